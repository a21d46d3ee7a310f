#!/usr/bin/env bash
# make bench: every benchmark suite of //bench, each printing its figures beside
# the baseline it measured in the same run. Needs `bazel build -c opt //bench:all`
# first (make bench does it). Choose suites with BENCH=kernels,optim,...
# (default: all); each suite's own flags are in its source and in
# docs/benchmarks.md, which records results with their commands.
set -uo pipefail

bin=./bazel-bin/bench
suites="${BENCH:-kernels,optim,step,collectives,checkpoint,conv,tokenizer}"
mpirun_flags=(--oversubscribe --bind-to none)
[[ "$(id -u)" == 0 ]] && mpirun_flags+=(--allow-run-as-root)
failed=()

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
    kernels) run kernels "$bin/kernels_bench" --benchmark_counters_tabular=true ;;
    optim) run optim "$bin/optim_bench" --benchmark_counters_tabular=true ;;
    step) run step "$bin/step_bench" ;;
    collectives)
      for op in all_gather reduce_scatter all_reduce; do
        run "collectives local $op" "$bin/collectives_bench" --backend=local --world_size=2 --op="$op" --inplace -b 64K -e 64M -f 4
      done
      for op in all_gather reduce_scatter all_reduce broadcast; do
        run "collectives mpi $op" mpirun "${mpirun_flags[@]}" -np 2 "$bin/collectives_bench" --backend=mpi --op="$op" -b 64K -e 64M -f 4
      done
      ;;
    checkpoint) run checkpoint "$bin/checkpoint_bench" ;;
    conv) run conv "$bin/conv_bench" --threads=1,2 ;;
    tokenizer) run tokenizer "$bin/tokenizer_bench" ;;
    *) echo "run_benchmarks: unknown suite \"$s\" (expected kernels, optim, step, collectives, checkpoint, conv, tokenizer)" >&2; exit 2 ;;
  esac
done

echo
if (( ${#failed[@]} )); then
  echo "benchmarks FAILED (a result check or a run failed): ${failed[*]}"
  exit 1
fi
echo "benchmarks done: ${suites}"
