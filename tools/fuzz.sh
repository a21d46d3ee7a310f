#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined)
# and runs each for FUZZ_SECONDS (default 60) on a copy of its committed seed
# corpus (new inputs stay in build/fuzz, not in the repository):
#   - safetensors: the safetensors header parser (checkpoint/safetensors.h)
#   - manifest:    the checkpoint manifest parser (checkpoint/manifest.h)
# Any crash, sanitizer report or failed invariant stops the run with the input
# that caused it saved in build/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${FUZZ_SECONDS:-60}"
CXX="${FUZZ_CXX:-clang++}"
OUT=build/fuzz
mkdir -p "$OUT"
ABSL_LIBS=$(grep -o '"-labsl_[a-z_]*"' third_party/system/BUILD.absl | tr -d '"' | tr '\n' ' ')
FLAGS=(-std=c++20 -g -O1 -fopenmp -fsanitize=fuzzer,address,undefined -I. -DZS_FUZZING)
RUNTIME=(runtime/tensor.cc runtime/tensor_copy.cc runtime/dtype.cc runtime/storage.cc runtime/allocator.cc runtime/device.cc)

build() {  # name sources...
  local name="$1"; shift
  echo "building fuzz target $name"
  "$CXX" "${FLAGS[@]}" "$@" "${RUNTIME[@]}" -o "$OUT/$name" $ABSL_LIBS
}

build safetensors tests/checkpoint/fuzz/safetensors_fuzz.cc checkpoint/safetensors.cc \
  checkpoint/atomic_file.cc checkpoint/crc32c.cc
build manifest tests/checkpoint/fuzz/manifest_fuzz.cc checkpoint/manifest.cc

run() {  # name seed_dir max_len
  local name="$1" seeds="$2" max_len="$3"
  rm -rf "$OUT/corpus_$name" && mkdir -p "$OUT/corpus_$name"
  cp "$seeds"/* "$OUT/corpus_$name/"
  echo "fuzzing $name for ${SECONDS_EACH}s"
  (cd "$OUT" && "./$name" -max_total_time="$SECONDS_EACH" -max_len="$max_len" -print_final_stats=1 \
     "corpus_$name" 2>&1 | tail -15)
}

run safetensors tests/checkpoint/testdata 4096
run manifest tests/checkpoint/fuzz/corpus/manifest 16384
echo "fuzzing finished: no crash"
