#!/usr/bin/env bash
# tokenizer_bench --json_out: the file is our schema (checked by tools/bench_compare,
# which exits 2 on anything malformed) with the figures the table prints, and comparing
# it with itself finds no regression (exit 0).
set -uo pipefail
bench="$1" compare="$2"
out="${TEST_TMPDIR:-/tmp}/tokenizer.json"
# No golden check here (the golden ids file is tests/data's): two repeats, the bundled text.
"$bench" --repeats=2 --golden= --json_out="$out" >"${TEST_TMPDIR:-/tmp}/table.txt" || { echo "FAIL: tokenizer_bench exited $?"; exit 1; }
grep -q "gpt2, fresh cache" "${TEST_TMPDIR:-/tmp}/table.txt" || { echo "FAIL: the printed table changed"; exit 1; }
grep -q '"schema": "zeroshard-bench/1"' "$out" || { echo "FAIL: no schema line in $out"; cat "$out"; exit 1; }
result=$("$compare" "$out" "$out"); rc=$?
echo "$result"
[[ $rc == 0 ]] || { echo "FAIL: bench_compare of the file with itself exited $rc"; exit 1; }
for name in tokenizer/load_vocab tokenizer/gpt2/fresh_cache tokenizer/gpt2/warm_cache tokenizer/gpt2/no_cache \
  tokenizer/pretokenize tokenizer/bytes; do
  grep -Eq "^$name .*within noise" <<<"$result" || { echo "FAIL: $name missing"; exit 1; }
done
echo "bench_json_out_test: passed"
