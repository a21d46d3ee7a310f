# Shared by the MPI fault scenarios (issue 26): start train_gpt under mpirun,
# find a rank's process, wait for log lines, timestamps. Sourced, not run.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1

now() { date +%s.%N; }
# elapsed START [END]: seconds with one decimal.
elapsed() { awk -v a="$1" -v b="${2:-$(now)}" 'BEGIN { printf "%.1f", b - a }'; }

# Only this job's processes are ever looked at or signalled: other jobs of the
# same binary may run beside it (make test runs tests in parallel).
# rank_pids MPIRUN_PID: the job's processes, mpirun's children; kept in RANK_PIDS.
RANK_PIDS=""
rank_pids() { RANK_PIDS="$(pgrep -P "$1" | tr '\n' ' ')"; }

# pid_of_rank R: the process of RANK_PIDS that is MPI rank R (its environment
# has OMPI_COMM_WORLD_RANK=R).
pid_of_rank() {
  local r="$1" p
  for p in $RANK_PIDS; do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r"; then
      echo "$p"; return 0
    fi
  done
  return 1
}

# How many of RANK_PIDS are still running (not zombies).
alive() {
  local n=0 p state
  for p in $RANK_PIDS; do
    state="$(awk '/^State:/ { print $2 }' "/proc/$p/status" 2>/dev/null)"
    if [ -n "$state" ] && [ "$state" != "Z" ]; then n=$((n + 1)); fi
  done
  echo "$n"
}

# Kills what is left of the job (the EXIT trap).
kill_job() {
  local p
  for p in $RANK_PIDS; do kill -KILL "$p" 2>/dev/null; done
  [ -n "${mpirun_pid:-}" ] && kill -KILL "$mpirun_pid" 2>/dev/null
  return 0
}

# wait_for PATTERN FILE SECONDS: 0 when an extended regex matches a line of
# FILE within SECONDS.
wait_for() {
  local pattern="$1" file="$2" limit="$3" start
  start=$(now)
  while ! grep -Eq -- "$pattern" "$file" 2>/dev/null; do
    if awk -v a="$start" -v b="$(now)" -v l="$limit" 'BEGIN { exit !(b - a > l) }'; then return 1; fi
    sleep 0.1
  done
}


# fail MESSAGE: ends the trial (a subshell), showing the job's output ($out).
fail() { echo "FAIL $SCENARIO: $*"; echo "---- output"; tail -n 40 "$out"; exit 1; }

# start_job ARGS...: train_gpt under mpirun -np 4 with ARGS, its output in
# $out; returns once the job logged step 5, with mpirun_pid, RANK_PIDS and
# P2 (rank 2's process) set.
start_job() {
  mpirun --oversubscribe --bind-to none -np 4 "$BIN" "$@" > "$out" 2>&1 &
  mpirun_pid=$!
  wait_for '^step 5 ' "$out" 120 || fail "the job did not reach step 5 in 120 s"
  rank_pids "$mpirun_pid"
  P2="$(pid_of_rank 2)" || fail "no process is rank 2 among mpirun's children ($RANK_PIDS)"
}

# wait_job_gone SECONDS: waits, at most SECONDS, until mpirun and every rank
# process have ended; fails if any is left or mpirun exited 0; sets rc to
# mpirun's status.
wait_job_gone() {
  local deadline=$(( $(date +%s) + $1 ))
  while { kill -0 "$mpirun_pid" 2>/dev/null || [ "$(alive)" -gt 0 ]; } && [ "$(date +%s)" -lt "$deadline" ]; do
    sleep 0.1
  done
  kill -0 "$mpirun_pid" 2>/dev/null && fail "mpirun still running $1 s after the fault"
  wait "$mpirun_pid"; rc=$?
  [ "$(alive)" -eq 0 ] || fail "$(alive) processes of the job left"
  [ "$rc" -ne 0 ] || fail "mpirun exited 0"
}
