#!/usr/bin/env bash
# Prints the libtorch peer's training-step figures (bench/peers/torch_gpt_step.cc) at its
# best settings, one machine-readable line per configuration:
#   (a) the benchmark of issue 3:  GPT 4 layers, 4 heads, 256 wide, T 128, batch 8, vocab 256
#   (b) ANCHORS.md's configuration: the same with vocab 512 (anchor: ~235 ms/step)
#   (c) the Llama at (a)'s shapes (--model=llama, 2 kv heads, SwiGLU width 704, untied)
#
#   tools/peers/run_step_peers.sh            # both configurations, best settings
#   tools/peers/run_step_peers.sh --sweep    # also every setting measured in docs/peers.md
#
# Environment: BIN (default build/peers/torch_gpt_step), STEPS (20), WARMUP (3),
# PEER_THREADS, PEER_BLAS (openblas-pthread | openblas-openmp | system), OPENBLAS_CORETYPE,
# WAIT_IDLE (seconds to wait for an idle machine before each run; default 0),
# ROUNDS (sweep rounds, default 3), SWEEP_VOCAB (256), SWEEP_SYSTEM=1 (add the system BLAS),
# SWEEP_SETTINGS ("blas coretype threads wait optim attn;..." instead of the default list),
# LLAMA=0 (skip (c)).
# See docs/peers.md for why these are the best settings.
set -euo pipefail

cd "$(dirname "$0")/../.."
BIN=${BIN:-build/peers/torch_gpt_step}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-3}
LIBDIR=/usr/lib/x86_64-linux-gnu

if [[ ! -x "$BIN" ]]; then
  echo "run_step_peers: $BIN missing; build it with 'make bench-peers'" >&2
  exit 1
fi

# Best settings, measured on this project's 2-core machines (docs/peers.md):
# - fastest on an idle machine: OpenBLAS built with OpenMP (it shares libgomp's thread
#   pool with torch: no oversubscription) and torch on 2 threads, default wait policy;
#   but its spinning threads make it collapse when someone else loads the machine.
# - robust: OpenBLAS with pthreads (2 threads), torch on 1 thread.
# Both run for each configuration; PEER_BLAS / PEER_THREADS / OPENBLAS_CORETYPE run
# only the one given instead. OpenBLAS's SkylakeX kernels need AVX-512: on a CPU
# without it (an AMD Zen 3, say) they die of SIGILL, so there OpenBLAS picks its own.
if grep -qw avx512f /proc/cpuinfo; then CORETYPES=(unset SkylakeX); else CORETYPES=(unset); fi
DEFAULT_CORETYPE=${CORETYPES[-1]}
BEST_SETTINGS=("openblas-openmp ${OPENBLAS_CORETYPE:-$DEFAULT_CORETYPE} 2 unset flat manual"
               "openblas-pthread ${OPENBLAS_CORETYPE:-$DEFAULT_CORETYPE} 1 unset flat manual")
if [[ -n "${PEER_BLAS:-}${PEER_THREADS:-}" ]]; then
  BEST_SETTINGS=("${PEER_BLAS:-openblas-openmp} ${OPENBLAS_CORETYPE:-$DEFAULT_CORETYPE} ${PEER_THREADS:-2} ${OMP_WAIT_POLICY:-unset} flat manual")
fi
# (c): the Llama of HF's modeling_llama at (a)'s shapes, grouped-query (4 heads on 2).
LLAMA_ARGS=(--model=llama --n_kv_head=2)
read -r BEST_BLAS BEST_CORETYPE BEST_THREADS _ <<<"${BEST_SETTINGS[0]}"

# Percentage of the machine's CPU time that was idle over the last second (other
# engineers share these 2 cores: a figure is only worth keeping when this is near 100).
idle_pct() {
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  echo $(( total > 0 ? 100 * idle / total : 0 ))
}

# WAIT_IDLE=N: before each run, wait up to N seconds for a second with >= 90% idle CPU.
wait_idle() {
  local deadline=$(( SECONDS + ${WAIT_IDLE:-0} )) pct
  pct=$(idle_pct)
  while (( pct < 90 && SECONDS < deadline )); do pct=$(idle_pct); done
  echo "$pct"
}

# Runs the peer with one BLAS (by directory: torch links libblas.so.3, which
# LD_LIBRARY_PATH points at Debian's OpenBLAS of that flavour, whatever the system's
# update-alternatives choice is) and the given environment; extra args go to the binary.
run() {
  local blas=$1; shift
  local ldpath=""
  if [[ "$blas" != system ]]; then
    if [[ ! -e "$LIBDIR/$blas/libblas.so.3" ]]; then
      echo "run_step_peers: $LIBDIR/$blas missing: install libopenblas0-pthread" \
           "(WITH_PEERS=1 make deps); without OpenBLAS torch calls the reference BLAS" \
           "and the peer is not at its best" >&2
      return 1
    fi
    ldpath="$LIBDIR/$blas"
  fi
  local load idle
  idle=$(wait_idle)
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  env ${ldpath:+LD_LIBRARY_PATH="$ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"} "$@" \
      | sed "s/\$/ load_before=${load// /,} idle_pct_before=${idle}/"
}

