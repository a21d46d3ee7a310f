#!/usr/bin/env bash
# `make faults`: the fault-injection suite of issue 26. Builds the main job
# (//examples:train_gpt, -c opt, with the Makefile's BAZEL_FLAGS), runs every
# scenario of SCENARIOS below, prints their summary lines as a table and writes
# it into docs/reliability.md between <!-- faults-table:begin --> and
# <!-- faults-table:end --> (section "The fault suite"). Exits 1 if any
# scenario failed or printed no summary line (the table is written either way).
#
# A scenario is a script, run from the repository root as
#     SCRIPT TRAIN_GPT TRIALS
# (TRAIN_GPT: the built binary's path; TRIALS: the row's count, or FAULT_TRIALS
# when set). It may run train_gpt under mpirun itself. It exits non-zero on any
# failure and prints one summary line per configuration it tries, exactly:
#     FAULTS|<scenario>|<configuration>|<trials>|<passed>|<PASS or FAIL>|<seconds>|<details>
# fields without "|": <scenario> the script's short name (save_kill),
# <configuration> free text ("sharded, async"), <trials> and <passed> integers,
# <seconds> the configuration's wall time, <details> one free-text line (what
# the trials found: e.g. the steps resumed from, how many kills hit a save, the
# seed that reproduces them). Everything else it prints is its log.
#
# Adding a scenario is one line in SCENARIOS: "<script> <trials> [sim]"; "sim"
# runs it with train_gpt built for the CUDA simulator (--define=cuda_sim=1, the
# build make sim-test makes: two simulated GPUs whose NCCL spans processes),
# for the GPU scenarios; without a CUDA toolkit such a row is SKIPPED.
#
# Environment: FAULT_TRIALS (every scenario's trial count), FAULT_SCENARIOS
# (names to run, e.g. "save_kill"; default all), FAULT_DOC (the markdown file,
# default docs/reliability.md; "" writes none), BAZEL, BAZEL_FLAGS.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

SCENARIOS=(
  "tests/faults/save_kill.sh 20"
  "tests/faults/mpi_kill.sh 3"
  "tests/faults/mpi_sigstop.sh 2"
  "tests/faults/nccl_peer_loss.sh 2 sim"
)

BAZEL="${BAZEL:-bazel}"
read -r -a FLAGS <<< "${BAZEL_FLAGS:-}"
DOC="${FAULT_DOC-docs/reliability.md}"
BEGIN='<!-- faults-table:begin -->'
END='<!-- faults-table:end -->'
if [[ -n "$DOC" ]] && ! { grep -qxF "$BEGIN" "$DOC" && grep -qxF "$END" "$DOC"; }; then
  echo "faults.sh: expected the lines '$BEGIN' and '$END' in $DOC" >&2
  exit 2
fi

echo "building //examples:train_gpt (-c opt)"
"$BAZEL" build "${FLAGS[@]}" -c opt //examples:train_gpt || { echo "faults.sh: the build failed" >&2; exit 1; }
bin="$("$BAZEL" info "${FLAGS[@]}" -c opt bazel-bin 2> /dev/null)/examples/train_gpt"
[[ -x "$bin" ]] || { echo "faults.sh: expected the built binary at '$bin'" >&2; exit 1; }

log_dir="$(mktemp -d "${TMPDIR:-/tmp}/faults.XXXXXX")"
# The GPU scenarios' binary: the simulator build overwrites bazel-bin's, so each is copied.
cp "$bin" "$log_dir/train_gpt" && bin="$log_dir/train_gpt"
sim_bin=""
sim_binary() {
  [[ -n "$sim_bin" ]] && return 0
  [[ -x "${ZEROSHARD_CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]] || return 1
  echo "building //examples:train_gpt for the CUDA simulator (--define=cuda_sim=1)"
  "$BAZEL" build "${FLAGS[@]}" --define=cuda_sim=1 //examples:train_gpt || return 1
  cp "$("$BAZEL" info "${FLAGS[@]}" --define=cuda_sim=1 bazel-bin 2> /dev/null)/examples/train_gpt" \
    "$log_dir/train_gpt_sim" && sim_bin="$log_dir/train_gpt_sim"
}

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
rows=()
failed=0
start=$SECONDS
for entry in "${SCENARIOS[@]}"; do
  read -r script trials kind <<< "$entry"
  trials="${FAULT_TRIALS:-$trials}"
  name="$(basename "$script" .sh)"
  if [[ -n "${FAULT_SCENARIOS:-}" && " ${FAULT_SCENARIOS//,/ } " != *" $name "* ]]; then continue; fi
  run_bin="$bin"
  if [[ "${kind:-}" == sim ]]; then
    if ! sim_binary; then
      rows+=("| $name | - | $trials | 0 | SKIPPED | - | needs the CUDA simulator build (a CUDA toolkit's nvcc and headers) |")
      continue
    fi
    run_bin="$sim_bin"
  fi
  echo "== $name: $script $run_bin $trials"
  log="$log_dir/$name.log"
  "$script" "$run_bin" "$trials" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  mapfile -t lines < <(grep -E '^FAULTS\|' "$log")
  if ((${#lines[@]} == 0)); then
    lines=("FAULTS|$name|-|$trials|0|FAIL|-|printed no summary line (exit $rc); log: $log")
  fi
  for l in "${lines[@]}"; do
    IFS='|' read -r _ sc cfg tr ps verdict secs details <<< "$l"
    [[ "$verdict" == PASS ]] || failed=1
    rows+=("| $sc | $cfg | $tr | $ps | $verdict | $secs | $details |")
  done
  ((rc == 0)) || failed=1
done
total=$((SECONDS - start))

table="$(
  echo "Last run: $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2> /dev/null || echo '?'), ${total} s; CPU: $cpu."
  echo
  echo "| Scenario | Configuration | Trials | Passed | Result | Seconds | Details |"
  echo "|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
)"
echo
echo "$table"
if [[ -n "$DOC" ]]; then
  tmp="$(mktemp)"
  TABLE="$table" awk -v begin="$BEGIN" -v end="$END" '
    $0 == begin { print; print ENVIRON["TABLE"]; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }' "$DOC" > "$tmp" && cat "$tmp" > "$DOC"
  rm -f "$tmp"
  echo "written into $DOC"
fi
((failed == 0)) || { echo "faults.sh: a scenario failed (logs in $log_dir)" >&2; exit 1; }
rm -rf "$log_dir"
