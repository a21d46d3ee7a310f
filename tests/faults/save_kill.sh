#!/usr/bin/env bash
# Issue 26, scenario 5: kill -9 during a save, at random moments; the run
# resumed with --resume=auto must end bitwise where an uninterrupted run ends.
#
#   tests/faults/save_kill.sh TRAIN_GPT [TRIALS]      (TRIALS: default $FAULT_TRIALS, else 20)
#
# For each configuration (state_dict_type sharded|full x sync|async saves):
#   reference  one uninterrupted run of FAULT_STEPS (12) steps saving every step;
#              it also measures when the first save appears and when the run ends
#   trials     the same run in a fresh work dir, killed with SIGKILL a random time
#              after a random save k (uniform in 1..N) began, i.e. its
#              step-<k>.tmp folder appeared: a uniform fraction of the
#              reference's time from one save's start to the next's, so the kill
#              lands anywhere in or after save k, inside the save or in the step
#              after it (after save N: inside it or at the run's end); then the same command with
#              --resume=auto to the same step count. A trial passes when
#                - the resumed run exits 0 and says it resumed from the newest
#                  *complete* checkpoint (a step-<n> folder with checkpoint.json)
#                  the killed run left, or started fresh when there was none;
#                - every orphan the kill left in the work dir (step-<n>.tmp,
#                  <dir>.old.<pid>, <name>.tmp.<pid>.<suffix>) is named in the
#                  resumed run's "removed what an interrupted save left" lines,
#                  and none (at any depth) is left after it;
#                - its final checkpoint is byte for byte the reference's (below);
#                - every loss it logged equals the reference's at that step.
#
# Bitwise: the final checkpoint folder step-<N>/ is compared file by file with
# cmp (the file lists must match too). Its tensor files hold every parameter and
# the AdamW moments as raw f32 bytes (sharded: rank_<r>.safetensors; full:
# model.safetensors and optimizer.safetensors), and checkpoint.json holds the
# step, the LR schedule, the dropout RNG offsets and each file's CRC-32C; none
# holds a path or a time, so two uninterrupted runs in different folders write
# identical bytes. That is the whole training state, bit for bit. The logged
# losses ("step <k> loss %.9g") are checked as well: a loss is an f32 rounded
# from the mean (train/train_step.h), and 9 significant digits identify an f32
# exactly, so equal text is equal bits; they cover only the steps the resumed
# run took, and the update of the last step shows only in the checkpoint.
#
# Randomness: bash's $RANDOM seeded with FAULT_SEED (default 26, printed) plus
# the configuration's index, so configuration c's trial t always draws the same
# save and fraction whatever FAULT_CONFIGS selects; a failure prints the seed,
# the trial, the save, the fraction and the delay in ms (the delay scales with
# this machine's measured save interval, so the moment itself is reproducible
# only as a fraction of it).
#
# Environment: FAULT_TRIALS, FAULT_SEED, FAULT_STEPS (12), FAULT_CONFIGS (a
# subset of "sharded/sync sharded/async full/sync full/async"), FAULT_CONFIG
# (the JSON config, default examples/configs/default.json, read from the working
# directory with data/tinyshakespeare.txt), FAULT_TRAIN_ARGS (flags replacing the
# small model below), FAULT_KEEP (a folder: work dirs of failed trials are
# copied there; under Bazel the test's undeclared outputs).
#
# Output: per trial one line; per configuration one summary line in the fault
# suite's format (tools/faults.sh):
#   FAULTS|save_kill|<configuration>|<trials>|<passed>|<PASS or FAIL>|<seconds>|<details>
# Exits 1 if any trial or reference run failed, 2 on bad usage.
set -uo pipefail

