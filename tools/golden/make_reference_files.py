#!/usr/bin/env python3
"""Writes the small safetensors files that tests/checkpoint/torch_interop_test.cc reads.

    /usr/bin/python3 tools/golden/make_reference_files.py --out_dir tests/checkpoint/testdata

Each value is produced by PyTorch (Debian's python3-torch) and written with the
hand-written writer in safetensors_io.py; the C++ test rebuilds every tensor from
the same formulas (and rounds the same float32 sources to bf16/f16 with its own
conversions), then checks the values, the raw bits and, for torch_reference, that
zeroshard's writer produces the very same bytes.

torch_reference.safetensors (zeroshard's layout, data in the order listed):
  f32.matrix    F32  [3, 4]     arange(12) * 0.5 - 2
  f32.special   F32  [6]        +inf, -inf, NaN (0x7fc00000), -0.0, 2^-149 (smallest
                                subnormal), FLT_MAX
  round.source  F32  [10]       float32 values that bf16/f16 cannot hold exactly
  round.bf16    BF16 [10]       round.source.to(torch.bfloat16) (round to nearest-even)
  round.f16     F16  [10]       round.source.to(torch.float16)
  i32.values    I32  [2, 2, 2]  -2^31, 2^31 - 1, -1, 0, 1, 7, -7, 123456789
  i64.values    I64  [5]        -2^63, 2^63 - 1, -1, 0, 2^40 + 3
  token_ids     I64  [2, 8]     (i * 7 + 3) % 50257 for i = 0..15
  scalar        F32  []         42.5 (a 0-d tensor)
  empty         F32  [0, 3]     no elements
  __metadata__  format=pt, generator=<this script>, torch_version=<torch.__version__>

torch_shuffled.safetensors: the tensors f32.matrix, round.bf16, i64.values, scalar and
"naïve.weight" (F16 [2] = [1.5, -2.25], its name written as a \\u escape), laid out as
the Python `safetensors` package lays them out (data sorted by dtype size, then name)
but with the header keys in yet another order, JSON with spaces, no padding: a reader
must sort entries by their offsets and not rely on the header order.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

ROUND_SOURCE = [1.0 / 3.0, 3.14159265, -2.71828183, 1.0e-3, 65519.0, 65520.0, 1.0e-7,
                -6.0e-8, 300.5, 0.1]


def reference_entries():
    # The bit patterns as int32 (two's complement: -0x00800000 is 0xff800000).
    f32_special = torch.tensor([0x7F800000, -0x00800000, 0x7FC00000, -0x80000000, 0x00000001,
                                0x7F7FFFFF], dtype=torch.int32)
    round_source = torch.tensor(ROUND_SOURCE, dtype=torch.float32)
    return [
        ("f32.matrix", torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 2),
        ("f32.special", f32_special.view(torch.float32)),
        ("round.source", round_source),
        ("round.bf16", round_source.to(torch.bfloat16)),
        ("round.f16", round_source.to(torch.float16)),
        ("i32.values", torch.tensor([-2**31, 2**31 - 1, -1, 0, 1, 7, -7, 123456789],
                                    dtype=torch.int32).reshape(2, 2, 2)),
        ("i64.values", torch.tensor([-2**63, 2**63 - 1, -1, 0, 2**40 + 3], dtype=torch.int64)),
        ("token_ids", ((torch.arange(16, dtype=torch.int64) * 7 + 3) % 50257).reshape(2, 8)),
        ("scalar", torch.tensor(42.5, dtype=torch.float32)),
        ("empty", torch.zeros(0, 3, dtype=torch.float32)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out_dir", default="tests/checkpoint/testdata")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out_dir, exist_ok=True)

    entries = reference_entries()
    metadata = {"format": "pt", "generator": "tools/golden/make_reference_files.py",
                "torch_version": torch.__version__}
    path = os.path.join(args.out_dir, "torch_reference.safetensors")
    safetensors_io.write(path, entries, metadata)

    by_name = dict(entries)
    shuffled = [("f32.matrix", by_name["f32.matrix"]), ("round.bf16", by_name["round.bf16"]),
                ("i64.values", by_name["i64.values"]), ("scalar", by_name["scalar"]),
                ("na\u00efve.weight", torch.tensor([1.5, -2.25], dtype=torch.float16))]
    shuffled_path = os.path.join(args.out_dir, "torch_shuffled.safetensors")
    safetensors_io.write(shuffled_path, shuffled, {"format": "pt"}, layout="package",
                         header_order=["scalar", "na\u00efve.weight", "i64.values", "f32.matrix",
                                       "round.bf16"],
                         compact=False, ensure_ascii=True, pad=False)

    # Read both back and compare, bit for bit.
    for p, want in ((path, entries), (shuffled_path, shuffled)):
        got, _ = safetensors_io.read(p)
        assert list(sorted(got)) == sorted(n for n, _ in want), p
        for n, t in want:
            assert safetensors_io.tensor_bytes(got[n]) == safetensors_io.tensor_bytes(t), (p, n)
            assert got[n].shape == t.shape and got[n].dtype == t.dtype, (p, n)
        print(f"wrote {p} ({os.path.getsize(p)} bytes)")


if __name__ == "__main__":
    main()
