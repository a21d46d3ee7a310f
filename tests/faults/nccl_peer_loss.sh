#!/usr/bin/env bash
# Scenario 4 of issue 26 (and issue 20): NCCL peer loss. The main job (shrunk:
# 2 blocks of width 64, batch 4) on 2 GPUs as 2 processes started
# torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
# ZEROSHARD_JOB_TOKEN: no launcher that would end the job for us); at step 3,
# half a step after rank 0 logged step 2 (mid-step), one process is killed
# with kill -9. Each trial passes when the other process exits non-zero
# within the collective timeout (distributed.timeout_s = 20 s here) of the
# kill, with an error naming the dead rank ("rank R of 2, pid P is gone").
# Trials alternate the victim: rank 1, then rank 0 (the lead).
#   nccl_peer_loss.sh TRAIN_GPT [TRIALS]
# Needs 2 GPUs: the simulator's in `make sim-test` (its NCCL checks that the
# processes it waits for are alive); skips where there are fewer. On real
# GPUs NCCL reports the lost peer (ncclRemoteError) or the watchdog ends the
# survivor at the timeout plus its grace. Prints the FAULTS summary line of
# tools/faults.sh.
set -uo pipefail
BIN="$(realpath "$1")"; TRIALS="${2:-${FAULT_TRIALS:-2}}"
TIMEOUT_S=20
CONFIG=examples/configs/default.json
probe="$("$BIN" --config="$CONFIG" --backend=nccl --world_size=2 --steps=1 --eval_iters=1 --set train.batch_size=1 --set model.block_size=8 --sample_tokens=0 \
         --work_dir= --set model.n_layer=1 --set model.n_embd=32 2>&1)"
if echo "$probe" | grep -Eq "built without CUDA|expected 2 GPUs|expected a CUDA device"; then
  echo "SKIPPED: $(echo "$probe" | grep -Em1 'built without CUDA|expected 2 GPUs|expected a CUDA device')"
  exit 0
fi
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN { printf "%.1f", b - a }'; }
alive() { kill -0 "$1" 2> /dev/null && [ "$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2> /dev/null)" != Z ]; }

trial() {  # trial VICTIM, in a subshell
  local victim="$1" survivor=$((1 - $1))
  work="$(mktemp -d)"
  trap 'kill -KILL $P0 $P1 2> /dev/null; rm -rf "$work"' EXIT
  local port=$((20000 + RANDOM % 20000))
  local envs=(env MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 ZEROSHARD_JOB_TOKEN="peer-loss-$RANDOM$RANDOM")
  local common=(--config="$CONFIG" --world_size=2 --steps=100000 --log_every=1 --eval_every=0 --sample_tokens=0
                --timeout_s="$TIMEOUT_S" --work_dir= --set model.n_layer=2 --set model.n_embd=64 --set train.batch_size=4)
  "${envs[@]}" RANK=0 LOCAL_RANK=0 "$BIN" "${common[@]}" --backend=nccl > "$work/out0" 2>&1 &
  P0=$!
  "${envs[@]}" RANK=1 LOCAL_RANK=1 "$BIN" "${common[@]}" --backend=nccl > "$work/out1" 2>&1 &
  P1=$!
  local start; start=$(now)
  until grep -q '^step 2 ' "$work/out0" 2> /dev/null; do
    if awk -v a="$start" -v b="$(now)" 'BEGIN { exit !(b - a > 300) }' || ! alive $P0 || ! alive $P1; then
      echo "FAIL nccl_peer_loss: the job did not reach step 2"; tail -n 20 "$work/out0" "$work/out1"; exit 1
    fi
    sleep 0.1
  done
  local ms; ms="$(grep '^step 2 ' "$work/out0" | awk '{ print $7 }')"
  sleep "$(awk -v m="$ms" 'BEGIN { printf "%.3f", m / 2000 }')"
  local vpid spid
  if ((victim == 0)); then vpid=$P0; spid=$P1; else vpid=$P1; spid=$P0; fi
  kill -KILL "$vpid"; local killed; killed=$(now)
  wait "$vpid" 2> /dev/null
  while alive "$spid"; do
    if awk -v a="$killed" -v b="$(now)" -v l="$((TIMEOUT_S + 30))" 'BEGIN { exit !(b - a > l) }'; then break; fi
    sleep 0.05
  done
  local gone; gone="$(elapsed "$killed")"
  if alive "$spid"; then
    echo "FAIL nccl_peer_loss: rank $survivor still running $gone s after rank $victim was killed"
    tail -n 20 "$work/out$survivor"; exit 1
  fi
  wait "$spid"; local rc=$?
  ((rc != 0)) || { echo "FAIL nccl_peer_loss: rank $survivor exited 0 after losing its peer"; exit 1; }
  awk -v g="$gone" -v t="$TIMEOUT_S" 'BEGIN { exit !(g <= t) }' ||
    { echo "FAIL nccl_peer_loss: rank $survivor took $gone s, past the collective timeout ($TIMEOUT_S s)"; exit 1; }
  local pattern="rank $victim of 2, pid $vpid is gone"
  grep -q "$pattern" "$work/out$survivor" ||
    { echo "FAIL nccl_peer_loss: rank $survivor's error does not name rank $victim ('$pattern')"; tail -n 20 "$work/out$survivor"; exit 1; }
  named="$(grep -m1 "$pattern" "$work/out$survivor" | sed 's/^ *//' | cut -c1-200)"
  echo "PASS nccl_peer_loss: rank $victim killed mid-step 3; rank $survivor exited (status $rc) after $gone s: \"$named\""
  echo "$gone" >> "$RESULT"
}

passed=0; begin=$SECONDS
RESULT="$(mktemp)"
for ((i = 0; i < TRIALS; ++i)); do
  if (trial $(((i + 1) % 2))); then passed=$((passed + 1)); fi
done
figures="$(tr '\n' ' ' < "$RESULT")"; rm -f "$RESULT"
verdict=PASS; ((passed == TRIALS)) || verdict=FAIL
echo "FAULTS|nccl_peer_loss|kill -9 of one of 2 GPU processes (torchrun-style) mid-step 3, timeout ${TIMEOUT_S} s|$TRIALS|$passed|$verdict|$((SECONDS - begin))|the survivor names the dead rank (the simulator's NCCL sees its process gone) and exits; seconds from the kill: ${figures:-none}"
[ "$verdict" = PASS ]
