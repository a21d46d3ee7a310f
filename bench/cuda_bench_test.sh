#!/usr/bin/env bash
# cuda_bench --quick end to end (the simulator build runs it on the CPU, `make
# sim-test`): it must exit 0 with every result check passed and write every
# section's figures, named with the quick shapes, to $ZEROSHARD_FIGURES, and in our
# schema to --json_out (bench/bench_json.h; the names in cuda_bench_util.h). Where
# there is nothing to measure (a CUDA build on a machine without a GPU, or a
# build without CUDA) cuda_bench says so, writes no --json_out file and exits 0, and
# so does this test.
#
#   cuda_bench_test.sh PATH/TO/cuda_bench
set -uo pipefail
bench=${1:?usage: cuda_bench_test.sh PATH/TO/cuda_bench}
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/cuda_bench_test.XXXXXX")
figures=$dir/figures.jsonl
json=$dir/cuda_bench.json

out=$(ZEROSHARD_FIGURES=$figures "$bench" --quick --json_out="$json" 2>&1)
rc=$?
echo "$out"
if [ $rc = 0 ] && grep -qE "no CUDA device on this machine|built without CUDA" <<< "$out"; then
  if [ -e "$json" ]; then echo "cuda_bench_test: FAILED: nothing measured, yet $json was written" >&2; exit 1; fi
  echo "cuda_bench_test: nothing to measure here (cuda_bench said so and exited 0): passed"
  exit 0
fi
failures=0
fail() { echo "cuda_bench_test: FAILED: $*" >&2; failures=$((failures + 1)); }
[ $rc = 0 ] || fail "cuda_bench --quick exited $rc"
[ -s "$figures" ] || { fail "no figures in \$ZEROSHARD_FIGURES ($figures)"; exit 1; }

# Every figure the quick run writes on any device (cuDNN's attention figures,
# written only where cuDNN exists, are not required); the NCCL rows end in the
# number of ranks ("x1" on the simulator).
expected=(
  "memory cast f32 -> bf16 (64K)"
  "memory softmax bf16 [64, 512]"
  "memory layernorm fwd bf16 [64, 64]"
  "memory layernorm fwd bf16 [64, 64], bf16 weight, bias"
  "memory layernorm bwd bf16 [64, 64] + dw, db, bf16 params"
  "memory cross-entropy fwd bf16 [64, 512]"
  "memory dropout bf16 [64, 64] p=0.1"
  "memory embedding fwd bf16 [64] x 64"
  "memory AdamW step f32 + bf16 grad/copy (64K)"
  "gemm qkv bf16 64x192x64"
  "gemm mlp fc bf16 64x256x64 +bias+gelu"
  "gemm mlp proj bf16 64x64x256"
  "gemm lm head bf16 64x512x64"
  "gemm square f16 128^3"
  "gemm square f32 tf32 128^3"
  "gemm mlp fc dW bf16 256x64x64 +bias grad"
  "memory bias grad reduce bf16 [64, 256]"
  "gemm bias-grad epilogue refused mlp fc dW bf16 256x64x64 +bias grad"
  "step bias-grad epilogue fallbacks GPT L2 C64 V256 B2 T32 bf16 FULL_SHARD world 1"
  "gemm mlp fc bf16 64x256x64 +bias+gelu, input kept"
  "gemm mlp proj dx bf16 64x256x64 +gelu grad"
  "gemm gelu epilogue refused mlp fc bf16 64x256x64 +bias+gelu, input kept"
  "gemm gelu epilogue refused mlp proj dx bf16 64x256x64 +gelu grad"
  "step gelu epilogue fallbacks GPT L2 C64 V256 B2 T32 bf16 FULL_SHARD world 1"
  "step gelu fusion GPT L2 C64 V256 B2 T32 bf16 FULL_SHARD world 1"
  "attention fwd ours B1 H2 T64 D64"
  "attention bwd ours B1 H2 T64 D64"
  "attention fwd ours B1 H2 T128 D128"
  "attention bwd ours B1 H2 T128 D128"
  "attention fwd tensor-core B1 H2 T64 D64"
  "attention bwd tensor-core B1 H2 T64 D64"
  "attention fwd tensor-core B1 H2 T128 D128"
  "attention bwd tensor-core B1 H2 T128 D128"
  "step tokens/s GPT L2 C64 V256 B2 T32 bf16 FULL_SHARD world 1"
  "result checks failed"
)
for name in "${expected[@]}"; do
  grep -qF "\"bench\":\"cuda_bench\",\"name\":\"$name\"," "$figures" || fail "no figure '$name'"
done
for op in "all-gather bf16" "reduce-scatter f32"; do
  for size in "4 KiB" "32 KiB" "256 KiB"; do
    grep -qE "\"name\":\"nccl $op $size x[0-9]+\"," "$figures" || fail "no figure 'nccl $op $size x<ranks>'"
  done
done
grep -qF '"name":"result checks failed","value":0,' "$figures" || fail "result checks failed is not 0"
# Note [Roofline]: every GEMM and attention line carries its FLOPs and bytes (on a
# known card also of_roofline; the simulator's "cuda_sim" is none).
for name in "gemm qkv bf16 64x192x64" "gemm mlp fc bf16 64x256x64 +bias+gelu, input kept" \
    "gemm mlp fc dW bf16 256x64x64 +bias grad" "attention fwd ours B1 H2 T64 D64" \
    "attention bwd tensor-core B1 H2 T128 D128"; do
  line=$(grep -F "\"name\":\"$name\"," "$figures")
  for field in flops bytes; do
    echo "$line" | grep -qE "\"$field\":[0-9]" || fail "figure '$name' has no $field: $line"
  done
done
# Every figure has a finite value (figures.h writes null for NaN and Inf).
if grep -q '"value":null' "$figures"; then fail "figures without a finite value: $(grep '"value":null' "$figures")"; fi

# The same run in our schema: every section, baselines named, the checks' count 0.
grep -qF '"schema": "zeroshard-bench/1"' "$json" || fail "no zeroshard-bench/1 file at $json"
for name in cuda/memory/softmax_bf16_64_512/ours cuda/memory/softmax_bf16_64_512/memcpy \
  cuda/gemm/qkv_bf16_64x192x64/ours cuda/gemm/qkv_bf16_64x192x64/cublas cuda/attention/b1_h2_t64_d64/fwd_ours \
  cuda/attention/b1_h2_t64_d64/fwd_tensor_core \
  cuda/step/gpt_l2_c64_v256_b2_t32_bf16_full_shard_world_1/tokens_per_s cuda/checks/failed; do
  grep -qF "\"name\": \"$name\"" "$json" || fail "no figure $name in $json"
done
grep -qE '"name": "cuda/nccl/all_gather_bf16_4_kib_x[0-9]+/ours_us"' "$json" || fail "no nccl figure in $json"
grep -A2 -F '"name": "cuda/checks/failed"' "$json" | grep -qE '"value": 0(\.0)?,' || fail "cuda/checks/failed is not 0"

if [ $failures -ne 0 ]; then
  echo "--- $figures:" >&2
  cat "$figures" >&2
  exit 1
fi
echo "cuda_bench_test: exit 0, $(wc -l < "$figures") figures, all ${#expected[@]} + 6 expected ones: passed"
