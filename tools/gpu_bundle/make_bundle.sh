#!/usr/bin/env bash
# make gpu-bundle: gather what the GPU machine needs into one folder (see docs/gpu.md,
# "The GPU bundle"). That machine has the NVIDIA driver and the CUDA libraries (the
# toolkit, or a Python environment's nvidia/*/lib folders) but no Bazel, Abseil, GTest or
# MPI, so every binary goes with the shared libraries it loads except the driver's and
# CUDA's own (libcudart, libcublas/Lt, libcudnn*, libnccl), which run.sh finds there.
#
#   tools/gpu_bundle/make_bundle.sh OUT_DIR BAZEL_BIN          # the CUDA build: OUT_DIR/bin, lib
#   tools/gpu_bundle/make_bundle.sh --sim OUT_DIR BAZEL_BIN    # the simulator build: OUT_DIR/sim/
#
# BAZEL_BIN holds the targets of tools/gpu_bundle/targets.txt, built with
# --dynamic_mode=fully (so the programs share one copy of each library); --sim, the
# same built with --define=cuda_sim=1 (what `run.sh --sim` runs). The first form
# starts OUT_DIR afresh; --sim adds to it.
set -euo pipefail
sim=0
if [ "${1:-}" = "--sim" ]; then sim=1; shift; fi
out=${1:?usage: make_bundle.sh [--sim] OUT_DIR BAZEL_BIN}
bin=${2:?usage: make_bundle.sh [--sim] OUT_DIR BAZEL_BIN}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

# Libraries the GPU machine provides (the driver's and CUDA's) or that must come from
# its own system (the C and C++ runtimes: a newer libstdc++ there serves our binaries,
# an older one carried here could break cuDNN's).
system_lib() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*) return 0 ;;
    libgcc_s.so*|libstdc++.so*) return 0 ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*.so*|libnccl.so*) return 0 ;;
    libnvidia-*) return 0 ;;
  esac
  return 1
}

# copy_tree SRC_BAZEL_BIN DEST: binaries to DEST/bin, their libraries to DEST/lib.
copy_tree() {
  local src=$1 dest=$2
  mkdir -p "$dest/bin" "$dest/lib"
  while read -r target flags; do
    [ -z "$target" ] && continue
    case "$target" in \#*) continue ;; esac
    if [ "$sim" = 1 ] && [ "$flags" = gpu-only ]; then continue; fi
    local path=${target#//}; path=${path/://}
    if [ ! -x "$src/$path" ]; then
      echo "make_bundle.sh: $src/$path is missing (was $target built?)" >&2
      exit 1
    fi
    strip -o "$dest/bin/$(basename "$path")" "$src/$path"
    ldd "$src/$path" | awk '/=>/ {print $1, $3}' | while read -r name file; do
      system_lib "$name" && continue
      if [ "$file" = "not" ] || [ ! -f "$file" ]; then
        echo "make_bundle.sh: $target needs $name, which ldd cannot find" >&2
        exit 1
      fi
      [ -f "$dest/lib/$name" ] && continue
      strip -o "$dest/lib/$name" "$file" 2>/dev/null || cp -L "$file" "$dest/lib/$name"
      # The simulator build shares every library that is the same in both builds
      # (run.sh --sim looks in sim/lib, then lib).
      if [ "$sim" = 1 ] && cmp -s "$dest/lib/$name" "$out/lib/$name"; then
        rm "$dest/lib/$name"
        : > "$dest/lib/.shared.$name"
      fi
    done
  done < "$here/targets.txt"
}

# The bundle's size: a GPU visit carries at most 64 MiB.
report() {
  local size
  size=$(du -sb "$out" | cut -f1)
  echo "make_bundle.sh: $out: $((size / 1048576)) MiB ($(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries$([ -d "$out/sim" ] && echo ", and the simulator build"))"
  if [ "$size" -gt $((64 * 1048576)) ]; then
    echo "make_bundle.sh: the bundle is over 64 MiB" >&2
    exit 1
  fi
}

if [ "$sim" = 1 ]; then
  [ -x "$out/run.sh" ] || { echo "make_bundle.sh --sim: $out is not a bundle yet (run the CUDA part first)" >&2; exit 1; }
  rm -rf "$out/sim"
  copy_tree "$bin" "$out/sim"
  report
  exit 0
fi
rm -rf "$out"
mkdir -p "$out"
copy_tree "$bin" "$out"

# What the tests and the job read, at the paths they name (relative to the workspace).
mkdir -p "$out/data" "$out/examples/configs" "$out/tests/testdata"
cp "$root/data/tinyshakespeare.txt" "$out/data/"
cp -r "$root/tests/testdata/llama_hf_gqa" "$out/tests/testdata/"  # train_gpt_gpu_test's Hugging Face folder (44 KiB)
cp "$root"/examples/configs/*.json "$out/examples/configs/"
cp "$here/run.sh" "$here/torch_gpt_step.py" "$out/"
chmod +x "$out/run.sh"
git -C "$root" rev-parse HEAD > "$out/COMMIT" 2>/dev/null || echo unknown > "$out/COMMIT"
git -C "$root" status --porcelain --untracked-files=no | grep -q . && echo "+ local changes" >> "$out/COMMIT" || true
report
