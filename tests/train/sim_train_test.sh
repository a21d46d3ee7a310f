#!/usr/bin/env bash
# make sim-train at the test's size (issue 20): tools/sim_train.sh --shrink on
# the GPU build of train_gpt. Its checks: 2 GPU processes (mpirun, and
# torchrun-style) equal 2 GPU threads bitwise, a run resumed from a checkpoint
# equals the uninterrupted one bitwise, the CPU run is within the derived fp32
# bound; FULL_SHARD and HYBRID_SHARD (2 nodes x 1 GPU). Needs 2 GPUs (the
# simulator's in `make sim-test`); skips where there are fewer.
#   sim_train_test.sh TRAIN_GPT
set -uo pipefail
BIN="$1"
probe="$("$BIN" --config=examples/configs/default.json --backend=nccl --world_size=2 --steps=1 --eval_iters=1 --set train.batch_size=1 --set model.block_size=8 \
         --sample_tokens=0 --work_dir= --set model.n_layer=1 --set model.n_embd=32 2>&1)"
if echo "$probe" | grep -Eq "built without CUDA|expected 2 GPUs|expected a CUDA device"; then
  echo "SKIPPED: $(echo "$probe" | grep -Em1 'built without CUDA|expected 2 GPUs|expected a CUDA device')"
  exit 0
fi
command -v mpirun > /dev/null || { echo "SKIPPED: no mpirun"; exit 0; }
exec tools/sim_train.sh "$BIN" --shrink
