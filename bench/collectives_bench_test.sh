#!/usr/bin/env bash
# Smoke test of collectives_bench: every op on the in-process backend (3
# ranks) and on MPI (2 processes) over small sizes; fails unless every row's
# data check (#wrong) is 0.
set -euo pipefail
bench="$1"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
args=(-b 4K -e 256K -f 8 --iters 2 --warmup 1 --repeats 1)
check() {  # rows: size count time algbw busbw #wrong ...
  local out="$1"
  echo "$out"
  local rows wrong
  rows=$(echo "$out" | awk '!/^#/ && NF >= 6' | wc -l)
  wrong=$(echo "$out" | awk '!/^#/ && NF >= 6 && $6 != 0' | wc -l)
  [[ "$rows" -gt 0 && "$wrong" -eq 0 ]] || { echo "FAILED: $rows rows, $wrong with wrong data" >&2; exit 1; }
}
for op in all_gather reduce_scatter all_reduce broadcast alltoall; do
  check "$("$bench" --backend=local --world_size=3 --op="$op" --dtype=bf16 "${args[@]}")"
  check "$(mpirun --oversubscribe --bind-to none -np 2 "$bench" --backend=mpi --op="$op" "${args[@]}")"
done
check "$("$bench" --backend=local --world_size=2 --op=reduce_scatter --inplace --redop=avg "${args[@]}")"
check "$("$bench" --backend=local --world_size=3 --op=alltoall --inplace "${args[@]}")"
check "$(mpirun --oversubscribe --bind-to none -np 2 "$bench" --backend=mpi --op=alltoall --inplace "${args[@]}")"
