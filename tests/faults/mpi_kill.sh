#!/usr/bin/env bash
# Scenario 1 of issue 26: kill -9 of rank 2 of 4 under mpirun at step 5, the
# job saving a checkpoint every step.
#   mpi_kill.sh TRAIN_GPT [TRIALS]
# Each trial passes when every process of the job is gone within 30 s of the
# kill, rank 2 is named (by mpirun, or by a survivor's DeadlineExceeded), and
# the newest complete checkpoint resumes (in-process ranks, world 4). Prints
# the summary line tools/faults.sh reads.
set -uo pipefail
BIN="$(realpath "$1")"; TRIALS="${2:-${FAULT_TRIALS:-1}}"
CONFIG=examples/configs/default.json
SCENARIO=mpi_kill
source "$(dirname "$0")/mpi_common.sh"

trial() {  # in a subshell: `fail` ends the trial
  work="$(mktemp -d)"; out="$work/out.txt"
  trap 'kill_job; rm -rf "$work"' EXIT
  common=(--config="$CONFIG" --world_size=4 --log_every=1 --eval_every=0 --sample_tokens=0
          --timeout_s=20 --work_dir="$work/runs" --save_every=1 --keep_last=3)
  start_job "${common[@]}" --backend=mpi --steps=100000
  kill -KILL "$P2"; killed=$(now)
  wait_job_gone 30
  gone="$(elapsed "$killed")"
  pattern='rank 2 .*(signal 9|Killed)|DEADLINE_EXCEEDED.*rank 2'
  grep -Eq "$pattern" "$out" || fail "rank 2 is not named"
  named="$(grep -Em1 "$pattern" "$out" | sed 's/^ *//' | cut -c1-160)"
  # The newest complete checkpoint loads: resume=auto on in-process ranks, two
  # steps past the newest step-<n> folder (a .tmp one is an unfinished save).
  resume="$work/resume.txt"
  latest="$(ls -d "$work"/runs/*/step-* 2>/dev/null | grep -v '\.tmp' | sort | tail -n1)"
  [ -n "$latest" ] || fail "no complete checkpoint was left"
  n=$((10#$(basename "$latest" | sed 's/step-//')))
  "$BIN" "${common[@]}" --resume=auto --steps=$((n + 2)) > "$resume" 2>&1 || { cat "$resume"; fail "resume failed"; }
  grep -q 'resumed from' "$resume" || { cat "$resume"; fail "the resumed run did not load a checkpoint"; }
  from="$(grep -m1 'resumed from' "$resume" | sed 's/.* at step //')"
  echo "PASS mpi_kill: rank 2 killed at step 5; every process gone after $gone s (mpirun status $rc); named: \"$named\"; the newest checkpoint resumed at step $from"
  echo "$gone $from" > "$RESULT"
}

passed=0; start=$SECONDS; figures=""
RESULT="$(mktemp)"
for ((i = 1; i <= TRIALS; ++i)); do
  if (trial); then passed=$((passed + 1)); figures="$figures $(awk '{ printf "%s s (step %s)", $1, $2 }' "$RESULT")"; fi
done
rm -f "$RESULT"
verdict=PASS; ((passed == TRIALS)) || verdict=FAIL
echo "FAULTS|mpi_kill|rank 2 of 4 killed at step 5, saving every step|$TRIALS|$passed|$verdict|$((SECONDS - start))|mpirun names rank 2 (exited on signal 9); seconds until the whole job was gone (step resumed from):${figures:- none}"
[ "$verdict" = PASS ]
