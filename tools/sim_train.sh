#!/usr/bin/env bash
# make sim-train (issue 20): the main job on 2 simulated GPUs as 2 processes,
# beside the same job on 2 GPU threads, resumed from a checkpoint, and on 2 CPU
# ranks; prints the loss lists and fails unless
#   - the 2-process GPU run equals the 2-thread GPU run bitwise (every logged
#     loss, and the final checkpoint file by file);
#   - the run resumed from the 2-process run's checkpoint at step SAVE_AT
#     equals the uninterrupted one bitwise (its losses and final checkpoint);
#   - (FULL_SHARD) a 2-process run started torchrun-style (RANK, WORLD_SIZE,
#     MASTER_ADDR, MASTER_PORT, ZEROSHARD_JOB_TOKEN) equals it bitwise too;
#   - the CPU run is within the fp32 bound below at every step.
#
#   tools/sim_train.sh TRAIN_GPT [--steps=N] [--save_at=K] [--strategies="FULL_SHARD HYBRID_SHARD"]
#                      [--shrink] [-- extra train_gpt flags]
#
# TRAIN_GPT is built with --define=cuda_sim=1 (the GPUs are the CPU
# simulator, tools/cuda/sim; its NCCL works across processes). The config is
# examples/configs/default.json with STEPS steps (default 4) and no sampling
# or mid-run evaluation; --shrink also narrows the model (2 blocks of width
# 64, batch 4: the test's size, ~10x faster on the simulator). HYBRID_SHARD
# runs as 2 "nodes" of 1 GPU: the 2-process runs name their nodes
# (ZEROSHARD_NODE=node-a / node-b, one mpirun app context each) and keep the
# default hybrid_shard_size 0, so the groups come from the nodes (Note
# [Hybrid shard groups]); the log must print that mapping. One process is one
# node, so the threads and CPU runs set hybrid_shard_size 1 (the same groups),
# and bitwise equality shows the node mapping made the groups it should.
#
# Bitwise: a logged loss is an f32 printed with %.9g, and 9 significant digits
# identify an f32, so equal text is equal bits (tests/faults/save_kill.sh);
# the checkpoints hold every parameter and AdamW moment as raw f32 bytes,
# the schedule and the RNG offsets, and no path or time.
#
# The CPU bound, per step t (derivation): both runs start from bitwise-equal
# parameters (the same deferred init from the seed) and read the same
# batches; the collectives sum in rank order on both; what differs is the
# order of fp32 sums inside kernels (the simulator's cuBLASLt reference loop
# against Eigen's blocked GEMM, the CUDA kernels' block reductions against
# the CPU loops).
#   (a) the forward at equal parameters: a K-term fp32 sum in two orders
#       differs by at most 2 lam sqrt(K) u sum|terms| with overwhelming
#       probability (probabilistic rounding analysis, Higham & Mary 2019;
#       lam = 6; u = 2^-24), the worst-case K u being unreachable in
#       practice; the loss goes through at most D = 9 L + 4 such sums in
#       sequence (per block: 2 layer norms, QKV, scores, softmax, att.V,
#       projection, 2 MLP GEMMs; then the final norm, lm_head, log-sum-exp,
#       the mean), whose relative errors add to first order, with K at most
#       4 C: F = 2 D lam sqrt(4 C) u relative (L = 4, C = 128: 6.5e-4);
#   (b) the parameters drift: rounding changes each normalised Adam update
#       by a small fraction of it, at most 1/1024 (Note [Parity bounds],
#       tests/sharding/parity.h), so to first order the loss change training
#       made by step t differs by at most sum_{s<=t} |L_s - L_{s-1}| / 1024.
#   |L_gpu(t) - L_cpu(t)| <= F |L_cpu(t)| + sum_{s<=t} |L_cpu(s) - L_cpu(s-1)| / 1024.
# A lost or doubled reduction, a stale shard or a misplaced slice moves the
# update by O(1) of itself, the loss by O(the progress per step): far outside.
set -uo pipefail

BIN="$(realpath "$1")"; shift
STEPS=4; SAVE_AT=2; STRATEGIES="FULL_SHARD HYBRID_SHARD"; SHRINK=0; EXTRA=()
while (($#)); do
  case "$1" in
    --steps=*) STEPS="${1#*=}" ;;
    --save_at=*) SAVE_AT="${1#*=}" ;;
    --strategies=*) STRATEGIES="${1#*=}" ;;
    --shrink) SHRINK=1 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "sim_train.sh: unknown argument $1"; exit 2 ;;
  esac
  shift
