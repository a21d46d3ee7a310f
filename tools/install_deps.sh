#!/usr/bin/env bash
# Installs, only if missing, the Debian 12 packages zeroshard builds with.
# Idempotent: a machine that has everything runs no apt command at all.
set -euo pipefail

PACKAGES=(
  g++ make
  bazel-bootstrap bazel-platforms      # Bazel 4.2.3, offline-capable (see README)
  libabsl-dev                          # Status/StatusOr, strings, synchronization, flags
  libeigen3-dev                        # CPU GEMM and vectorised loops
  libgtest-dev libgmock-dev            # tests
  libbenchmark-dev                     # benchmarks
  openmpi-bin libopenmpi-dev           # the MPI backend and its tests
  nlohmann-json3-dev                   # configs, checkpoint metadata
  liburing-dev                         # io_uring: asynchronous O_DIRECT I/O of NVMe offload
  cmake pkg-config                     # the consumer tests: the installed library from CMake and pkg-config
)
if [[ "${WITH_PEERS:-0}" == "1" ]]; then
  PACKAGES+=(libtorch-dev python3-torch python3-numpy  # peers and golden files, never linked
             libopenblas0-openmp libopenblas0-pthread)  # the BLAS torch runs best with (docs/peers.md)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
echo "installing: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
