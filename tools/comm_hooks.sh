#!/usr/bin/env bash
# The main job (examples/configs/default.json: GPT, FULL_SHARD, 4 ranks) under
# each communication hook (sharding/comm_hook.h); prints one markdown table:
# the bytes each rank sends per step (the communicator's count, Note [Bytes
# sent]) beside f32 and bf16 without a hook, tokens/s, and for the hooks in
# LOSS_RUNS the final loss after STEPS steps against the uncompressed run
# (hpz is left out there: its values are bitwise the plain run's, tested in
# tests/sharding/comm_hook_test.cc). Every variant also runs BYTES_STEPS steps
# for its byte count, as 4 MPI processes with MPI=1 (on this 2-vCPU machine
# the 4 busy-polling MPI ranks made steps 20x slower than in-process ranks, so
# the default is in-process; the backends count bytes alike and reduce bitwise
# alike, Note [Reduction numerics]). hpz, qgz and zeropp use groups of 2 ranks
# (a "node" of 2: with every rank on one host the default group would be all 4,
# and hpZ would keep nothing).
#
#   tools/comm_hooks.sh [STEPS] [OUT.md]   (BIN: the -c opt train_gpt)
#
# WORLD (default 4) sets the ranks and GROUP (default 2) the hooks' group
# size: `MPI=1 WORLD=2 GROUP=1 LOSS_RUNS= BYTES_STEPS=20` times every hook as
# 2 MPI processes, one per vCPU here (a "node" per rank).
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # containers run as root
steps=${1:-300}
out=${2:-}
bytes_steps=${BYTES_STEPS:-5}
loss_runs=" ${LOSS_RUNS:-none qwz qgz zeropp} "
bin=${BIN:-bazel-bin/examples/train_gpt}
world=${WORLD:-4}
group=${GROUP:-2}
[ -x "$bin" ] || { echo "comm_hooks.sh: $bin not built (bazel build -c opt //examples:train_gpt)" >&2; exit 2; }
work=$(mktemp -d /tmp/comm_hooks.XXXXXX)
trap 'rm -rf "$work"' EXIT

# job LOG STEPS ARGS...: one run of the job, its done line in LOG.done.
job() {
  local log=$1 n=$2
  shift 2
  local launch=()
  [ "${MPI:-0}" = 1 ] && launch=(mpirun --oversubscribe --bind-to none -np "$world") && set -- "$@" --backend=mpi
  "${launch[@]}" "$bin" --config=examples/configs/default.json --world_size="$world" --steps="$n" --log_every=50 \
    --work_dir="$log.dir" "$@" > "$log" 2>&1 ||
    { echo "comm_hooks.sh: $log failed:" >&2; tail -20 "$log" >&2; exit 1; }
  grep -ao 'done: .*' "$log" | tail -1 > "$log.done"
}

# run NAME ARGS...: the short run (bytes), and the STEPS run when NAME is in LOSS_RUNS.
run() {
  local name=$1
  shift
  job "$work/$name.short" "$bytes_steps" "$@"
  if [[ "$loss_runs" == *" $name "* ]]; then job "$work/$name" "$steps" "$@"; fi
}

field() {  # field NAME REGEX: the first capture of REGEX in NAME's done line
  [ -f "$work/$1.done" ] && sed -nE "s#.*$2.*#\\1#p" "$work/$1.done"
}

run none
run none_bf16 --param_dtype=bf16 --reduce_dtype=bf16
run qwz --comm_hook=qwz
run qgz --comm_hook=qgz --comm_hook_group_size="$group"
run qgz_int4 --comm_hook=qgz --comm_hook_grad_bits=4 --comm_hook_group_size="$group"
run hpz --comm_hook=hpz --comm_hook_group_size="$group"
run zeropp --comm_hook=zeropp --comm_hook_group_size="$group"

base_bytes=$(field none.short 'comm_bytes_per_step ([0-9]+)')
base_loss=$(field none 'final train loss ([0-9.]+)')
{
  echo "| run | comm_bytes_per_step | vs f32 | tokens/s | final loss ($steps steps) | minus uncompressed |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for name in none none_bf16 qwz qgz qgz_int4 hpz zeropp; do
    bytes=$(field "$name.short" 'comm_bytes_per_step ([0-9]+)')
    tps=$(field "$name" '\(([0-9]+) tokens/s\)' || true)
    [ -n "$tps" ] || tps=$(field "$name.short" '\(([0-9]+) tokens/s\)')
    loss=$(field "$name" 'final train loss ([0-9.]+)' || true)
    awk -v n="$name" -v b="$bytes" -v bb="$base_bytes" -v t="$tps" -v l="$loss" -v bl="$base_loss" 'BEGIN {
      if (l == "") printf "| %s | %d | %.3f | %d | - | - |\n", n, b, b / bb, t;
      else printf "| %s | %d | %.3f | %d | %.6f | %+.6f |\n", n, b, b / bb, t, l, l - bl }'
  done
  echo
  echo "($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, $([ "${MPI:-0}" = 1 ] && echo "$world MPI processes" || echo "$world in-process ranks"), hook groups of $group; tokens/s of the $steps-step run where there is one, else of the $bytes_steps-step one; $(date -u +%Y-%m-%d))"
} | tee "${out:-/dev/null}"
