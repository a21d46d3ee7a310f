#!/usr/bin/env python3
"""Self time per op of a chrome trace written by `torch_gpt_step --profile=TRACE.json`.

    tools/peers/summarize_trace.py TRACE.json [--steps N] [--top 25]

torch's legacy profiler records nested ops (aten::linear contains aten::addmm, ...);
each event's self time is its duration minus that of the events directly inside it on
the same thread, so the self times add up to the profiled time without double counting.
Prints ms per step by op and the share of a few families (GEMM, GELU, LayerNorm, ...).
Standard library only.
"""

import argparse
import collections
import json

FAMILIES = {
    "GEMM (addmm, mm, bmm)": ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm"),
    "GELU fwd+bwd": ("aten::gelu", "aten::gelu_backward"),
    "LayerNorm fwd+bwd": ("aten::native_layer_norm", "aten::native_layer_norm_backward"),
    "softmax fwd+bwd": ("aten::_softmax", "aten::_softmax_backward_data"),
    "cross-entropy fwd+bwd": ("aten::_log_softmax", "aten::_log_softmax_backward_data",
                              "aten::nll_loss_forward", "aten::nll_loss_backward"),
    "embedding fwd+bwd": ("aten::index_select", "aten::embedding_dense_backward",
                          "aten::index_add_"),
}


def self_times(events):
    """{name: self microseconds} over complete ('X') events, nesting per thread."""
    out = collections.Counter()
    by_tid = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_tid[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [end, name, child_time]
        def pop():
            end, name, dur, child = stack.pop()
            out[name] += dur - child
            if stack:
                stack[-1][3] += dur
        for e in evs:
            while stack and e["ts"] >= stack[-1][0] - 1e-3:
                pop()
            stack.append([e["ts"] + e["dur"], e["name"], e["dur"], 0.0])
        while stack:
            pop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=1, help="steps the trace covers")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.trace) as f:
        events = json.load(f)
    st = self_times(events)
    total = sum(st.values())
    print(f"profiled self time: {total / 1e3 / args.steps:.1f} ms/step over {args.steps} step(s)")
    for name, us in st.most_common(args.top):
        print(f"  {us / 1e3 / args.steps:8.2f} ms/step {100 * us / total:5.1f}%  {name}")
    print("families:")
    for fam, names in FAMILIES.items():
        us = sum(st.get(n, 0.0) for n in names)
        print(f"  {us / 1e3 / args.steps:8.2f} ms/step {100 * us / total:5.1f}%  {fam}")


if __name__ == "__main__":
    main()
