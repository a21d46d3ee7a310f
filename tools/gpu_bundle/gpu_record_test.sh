#!/usr/bin/env bash
# gpu_record against records whose verdict is known: the H200 record of
# 2026-11-26 passes gpu-check; a run folder built here with one of each problem
# (a failed test, a crash, a timed-out step, sanitizer errors in our kernel and in
# racecheck's summary, cuDNN refusing attention, a legacy convolution fallback, a
# failed bench check, a bias-gradient and a GELU epilogue fallback, a missing GPT step figure) fails
# it, naming each (a refusal count of 0 is no problem).
set -uo pipefail
rec=${1:?gpu_record}
h200=${2:?the H200 record}
fail() { echo "FAIL: $*"; exit 1; }

out=$("$rec" --check="$h200") || fail "the H200 record should pass gpu-check: $out"
echo "$out" | grep -q "168 passed, 0 failed" || fail "the H200 record's counts: $out"

d=${TEST_TMPDIR:-$(mktemp -d)}/run
mkdir -p "$d/tests" "$d/logs"
cat > "$d/env.txt" <<'ENV'
date: 2026-11-26T00:00:00Z
commit: abc
mode: gpu
gpu: NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04, 1980 MHz
lib: libcudnn.so.9 /opt/x/nvidia/cudnn/lib
lib_real: libcudnn.so.9 -> /opt/x/nvidia/cudnn/lib/libcudnn.so.9.19.0
ENV
printf 'tests\tok_test\tpassed\t1.0\tlogs/test_ok_test.log\n' >> "$d/steps.tsv"
printf 'tests\tcrash_test\tfailed(1)\t0.5\tlogs/test_crash_test.log\n' >> "$d/steps.tsv"
printf 'sanitize\tmemcheck:ok_test\tfailed(99)\t3.0\tlogs/sanitize_memcheck_ok_test.log\n' >> "$d/steps.tsv"
printf 'sanitize\tracecheck:ok_test\tpassed\t3.0\tlogs/sanitize_racecheck_ok_test.log\n' >> "$d/steps.tsv"
printf 'sanitize\tsynccheck:ok_test\ttimeout\t240.0\tlogs/sanitize_synccheck_ok_test.log\n' >> "$d/steps.tsv"
printf 'bench\tcuda_bench\tpassed\t20.0\tlogs/bench.log\n' >> "$d/steps.tsv"
printf 'train\ttrain_gpt\ttimeout\t300.0\tlogs/train_gpt.log\n' >> "$d/steps.tsv"
cat > "$d/tests/ok_test.json" <<'JSON'
{"testsuites": [{"name": "Suite", "testsuite": [
  {"name": "Passes", "status": "RUN", "result": "COMPLETED", "time": "0.1s"},
  {"name": "Skips", "status": "RUN", "result": "SKIPPED", "time": "0s"},
  {"name": "Fails", "status": "RUN", "result": "COMPLETED", "time": "0.2s",
   "failures": [{"failure": "x.cc:1\nelement 3 got 1, want 2", "type": ""}]}]}]}
