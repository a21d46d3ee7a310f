#!/usr/bin/env bash
# make bench: every benchmark suite of //bench, each printing its figures beside
# the baseline it measured in the same run. Needs `bazel build -c opt //bench:all`
# first (make bench does it). Choose suites with BENCH=kernels,optim,...
# (default: all); each suite's own flags are in its source and in
# docs/benchmarks.md, which records results with their commands.
#
# Results as data (docs/benchmarks.md, "Results as data"): every suite also writes
# its figures as JSON, one file per suite, under
#   bench/results/<machine>/<date>_<commit>/<suite>.json     (BENCH_RESULTS= to change the root)
# where <machine> is the CPU model (lower case, [a-z0-9-] only) and the core count, so
# results of one machine sit together: `tools/bench_compare OLD_DIR NEW_DIR` compares
# two runs. Google Benchmark suites write their own JSON (--benchmark_out); the others
# our schema (bench/bench_json.h, --json_out). The collectives suite writes two files,
# collectives_local.json (in-process ranks) and collectives_mpi.json (2 MPI processes).
#
# Sizes and repeats are chosen to keep the whole run short (smaller than the docs'
# commands where those are long; the docs name theirs), with 3 repeats of every figure
# where the bench takes --repeats, so that bench_compare sees noise. On the 2-vCPU AMD
# EPYC VM, under a load of 7-10 from other sessions, it took about 13 minutes: kernels
# 47 s, optim 80, step 250-280, collectives 63, checkpoint 30, conv 44, nvme 230,
# tokenizer 1 (step and nvme's single-rank steps run OpenMP teams, which other load
# slows most). Each suite prints its seconds.
set -uo pipefail

bin=./bazel-bin/bench
all_suites=kernels,optim,step,collectives,checkpoint,conv,nvme,tokenizer
suites="${BENCH:-$all_suites}"
mpirun_flags=(--oversubscribe --bind-to none)
[[ "$(id -u)" == 0 ]] && mpirun_flags+=(--allow-run-as-root)
failed=()

# The machine's name: the CPU model and core count; for the GPU suite (cuda, `make
# gpu-bench`) the card's name and count ("nvidia-h100-80gb-hbm3-1gpu"), as the figures are the GPU's.
slug() { tr 'A-Z' 'a-z' | sed -e 's/([^)]*)//g' -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//'; }
cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
machine=$(printf '%s' "${cpu_model:-unknown}" | slug)-$(nproc)c
if [[ ",$suites," == *,cuda,* ]]; then
  gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)
  [[ -n "$gpus" ]] && machine=$(head -1 <<<"$gpus" | slug)-$(wc -l <<<"$gpus")gpu
fi
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
  local start=$SECONDS
  if ! "$@"; then
    failed+=("$name")
  fi
  echo "=== $name: $((SECONDS - start)) s"
}

for s in ${suites//,/ }; do
  # shellcheck disable=SC2046  # gbench_json prints two flags
  case "$s" in
    # Google Benchmark: 3 repetitions (bench_compare's noise), each shorter than its default.
    kernels) run kernels "$bin/kernels_bench" --benchmark_counters_tabular=true --benchmark_min_time=0.1 \
      --benchmark_repetitions=3 $(gbench_json kernels) ;;
    optim) run optim "$bin/optim_bench" --benchmark_counters_tabular=true --benchmark_min_time=0.1 \
      --benchmark_repetitions=3 $(gbench_json optim) ;;
    # OMP_WAIT_POLICY=PASSIVE (as the tests run): with up to 4 ranks of OpenMP teams on 2
    # cores, spinning teams of one row steal the cores of the next (2.7 s unsharded steps
    # instead of ~0.2 s were seen without it).
    step) OMP_WAIT_POLICY=PASSIVE run step "$bin/step_bench" --steps=4 --warmup=1 --repeats=3 \
      --json_out="$out/step.json" ;;
    collectives)
      run "collectives local" "$bin/collectives_bench" --backend=local --world_size=2 \
        --op=all_gather,reduce_scatter,all_reduce --inplace -b 64K -e 64M -f 4 --json_out="$out/collectives_local.json"
      run "collectives mpi" mpirun "${mpirun_flags[@]}" -np 2 "$bin/collectives_bench" --backend=mpi \
        --op=all_gather,reduce_scatter,all_reduce,broadcast -b 64K -e 64M -f 4 --json_out="$out/collectives_mpi.json"
      ;;
    checkpoint) run checkpoint "$bin/checkpoint_bench" --json_out="$out/checkpoint.json" ;;
    conv) OMP_WAIT_POLICY=PASSIVE run conv "$bin/conv_bench" --threads=1,2 --json_out="$out/conv.json" ;;
    # NVMe offload's mechanism on whatever disk holds $TMPDIR: states up to 256 MiB, 3 repeats.
    nvme) OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE run nvme "$bin/nvme_bench" --dir="${TMPDIR:-/tmp}" --max_mb=256 \
      --steps=4 --warmup=1 --repeats=3 --json_out="$out/nvme.json" ;;
    tokenizer) run tokenizer "$bin/tokenizer_bench" --json_out="$out/tokenizer.json" ;;
    # Not in the default list: the GPU kernels, GEMMs, NCCL and the GPT step (make gpu-bench).
    cuda) run cuda "$bin/cuda_bench" --json_out="$out/cuda.json" ;;
    *) echo "run_benchmarks: unknown suite \"$s\" (expected some of $all_suites, or cuda)" >&2; exit 2 ;;
  esac
done

echo
if (( ${#failed[@]} )); then
  echo "benchmarks FAILED (a result check or a run failed): ${failed[*]}"
  exit 1
fi
echo "benchmarks done: ${suites} in $SECONDS s; results as JSON in $out/"
