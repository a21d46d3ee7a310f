#!/usr/bin/env bash
# tests/bazel_consumer: a second Bazel workspace depending on this one through
# local_repository (make bazel-consumer-test). It builds the whole library in
# its own output base (a cold build, ~15 minutes on 2 cores), so `make test`
# does not run it; the same programs run in `make test` as
# //tests/consumer:all and, outside Bazel, in make consumer-test.
set -euo pipefail
cd "$(dirname "$0")/../tests/bazel_consumer"
status=0
"${BAZEL:-bazel}" test --disk_cache="${DISK_CACHE:-$HOME/.cache/zeroshard/bazel-disk}" //... || status=$?
"${BAZEL:-bazel}" shutdown
exit $status
