"""Golden token ids of GPT-2's byte-level BPE, written by GPT-2's own algorithm.

This is the encoder of openai/gpt-2's `src/encoder.py` (MIT) written out again: the
same pre-tokenizer pattern run by the same engine (the `regex` module), the same
byte-to-unicode map and the same merge loop (lowest-ranked pair first, every
occurrence left to right, until no pair has a rank). It reads the vocabulary the
library ships (data/gpt2/encoder.json, vocab.bpe) and writes

  tests/data/testdata/tinyshakespeare_gpt2.bin  the ids of data/tinyshakespeare.txt,
                                                 raw little-endian uint16 (nanoGPT's format)
  tests/data/testdata/bpe_hard_cases.ids        the ids of each line of
                                                 tests/data/testdata/bpe_hard_cases.txt and
                                                 of the whole file, as text

Run from the repository root (Debian's python3-regex; any version of `regex` gives
the same ids for these files, since every character in them is assigned in Unicode 14,
which the script checks):

  /usr/bin/python3 tools/golden/gpt2_bpe_golden.py

tools/golden/gpt2_bpe_crosscheck.sh compares these files with a second, independent
implementation (the npm package gpt-3-encoder).
"""

import json
import struct
import sys
import unicodedata

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Gpt2Encoder:
    def __init__(self, encoder_json, vocab_bpe):
        with open(encoder_json, encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(vocab_bpe, encoding="utf-8") as f:
            merges = [tuple(line.split()) for line in f.read().split("\n")[1:-1]]
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for piece in PATTERN.findall(text):
            mapped = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[sym] for sym in self.bpe(mapped))
        return ids


def check_assigned(text, path):
    # Characters assigned after Unicode 14 would make the ids depend on the version
    # of `regex`; private-use characters and noncharacters are in the file on purpose.
    for c in set(text):
        if unicodedata.category(c) == "Cn" and not (0xFDD0 <= ord(c) <= 0xFDEF or
                                                    (ord(c) & 0xFFFE) == 0xFFFE):
            sys.exit(f"{path}: U+{ord(c):04X} is not assigned in Unicode "
                     f"{unicodedata.unidata_version}")


def main():
    enc = Gpt2Encoder("data/gpt2/encoder.json", "data/gpt2/vocab.bpe")

    path = "data/tinyshakespeare.txt"
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    check_assigned(text, path)
    ids = enc.encode(text)
    with open("tests/data/testdata/tinyshakespeare_gpt2.bin", "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    print(f"{path}: {len(text.encode('utf-8'))} bytes, {len(ids)} tokens")

    path = "tests/data/testdata/bpe_hard_cases.txt"
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    check_assigned(text, path)
    out = [
        "# GPT-2 BPE token ids of tests/data/testdata/bpe_hard_cases.txt, written by",
        "# tools/golden/gpt2_bpe_golden.py (regex " + regex.__version__ + ", Python " +
        sys.version.split()[0] + ").",
        "# 'line N:' the ids of line N (1-based: the text between two newlines, without them);",
        "# 'whole:' the ids of the whole file.",
    ]
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the file ends with a newline: no line after it
    for n, line in enumerate(lines, 1):
        out.append(f"line {n}: " + " ".join(map(str, enc.encode(line))))
    whole = enc.encode(text)
    out.append("whole: " + " ".join(map(str, whole)))
    with open("tests/data/testdata/bpe_hard_cases.ids", "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print(f"{path}: {len(lines)} lines, {len(whole)} tokens")


if __name__ == "__main__":
    main()
