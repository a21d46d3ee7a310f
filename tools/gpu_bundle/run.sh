#!/usr/bin/env bash
# The GPU visit in one command (docs/gpu.md, "The GPU bundle").
#
#   gpu_bundle/run.sh [--sim] [--only=STEP,...] [--tests=PROGRAM,...] OUTDIR
#
# Steps, in order, each bounded in time (seconds; override with the variable named):
#   env        the card, driver, and where the CUDA libraries were found
#   tests      every GPU test program                       (ZS_T_TEST=150 each)
#   sanitize   compute-sanitizer memcheck / racecheck / synccheck on the kernel tests
#                                                           (ZS_T_SANITIZE=240 each)
#   bench      bench/cuda_bench: kernels, GEMM, attention, the GPT step, NCCL
#                                                           (ZS_T_BENCH=300)
#   train      train_gpt, 50 steps at GPT-2 124M shapes, bf16, FULL_SHARD on 1 GPU
#                                                           (ZS_T_TRAIN=300)
#   torch      the same GPT step in PyTorch, eager and torch.compile, if torch imports
#                                                           (ZS_T_TORCH=300)
# --sim runs the simulator build (sim/bin) against its stand-in libraries, with shapes
# the CPU can take (cuda_bench --quick, a small job); the record has the same schema
# (`make test` runs it on a few test programs, the bench and the job, so the bundle
# cannot rot between GPU visits). --tests runs only the named test programs. Writes
# OUTDIR/record.json, OUTDIR/summary.md and OUTDIR/logs/; exits 1 when the record has
# problems (gpu_record --check says which).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sim=0
only=""
only_tests=""
outdir=""
for a in "$@"; do
  case "$a" in
    --sim) sim=1 ;;
    --only=*) only=${a#--only=} ;;
    --tests=*) only_tests=${a#--tests=} ;;
    -h|--help) sed -n 2,22p "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $a" >&2; exit 2 ;;
    *) outdir=$a ;;
  esac
done
[ -n "$outdir" ] || { echo "usage: run.sh [--sim] [--only=STEP,...] OUTDIR" >&2; exit 2; }
mkdir -p "$outdir/logs" "$outdir/tests" || exit 2
outdir=$(cd "$outdir" && pwd)
logs=$outdir/logs
steps=$outdir/steps.tsv            # step, name, status, seconds, log
: > "$steps"
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
note() { echo "[run.sh $(date +%H:%M:%S)] $*"; }

if [ "$sim" = 1 ]; then
  bindir=$here/sim/bin; libdir=$here/sim/lib:$here/lib  # make_bundle.sh keeps shared libraries once
else
  bindir=$here/bin; libdir=$here/lib
fi
[ -d "$bindir" ] || { echo "run.sh: $bindir is missing (make gpu-bundle$([ $sim = 1 ] && echo ' builds it with the simulator'))" >&2; exit 2; }

