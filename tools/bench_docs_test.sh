#!/usr/bin/env bash
# bench_docs on the committed fixtures (tools/bench_docs_testdata):
# - doc.md's regions rewritten to exactly expected.md (the tokenizer table from the newest
#   run that has tokenizer.json, the checkpoint table from the older run, the nvme region,
#   which has no results, left as it was);
# - everything outside the regions byte for byte (compared with the regions cut out);
# - a second run changes nothing, and --check says so (exit 0), or exit 1 on a stale doc;
# - exit 2, the doc untouched, on a marker without its partner, Google Benchmark JSON,
#   a results folder that does not exist.
#   bazel test //tools:bench_docs_test
set -uo pipefail
tool="$1"
d=tools/bench_docs_testdata
tmp="${TEST_TMPDIR:-/tmp}/bench_docs_test"
rm -rf "$tmp" && mkdir -p "$tmp"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
# The file with every region's contents (the lines between its markers) removed.
outside() { awk '/^<!-- bench:[a-z0-9_]+ end -->$/ { inside = 0 } !inside { print } /^<!-- bench:[a-z0-9_]+ begin -->$/ { inside = 1 }' "$1"; }

cp "$d/doc.md" "$tmp/doc.md"
out=$("$tool" --doc="$tmp/doc.md" "$d/results/fixture-cpu-2c" 2>&1); rc=$?
echo "$out"
[[ $rc == 0 ]] || fail "bench_docs exited $rc"
grep -q "note: no nvme.json" <<<"$out" || fail "no note about the nvme region without results"
if ! cmp -s "$tmp/doc.md" "$d/expected.md"; then
  fail "the rewritten doc differs from expected.md:"
  diff "$d/expected.md" "$tmp/doc.md" >&2
fi
cmp -s <(outside "$d/doc.md") <(outside "$tmp/doc.md") || fail "text outside the regions changed"
# The last line has no newline in the fixture, and keeps none.
[[ "$(tail -c 1 "$tmp/doc.md" | od -An -c | tr -d ' ')" == e ]] || fail "the last line's (missing) newline changed"

# Idempotent; --check on the result and on the stale original.
cp "$tmp/doc.md" "$tmp/again.md"
"$tool" --doc="$tmp/again.md" "$d/results/fixture-cpu-2c" >/dev/null 2>&1 || fail "second run exited $?"
cmp -s "$tmp/doc.md" "$tmp/again.md" || fail "a second run changed the doc"
"$tool" --check --doc="$tmp/doc.md" "$d/results/fixture-cpu-2c" >/dev/null 2>&1 || fail "--check on a fresh doc exited $?"
cp "$d/doc.md" "$tmp/stale.md"
"$tool" --check --doc="$tmp/stale.md" "$d/results/fixture-cpu-2c" >/dev/null 2>&1; rc=$?
[[ $rc == 1 ]] || fail "--check on a stale doc exited $rc, expected 1"
cmp -s "$tmp/stale.md" "$d/doc.md" || fail "--check wrote the doc"
# A run folder directly: the older run's tokenizer table.
cp "$d/doc.md" "$tmp/run.md"
"$tool" --doc="$tmp/run.md" "$d/results/fixture-cpu-2c/20260101T000000Z_aaaaaaaaaaaa" >/dev/null 2>&1 ||
  fail "a run folder: exit $?"
# shellcheck disable=SC2016  # backquotes of markdown
grep -qF '| `tokenizer/gpt2/fresh_cache` | 51.00 | MB/s | 30.00 (`tokenizer/gpt2/no_cache`) | 1.70x |' "$tmp/run.md" ||
  fail "a run folder: not the older run's tokenizer row: $(grep fresh_cache "$tmp/run.md")"

# expect2 DOC RESULTS PATTERN: exit 2, the message, the doc untouched.
expect2() {
  cp "$1" "$tmp/bad.md"
  out=$("$tool" --doc="$tmp/bad.md" "$2" 2>&1); rc=$?
  [[ $rc == 2 ]] || fail "$1 $2: exit $rc, expected 2: $out"
  grep -qF -- "$3" <<<"$out" || fail "$1 $2: output lacks '$3': $out"
  cmp -s "$1" "$tmp/bad.md" || fail "$1 $2: the doc was changed"
}
expect2 "$d/doc_unclosed.md" "$d/results/fixture-cpu-2c" \
  'expected "<!-- bench:tokenizer end -->" (region opened at line 3), found "<!-- bench:checkpoint end -->"'
printf '<!-- bench:kernels begin -->\n<!-- bench:kernels end -->\n' > "$tmp/kernels.md"
expect2 "$tmp/kernels.md" "$d/gbench_run" "found Google Benchmark's JSON"
expect2 "$d/doc.md" "$d/no_such_folder" "expected a results folder (a run or a machine folder), found $d/no_such_folder"
printf 'no markers\n' > "$tmp/none.md"
expect2 "$tmp/none.md" "$d/results/fixture-cpu-2c" "found none"

if (( failures )); then echo "bench_docs_test: $failures failure(s)"; exit 1; fi
echo "bench_docs_test: all cases passed"
