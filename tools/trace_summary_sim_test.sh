#!/usr/bin/env bash
# trace_summary reads zs_simulate's trace (pid 0, a row per stream, no step span) and
# finds the exposed communication the simulator prints: both compute union(comm) minus
# union(compute, copy) over the step, so the figures agree to the last printed digit
# (+-0.001 ms: each side rounds to 3 decimals of a ms on its own).
#   bazel test //tools:trace_summary_sim_test
set -euo pipefail
summary="$1" simulate="$2"
trace="${TEST_TMPDIR:-/tmp}/sim_trace.json"
sim_out=$("$simulate" --config=examples/configs/default.json --world=4 --profile=cpu --trace="$trace")
sum_out=$("$summary" "$trace")
sim_ms=$(sed -nE 's/^communication .* exposed ([0-9.]+) ms.*/\1/p' <<<"$sim_out")
sum_ms=$(sed -nE 's/^exposed_comm_ms ([0-9.]+) of.*/\1/p' <<<"$sum_out")
if [[ -z "$sim_ms" || -z "$sum_ms" ]]; then
  echo "FAIL: no exposed figure (simulator: '$sim_ms', trace_summary: '$sum_ms')"; echo "$sim_out"; echo "$sum_out"; exit 1
fi
if ! awk -v a="$sim_ms" -v b="$sum_ms" 'BEGIN { d = a - b; exit !(d <= 0.001 && d >= -0.001) }'; then
  echo "FAIL: the simulator says $sim_ms ms exposed, trace_summary $sum_ms ms"; echo "$sum_out"; exit 1
fi
# The predicted step's per-op breakdown: device ops are "op" spans, the GEMMs (MatMul) marked.
ops_out=$("$summary" --ops "$trace")
if ! grep -qE '^ +MatMul .* GEMM$' <<<"$ops_out" || ! grep -q '^  largest_non_gemm_op ' <<<"$ops_out"; then
  echo "FAIL: no per-op table with MatMul as a GEMM and a largest non-GEMM op"; echo "$ops_out"; exit 1
fi
echo "PASS: exposed $sim_ms ms (simulator) = $sum_ms ms (trace_summary); $(grep '^  largest_non_gemm_op' <<<"$ops_out")"