usage() { echo "usage: $0 TRAIN_GPT [TRIALS]  (env FAULT_TRIALS, FAULT_SEED, FAULT_STEPS, FAULT_CONFIGS)" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
bin="$1"
trials="${2:-${FAULT_TRIALS:-20}}"
seed="${FAULT_SEED:-26}"
steps="${FAULT_STEPS:-12}"
config="${FAULT_CONFIG:-examples/configs/default.json}"
all_configs=(sharded/sync sharded/async full/sync full/async)
read -r -a configs <<< "${FAULT_CONFIGS:-${all_configs[*]}}"
[[ -x "$bin" ]] || { echo "save_kill: expected an executable train_gpt, found '$bin'" >&2; exit 2; }
[[ "$trials" =~ ^[0-9]+$ ]] || { echo "save_kill: expected a trial count >= 0, found '$trials'" >&2; exit 2; }
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "save_kill: expected FAULT_STEPS >= 1, found '$steps'" >&2; exit 2; }
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "save_kill: expected FAULT_SEED a number, found '$seed'" >&2; exit 2; }
[[ -f "$config" ]] || { echo "save_kill: expected the config $config under $(pwd)" >&2; exit 2; }

# A small model (2 ranks, 2 blocks of width 32): a step takes milliseconds, so
# a save (files written, fsynced, renamed) is a large part of the run and many
# kills land inside one. FAULT_TRAIN_ARGS="--world_size=4" runs default.json's model.
read -r -a model_args <<< "${FAULT_TRAIN_ARGS:---world_size=2 --n_layer=2 --n_head=2 --n_embd=32 --block_size=32 --batch_size=4}"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export LC_ALL=C  # sort and join agree on the order

root="$(mktemp -d "${TEST_TMPDIR:-${TMPDIR:-/tmp}}/save_kill.XXXXXX")"
trap 'rm -rf "$root"' EXIT
keep="${FAULT_KEEP:-${TEST_UNDECLARED_OUTPUTS_DIR:-}}"
experiment=save_kill  # checkpoints go to <work_dir>/save_kill/step-<n>/

