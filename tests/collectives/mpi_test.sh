#!/usr/bin/env bash
# Runs an MPI gtest binary under mpirun: mpi_test.sh <np> <binary> [gtest args].
# Rank 0 alone writes the gtest XML to Bazel's $XML_OUTPUT_FILE, so the test
# summary counts the cases once.
set -euo pipefail
np="$1"; binary="$2"; shift 2
xml_args=()
if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then xml_args=("--gtest_output=xml:${XML_OUTPUT_FILE}"); fi
# As root mpirun needs explicit permission; more ranks than cores need
# --oversubscribe; idle ranks yield so that 4 ranks share 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
# Under ASan (`make sanitize`, .bazelrc test:asan-ubsan) LeakSanitizer reports
# OpenMPI's own allocations that MPI_Finalize never frees: ~120 KB in ~3,400
# blocks per rank (libmpi, libopen-pal, hwloc and MCA components already
# unloaded) for a program that only calls MPI_Init_thread, MPI_Allreduce and
# MPI_Finalize, and every rank then exits 1. Leak checking is off for the MPI tests only (the last option wins);
# the same communicator suite runs in-process with it on
# (//tests/collectives:local_communicator_test). No effect in other builds.
export ASAN_OPTIONS="${ASAN_OPTIONS:+${ASAN_OPTIONS}:}detect_leaks=0"
exec mpirun --oversubscribe --bind-to none -np "$np" "$binary" "${xml_args[@]}" "$@"
