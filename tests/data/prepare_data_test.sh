#!/usr/bin/env bash
# prepare_data end to end: its files against the golden ids of the bundled Shakespeare
# (tools/golden/gpt2_bpe_golden.py) in both formats, the train/val split, several
# inputs with --eot, the byte tokenizer, and its errors.
set -euo pipefail
bin="$1"
golden=tests/data/testdata/tinyshakespeare_gpt2.bin
text=data/tinyshakespeare.txt
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
u32s() { od -An -v -tu4 -N "$2" "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }  # little-endian host

# nanoGPT: exactly the golden ids.
"$bin" --tokenizer=gpt2 --format=nanogpt "$text" "$tmp/a.bin" > "$tmp/out.txt"
cmp "$tmp/a.bin" "$golden" || fail "nanogpt file differs from the golden ids"
grep -q "wrote $tmp/a.bin: 338025 tokens (gpt2, nanogpt)" "$tmp/out.txt" || fail "summary: $(cat "$tmp/out.txt")"

# llm.c: the header (20240520, 1, count, zeros), then the golden ids.
"$bin" --tokenizer=gpt2 --format=llmc "$text" "$tmp/b.bin" > /dev/null
[[ "$(u32s "$tmp/b.bin" 12)" == "20240520 1 338025" ]] || fail "llmc header: $(u32s "$tmp/b.bin" 12)"
[[ -z "$(od -An -v -tu4 -j 12 -N 1012 "$tmp/b.bin" | tr -d ' 0\n')" ]] || fail "llmc header: not zero after [2]"
cmp <(tail -c +1025 "$tmp/b.bin") "$golden" || fail "llmc tokens differ from the golden ids"

# The split: the first floor(0.9 N) tokens, then the rest; together the golden ids.
"$bin" --format=llmc --val_fraction=0.1 "$text" "$tmp/c.bin" > /dev/null
[[ ! -e "$tmp/c.bin" ]] || fail "a split wrote c.bin"
[[ "$(u32s "$tmp/c_train.bin" 12)" == "20240520 1 304222" ]] || fail "train header: $(u32s "$tmp/c_train.bin" 12)"
[[ "$(u32s "$tmp/c_val.bin" 12)" == "20240520 1 33803" ]] || fail "val header: $(u32s "$tmp/c_val.bin" 12)"
cat <(tail -c +1025 "$tmp/c_train.bin") <(tail -c +1025 "$tmp/c_val.bin") | cmp - "$golden" ||
  fail "train + val differ from the golden ids"

# Two inputs with --eot: ids, 50256, ids, 50256; and the progress bar.
"$bin" --eot --progress=always "$text" "$text" "$tmp/d.bin" > /dev/null 2> "$tmp/err.txt"
grep -q "100%" "$tmp/err.txt" || fail "no progress bar: $(cat "$tmp/err.txt")"
printf '\x50\xc4' > "$tmp/eot.bin"  # 50256, little-endian
cat "$golden" "$tmp/eot.bin" "$golden" "$tmp/eot.bin" | cmp - "$tmp/d.bin" || fail "two inputs with --eot"

# Bytes: each byte as a uint16.
printf 'ab\n' > "$tmp/small.txt"
"$bin" --tokenizer=bytes "$tmp/small.txt" "$tmp/e.bin" > /dev/null
[[ "$(od -An -tu2 "$tmp/e.bin" | tr -s ' ' | sed 's/^ //')" == "97 98 10" ]] || fail "bytes: $(od -An -tu2 "$tmp/e.bin")"

# Errors: a message and exit 1 (2 for a wrong number of files).
expect_error() {  # expected exit code, expected message, arguments...
  local code="$1" message="$2"; shift 2
  set +e; "$bin" "$@" > /dev/null 2> "$tmp/err.txt"; local got=$?; set -e
  [[ $got == "$code" ]] || fail "$* exited $got, expected $code"
  grep -qF -- "$message" "$tmp/err.txt" || fail "$*: expected \"$message\", found: $(cat "$tmp/err.txt")"
}
expect_error 1 'unknown token file format "npy", expected "nanogpt" or "llmc"' --format=npy "$text" "$tmp/x.bin"
expect_error 1 'unknown tokenizer "gpt4", expected "gpt2" or "bytes"' --tokenizer=gpt4 "$text" "$tmp/x.bin"
expect_error 1 'cannot open "/nonexistent.txt"' /nonexistent.txt "$tmp/x.bin"
expect_error 1 '--val_fraction=1, expected 0 <= f < 1' --val_fraction=1 "$text" "$tmp/x.bin"
expect_error 1 'the tokenizer "bytes" has no end-of-text token' --tokenizer=bytes --eot "$text" "$tmp/x.bin"
expect_error 2 'expected IN.txt [more.txt ...] OUT.bin, found 1 file argument(s)' "$text"
echo "prepare_data_test: all checks passed"