# ---- the CUDA libraries ------------------------------------------------------------
# Where they may be: ZEROSHARD_CUDA_LIBS, the toolkit, a Python environment's wheels
# (nvidia/cu13/lib, nvidia/<name>/lib), then the loader's cache.
cuda_dirs=()
add_dir() { [ -d "$1" ] && cuda_dirs+=("$1"); }
if [ "$sim" = 0 ]; then
  for d in ${ZEROSHARD_CUDA_LIBS:+${ZEROSHARD_CUDA_LIBS//:/ }}; do add_dir "$d"; done
  add_dir /usr/local/cuda/lib64
  add_dir /usr/local/cuda/targets/x86_64-linux/lib
  sites=""
  if command -v python3 >/dev/null; then
    sites=$(python3 -c 'import site,sys; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null)
  fi
  for s in $sites /opt/torch/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages; do
    for d in "$s"/nvidia/cu1*/lib "$s"/nvidia/*/lib; do add_dir "$d"; done
  done
fi
found_libs=""
find_lib() {  # find_lib SONAME: prints the directory
  local d
  for d in "${cuda_dirs[@]}"; do [ -e "$d/$1" ] && { echo "$d"; return 0; }; done
  d=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  [ -n "$d" ] && { dirname "$d"; return 0; }
  return 1
}
ld_path=$libdir
if [ "$sim" = 0 ]; then
  for so in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
    if d=$(find_lib $so); then
      found_libs+="$so $d"$'\n'
      [[ ":$ld_path:" == *":$d:"* ]] || ld_path+=":$d"
    else
      found_libs+="$so MISSING"$'\n'
    fi
  done
  # cuDNN loads its engine libraries (libcudnn_*.so.9) by name from its own folder.
fi
export LD_LIBRARY_PATH=$ld_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ZEROSHARD_FIGURES=$outdir/figures.jsonl   # runtime/figures.h: every figure as a JSON line
: > "$ZEROSHARD_FIGURES"

# run_step STEP NAME TIMEOUT LOG CMD...: runs CMD in the bundle folder, appends a line to steps.tsv.
run_step() {
  local step=$1 name=$2 limit=$3 log=$4; shift 4
  local t0=$(date +%s.%N) rc
  (cd "$here" && timeout -k 10 "$limit" "$@") > "$log" 2>&1
  rc=$?
  local t1=$(date +%s.%N)
  local secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
  local status=passed
  if [ $rc = 124 ] || [ $rc = 137 ]; then status=timeout
  elif [ $rc != 0 ]; then status="failed($rc)"; fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$step" "$name" "$status" "$secs" "${log#$outdir/}" >> "$steps"
  note "$step $name: $status in ${secs}s"
  return 0
}

# ---- env ----------------------------------------------------------------------------
if want env; then
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(tr '\n' ' ' < "$here/COMMIT" 2>/dev/null)"
    echo "mode: $([ $sim = 1 ] && echo sim || echo gpu)"
    echo "host: $(uname -srm)"
    echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
    if [ "$sim" = 0 ]; then
      if command -v nvidia-smi >/dev/null; then
        echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
        echo "driver_cuda: $(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
      else
        echo "gpu: none (no nvidia-smi)"
      fi
      command -v nvcc >/dev/null && echo "nvcc: $(nvcc --version | tail -2 | head -1)"
      command -v compute-sanitizer >/dev/null && echo "compute-sanitizer: $(command -v compute-sanitizer)"
      printf '%s' "$found_libs" | sed 's/^/lib: /'
      for so in libcudnn.so.9 libnccl.so.2 libcublasLt.so.13 libcudart.so.13; do
        f=$(find_lib $so) && echo "lib_real: $so -> $(readlink -f "$f/$so")"
      done
      python3 -c 'import torch; print("torch:", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null || echo "torch: not importable"
    else
      echo "gpu: cuda_sim (the CPU simulator; tools/cuda/sim)"
    fi
    echo "ld_library_path: $LD_LIBRARY_PATH"
  } > "$outdir/env.txt" 2>&1
  cat "$outdir/env.txt"
fi

tests=$(cd "$bindir" && ls *_test 2>/dev/null)
if [ -n "$only_tests" ]; then
  for t in ${only_tests//,/ }; do
    [ -x "$bindir/$t" ] || { echo "run.sh: --tests names $t, which is not in $bindir" >&2; exit 2; }
  done
  tests=${only_tests//,/ }
fi
# ---- sanitize -----------------------------------------------------------------------
# Runs beside the tests (both only check results; the benches come after, alone).
sanitize_pid=""
if want sanitize && [ "$sim" = 0 ]; then
(
  if command -v compute-sanitizer >/dev/null; then
    # memcheck: every kernel test, vendor kernels included (a wrong size handed
    # to cuBLASLt or cuDNN shows there). racecheck and synccheck: the tests of
    # kernels with shared memory and barriers, on our kernels only (names in
    # namespace zeroshard; synccheck flags cuDNN's warp-specialised attention
    # kernels). The tests use their smaller sizes (ZEROSHARD_TEST_SHRINK=1).
    kernel_tests="cuda_rows_test cuda_elementwise_test cuda_attention_test cuda_embedding_test cuda_dropout_test cuda_cast_reduce_test cuda_flat_buffer_test cuda_gemm_test strided_copy_test cuda_adamw_test op_harness_gpu_test cuda_vision_test"
    shared_tests="cuda_rows_test cuda_attention_test cuda_cast_reduce_test cuda_embedding_test"
    sjobs=()
    for t in $kernel_tests; do sjobs+=("memcheck $t"); done
    for t in $shared_tests; do sjobs+=("racecheck $t" "synccheck $t"); done
    par=${ZS_SANITIZE_JOBS:-8}
    for j in "${sjobs[@]}"; do
      set -- $j
      [ -x "$bindir/$2" ] || continue
      only_ours=()
      [ "$1" != memcheck ] && only_ours=(--kernel-name kns=zeroshard)
      while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do sleep 0.5; done
      run_step sanitize "$1:$2" "${ZS_T_SANITIZE:-240}" "$logs/sanitize_$1_$2.log" \
        env ZEROSHARD_TEST_SHRINK=1 ZEROSHARD_FIGURES= \
        compute-sanitizer --tool "$1" "${only_ours[@]}" --error-exitcode 99 --print-limit 20 \
        "$bindir/$2" --gtest_output="json:$outdir/tests/sanitize_$1_$2.json" &
    done
    wait
  else
    printf 'sanitize\tcompute-sanitizer\tmissing\t0\t\n' >> "$steps"
  fi
) &
sanitize_pid=$!
fi

# ---- tests --------------------------------------------------------------------------
if want tests; then
  for t in $tests; do
    # The programs' own figures (cuDNN's refusals) go to a file of their own: the
    # jobs some tests run inside would read as the main job's figures.
    run_step tests "$t" "${ZS_T_TEST:-150}" "$logs/test_$t.log" \
      env ZEROSHARD_FIGURES="$outdir/test_figures.jsonl" \
      "$bindir/$t" --gtest_output="json:$outdir/tests/$t.json"
  done
fi
[ -n "$sanitize_pid" ] && wait "$sanitize_pid"

# ---- crashes ------------------------------------------------------------------------
# A test program that ended without writing its results (exit(), abort, a
# signal) runs again under cuda-gdb, stopped where it ends, for a backtrace
# (logs/crash_<program>.txt). This is how a first visit found nvcc compiling a
# host call of a __device__ function into exit(1) (docs/gpu.md).
if want tests && [ "$sim" = 0 ] && command -v cuda-gdb >/dev/null; then
  n=0
  for t in $tests; do
    [ -f "$outdir/tests/$t.json" ] && continue
    grep -q "	$t	passed	" "$steps" && continue
    n=$((n + 1)); [ $n -gt "${ZS_MAX_BACKTRACES:-4}" ] && break
    note "backtrace of $t (cuda-gdb)"
    (cd "$here" && timeout -k 5 "${ZS_T_BACKTRACE:-120}" cuda-gdb -q -batch -ex 'set pagination off' \
      -ex 'set breakpoint pending on' -ex 'break exit' -ex 'break _exit' -ex 'break abort' -ex run \
      -ex 'bt 40' -ex 'info threads' --args "$bindir/$t") > "$logs/crash_$t.txt" 2>&1
  done
fi

# ---- bench --------------------------------------------------------------------------
if want bench; then
  if [ -x "$bindir/cuda_bench" ]; then
    # On the simulator its small shapes (cuda_bench picks them there by itself too).
    bench_args=()
    [ "$sim" = 1 ] && bench_args=(--quick)
    run_step bench cuda_bench "${ZS_T_BENCH:-300}" "$logs/bench_cuda_bench.log" "$bindir/cuda_bench" \
      "${bench_args[@]}"
  else
    printf 'bench\tcuda_bench\tskipped\t0\t\n' >> "$steps"
    note "bench: no cuda_bench in $bindir: skipped"
  fi
fi

# ---- train --------------------------------------------------------------------------
if want train && [ -x "$bindir/train_gpt" ]; then
  if [ "$sim" = 1 ]; then  # the simulator runs kernels on one CPU thread: a small model, bytes
    shape=(--tokenizer=bytes --vocab_size=256 --n_layer=1 --n_head=2 --n_embd=32 --block_size=16
           --batch_size=2 --steps=3)
  else
    shape=(--tokenizer=gpt2 --vocab_size=50304 --n_layer=12 --n_head=12 --n_embd=768 --block_size=1024
           --batch_size=8 --steps=${ZS_TRAIN_STEPS:-50})
  fi
  run_step train train_gpt "${ZS_T_TRAIN:-300}" "$logs/train_gpt.log" \
    "$bindir/train_gpt" --config=examples/configs/default.json --backend=nccl --world_size=1 \
    "${shape[@]}" --param_dtype=bf16 --reduce_dtype=f32 \
    --sharding_strategy=FULL_SHARD --lr=6e-4 --warmup_steps=10 --log_every=10 --eval_every=0 \
    --eval_iters=2 --sample_tokens=0 --notensorboard --work_dir="$outdir/train"
fi

# ---- torch --------------------------------------------------------------------------
if want torch && [ "$sim" = 1 ]; then
  printf 'torch\ttorch_gpt_step\tskipped\t0\t\n' >> "$steps"
elif want torch; then
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    run_step torch torch_gpt_step "${ZS_T_TORCH:-300}" "$logs/torch_gpt_step.log" \
      env PYTHONUNBUFFERED=1 python3 "$here/torch_gpt_step.py" --mode=both
  else
    printf 'torch\ttorch_gpt_step\tskipped\t0\t\n' >> "$steps"
    note "torch: python3 cannot import torch with a GPU: skipped"
  fi
fi

# ---- record -------------------------------------------------------------------------
if [ -x "$bindir/gpu_record" ]; then
  "$bindir/gpu_record" --dir="$outdir" --record="$outdir/record.json" --summary="$outdir/summary.md"
  rc=$?
  cat "$outdir/summary.md" 2>/dev/null
  exit $rc
fi
note "no gpu_record in the bundle: raw results are in $outdir"
