#!/usr/bin/env bash
# Scenario 2 of issue 26: SIGSTOP of rank 2 of 4 under mpirun.
#   mpi_sigstop.sh TRAIN_GPT [TRIALS]   (FAULT_TIMEOUT_S: the collective timeout, default 20)
# Each trial passes when the survivors print a DeadlineExceeded naming rank 2
# within timeout + 5 s of the stop and every process of the job is gone
# within 60 s. Before the fix the survivors named rank 2 and then waited in
# MPI_Finalize forever. Prints the summary line tools/faults.sh reads.
set -uo pipefail
BIN="$(realpath "$1")"; TRIALS="${2:-${FAULT_TRIALS:-1}}"
CONFIG=examples/configs/default.json
TIMEOUT_S="${FAULT_TIMEOUT_S:-20}"
SCENARIO=mpi_sigstop
source "$(dirname "$0")/mpi_common.sh"

trial() {  # in a subshell: `fail` ends the trial
  work="$(mktemp -d)"; out="$work/out.txt"
  trap 'kill_job; rm -rf "$work"' EXIT
  start_job --config="$CONFIG" --backend=mpi --world_size=4 --steps=100000 --log_every=1 \
    --eval_every=0 --sample_tokens=0 --timeout_s="$TIMEOUT_S" --work_dir="$work/runs"
  kill -STOP "$P2"; stopped=$(now)
  wait_for 'DEADLINE_EXCEEDED.*rank 2' "$out" $((TIMEOUT_S + 60)) || fail "no DeadlineExceeded naming rank 2"
  named="$(elapsed "$stopped")"
  wait_job_gone 60
  gone="$(elapsed "$stopped")"
  awk -v n="$named" -v t="$TIMEOUT_S" 'BEGIN { exit !(n <= t + 5) }' || fail "named after $named s (timeout $TIMEOUT_S s)"
  awk -v g="$gone" 'BEGIN { exit !(g <= 60) }' || fail "job ended after $gone s"
  echo "PASS mpi_sigstop: rank 2 stopped at step 5; DeadlineExceeded naming it after $named s; every process gone after $gone s (mpirun status $rc)"
  grep -m1 'DEADLINE_EXCEEDED' "$out" | cut -c1-300
  echo "$named $gone" > "$RESULT"
}

passed=0; start=$SECONDS; figures=""
RESULT="$(mktemp)"
for ((i = 1; i <= TRIALS; ++i)); do
  if (trial); then passed=$((passed + 1)); figures="$figures $(cat "$RESULT" | awk '{ printf "%s/%s", $1, $2 }')"; fi
done
rm -f "$RESULT"
verdict=PASS; ((passed == TRIALS)) || verdict=FAIL
echo "FAULTS|mpi_sigstop|rank 2 of 4 stopped at step 5, timeout ${TIMEOUT_S} s|$TRIALS|$passed|$verdict|$((SECONDS - start))|seconds from the stop to the named DeadlineExceeded / to the whole job gone:${figures:- none}"
[ "$verdict" = PASS ]
