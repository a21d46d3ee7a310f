#!/usr/bin/env bash
# The main job (examples/configs/default.json: GPT, FULL_SHARD, 4 ranks) under
# each communication hook (sharding/comm_hook.h); prints one markdown table:
# bytes each rank sends per step (the communicator's count, Note [Bytes sent])
# beside f32 and bf16 without a hook, tokens/s as 4 MPI processes over
# TIME_STEPS steps, and the final loss after STEPS steps against the
# uncompressed run. The loss runs use in-process ranks: the backends reduce
# bitwise alike (Note [Reduction numerics]), so the losses are the MPI run's,
# at a fraction of the time on a small machine. hpz, qgz and zeropp use groups of 2 ranks (a "node" of 2; with every
# rank on one host the default group would be all 4, and hpZ would keep
# nothing).
#
#   tools/comm_hooks.sh [STEPS] [OUT.md]   (BIN: the -c opt train_gpt; TIME_STEPS: 30)
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # containers run as root
steps=${1:-300}
time_steps=${TIME_STEPS:-30}
out=${2:-}
bin=${BIN:-bazel-bin/examples/train_gpt}
[ -x "$bin" ] || { echo "comm_hooks.sh: $bin not built (bazel build -c opt //examples:train_gpt)" >&2; exit 2; }
work=$(mktemp -d /tmp/comm_hooks.XXXXXX)
trap 'rm -rf "$work"' EXIT

# run NAME ARGS...: the loss run (in-process ranks, STEPS steps) and the timed
# run (4 MPI processes, TIME_STEPS steps); their done lines in $work/NAME.done
# and $work/NAME.mpi.done.
run() {
  local name=$1
  shift
  "$bin" --config=examples/configs/default.json --steps="$steps" --log_every=50 \
    --work_dir="$work/$name.dir" "$@" > "$work/$name.log" 2>&1 ||
    { echo "comm_hooks.sh: $name failed:" >&2; tail -20 "$work/$name.log" >&2; exit 1; }
  grep -ao 'done: .*' "$work/$name.log" | tail -1 > "$work/$name.done"
  mpirun --oversubscribe --bind-to none -np 4 "$bin" --config=examples/configs/default.json --backend=mpi \
    --steps="$time_steps" --log_every=50 --work_dir="$work/$name.mpi.dir" "$@" > "$work/$name.mpi.log" 2>&1 ||
    { echo "comm_hooks.sh: $name (mpi) failed:" >&2; tail -20 "$work/$name.mpi.log" >&2; exit 1; }
  grep -ao 'done: .*' "$work/$name.mpi.log" | tail -1 > "$work/$name.mpi.done"
}

field() {  # field NAME REGEX: the first capture of REGEX in NAME's done line
  sed -nE "s#.*$2.*#\\1#p" "$work/$1.done"
}

run none
run none_bf16 --param_dtype=bf16 --reduce_dtype=bf16
run qwz --comm_hook=qwz
run qgz --comm_hook=qgz --comm_hook_group_size=2
run qgz_int4 --comm_hook=qgz --comm_hook_grad_bits=4 --comm_hook_group_size=2
run hpz --comm_hook=hpz --comm_hook_group_size=2
run zeropp --comm_hook=zeropp --comm_hook_group_size=2

base_bytes=$(field none 'comm_bytes_per_step ([0-9]+)')
base_loss=$(field none 'final train loss ([0-9.]+)')
{
  echo "| run | comm_bytes_per_step | vs f32 | tokens/s (MPI, $time_steps steps) | final loss ($steps steps) | minus uncompressed |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for name in none none_bf16 qwz qgz qgz_int4 hpz zeropp; do
    bytes=$(field "$name" 'comm_bytes_per_step ([0-9]+)')
    tps=$(field "$name.mpi" '\(([0-9]+) tokens/s\)')
    loss=$(field "$name" 'final train loss ([0-9.]+)')
    awk -v n="$name" -v b="$bytes" -v bb="$base_bytes" -v t="$tps" -v l="$loss" -v bl="$base_loss" \
      'BEGIN { printf "| %s | %d | %.3f | %d | %.6f | %+.6f |\n", n, b, b / bb, t, l, l - bl }'
  done
  echo
  echo "($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, 4 MPI processes; $(date -u +%Y-%m-%d))"
} | tee "${out:-/dev/null}"