done
((SAVE_AT > 0 && SAVE_AT < STEPS)) || { echo "sim_train.sh: expected 0 < save_at < steps, found $SAVE_AT, $STEPS"; exit 2; }
CONFIG=examples/configs/default.json
[ -f "$CONFIG" ] || { echo "sim_train.sh: run from the repository root ($CONFIG not found)"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1

L=4; C=128
SIZE=()
if ((SHRINK)); then
  L=2; C=64
  SIZE=(--set model.n_layer=2 --set model.n_embd=64 --set train.batch_size=4)
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/sim_train.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

losses() { grep -E '^step [0-9]+ loss ' "$1" | awk '{print $4}' | tr '\n' ' ' | sed 's/ $//'; }
# run NAME LAUNCH... : the job's output in $WORK/NAME.log; fails loudly.
run() {
  local name="$1"; shift
  if ! timeout 1200 "$@" > "$WORK/$name.log" 2>&1; then
    echo "---- $name failed: $*"; tail -n 30 "$WORK/$name.log"; return 1
  fi
}
# The checkpoint at step N under a run's work dir.
ckpt() { find "$1" -type d -name "$(printf 'step-%06d' "$2")" | head -n1; }
same_ckpt() {  # same_ckpt A B: every file of A and B byte for byte
  local a="$1" b="$2" f
  [ -n "$a" ] && [ -n "$b" ] || { echo "missing checkpoint ($a, $b)"; return 1; }
  diff <(cd "$a" && ls) <(cd "$b" && ls) > /dev/null || { echo "other files: $(cd "$a" && ls) / $(cd "$b" && ls)"; return 1; }
  for f in $(cd "$a" && ls); do cmp -s "$a/$f" "$b/$f" || { echo "$f differs"; return 1; }; done
}

echo "sim-train: $CONFIG, $STEPS steps, save at step $SAVE_AT, model L=$L C=$C$( ((SHRINK)) && echo ' (shrunk)'), binary $BIN"
# PROCS=(the mpirun command of 2 processes running BIN with "$@");
# HYBRID_SHARD's as 2 named nodes (see the top).
procs2() {
  if [ "$S" = HYBRID_SHARD ]; then
    PROCS=(mpirun --oversubscribe --bind-to none -np 1 env ZEROSHARD_NODE=node-a "$BIN" "$@"
           : -np 1 env ZEROSHARD_NODE=node-b "$BIN" "$@")
  else
    PROCS=(mpirun --oversubscribe --bind-to none -np 2 "$BIN" "$@")
  fi
}
for S in $STRATEGIES; do
  one_process=()  # what a single process needs to lay out the same groups
  [ "$S" = HYBRID_SHARD ] && one_process=(--hybrid_shard_size=1)
  common=(--config="$CONFIG" --world_size=2 --steps="$STEPS" --log_every=1 --eval_every=0 --sample_tokens=0
          --eval_iters=2 --timeout_s=120 --sharding_strategy="$S" "${SIZE[@]}" "${EXTRA[@]}")
  d="$WORK/$S"
  echo
  echo "== $S$([ "$S" = HYBRID_SHARD ] && echo ' (2 nodes x 1 GPU: a shard group per node)')"
  procs2 "${common[@]}" --backend=nccl --work_dir="$d/procs" --save_every="$SAVE_AT"
  run "$S.procs" "${PROCS[@]}" || { fail "$S: the 2-process GPU run"; continue; }
  run "$S.threads" "$BIN" "${common[@]}" "${one_process[@]}" --backend=nccl --work_dir="$d/threads" \
    --save_every="$SAVE_AT" || { fail "$S: the 2-thread GPU run"; continue; }
  from="$(ckpt "$d/procs" "$SAVE_AT")"
  procs2 "${common[@]}" --backend=nccl --work_dir="$d/resumed" --save_every="$SAVE_AT" --resume="$from"
  run "$S.resumed" "${PROCS[@]}" || { fail "$S: the resumed GPU run"; continue; }
  run "$S.cpu" "$BIN" "${common[@]}" "${one_process[@]}" --backend=local --work_dir="$d/cpu" ||
    { fail "$S: the CPU run"; continue; }
  if [ "$S" = HYBRID_SHARD ]; then
    mapping="$(grep -a -A3 'HYBRID_SHARD: 2 shard groups' "$WORK/$S.procs.log")"
    echo "$mapping"
    grep -q "shard group 1: rank 1 on node node-b" <<< "$mapping" ||
      fail "$S: the 2-process run did not print a shard group per node"
  fi
  procs="$(losses "$WORK/$S.procs.log")"; threads="$(losses "$WORK/$S.threads.log")"
  resumed="$(losses "$WORK/$S.resumed.log")"; cpu="$(losses "$WORK/$S.cpu.log")"
  echo "GPU, 2 processes (mpirun):        $procs"
  echo "GPU, 2 threads:                   $threads"
  echo "GPU, 2 processes, resumed at $SAVE_AT:  $(printf '%*s' $((11 * SAVE_AT)) '')$resumed"
  echo "CPU, 2 ranks:                     $cpu"
  [ "$procs" = "$threads" ] || fail "$S: 2 processes and 2 threads logged other losses"
  why="$(same_ckpt "$(ckpt "$d/procs" "$STEPS")" "$(ckpt "$d/threads" "$STEPS")")" ||
    fail "$S: the final checkpoints of 2 processes and 2 threads differ: $why"
  tail_procs="$(echo "$procs" | cut -d' ' -f$((SAVE_AT + 1))-)"
  [ "$resumed" = "$tail_procs" ] || fail "$S: the resumed run logged $resumed where the uninterrupted one logged $tail_procs"
  grep -q "resumed from .* at step $SAVE_AT" "$WORK/$S.resumed.log" || fail "$S: the resumed run did not resume at step $SAVE_AT"
  why="$(same_ckpt "$(ckpt "$d/procs" "$STEPS")" "$(ckpt "$d/resumed" "$STEPS")")" ||
    fail "$S: the resumed run's final checkpoint differs from the uninterrupted one's: $why"
  verdict="$(awk -v g="$procs" -v c="$cpu" -v L="$L" -v C="$C" 'BEGIN {
      n = split(g, gv, " "); m = split(c, cv, " ");
      if (n != m || n == 0) { print "FAIL step counts " n " and " m; exit }
      u = 2 ^ -24; lam = 6; D = 9 * L + 4; F = 2 * D * lam * sqrt(4 * C) * u;
      drift = 0; worst = 0; bad = "";
      for (i = 1; i <= n; ++i) {
        if (i > 1) drift += (cv[i] > cv[i-1] ? cv[i] - cv[i-1] : cv[i-1] - cv[i]) / 1024;
        b = F * (cv[i] < 0 ? -cv[i] : cv[i]) + drift;
        d = gv[i] - cv[i]; if (d < 0) d = -d;
        if (d / b > worst) worst = d / b;
        if (d > b) bad = bad sprintf(" step %d: |%s - %s| = %.3g > %.3g;", i - 1, gv[i], cv[i], d, b);
      }
      printf "%s F = %.3g relative; largest difference %.3g of its bound%s\n", (bad == "" ? "OK" : "FAIL"), F, worst, bad
    }')"
  echo "GPU against CPU: $verdict"
  [[ "$verdict" == OK* ]] || fail "$S: GPU and CPU runs differ beyond the fp32 bound"
  if [ "$S" = FULL_SHARD ]; then
    # torchrun-style: two processes started by hand, rank 0 serving the id.
    port=$((20000 + RANDOM % 20000))
    envs=(env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 ZEROSHARD_JOB_TOKEN="sim-train-$RANDOM$RANDOM")
    "${envs[@]}" RANK=1 LOCAL_RANK=1 timeout 1200 "$BIN" "${common[@]}" --backend=nccl --work_dir="$d/env" \
      --save_every="$SAVE_AT" > "$WORK/$S.env1.log" 2>&1 &
    peer=$!
    run "$S.env" "${envs[@]}" RANK=0 LOCAL_RANK=0 "$BIN" "${common[@]}" --backend=nccl --work_dir="$d/env" \
      --save_every="$SAVE_AT" || fail "$S: the torchrun-style run (rank 0)"
    wait "$peer" || { fail "$S: the torchrun-style run (rank 1)"; tail -n 20 "$WORK/$S.env1.log"; }
    env_losses="$(losses "$WORK/$S.env.log")"
    echo "GPU, 2 processes (torchrun-style): $env_losses"
    [ "$env_losses" = "$procs" ] || fail "$S: the torchrun-style run logged other losses than the mpirun one"
    why="$(same_ckpt "$(ckpt "$d/procs" "$STEPS")" "$(ckpt "$d/env" "$STEPS")")" ||
      fail "$S: the torchrun-style run's final checkpoint differs: $why"
  fi
done
echo
if ((failures)); then echo "sim-train: $failures check(s) failed"; exit 1; fi
echo "sim-train: every check passed"
