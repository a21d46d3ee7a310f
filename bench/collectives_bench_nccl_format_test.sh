#!/usr/bin/env bash
# collectives_bench --nccl_tests_format read the way tools read nccl-tests output
# (Note [nccl-tests format] in bench/collectives_bench.cc): the three header lines
# exactly as NVIDIA/nccl-tests src/common.cu prints them, every data row 13
# whitespace-separated fields (size count type redop root, then time algbw busbw
# #wrong out of place and in place) with numbers where numbers belong, #wrong 0
# (N/A without --check), algbw and busbw consistent with size and time, and the
# "# Out of bounds values" and "# Avg bus bandwidth" lines. Then --json_out in both
# tables: our schema, read back by tools/bench_compare.
#
#   collectives_bench_nccl_format_test.sh PATH/TO/collectives_bench PATH/TO/bench_compare_main
set -uo pipefail
bench="$1" compare="$2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
tmp="${TEST_TMPDIR:-/tmp}"
small=(--minbytes=1K --maxbytes=64K --stepfactor=4 --iters=2 --warmup_iters=1 --repeats=1)
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# The header lines, byte for byte (nccl-tests' printf widths; the first keeps its trailing spaces).
h1='#                                                              out-of-place                       in-place          '
h2='#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong'
h3='#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       '

