#!/usr/bin/env bash
# The installed library from outside Bazel (make consumer-test, part of make
# test; the Makefile installs into PREFIX first):
#   1. tools/check_installed_headers.sh: no installed header includes a path
#      outside zeroshard/ (dependencies' headers aside);
#   2. tests/consumer with CMake (find_package(zeroshard)): its own two-input
#      model trained sharded on 4 in-process ranks, checkpoint and resume,
#      linked against libzeroshard.so and, whole, libzeroshard.a;
#   3. tests/consumer/pkgconfig_main.cc with a plain compiler line and
#      `pkg-config --cflags --libs zeroshard`.
#
#   tools/consumer_test.sh PREFIX BUILD_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
prefix=$(realpath "$1")
build=$2
mkdir -p "$build"
ran=0 passed=0
step() {  # step NAME COMMAND...: runs it, counts it, shows the tail of its log on failure
  local name=$1; shift
  ran=$((ran + 1))
  local log="$build/$(echo "$name" | tr ' /' '__').log"
  if "$@" > "$log" 2>&1; then
    passed=$((passed + 1)); echo "  PASSED  $name"; grep -E '^(ok|FAIL|check_installed_headers:)' "$log" | sed 's/^/          /'
  else
    echo "  FAILED  $name"; tail -40 "$log" | sed 's/^/          /'
  fi
}

echo "consumer-test: the library installed in $prefix, used from outside Bazel"
step "installed headers" ./tools/check_installed_headers.sh "$prefix"
step "cmake configure" cmake -S tests/consumer -B "$build/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release
step "cmake build" cmake --build "$build/cmake" -j 2
step "consumer (shared library)" "$build/cmake/consumer_shared"
step "consumer (static library)" "$build/cmake/consumer_static"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
step "pkg-config build" bash -c "${CXX:-g++} -O2 tests/consumer/pkgconfig_main.cc \$(pkg-config --cflags --libs zeroshard) -o '$build/pkgconfig_consumer'"
step "pkg-config consumer" env LD_LIBRARY_PATH="$prefix/lib" "$build/pkgconfig_consumer"
echo "consumer-test: $ran ran, $passed passed, $((ran - passed)) failed"
[[ $passed -eq $ran ]]
