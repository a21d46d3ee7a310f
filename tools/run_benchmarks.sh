#!/usr/bin/env bash
# make bench: every benchmark suite of //bench, each printing its figures beside
# the baseline it measured in the same run. Needs `bazel build -c opt //bench:all`
# first (make bench does it). Choose suites with BENCH=kernels,optim,...
# (default: all); each suite's own flags are in its source and in
# docs/benchmarks.md, which records results with their commands.
#
# Results as data (docs/benchmarks.md, "Results as data"): every suite also writes
# its figures as JSON, one file per run, under
#   bench/results/<machine>/<date>_<commit>/<suite>.json     (BENCH_RESULTS= to change the root)
# where <machine> is the CPU model (lower case, [a-z0-9-] only) and the core count, so
# results of one machine sit together: `tools/bench_compare OLD_DIR NEW_DIR` compares
# two runs. Google Benchmark suites write their own JSON (--benchmark_out); the others
# our schema (bench/bench_json.h, --json_out).
set -uo pipefail

bin=./bazel-bin/bench
suites="${BENCH:-kernels,optim,step,collectives,checkpoint,conv,tokenizer}"
mpirun_flags=(--oversubscribe --bind-to none)
[[ "$(id -u)" == 0 ]] && mpirun_flags+=(--allow-run-as-root)
failed=()

cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
machine=$(printf '%s' "${cpu_model:-unknown}" | tr 'A-Z' 'a-z' | sed -e 's/([^)]*)//g' -e 's/[^a-z0-9]\{1,\}/-/g' \
  -e 's/^-//' -e 's/-$//')-$(nproc)c
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo nogit)
[[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] && commit+="-dirty"
out="${BENCH_RESULTS:-bench/results}/$machine/$(date -u +%Y%m%dT%H%M%SZ)_$commit"
mkdir -p "$out" || { echo "run_benchmarks: cannot create $out" >&2; exit 2; }
export ZEROSHARD_BENCH_COMMIT="$commit"  # recorded in each file's "build" (bench/bench_json.cc)
echo "results as JSON: $out/"
gbench_json() { echo "--benchmark_out=$out/$1.json" --benchmark_out_format=json; }

run() {  # name, command...
  local name="$1"; shift
  echo
  echo "=== $name: $* (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  if ! "$@"; then
    failed+=("$name")
  fi
}

for s in ${suites//,/ }; do
  case "$s" in
    # shellcheck disable=SC2046  # gbench_json prints two flags
    kernels) run kernels "$bin/kernels_bench" --benchmark_counters_tabular=true $(gbench_json kernels) ;;
    # shellcheck disable=SC2046
    optim) run optim "$bin/optim_bench" --benchmark_counters_tabular=true $(gbench_json optim) ;;
    step) run step "$bin/step_bench" ;;
    collectives)
      for op in all_gather reduce_scatter all_reduce; do
        run "collectives local $op" "$bin/collectives_bench" --backend=local --world_size=2 --op="$op" --inplace -b 64K -e 64M -f 4
      done
      for op in all_gather reduce_scatter all_reduce broadcast; do
        run "collectives mpi $op" mpirun "${mpirun_flags[@]}" -np 2 "$bin/collectives_bench" --backend=mpi --op="$op" -b 64K -e 64M -f 4
      done
      ;;
    checkpoint) run checkpoint "$bin/checkpoint_bench" --json_out="$out/checkpoint.json" ;;
    conv) run conv "$bin/conv_bench" --threads=1,2 ;;
    tokenizer) run tokenizer "$bin/tokenizer_bench" --json_out="$out/tokenizer.json" ;;
    *) echo "run_benchmarks: unknown suite \"$s\" (expected kernels, optim, step, collectives, checkpoint, conv, tokenizer)" >&2; exit 2 ;;
  esac
done

echo
if (( ${#failed[@]} )); then
  echo "benchmarks FAILED (a result check or a run failed): ${failed[*]}"
  exit 1
fi
echo "benchmarks done: ${suites}; results as JSON in $out/"
