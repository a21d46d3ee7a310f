#!/usr/bin/env bash
# The vision job (model.type "resnet") on 2 GPUs in every launch (issue 20,
# docs/launch.md): one process driving both GPUs from threads, 2 processes
# under mpirun, and 2 processes started torchrun-style (RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT, ZEROSHARD_JOB_TOKEN). Fails unless the three
# runs log the same losses and save bitwise the same weights (parameters
# gathered to rank 0, BatchNorm buffers averaged over the ranks: every
# parameter and statistic as raw f32 bytes, no path or time in the file).
# The runs differ only in how ranks are launched and bootstrapped, so any
# difference is a launch bug (a rank reading another's batch, a buffer not
# averaged, a shard misplaced). The GPU run against the CPU one, within the
# derived fp32 bound, is //tests/train:train_resnet_gpu_test.
#
# A small config: examples/configs/resnet.json narrowed to 2 stages of 8 and
# 16 channels on 16x16 images, 4 per rank, 4 steps (seconds on the
# simulator). Needs 2 GPUs (the simulator's in `make sim-test`) and mpirun
# for the mpirun launch; skips in a build without CUDA or with fewer GPUs.
#   sim_train_resnet_test.sh TRAIN_GPT
set -uo pipefail
BIN="$1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1
common=(--config=examples/configs/resnet.json --world_size=2 --steps=4 --log_every=1 --eval_every=0
        --timeout_s=120 --set 'model.widths=[8,16]' --set 'model.depths=[1,1]' --set data.image_size=16
        --set data.train_size=256 --set data.val_size=24 --set train.batch_size=4 --set train.eval_batch=6)
probe="$("$BIN" "${common[@]}" --steps=1 --backend=nccl --work_dir= 2>&1)"
if echo "$probe" | grep -Eq "built without CUDA|expected 2 GPUs|expected a CUDA device"; then
  echo "SKIPPED: $(echo "$probe" | grep -Em1 'built without CUDA|expected 2 GPUs|expected a CUDA device')"
  exit 0
fi
WORK="$(mktemp -d "${TEST_TMPDIR:-/tmp}/sim_train_resnet.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# run NAME LAUNCH...: the job's output in $WORK/NAME.log; says so when it fails.
run() {
  local name="$1"; shift
  if ! timeout 600 "$@" > "$WORK/$name.log" 2>&1; then
    echo "---- $name failed: $*"; tail -n 30 "$WORK/$name.log"; return 1
  fi
}
losses() { grep -E '^step +[0-9]+ loss ' "$1" | awk '{print $4}' | tr '\n' ' ' | sed 's/ $//'; }
weights() { echo "$WORK/$1.safetensors"; }

run threads "$BIN" "${common[@]}" --backend=nccl --work_dir="$WORK/threads" --save="$(weights threads)" ||
  fail "the 2-thread GPU run"
launches=(threads)
if command -v mpirun > /dev/null; then
  run procs mpirun --oversubscribe --bind-to none -np 2 "$BIN" "${common[@]}" --backend=nccl \
    --work_dir="$WORK/procs" --save="$(weights procs)" || fail "the 2-process GPU run (mpirun)"
  launches+=(procs)
else
  echo "(no mpirun: the mpirun launch is not run)"
fi
# torchrun-style: two processes started by hand, rank 0 serving the NCCL id.
port=$((20000 + RANDOM % 20000))
envs=(env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 ZEROSHARD_JOB_TOKEN="sim-resnet-$RANDOM$RANDOM")
"${envs[@]}" RANK=1 LOCAL_RANK=1 timeout 600 "$BIN" "${common[@]}" --backend=nccl --work_dir="$WORK/env" \
  --save="$(weights env)" > "$WORK/env1.log" 2>&1 &
peer=$!
run env "${envs[@]}" RANK=0 LOCAL_RANK=0 "$BIN" "${common[@]}" --backend=nccl --work_dir="$WORK/env" \
  --save="$(weights env)" || fail "the torchrun-style run (rank 0)"
wait "$peer" || { fail "the torchrun-style run (rank 1)"; tail -n 20 "$WORK/env1.log"; }
launches+=(env)

want="$(losses "$WORK/threads.log")"
[ -n "$want" ] || fail "the 2-thread run logged no losses"
for l in "${launches[@]}"; do
  got="$(losses "$WORK/$l.log")"
  printf 'GPU, %-8s losses %s\n' "$l:" "$got"
  grep -q "^2 ranks (nccl" "$WORK/$l.log" || fail "$l: the run did not train on the nccl backend"
  grep -q "made 0.0 cudaMalloc" "$WORK/$l.log" || fail "$l: warm steps took cudaMalloc (or the line is missing)"
  [ "$l" = threads ] && continue
  [ "$got" = "$want" ] || fail "$l logged $got where the 2-thread run logged $want"
  if ! cmp -s "$(weights "$l")" "$(weights threads)"; then
    fail "$l saved other weights than the 2-thread run ($(ls -l "$(weights "$l")" "$(weights threads)" 2>&1 | tr '\n' ' '))"
  fi
done
if ((failures)); then echo "sim_train_resnet: $failures check(s) failed"; exit 1; fi
echo "sim_train_resnet: ${launches[*]} logged the same losses and saved the same weights"