# parse NAME FACTOR ROWS CHECKED TYPE REDOP ROOT PARTS < output
#   FACTOR: busbw / algbw (nccl-tests: all_reduce 2(n-1)/n, all_gather and reduce_scatter
#   (n-1)/n, broadcast 1); ROWS: data rows expected; CHECKED: 1 when #wrong must be 0, 0
#   when it must be N/A; PARTS: size / count / element bytes (n for all_gather and
#   reduce_scatter, whose size is the whole buffer; 1 otherwise).
parse() {
  local name="$1" factor="$2" rows="$3" checked="$4" type="$5" redop="$6" root="$7" parts="$8" esize="$9"
  local out
  out=$(cat)
  echo "--- $name"
  echo "$out"
  for h in "$h1" "$h2" "$h3"; do
    grep -qxF -- "$h" <<<"$out" || fail "$name: no header line '$h'"
  done
  grep -qx '# Out of bounds values : 0 OK' <<<"$out" || fail "$name: no '# Out of bounds values : 0 OK' line"
  # A parser's rules: data lines are those not starting with '#' and not empty; each has
  # 13 fields; integers, names and decimals where nccl-tests prints them.
  local verdict
  verdict=$(awk -v factor="$factor" -v rows="$rows" -v checked="$checked" -v type="$type" -v redop="$redop" \
    -v root="$root" -v parts="$parts" -v esize="$esize" '
    function num(x) { return x ~ /^[0-9]+(\.[0-9]+)?$/ }
    function half(x,  d) { d = index(x, ".") ? length(x) - index(x, ".") : 0; return 0.5 * 10 ^ -d }
    function abs(x) { return x < 0 ? -x : x }
    /^# Avg bus bandwidth    : / {
      if ($0 !~ /^# Avg bus bandwidth    : [0-9.e+-]+ $/) { print "avg line malformed: [" $0 "]"; bad++ }
      avg = $6; avgs++; next
    }
    /^#/ || /^$/ { next }
    {
      n++
      if (NF != 13) { print "row " n ": " NF " fields, expected 13: " $0; bad++; next }
      if ($1 !~ /^[0-9]+$/ || $2 !~ /^[0-9]+$/) { print "row " n ": size and count must be integers: " $0; bad++ }
      if ($1 != $2 * parts * esize) { print "row " n ": size " $1 " != count " $2 " x " parts " x " esize; bad++ }
      if ($3 != type || $4 != redop || $5 != root) { print "row " n ": type/redop/root " $3 "/" $4 "/" $5; bad++ }
      for (c = 6; c <= 10; c += 4) {
        t = $c; alg = $(c + 1); bus = $(c + 2); wrong = $(c + 3)
        if (!num(t) || !num(alg) || !num(bus)) { print "row " n ": not numbers: " t " " alg " " bus; bad++; continue }
        if (checked && wrong != "0") { print "row " n ": #wrong " wrong ", expected 0"; bad++ }
        if (!checked && wrong != "N/A") { print "row " n ": #wrong " wrong ", expected N/A"; bad++ }
        # algbw = size / time (GB/s from bytes and us): the printed time is rounded to
        # half a unit of its last digit (h), so size / time is known to a relative h / t;
        # algbw itself to 0.005.
        want = $1 / (t * 1000)
        if (t > 0 && abs(alg - want) > 0.005 + want * half(t) / t + 1e-9) {
          print "row " n ": algbw " alg ", size / time = " want; bad++
        }
        # busbw = algbw x factor, both printed to 0.005.
        if (abs(bus - alg * factor) > 0.005 + 0.005 * factor + 1e-9) {
          print "row " n ": busbw " bus " != algbw " alg " x " factor; bad++
        }
        sum += bus; cols++
      }
    }
    END {
      if (n != rows) { print n " data rows, expected " rows; bad++ }
      if (avgs != 1) { print avgs " avg bus bandwidth lines, expected 1"; bad++ }
      # The average of the busbw columns (each printed to 0.005; %g keeps 6 digits).
      else if (cols > 0 && abs(avg - sum / cols) > 0.005 + 1e-5 * avg) { print "avg " avg ", mean of busbw " sum / cols; bad++ }
      print (bad ? "BAD" : "OK")
    }' <<<"$out")
  if [[ "$(tail -1 <<<"$verdict")" != OK ]]; then
    fail "$name: $verdict"
  fi
}

run() {  # expected exit code, then the command
  local want="$1"; shift
  out=$("$@" 2>&1); local rc=$?
  [[ $rc == "$want" ]] || fail "$* exited $rc, expected $want: $out"
}

# Sizes 1K, 4K, 16K, 64K: 4 rows each.
run 0 "$bench" --backend=local --world_size=4 --nccl_tests_format --op=all_reduce "${small[@]}"
parse "all_reduce local x4" 1.5 4 1 float sum -1 1 4 <<<"$out"
run 0 "$bench" --backend=local --world_size=4 --nccl_tests_format --op=all_gather "${small[@]}"
parse "all_gather local x4" 0.75 4 1 float none -1 4 4 <<<"$out"
run 0 "$bench" --backend=local --world_size=2 --nccl_tests_format --op=reduce_scatter --dtype=bf16 --redop=avg \
  "${small[@]}"
parse "reduce_scatter avg bf16 local x2" 0.5 4 1 bfloat16 avg -1 2 2 <<<"$out"
run 0 "$bench" --backend=local --world_size=2 --nccl_tests_format --op=broadcast --root=1 --dtype=i32 "${small[@]}"
parse "broadcast root 1 local x2" 1 4 1 int32 none 1 1 4 <<<"$out"
run 0 "$bench" --backend=local --world_size=2 --nccl_tests_format --op=all_reduce --check=false "${small[@]}"
parse "all_reduce unchecked" 1 4 0 float sum -1 1 4 <<<"$out"
run 0 mpirun --oversubscribe --bind-to none -np 2 "$bench" --backend=mpi --nccl_tests_format --op=all_reduce \
  --redop=max "${small[@]}"
parse "all_reduce max mpi x2" 1 4 1 float max -1 1 4 <<<"$out"

# alltoall_perf's table: count per peer, size = count x ranks x element bytes, busbw
# (n-1)/n; the in-place columns stage the input (Note [nccl-tests format]), checked too.
run 0 "$bench" --backend=local --world_size=4 --nccl_tests_format --op=alltoall "${small[@]}"
parse "alltoall local x4" 0.75 4 1 float none -1 4 4 <<<"$out"
run 0 "$bench" --backend=local --world_size=2 --nccl_tests_format --op=alltoall --dtype=i8 "${small[@]}"
parse "alltoall int8 local x2" 0.5 4 1 int8 none -1 2 1 <<<"$out"

# Bad requests: a clear error, exit 2.
run 2 "$bench" --nccl_tests_format --op=all_gather,all_reduce
grep -q "one --op at a time" <<<"$out" || fail "two ops: $out"
run 2 "$bench" --op=all_to_everyone
grep -q "expected all_gather, reduce_scatter, all_reduce, broadcast or alltoall" <<<"$out" || fail "bad op: $out"

# --json_out, both tables: our schema, every figure named as the header of
# collectives_bench.cc says, and bench_compare reads it (a file against itself: exit 0).
json="$tmp/collectives.json"
run 0 "$bench" --backend=local --world_size=2 --op=all_gather,all_reduce -b 4K -e 16K -f 4 --iters 2 --warmup 1 \
  --repeats 2 --json_out="$json"
for name in collectives/local_w2/all_gather_f32/4096/busbw collectives/local_w2/all_gather_f32/16384/memcpy \
  collectives/local_w2/all_reduce_sum_f32/16384/busbw collectives/local_w2/all_reduce_sum_f32/16384/memcpy_all_ranks; do
  grep -q "\"name\": \"$name\"" "$json" || fail "no figure $name in $json"
done
grep -q '"baseline": {' "$json" || fail "no baseline in $json"
"$compare" "$json" "$json" >/dev/null || fail "bench_compare $json $json exited $?"
json="$tmp/collectives_nccl.json"
run 0 "$bench" --backend=local --world_size=2 --nccl_tests_format --op=all_reduce "${small[@]}" --json_out="$json"
for name in collectives/local_w2/all_reduce_sum_f32/1024/busbw_out_of_place \
  collectives/local_w2/all_reduce_sum_f32/65536/busbw_in_place; do
  grep -q "\"name\": \"$name\"" "$json" || fail "no figure $name in $json"
done
"$compare" "$json" "$json" >/dev/null || fail "bench_compare $json $json exited $?"

if (( failures )); then echo "collectives_bench_nccl_format_test: $failures failure(s)"; exit 1; fi
echo "collectives_bench_nccl_format_test: passed"
