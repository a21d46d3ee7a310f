#!/bin/sh
# Exit 0 when this machine has a usable NVIDIA GPU (the driver lists one), 1 otherwise.
# Used by `make gpu-test` and `make gpu-bench` to print a clear message and
# succeed on machines without one.
command -v nvidia-smi >/dev/null 2>&1 || exit 1
nvidia-smi -L 2>/dev/null | grep -q '^GPU '
