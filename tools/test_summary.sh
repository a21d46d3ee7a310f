#!/usr/bin/env bash
# Prints how many test cases ran, passed, failed and were skipped, summed over
# the gtest XML reports Bazel keeps under bazel-testlogs/ for the test targets
# named on stdin (one label per line, from `bazel query 'tests(//...)'`).
# Exits non-zero when a case failed or when no case ran at all (a run that
# tests nothing is a failure).
set -uo pipefail
logs="${1:-bazel-testlogs}"
total=0; failures=0; errors=0; skipped=0; targets=0
while IFS= read -r xml; do
  targets=$((targets + 1))
  # The <testsuites ...> element carries the totals of the binary.
  line=$(grep -m1 -o '<testsuites [^>]*>' "$xml" || true)
  if [[ -z "$line" ]]; then
    # Not a gtest binary (e.g. an sh_test): Bazel's own one-case report.
    line=$(grep -m1 -o '<testsuite [^>]*>' "$xml" || true)
  fi
  get() { echo "$line" | grep -o " $1=\"[0-9]*\"" | grep -o '[0-9]*' | head -1; }
  t=$(get tests); f=$(get failures); e=$(get errors)
  s=$(grep -c 'result="skipped"' "$xml" || true)
  total=$((total + ${t:-0})); failures=$((failures + ${f:-0})); errors=$((errors + ${e:-0}))
  skipped=$((skipped + ${s:-0}))
done < <(while IFS= read -r label; do
  [[ "$label" == //* ]] || continue
  path="${label#//}"; path="${path/://}"
  [[ -f "$logs/$path/test.xml" ]] && echo "$logs/$path/test.xml"
done)
passed=$((total - failures - errors - skipped))
echo "================================================================"
echo "zeroshard tests: ${total} cases in ${targets} test binaries:" \
     "${passed} passed, $((failures + errors)) failed, ${skipped} skipped"
echo "================================================================"
if [[ $total -eq 0 ]]; then
  echo "no test case ran: that is a failure" >&2
  exit 1
fi
[[ $((failures + errors)) -eq 0 ]]
