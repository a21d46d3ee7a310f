#!/usr/bin/env bash
# Issue 26, scenario 9: a soak. The main job (examples/configs/default.json: 4
# in-process ranks, FULL_SHARD, a GPT of 4 blocks of width 128) trains
# SOAK_STEPS steps (default 20000) with an async save every 50 steps and
# keep_last 3, while this script samples, every SOAK_INTERVAL seconds (default
# 2), the process's resident memory (VmRSS of /proc/PID/status), its open file
# descriptors (/proc/PID/fd) and the checkpoints on disk (step-* folders under
# the experiment's folder, complete or in flight, and their bytes).
#
#   make soak                                  (builds -c opt, then this)
#   SOAK_STEPS=2000 tools/soak.sh [TRAIN_GPT]  (default bazel-bin/examples/train_gpt)
#
# Environment: SOAK_STEPS, SOAK_INTERVAL, SOAK_ARGS (more train_gpt flags),
# SOAK_DIR (the work dir; default a temporary folder, removed at the end),
# SOAK_CSV (also write the samples there: seconds,step,rss_kib,fds,threads,checkpoints,checkpoint_bytes).
#
# It prints the first, last and largest value of each series and fails when
#   - the run exits non-zero;
#   - the disk held more than 4 checkpoints at any sample: keep_last 3 complete
#     ones plus the one an async save is writing (train/trainer.cc prunes to
#     keep_last before each save starts, so 4 is the most there may ever be);
#   - the descriptors grew: the fewest open in the last quarter of the samples
#     after warm-up exceed the fewest in the first quarter. Minimums, because a
#     sample may land while a save holds its files open (legitimately a few
#     more); a leaked descriptor stays open, so it raises every later sample,
#     the smallest included;
#   - resident memory grew beyond the bound below.
#
# The memory bound. The job runs with glibc's malloc thresholds fixed at their
# defaults (GLIBC_TUNABLES mmap_threshold and trim_threshold 128 KiB, unless
# GLIBC_TUNABLES is set): left dynamic, the first free of a large block (a
# snapshot) raises the mmap threshold to its size and the trim threshold to
# twice that, after which each thread's arena may keep that much freed memory
# resident, and RSS drifted by up to 1.1 MiB in 2000 steps of a 2-rank run
# with no leak. Fixed, blocks of 128 KiB or more are mapped and unmapped, so
# RSS follows live memory. Warm-up ends once 3 saves have been started (step
# 150): by then every buffer of a steady step exists (gathered units,
# activations, the optimizer's moments, the communicators' rings), an async
# save has taken its host snapshot at least once, and each step's allocations
# repeat, so malloc's free lists are at a fixed point. After warm-up the only
# legitimate growth is
#   C   one checkpoint's bytes (measured on disk at the end): the async save's
#       host snapshot, should a save be in flight at one sample and not at another;
#   64 B x ranks x steps  each rank's RunTraining keeps two doubles per step
#       (TrainSummary::losses and the step times, train/trainer.cc), 16 B; a
#       std::vector's capacity is at most twice its size, and the buffers it
#       outgrew (half, a quarter, ... of that: at most its capacity again) may
#       stay in malloc's free lists: 4 x 16 B per step and rank;
#   128 KiB x threads  free memory at the top of an arena below the trim
#       threshold is not returned; there are at most as many arenas as threads
#       (the most sampled, /proc/PID/status Threads).
# So: the largest RSS in the last quarter of the post-warm-up samples must not
# exceed the largest in the first quarter by more than their sum. A leak of
# one snapshot per save is caught after two saves; a steady leak of a few
# hundred bytes per step and rank within 20000 steps.
set -uo pipefail

