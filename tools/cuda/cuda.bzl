"""`cuda_library`: compiles `.cu` files with nvcc in one genrule each.

There are no CUDA rules for Bazel offline, so each `.cu` becomes a position
independent object (`<name>_cu/<file>.pic.o`) that a `cc_library` links
(`alwayslink`). Headers the `.cu` files include must be listed in `hdrs` (their
own) or `textual_deps` (files of other packages, e.g. `//runtime:half.h`).
When CUDA is disabled (see cuda_configure.bzl) the library is empty.

Every `cuda_library` also makes `<name>_sim`: the same `.cu` files compiled by
the host compiler against tools/cuda/sim (a CPU executor of the kernels, no
CUDA toolkit needed), with `zeroshard` renamed `zeroshard_sim` so a test can
link both. tests/kernels:cuda_sim_test runs them against the CPU kernels.
"""

load("@local_cuda//:defs.bzl", "CUDA_ARCHS", "CUDA_ENABLED", "NVCC")
load("//tools:cc.bzl", "cc_library", "zs_prefixed_headers")

def _gencode_flags():
    # Machine code for each architecture (sm_80: A100, sm_90: H100/H200), and the
    # newest one's PTX too, so a newer card (Blackwell's sm_100, ...) runs it,
    # JIT-compiled by the driver at load, instead of failing with "no kernel image".
    # No sm_90a yet: nothing here uses wgmma or the tensor memory accelerator.
    # ZEROSHARD_CUDA_ARCHS=80,90 reaches defs.bzl as a tuple, =90 as one int.
    archs = sorted([int(a) for a in (CUDA_ARCHS if type(CUDA_ARCHS) in ("tuple", "list") else [CUDA_ARCHS])])
    flags = ["-gencode arch=compute_%s,code=sm_%s" % (a, a) for a in archs]
    flags.append("-gencode arch=compute_%s,code=compute_%s" % (archs[-1], archs[-1]))
    return " ".join(flags)

# Every .cu launches through runtime/cuda/launch.cuh.
_LAUNCH_HEADER = "//runtime/cuda:launch.cuh"

_SIM_COPTS = [
    "-DZEROSHARD_CUDA_SIM",
    "-isystem tools/cuda/sim/include",
    "-O2",
    "-ffp-contract=off",
]

def _repository_root():
    """This repository's root from the execution root: `.`, or external/<name>
    when another workspace builds it."""
    repo = native.repository_name()
    return "." if repo == "@" else "external/" + repo[1:]

def _cuda_sim_libraries(name, srcs, hdrs, textual_deps):
    """`<name>_sim` (zeroshard renamed, for tests beside the real kernels) and
    `<name>_simdev` (the kernels under their own names, linked instead of the
    nvcc objects under --define=cuda_sim=1)."""
    copies = []
    for src in srcs:
        stem = src[:-len(".cu")] if src.endswith(".cu") else src
        out = "%s_sim/%s.cc" % (name, stem)
        native.genrule(
            name = "%s_sim_%s" % (name, stem.replace("/", "_")),
            srcs = [src],
            outs = [out],
            cmd = "cp $< $@",
        )
        copies.append(out)

    # The headers the .cu files include textually, as zeroshard/<path>.
    zs_prefixed_headers(name = name + "_textual_hdrs", hdrs = textual_deps)
    for suffix, extra, tags in [("_sim", ["-Dzeroshard=zeroshard_sim"], []), ("_simdev", [], ["manual"])]:
        cc_library(
            name = name + suffix,
            srcs = copies,
            hdrs = hdrs,
            copts = _SIM_COPTS + extra,
            deps = ["//tools/cuda/sim:cuda_sim", ":%s_textual_hdrs" % name],
            alwayslink = 1,
            tags = tags,
            # Tests anywhere may run the simulated kernels.
            visibility = ["//visibility:public"],
        )

