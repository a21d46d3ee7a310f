#!/usr/bin/env bash
# Checks the register and local-memory use ptxas reported for every kernel of a
# cuda_library (its `<file>.resources.txt`, nvcc --resource-usage, one entry per
# kernel and architecture; see tools/cuda/cuda.bzl):
#   - at most 64 registers per thread, so a block of 1024 threads fits the
#     65536-register file of sm_80 and sm_90 (a kernel above it fails to launch
#     with "too many resources requested", which only a GPU would show);
#   - no spill stores or loads and no stack frame (local memory on the device).
# Prints one line per report and exits 1 naming each kernel over a limit.
#
# `--max_registers=N` before reports sets their limit (cuda_library's
# max_registers: kernels launched with small blocks, where 64 would be wrong).
set -uo pipefail
max_regs=64
status=0
for report in "$@"; do
  if [[ "$report" == --max_registers=* ]]; then
    max_regs=${report#--max_registers=}
    continue
  fi
  out=$(awk -v max="$max_regs" '
    /Compiling entry function/ {
      name = $0; sub(/.*function \047/, "", name); sub(/\047 for \047/, " on ", name); sub(/\047.*/, "", name)
    }
    /bytes stack frame/ {
      split($0, w, " "); stack = w[1]; spill_st = w[5]; spill_ld = w[9]
      if (stack + 0 > 0 || spill_st + 0 > 0 || spill_ld + 0 > 0) {
        printf "FAIL %s: %s bytes stack frame, %s bytes spill stores, %s bytes spill loads\n", name, stack, spill_st, spill_ld
      }
    }
    /Used [0-9]+ registers/ {
      n++; r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r); r += 0
      if (r > top) top = r
      if (r > max) printf "FAIL %s: %d registers (at most %d)\n", name, r, max
    }
    END { printf "kernels %d max_registers %d\n", n, top }
  ' "$report")
  if grep -q '^FAIL' <<<"$out"; then
    grep '^FAIL' <<<"$out" | while read -r _ line; do
      echo "$(basename "$report"): $(echo "$line" | c++filt 2>/dev/null || echo "$line")"
    done
    status=1
  fi
  summary=$(grep '^kernels' <<<"$out")
  count=$(awk '{print $2}' <<<"$summary")
  if [[ "${count:-0}" -eq 0 ]]; then
    echo "$(basename "$report"): no kernel entries (was it compiled with --resource-usage?)"
    status=1
  fi
  echo "$(basename "$report"): $summary (limit $max_regs, no spills, no stack)"
done
exit $status
