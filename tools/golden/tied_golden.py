#!/usr/bin/env python3
"""Tied embeddings across the safetensors ecosystem, with PyTorch as the oracle.

    # 1. A tied nanoGPT stored as Hugging Face / safetensors tools store it: the
    #    tied matrix once, as transformer.wte.weight, no lm_head.weight.
    /usr/bin/python3 tools/golden/tied_golden.py write --out tests/testdata/gpt_tied_hf.safetensors
    # 2. zeroshard's write-once model file (tests/checkpoint/tied_golden_test.cc
    #    writes it, and checks it against the committed copy) loaded back into the
    #    PyTorch nanoGPT with load_state_dict(strict=True) after restoring the
    #    alias from __metadata__["tied_parameters"].
    /usr/bin/python3 tools/golden/tied_golden.py check --file tests/testdata/gpt_tied_once_zeroshard.safetensors

The model and its weights are those of gpt_golden.py (same config, seed, init).
Needs Debian's python3-torch (1.13); the C++ tests need no torch.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from gpt_golden import CONFIG, GPT, SEED, init_gpt2, perturb_1d  # noqa: E402


def golden_model():
    gen = torch.Generator().manual_seed(SEED)
    model = GPT(CONFIG)
    init_gpt2(model, gen)
    perturb_1d(model, gen)
    return model


def write(out):
    model = golden_model()
    state = model.state_dict()
    # What safetensors.torch.save_model / save_pretrained keep of shared storage:
    # the first name in state_dict order, here the embedding.
    assert state["lm_head.weight"].data_ptr() == state["transformer.wte.weight"].data_ptr()
    entries = [(n, t.detach().clone()) for n, t in state.items() if n != "lm_head.weight"]
    safetensors_io.write(out, entries, {"format": "pt"})
    got, meta = safetensors_io.read(out)
    assert "lm_head.weight" not in got and meta == {"format": "pt"}
    print(f"wrote {out} ({os.path.getsize(out)} bytes, {len(entries)} tensors, no lm_head.weight)")


def check(path):
    tensors, meta = safetensors_io.read(path)
    tied = json.loads(meta["tied_parameters"])
    assert tied == {"lm_head.weight": "transformer.wte.weight"}, tied
    assert "lm_head.weight" not in tensors, "expected the tied matrix once"
    for alias, name in tied.items():
        tensors[alias] = tensors[name]  # restore the alias
    model = GPT(CONFIG)
    model.load_state_dict(tensors, strict=True)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    # The values are the golden model's (the C++ test wrote them from gpt_tied_hf.safetensors).
    want = golden_model().state_dict()
    for n, t in model.state_dict().items():
        assert torch.equal(t, want[n]), n
    print(f"{path}: load_state_dict(strict=True) OK after restoring {tied}; "
          f"{len(model.state_dict())} entries equal the golden model's bitwise")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("write")
    w.add_argument("--out", default="tests/testdata/gpt_tied_hf.safetensors")
    c = sub.add_parser("check")
    c.add_argument("--file", default="tests/testdata/gpt_tied_once_zeroshard.safetensors")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.mode == "write":
        write(args.out)
    else:
        check(args.file)


if __name__ == "__main__":
    main()