def cuda_library(name, srcs = [], hdrs = [], textual_deps = [], deps = [], nvcc_flags = [], visibility = None,
                 max_registers = {}):
    """max_registers: {src: N} for a .cu whose kernels all launch with at most
    65536 / N threads per block (their __launch_bounds__), checked against N
    registers per thread instead of check_resources.sh's default 64."""
    textual_deps = textual_deps + [_LAUNCH_HEADER]
    _cuda_sim_libraries(name, srcs, hdrs, textual_deps)
    if not CUDA_ENABLED:
        cc_library(name = name, hdrs = hdrs, deps = deps, visibility = visibility)
        return
    objs = []
    reports = []
    report_args = []
    for src in srcs:
        stem = src[:-len(".cu")] if src.endswith(".cu") else src
        out = "%s_cu/%s.pic.o" % (name, stem)
        # ptxas's registers, spills and stack per kernel and architecture,
        # checked by <name>_resources_test (tools/cuda/check_resources.sh).
        report = "%s_cu/%s.resources.txt" % (name, stem)
        native.genrule(
            name = "%s_cu_%s" % (name, stem.replace("/", "_")),
            srcs = [src] + hdrs + textual_deps,
            outs = [out, report],
            cmd = " ".join([
                # Includes are written zeroshard/<path> (tools/cc.bzl): a
                # directory whose `zeroshard` is this repository's root.
                "ZS_INC=$$(mktemp -d) && trap 'rm -rf \"$$ZS_INC\"' EXIT &&",
                "ln -s \"$$PWD/%s\" \"$$ZS_INC/zeroshard\" &&" % _repository_root(),
                NVCC,
                "-c -O3 -std=c++20 -Xcompiler -fPIC",
                "--expt-relaxed-constexpr",
                "--resource-usage",
                # The densest fatbin compression (CUDA 12.9+; decompressed by the
                # driver at load, any driver a CUDA 13 runtime runs on): the
                # vectorised kernels' instantiations (op x dtype pair x pack
                # width x architecture) are 6.8 MB of elementwise machine code
                # by default and 1.2 MB this way, which keeps the GPU bundle
                # under its 64 MiB (docs/gpu.md).
                "--compress-mode=size",
                _gencode_flags(),
                "-I. -I$(GENDIR) -I$$ZS_INC",
                " ".join(nvcc_flags),
                "-o $(location %s) $(location %s)" % (out, src),
                "> $(location %s) 2>&1 || { cat $(location %s) >&2; exit 1; }" % (report, report),
                # A __device__-only function called from host code inside a
                # template is not diagnosed by nvcc: cudafe++ compiles the call
                # into exit(1), which ends the program silently at run time (the
                # simulator, where __device__ means nothing, cannot see it). No
                # host code of ours calls exit, so any reference is that.
                "&& if nm -u $(location %s) | grep -qw exit; then" % out,
                "echo \"nvcc %s: the host object calls exit(): a __device__-only function is called from host code (nvcc replaced the call with exit(1)); in:\" >&2;" % src,
                "objdump -dr -C --no-show-raw-insn $(location %s) | awk '/^[0-9a-f]+ <.*>:$$/ {f=$$0} /R_X86_64_PLT32[ \t]+exit/ {print \"  \" f}' | sort -u >&2;" % out,
                "exit 1; fi",
            ]),
            message = "nvcc %s" % src,
        )
        objs.append(out)
        reports.append(report)
        if src in max_registers:
            report_args.append("--max_registers=%d" % max_registers[src])
        report_args.append("$(location %s)" % report)
        if src in max_registers:
            report_args.append("--max_registers=64")
    native.sh_test(
        name = name + "_resources_test",
        size = "small",
        srcs = ["//tools/cuda:check_resources.sh"],
        args = report_args,
        data = reports,
    )
    cc_library(
        name = name,
        srcs = select({
            "//tools/cuda:sim_device": [],
            "//conditions:default": objs,
        }),
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"] + select({
            "//tools/cuda:sim_device": [":%s_simdev" % name],
            "//conditions:default": [],
        }),
        alwayslink = 1,
        visibility = visibility,
    )