JSON
printf 'Running main()\n[ RUN      ] Suite.Dies\n' > "$d/logs/test_crash_test.log"
printf '#0  exit () from libc.so.6\n#1  zeroshard::cuda::LaunchFill(...)\n' > "$d/logs/crash_crash_test.txt"
cat > "$d/logs/sanitize_memcheck_ok_test.log" <<'LOG'
========= Invalid __global__ read of size 4 bytes
=========     at void zeroshard::cuda::(anonymous namespace)::Gather<float>(const float *)+0x70
=========     by thread (1,0,0) in block (0,0,0)
========= ERROR SUMMARY: 1 error
LOG
echo "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)" > "$d/logs/sanitize_racecheck_ok_test.log"
: > "$d/logs/sanitize_synccheck_ok_test.log"
cat > "$d/figures.jsonl" <<'FIG'
{"bench":"cuda_bench","name":"attention cudnn refused B8 H12 T1024 D64","value":1,"unit":"count"}
{"bench":"cuda_bench","name":"result checks failed","value":2,"unit":"count"}
{"bench":"cuda_bench","name":"gemm bias-grad epilogue refused mlp fc dW bf16 3072x768x8192 +bias grad","value":0,"unit":"count"}
{"bench":"cuda_bench","name":"step bias-grad epilogue fallbacks GPT-2 124M B8 T1024 bf16 FULL_SHARD world 1","value":48,"unit":"count","fused":0}
{"bench":"cuda_bench","name":"step gelu epilogue fallbacks GPT-2 124M B8 T1024 bf16 FULL_SHARD world 1","value":24,"unit":"count","fused":0}
{"bench":"cuda_bench","name":"attention fwd ours B8 H12 T1024 D64","value":3.1,"unit":"TFLOP/s"}
{"bench":"cuda_bench","name":"attention fwd tensor-core B8 H12 T1024 D64","value":2.5,"unit":"TFLOP/s"}
{"bench":"cuda_bench","name":"attention bwd ours B8 H12 T1024 D64","value":3.1,"unit":"TFLOP/s"}
{"bench":"cuda_bench","name":"attention bwd tensor-core B8 H12 T1024 D64","value":90,"unit":"TFLOP/s"}
{"bench":"cuda_bench","name":"step attention scalar runs GPT-2 124M B8 T1024 bf16 FULL_SHARD world 1","value":24,"unit":"count","cudnn":0,"tensor_core":0,"head_dim":64}
{"bench":"cuda_bench","name":"step attention scalar runs GPT L2 C64 V256 B2 T32 bf16 FULL_SHARD world 1","value":4,"unit":"count","head_dim":8}
{"bench":"cuda_bench","name":"gemm qkv","value":640.5,"unit":"TFLOP/s","baseline":641,"of_baseline":0.99}
not json: ignored
FIG
cat > "$d/test_figures.jsonl" <<'FIG'
{"bench":"cuda_vision_test","name":"cudnn conv legacy passes (auto)","value":3,"unit":"count","graph":18}
{"bench":"train_gpt","name":"tokens/s of a job inside a test","value":5,"unit":"tokens/s"}
FIG

"$rec" --dir="$d" > "$d/out.txt" 2>&1 && fail "gpu_record --dir should exit 1 on a run with problems"
"$rec" --check="$d/record.json" > "$d/check.txt" 2>&1 && fail "gpu-check should fail this record"
for want in \
    "test ok_test Suite.Fails failed: x.cc:1 element 3 got 1, want 2" \
    "program crash_test ended (failed(1)) without its results" \
    "compute-sanitizer memcheck ok_test: errors (1 errors)" \
    "compute-sanitizer racecheck ok_test: errors (1 errors)" \
    "compute-sanitizer synccheck ok_test: timeout" \
    "step train train_gpt: timeout" \
    "cuDNN refused attention where it was expected to run" \
    "3 convolution passes fell back to cuDNN's legacy API" \
    "cuda_bench: result checks failed" \
    "cuda_bench: cuBLASLt refused the bias-gradient epilogue (step bias-grad epilogue fallbacks" \
    "cuda_bench: cuBLASLt refused a GELU epilogue (step gelu epilogue fallbacks" \
    "cuda_bench: attention ran our scalar kernel at head dim 64 (step attention scalar runs GPT-2" \
    "cuda_bench: our tensor-core attention fwd B8 H12 T1024 D64 ran at 2.5" \
    "cuda_bench: no GPT step figure in the record"; do
  grep -qF "$want" "$d/check.txt" || fail "gpu-check does not say: $want
$(cat "$d/check.txt")"
done
# (the scalar kernel at head dim 8 is not one: neither faster kernel takes it)
# (the backward's tensor-core row, above the scalar one, is not one)
grep -q "14 problems" "$d/check.txt" || fail "expected exactly 14 problems: $(cat "$d/check.txt")"
grep -q "3 tests (1 passed, 1 failed, 1 skipped)" "$d/check.txt" || fail "counts: $(head -1 "$d/check.txt")"
# The record itself: the kernel named by memcheck is ours; the test's job figure is left out;
# the card's datasheet peak; the backtrace of the crash is in the summary.
grep -q '"errors_in_our_kernels": 1' "$d/record.json" || fail "memcheck's kernel should count as ours"
grep -q "a job inside a test" "$d/record.json" && fail "a job's figure from inside a test is not the record's"
grep -q '"datasheet_bf16_tflops": 989' "$d/record.json" || fail "the H100's datasheet peak"
grep -q "LaunchFill" "$d/summary.md" || fail "the crash backtrace belongs in summary.md"
"$rec" --check=/nonexistent.json > /dev/null 2>&1; [ $? = 2 ] || fail "an unreadable record is exit 2"
echo '{"schema": "other"}' > "$d/other.json"
"$rec" --check="$d/other.json" > "$d/other.txt" 2>&1; [ $? = 2 ] || fail "another schema is exit 2"
grep -q "not a zeroshard GPU record" "$d/other.txt" || fail "the schema message"
echo "PASS"
