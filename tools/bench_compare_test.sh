#!/usr/bin/env bash
# bench_compare on the committed fixtures (tests/testdata/bench, written to show each
# case of the rule in tools/bench_compare.cc): exit 0 for the same results, noise and
# improvements; 1 naming the figure for a regression beyond noise; 2 on malformed input.
#   bazel test //tools:bench_compare_test
set -uo pipefail
tool="$1"
d=tests/testdata/bench
failures=0
out=""

# expect CODE OLD NEW [grep patterns the output must contain...]
expect() {
  local code="$1" old="$2" new="$3"; shift 3
  # shellcheck disable=SC2086  # OLD may carry a flag before the path
  out=$("$tool" $old "$new" 2>&1); local got=$?
  if [[ "$got" != "$code" ]]; then
    echo "FAIL: bench_compare $old $new: exit $got, expected $code; output:"; echo "$out"
    failures=$((failures + 1)); return
  fi
  for pattern in "$@"; do
    if ! grep -Eq -- "$pattern" <<<"$out"; then
      echo "FAIL: bench_compare $old $new: output lacks /$pattern/; output:"; echo "$out"
      failures=$((failures + 1))
    fi
  done
}
# forbid OLD NEW PATTERN: the output of the last expect must not contain PATTERN.
forbid() {
  if grep -Eq -- "$1" <<<"$out"; then echo "FAIL: output has /$1/:"; echo "$out"; failures=$((failures + 1)); fi
}

# The same file: every figure within noise, change 0.
expect 0 $d/old.json $d/old.json "step/full_shard/world2 .* \+0\.0% .*within noise" "no regression"
forbid "REGRESSION|only in"
# 30% slower step with repeats of MAD 1%: band = max(5%, 3*sqrt(2)*1%) = 5%; flagged by name.
expect 1 $d/old.json $d/slower30.json "step/full_shard/world2 .* \+30\.0% +5\.0%  REGRESSION" "1 regression"
forbid "tokenizer/.*REGRESSION"
# 2% worse on two figures: inside the 5% floor.
expect 0 $d/old.json $d/noise2.json "tokenizer/gpt2/fresh_cache .* -2\.0% .*within noise" \
  "step/full_shard/world2 .* \+2\.0% .*within noise"
# Improvements (MB/s up 25%, seconds down 20%) never fail.
expect 0 $d/old.json $d/better.json "tokenizer/gpt2/fresh_cache .* \+25\.0% .*better" "step/full_shard/world2 .* -20\.0% .*better"
# A name in one file only is reported, and is not a failure.
expect 0 $d/old.json $d/missing.json "only in $d/old.json: tokenizer/bytes" \
  "only in $d/missing.json: tokenizer/pretokenize"
# 30% worse but with repeats of MAD 10% on each side: band = 3*sqrt(2)*10% = 42.4%: noise.
expect 0 $d/noisy_old.json $d/noisy_new.json "conv/resnet18/step .* \+30\.0% +42\.4%  within noise"
# Malformed input: exit 2 with what was expected and what was found.
expect 2 $d/old.json $d/malformed_value.json 'expected "value" to be a number, found "fast"'
expect 2 $d/malformed_truncated.json $d/old.json "malformed_truncated.json: not valid JSON"
expect 2 $d/old.json $d/malformed_schema.json 'expected "schema": "zeroshard-bench/1", found "zeroshard-bench/9"'
expect 2 $d/old.json $d/does_not_exist.json "does_not_exist.json: cannot open"
expect 2 $d/old.json $d/dir_old "expected two files or two directories"
# Google Benchmark JSON: per-repetition rows (real_time in ns, lower is better; bytes_per_second,
# higher) and aggregate-only rows (items_per_second from the median row).
expect 0 $d/gbench_old.json $d/gbench_old.json "BM_Add/1048576 .* 1000 ns .* 1000 ns" \
  "BM_Memcpy/1048576 .*B/s" "BM_AdamW/10M .* 100 items/s"
expect 1 $d/gbench_old.json $d/gbench_new.json "BM_Add/1048576 .* \+30\.0% .*REGRESSION" \
  "BM_Memcpy/1048576 .*within noise" "BM_AdamW/10M .*within noise"
# Two directories: files compared by name, those in one only reported.
expect 1 $d/dir_old $d/dir_new "== step.json" "step/full_shard/world2 .*REGRESSION" "== tokenizer.json" \
  "only in $d/dir_old: file conv.json" "only in $d/dir_new: file nvme.json"
# The floor is a flag.
expect 0 "--floor=0.5 $d/old.json" $d/slower30.json "step/full_shard/world2 .* \+30\.0% +50\.0%  within noise"
expect 2 "--floor=abc $d/old.json" $d/old.json "expected --floor=<fraction >= 0"

if (( failures )); then echo "bench_compare_test: $failures failure(s)"; exit 1; fi
echo "bench_compare_test: all cases passed"