bin="${1:-bazel-bin/examples/train_gpt}"
[[ "$bin" == /* ]] || bin="$PWD/$bin"
cd "$(dirname "$0")/.." || exit 2  # the config and data paths are the repository's
steps="${SOAK_STEPS:-20000}"
interval="${SOAK_INTERVAL:-2}"
save_every=50
keep_last=3
max_checkpoints=$((keep_last + 1))  # the complete ones and the one in flight
warm_steps=$((3 * save_every))
[[ -x "$bin" ]] || { echo "soak: expected an executable train_gpt, found '$bin' (make soak builds it)" >&2; exit 2; }
[[ "$steps" =~ ^[0-9]+$ ]] && ((steps > warm_steps)) ||
  { echo "soak: expected SOAK_STEPS > $warm_steps (the warm-up), found '$steps'" >&2; exit 2; }
read -r -a extra <<< "${SOAK_ARGS:-}"
ranks=$("$bin" --config=examples/configs/default.json "${extra[@]}" --print_config |
        sed -nE 's/^ *"world_size": ([0-9]+),?$/\1/p' | head -1)
[[ "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "soak: expected the config's world_size from --print_config, found '$ranks'" >&2; exit 2; }
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

if [[ -n "${SOAK_DIR:-}" ]]; then
  wd="$SOAK_DIR"
  mkdir -p "$wd"
else
  wd="$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")"
  trap 'rm -rf "$wd"' EXIT
fi
ckpt="$wd/soak"  # experiment_name soak
log="$wd/soak.log"
samples="$wd/samples.csv"
echo "seconds,step,rss_kib,fds,threads,checkpoints,checkpoint_bytes" > "$samples"

echo "soak: $steps steps of examples/configs/default.json on $ranks ranks, async saves every $save_every, keep_last $keep_last;" \
     "a sample every $interval s; work dir $wd"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
start=$SECONDS
GLIBC_TUNABLES="${GLIBC_TUNABLES:-glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=131072}" \
"$bin" --config=examples/configs/default.json --set experiment_name=soak --work_dir="$wd" --steps="$steps" \
  --save_every=$save_every --async_save --keep_last=$keep_last --log_every=10 "${extra[@]}" > "$log" 2>&1 &
pid=$!

while kill -0 "$pid" 2> /dev/null; do
  rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2> /dev/null)
  fds=$(ls "/proc/$pid/fd" 2> /dev/null | wc -l)
  threads=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status" 2> /dev/null)
  [[ -n "$rss" ]] || break  # exited between the check and the read
  n=0 bytes=0
  shopt -s nullglob
  dirs=("$ckpt"/step-*)
  shopt -u nullglob
  n=${#dirs[@]}
  ((n > 0)) && bytes=$(du -sbc "${dirs[@]}" 2> /dev/null | awk 'END { print $1 }')
  step=$(grep -oE '^step [0-9]+ loss' "$log" | tail -1 | awk '{ print $2 }')
  echo "$((SECONDS - start)),${step:--1},$rss,$fds,${threads:-0},$n,${bytes:-0}" >> "$samples"
  sleep "$interval"
done
wait "$pid"
rc=$?
seconds=$((SECONDS - start))
[[ -n "${SOAK_CSV:-}" ]] && cp "$samples" "$SOAK_CSV"

# One complete checkpoint's bytes (C above): the newest.
last_ckpt=""
for d in "$ckpt"/step-[0-9]*; do [[ "$d" =~ /step-[0-9]+$ ]] && last_ckpt="$d"; done  # sorted: zero-padded
ckpt_bytes=0
[[ -n "$last_ckpt" ]] && ckpt_bytes=$(du -sb "$last_ckpt" | cut -f1)

awk -F, -v warm="$warm_steps" -v steps="$steps" -v ckpt_bytes="$ckpt_bytes" -v max_ckpt="$max_checkpoints" \
    -v rc="$rc" -v seconds="$seconds" -v ranks="$ranks" '
  NR == 1 { next }
  {
    n++; t[n] = $1; st[n] = $2; rss[n] = $3; fds[n] = $4; th[n] = $5; nc[n] = $6; nb[n] = $7
    if ($2 >= warm && first_warm == 0) first_warm = n
  }
  function report(name, a, unit,   i, mx) {
    mx = a[1]
    for (i = 2; i <= n; i++) if (a[i] > mx) mx = a[i]
    printf "  %-18s first %12s  last %12s  max %12s %s\n", name, a[1], a[n], mx, unit
  }
  END {
    fail = 0
    if (rc != 0) { print "soak: FAIL: train_gpt exited " rc; fail = 1 }
    printf "soak: %d samples over %d s, %d steps\n", n, seconds, steps
    report("RSS", rss, "KiB"); report("open fds", fds, ""); report("threads", th, ""); report("checkpoints", nc, "")
    report("checkpoint bytes", nb, "B")
    mxc = 0
    for (i = 1; i <= n; i++) if (nc[i] > mxc) { mxc = nc[i]; at = i }
    if (mxc > max_ckpt) {
      printf "soak: FAIL: %d checkpoints on disk at %s s (step %s); at most %d may be\n", mxc, t[at], st[at], max_ckpt
      fail = 1
    }
    m = first_warm == 0 ? 0 : n - first_warm + 1  # samples after warm-up
    if (m < 8) {
      printf "soak: FAIL: %d samples after the warm-up (step %d); need 8: more SOAK_STEPS or a shorter SOAK_INTERVAL\n", m, warm
      fail = 1
    } else {
      q = int(m / 4)
      e1 = first_warm + q - 1; b2 = n - q + 1
      rss1 = 0; rss2 = 0; fd1 = 1e9; fd2 = 1e9
      for (i = first_warm; i <= e1; i++) { if (rss[i] > rss1) rss1 = rss[i]; if (fds[i] < fd1) fd1 = fds[i] }
      for (i = b2; i <= n; i++) { if (rss[i] > rss2) rss2 = rss[i]; if (fds[i] < fd2) fd2 = fds[i] }
      mth = 0
      for (i = 1; i <= n; i++) if (th[i] > mth) mth = th[i]
      allowed = (ckpt_bytes + 64 * ranks * (steps - warm) + mth * 131072) / 1024
      printf "  after warm-up (step %d on): RSS max %d KiB in the first quarter, %d KiB in the last (+%d KiB; bound +%d KiB = checkpoint %d B + 64 B x %d ranks x %d steps + %d threads x 128 KiB)\n",
             warm, rss1, rss2, rss2 - rss1, allowed, ckpt_bytes, ranks, steps - warm, mth
      printf "  open fds: fewest %d in the first quarter, %d in the last\n", fd1, fd2
      if (rss2 - rss1 > allowed) { printf "soak: FAIL: resident memory grew by %d KiB, more than %d KiB\n", rss2 - rss1, allowed; fail = 1 }
      if (fd2 > fd1) { printf "soak: FAIL: open descriptors grew from %d to %d\n", fd1, fd2; fail = 1 }
    }
    if (!fail) print "soak: PASS"
    exit fail
  }' "$samples"
status=$?
((status == 0)) || tail -20 "$log"
exit $status
