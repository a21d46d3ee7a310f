#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets with Bazel and clang-14
# (--config=fuzz in .bazelrc: -fsanitize=fuzzer,address,undefined, fatal) and
# runs each for FUZZ_SECONDS (default 600) on a copy of its committed corpus;
# new inputs stay in build/fuzz/corpus_<name>, not in the repository.
#
#   name         entry point                                       corpus
#   safetensors  tests/checkpoint/fuzz/safetensors_fuzz.cc         tests/checkpoint/fuzz/corpus/safetensors
#   manifest     tests/checkpoint/fuzz/manifest_fuzz.cc            tests/checkpoint/fuzz/corpus/manifest
#   token_data   tests/data/fuzz/token_data_fuzz.cc                tests/data/fuzz/corpus/token_data
#   config       tests/train/fuzz/config_fuzz.cc                   tests/train/fuzz/corpus/config
#
# Each entry point also runs over its corpus in `make test` (the *_fuzz_test
# beside it, built normally). Any crash, sanitizer report or failed invariant
# stops the run with the input saved as build/fuzz/<name>-crash-<sha1>; add it
# to the corpus with the fix. Environment:
#   FUZZ_SECONDS=60          seconds per target
#   FUZZ_TARGETS="config"    a subset, by name
#   BAZEL, BAZEL_FLAGS       as the Makefile passes them (the disk cache)
# The sources used to be compiled here by a hand-kept list, which went stale
# when files moved (checkpoint/crc32c.cc went to runtime/); Bazel's own deps
# cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${FUZZ_SECONDS:-600}"
BAZEL="${BAZEL:-bazel}"
read -r -a FLAGS <<< "${BAZEL_FLAGS:-}"
OUT=build/fuzz

# name | Bazel target | corpus | -max_len
ALL=(
  "safetensors|//tests/checkpoint:safetensors_fuzzer|tests/checkpoint/fuzz/corpus/safetensors|4096"
  "manifest|//tests/checkpoint:manifest_fuzzer|tests/checkpoint/fuzz/corpus/manifest|16384"
  "token_data|//tests/data:token_data_fuzzer|tests/data/fuzz/corpus/token_data|4096"
  "config|//tests/train:config_fuzzer|tests/train/fuzz/corpus/config|8192"
)
SELECTED=()
for row in "${ALL[@]}"; do
  name="${row%%|*}"
  if [ -z "${FUZZ_TARGETS:-}" ] || [[ " ${FUZZ_TARGETS//,/ } " == *" $name "* ]]; then SELECTED+=("$row"); fi
done
if [ "${#SELECTED[@]}" -eq 0 ]; then
  echo "fuzz.sh: FUZZ_TARGETS=\"$FUZZ_TARGETS\" names none of: safetensors manifest token_data config" >&2
  exit 2
fi

labels=()
for row in "${SELECTED[@]}"; do IFS='|' read -r _ label _ _ <<< "$row"; labels+=("$label"); done
echo "building ${labels[*]} with --config=fuzz (clang-14, libFuzzer + ASan + UBSan)"
# --output_filter: clang's warnings on the project's GCC-tuned code are noise
# here (errors still print); ld.gold warns once per ASan helper symbol.
set +e
"$BAZEL" build "${FLAGS[@]}" --config=fuzz --repo_env=CC="$PWD/tools/fuzz/cc" --output_filter='^$' "${labels[@]}" 2>&1 |
  grep -v "ld.gold: warning: Cannot export local symbol '__asan"
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 0 ] || { echo "fuzz.sh: the build failed"; exit 1; }
BIN=$("$BAZEL" info "${FLAGS[@]}" --config=fuzz --repo_env=CC="$PWD/tools/fuzz/cc" bazel-bin 2>/dev/null)

mkdir -p "$OUT"
failed=()
for row in "${SELECTED[@]}"; do
  IFS='|' read -r name label seeds max_len <<< "$row"
  path="${label#//}"
  binary="$BIN/${path%%:*}/${path##*:}"
  rm -rf "$OUT/corpus_$name" && mkdir -p "$OUT/corpus_$name"
  cp "$seeds"/* "$OUT/corpus_$name/"
  # A libFuzzer dictionary beside the corpus folder (fuzz/<name>.dict), if any.
  dict=()
  dict_file="$(dirname "$(dirname "$seeds")")/$name.dict"
  [ -f "$dict_file" ] && dict=(-dict="$dict_file")
  echo "fuzzing $name for ${SECONDS_EACH}s ($(ls "$seeds" | wc -l) seeds${dict:+, dictionary $dict_file})"
  set +e
  "$binary" -max_total_time="$SECONDS_EACH" -max_len="$max_len" -timeout=30 -rss_limit_mb=4096 "${dict[@]}" \
    -print_final_stats=1 -artifact_prefix="$OUT/$name-" "$OUT/corpus_$name" > "$OUT/$name.log" 2>&1
  status=$?
  set -e
  grep -E '^#[0-9]+.*DONE|^stat::number_of_executed_units|^stat::peak_rss_mb' "$OUT/$name.log" || true
  if [ "$status" -ne 0 ]; then
    tail -60 "$OUT/$name.log"
    echo "fuzz.sh: $name failed (exit $status); the input is under $OUT/$name-*; log $OUT/$name.log"
    failed+=("$name")
  fi
done
if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzzing finished: failures in ${failed[*]}"
  exit 1
fi
echo "fuzzing finished: no crash in ${#SELECTED[@]} targets, ${SECONDS_EACH}s each"