# the two GPT configurations at the best settings, each followed by zeroshard's own step
# (//bench:step_bench, one rank, the same model and batch) and the ratio to the peer's best;
# then the Llama (peer only: step_bench has no Llama)
best() {
  local vocab setting line ms peer_best
  for vocab in 256 512; do
    peer_best=""
    for setting in "${BEST_SETTINGS[@]}"; do
      line=$(SWEEP_VOCAB=$vocab run_setting "$setting" best)
      echo "$line"
      ms=$(grep -o 'ms_per_step=[0-9.]*' <<<"$line" | head -1 | cut -d= -f2)
      if [[ -n "$ms" ]] && { [[ -z "$peer_best" ]] || awk -v a="$ms" -v b="$peer_best" 'BEGIN{exit !(a<b)}'; }; then
        peer_best=$ms
      fi
    done
    ours "$vocab" "$peer_best"
  done
  if [[ "${LLAMA:-1}" != 0 ]]; then
    for setting in "${BEST_SETTINGS[@]}"; do
      SWEEP_VOCAB=256 run_setting "$setting" best "${LLAMA_ARGS[@]}"
    done
  fi
}

# zeroshard's single-rank step for the same configuration (median of 3 interleaved runs; OURS_BIN, default the
# -c opt build of //bench:step_bench), and ours / the peer's best as a speedup.
ours() {
  local vocab=$1 peer_best=$2 bin=${OURS_BIN:-bazel-bin/bench/step_bench} out ms fs
  if [[ ! -x "$bin" ]]; then
    echo "# ours: $bin missing (bazel build -c opt //bench:step_bench)"
    return
  fi
  out=$("$bin" --world_sizes=1 --strategies=FULL_SHARD --vocab_size="$vocab" --steps="$STEPS" \
        --warmup="$WARMUP" --repeats=3) || { echo "# ours: step_bench failed"; echo "$out"; return 1; }
  ms=$(awk '$1 == "unsharded" {print $3}' <<<"$out")
  fs=$(awk '$1 == "FULL_SHARD" {print $3}' <<<"$out")
  echo "ours=zeroshard ms_per_step=$ms tokens_per_s=$(awk -v m="$ms" 'BEGIN{printf "%.0f", 1024000/m}')" \
       "full_shard_world1_ms=$fs vocab_size=$vocab peer_best_ms=${peer_best:-none}" \
       "speedup_vs_peer=$(awk -v m="$ms" -v p="${peer_best:-0}" 'BEGIN{printf (p>0 ? "%.2fx" : "-"), p/m}')" \
       "load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
}

# One setting of the sweep: "blas coretype threads wait_policy optim attn"; the round;
# extra args go to the peer (LLAMA_ARGS).
run_setting() {
  local blas ct t wait opt attn
  read -r blas ct t wait opt attn <<<"$1"
  local envs=(env -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY)
  [[ $ct != unset ]] && envs+=(OPENBLAS_CORETYPE="$ct")
  [[ $wait != unset ]] && envs+=(OMP_WAIT_POLICY="$wait")
  run "$blas" "${envs[@]}" "$BIN" --n_layer=4 --n_head=4 --n_embd=256 --block_size=128 \
      --batch_size=8 --vocab_size="${SWEEP_VOCAB:-256}" --steps="$STEPS" --warmup="$WARMUP" \
      --threads="$t" --optim="$opt" --attn="$attn" "${@:3}" | sed "s/^/setting=${1// /,} round=$2 /"
}

# Every setting, ROUNDS times round-robin (the machine is shared: interleaving spreads
# other people's load over all settings; compare the best round of each).
sweep() {
  local settings=() blas ct t wait
  for blas in openblas-pthread openblas-openmp; do
    for ct in "${CORETYPES[@]}"; do
      for t in 1 2; do
        for wait in unset PASSIVE; do
          [[ $t == 1 && $wait == PASSIVE ]] && continue  # no idle torch threads to park
          settings+=("$blas $ct $t $wait flat manual")
        done
      done
    done
  done
  # the optimizer and attention variants, and the system BLAS, at the best settings
  settings+=("$BEST_BLAS $BEST_CORETYPE $BEST_THREADS unset torch manual"
             "$BEST_BLAS $BEST_CORETYPE $BEST_THREADS unset foreach manual"
             "$BEST_BLAS $BEST_CORETYPE $BEST_THREADS unset flat sdpa")
  [[ -n "${SWEEP_SYSTEM:-}" ]] && settings+=("system unset 1 unset flat manual")
  # SWEEP_SETTINGS="blas ct threads wait optim attn;..." replaces the list
  if [[ -n "${SWEEP_SETTINGS:-}" ]]; then IFS=';' read -r -a settings <<<"$SWEEP_SETTINGS"; fi
  local r s
  for (( r = 1; r <= ${ROUNDS:-3}; r++ )); do
    for s in "${settings[@]}"; do run_setting "$s" "$r"; done
  done
}

echo "# libtorch peer, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)," \
     "uptime:$(uptime | sed 's/.*load average/ load average/')"
if [[ "${1:-}" == "--sweep" ]]; then
  sweep
fi
best
echo "# uptime:$(uptime | sed 's/.*load average/ load average/')"