now_ms() { local t="${EPOCHREALTIME/./}"; echo $((10#$t / 1000)); }

# The run of one configuration; extra flags (--resume=auto) after the work dir.
train_args() {  # format async work_dir [flags...]
  local format="$1" async="$2" wd="$3"; shift 3
  local a=(--config="$config" --set "experiment_name=$experiment" --work_dir="$wd" --steps="$steps"
           --save_every=1 --state_dict_type="$format" --log_every=1 --eval_every=0 --eval_iters=1
           --sample_tokens=0 --notensorboard "${model_args[@]}")
  [[ "$async" == async ]] && a+=(--async_save)
  printf '%s\n' "${a[@]}" "$@"
}

# Waits until an entry matching the glob $1 appears or process $2 has exited.
wait_for() {
  local glob="$1" pid="$2"
  until compgen -G "$glob" > /dev/null; do
    kill -0 "$pid" 2> /dev/null || return 1
    sleep 0.002
  done
}

# The newest complete checkpoint's step under $1 (0: none).
newest_complete() {
  local best=0 d n
  for d in "$1"/step-*; do
    [[ -d "$d" && "$(basename "$d")" =~ ^step-([0-9]+)$ && -f "$d/checkpoint.json" ]] || continue
    n=$((10#${BASH_REMATCH[1]}))
    ((n > best)) && best=$n
  done
  echo "$best"
}

# Orphans of an interrupted save: the top level of the checkpoint folder (what
# RemoveOrphanedSaves looks at) or anywhere under the work dir (-r).
orphans() {
  local depth=(-mindepth 1 -maxdepth 1)
  [[ "$1" == -r ]] && { depth=(-mindepth 1); shift; }
  [[ -d "$1" ]] || return 0
  find "$1" "${depth[@]}" \( -name 'step-*.tmp' -o -name '*.old.[0-9]*' -o -name '*.tmp.[0-9]*' \) | sort
}

losses() { grep -E '^step [0-9]+ loss ' "$1" | awk '{print $2, $4}'; }

failures=0
for cfg in "${configs[@]}"; do
  ci=-1
  for i in "${!all_configs[@]}"; do [[ "${all_configs[$i]}" == "$cfg" ]] && ci=$i; done
  ((ci >= 0)) || { echo "save_kill: expected configurations among '${all_configs[*]}', found '$cfg'" >&2; exit 2; }
  format="${cfg%/*}" async="${cfg#*/}"
  t_cfg=$(now_ms)
  RANDOM=$((seed * 8 + ci))
  echo "== save_kill $cfg: $trials trials of $steps steps, seed $seed (RANDOM=$((seed * 8 + ci)))"

  # The reference, timed: from its start, when its first save appears (the
  # step-000001.tmp folder) and when its last one is complete (step-<N>): N - 1
  # intervals from one save's start to the next's.
  ref="$root/$format-$async/ref"
  mkdir -p "$ref"
  mapfile -t args < <(train_args "$format" "$async" "$ref")
  t0=$(now_ms)
  "$bin" "${args[@]}" > "$ref.log" 2>&1 &
  pid=$!
  final=$(printf '%s/%s/step-%06d' "$ref" "$experiment" "$steps")
  wait_for "$ref/$experiment/step-*" "$pid"
  t_first=$(now_ms)
  wait_for "$final" "$pid"
  t_last=$(now_ms)
  wait "$pid"
  rc=$?
  t_end=$(now_ms)
  if [[ $rc -ne 0 || ! -f "$final/checkpoint.json" ]]; then
    echo "FAIL: the reference run exited $rc without $final; its log:"
    tail -20 "$ref.log"
    echo "FAULTS|save_kill|$format, $async|$trials|0|FAIL|$(((t_end - t_cfg) / 1000))|the reference run failed (exit $rc)"
    failures=$((failures + 1))
    continue
  fi
  gap=$(((t_last - t_first) / (steps > 1 ? steps - 1 : 1)))
  ((gap < 1)) && gap=1
  echo "   reference: $((t_end - t0)) ms, its saves from $((t_first - t0)) to $((t_last - t0)) ms;" \
       "kills at U[0,1) x $gap ms after a random save begins"

  passed=0 mid_save=0 finished=0
  declare -A hist=()
  for ((t = 1; t <= trials; t++)); do
    k=$((1 + RANDOM % steps))  # the save to wait for
    r=$RANDOM
    delay=$((r * gap / 32768))
    frac=$(awk -v r="$r" 'BEGIN { printf "%.4f", r / 32768 }')
    wd="$root/$format-$async/trial"
    rm -rf "$wd" "$wd".*.log
    mkdir -p "$wd"
    ckpt="$wd/$experiment"
    mapfile -t args < <(train_args "$format" "$async" "$wd")
    "$bin" "${args[@]}" > "$wd.killed.log" 2>&1 &
    pid=$!
    wait_for "$(printf '%s/step-%06d' "$ckpt" "$k")*" "$pid"
    sleep "$(awk -v ms="$delay" 'BEGIN { printf "%.3f", ms / 1000 }')"
    kill -KILL "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null  # no "Killed" line from bash
    rc=$?
    problems=()
    if [[ $rc -eq 0 ]]; then
      finished=$((finished + 1))  # ended before the kill: the resume has nothing to do
    elif [[ $rc -ne 137 ]]; then
      problems+=("the killed run exited $rc before the kill (expected 137, SIGKILL)")
    fi
    expected=$(newest_complete "$ckpt")
    mapfile -t left < <(orphans "$ckpt")
    ((${#left[@]} > 0)) && mid_save=$((mid_save + 1))

    mapfile -t args < <(train_args "$format" "$async" "$wd" --resume=auto)
    "$bin" "${args[@]}" > "$wd.resumed.log" 2>&1
    rc=$?
    [[ $rc -eq 0 ]] || problems+=("the resumed run exited $rc")
    got=$(sed -nE 's/^ *resumed from .* at step ([0-9]+)$/\1/p' "$wd.resumed.log" | tail -1)
    if [[ -z "$got" ]] && grep -q 'resume=auto: no checkpoint under' "$wd.resumed.log"; then got=0; fi
    if [[ "$got" != "$expected" ]]; then
      problems+=("resumed from step '${got:-?}', but the newest complete checkpoint the kill left is step $expected")
    fi
    for o in "${left[@]}"; do
      grep -qF "removed what an interrupted save left: $o" "$wd.resumed.log" ||
        problems+=("the orphan $o was not reported removed")
    done
    mapfile -t after < <(orphans -r "$wd")
    ((${#after[@]} == 0)) || problems+=("orphans left after the resumed run: ${after[*]}")
    mine=$(printf '%s/step-%06d' "$ckpt" "$steps")
    if [[ ! -d "$mine" ]]; then
      problems+=("no final checkpoint $mine")
    else
      if [[ "$(cd "$final" && ls -A)" != "$(cd "$mine" && ls -A)" ]]; then
        problems+=("final checkpoint files {$(cd "$mine" && ls -A | tr '\n' ' ')}, expected {$(cd "$final" && ls -A | tr '\n' ' ')}")
      fi
      for f in "$final"/*; do
        cmp -s "$f" "$mine/$(basename "$f")" || problems+=("$(basename "$f") of step $steps differs from the reference's")
      done
    fi
    # Every loss the resumed run logged is the reference's at that step.
    diff_losses=$(join <(losses "$ref.log" | sort) <(losses "$wd.resumed.log" | sort) | awk '$2 != $3' | head -3)
    [[ -z "$diff_losses" ]] || problems+=("logged losses differ (step reference resumed): $diff_losses")
    n_resumed=$(losses "$wd.resumed.log" | wc -l)
    ((n_resumed == steps - ${got:-0})) || problems+=("the resumed run logged $n_resumed steps, expected $((steps - ${got:-0}))")

    hist[$expected]=$((${hist[$expected]:-0} + 1))
    note="killed $delay ms (fraction $frac) after save $k began"
    if ((${#problems[@]} == 0)); then
      passed=$((passed + 1))
      echo "   trial $t: $note, orphans it left: ${#left[@]}; resumed from step $got: ok"
    else
      failures=$((failures + 1))
      echo "   trial $t: FAIL ($note; seed $seed, configuration $cfg; reproduce:" \
           "FAULT_SEED=$seed FAULT_CONFIGS=$cfg $0 $bin $t, whose last trial draws the same fraction)"
      printf '     - %s\n' "${problems[@]}"
      echo "     orphans after the kill: ${left[*]:-none}"
      echo "     --- the killed run's log (tail):"; tail -5 "$wd.killed.log" | sed 's/^/     /'
      echo "     --- the resumed run's log (tail):"; tail -15 "$wd.resumed.log" | sed 's/^/     /'
      if [[ -n "$keep" ]]; then
        mkdir -p "$keep" && cp -r "$wd" "$keep/save_kill-$format-$async-trial$t" &&
          cp "$wd".*.log "$keep/" 2> /dev/null && echo "     kept in $keep/save_kill-$format-$async-trial$t"
      fi
    fi
  done
  histogram=""
  for k in $(printf '%s\n' "${!hist[@]}" | sort -n); do histogram+=" ${k}x${hist[$k]}"; done
  unset hist
  verdict=PASS
  ((passed == trials)) || verdict=FAIL
  secs=$(awk -v ms="$(($(now_ms) - t_cfg))" 'BEGIN { printf "%.1f", ms / 1000 }')
  echo "FAULTS|save_kill|$format, $async|$trials|$passed|$verdict|$secs|resumed from step (step x trials):${histogram:- none}; $mid_save kills left a partial save, $finished came after the run ended; seed $seed"
done
((failures == 0)) || { echo "save_kill: $failures failures" >&2; exit 1; }
