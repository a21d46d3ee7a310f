"""`zs_op`: one declaration per op family of kernels/ (docs/adding_an_op.md).

    load("//tools:zs_op.bzl", "zs_op", "zs_op_registry")

    zs_op(
        name = "softmax",
        cpu_srcs = ["cpu/softmax.cc"],
        cpu_hdrs = ["cpu/softmax.h"],
        cuda_srcs = ["cuda/softmax.cu"],
        deps = [":rows", "//runtime:tensor"],
    )
    ...
    zs_op_registry()   # last in the BUILD file

makes, for `name`:

- `:<name>`: the op entry `<name>.{h,cc}` (argument checks, then a switch on
  the device) with its CPU kernels (`cpu_srcs`, `cpu_hdrs`) in one cc_library,
  as every op family was declared by hand before. The CUDA launchers come in
  through `:cuda_<name>` when there are `cuda_srcs`.
- `:cuda_<name>_kernels`: `cuda_srcs` compiled by nvcc (tools/cuda/cuda.bzl's
  `cuda_library`, which also makes `_sim`, `_simdev` and `_resources_test`),
  `--fmad=false` unless `nvcc_flags` says otherwise, so the per-element math
  rounds as the CPU kernels do (.bazelrc: -ffp-contract=off). The `.cu` files
  read `cuda/common.cuh`, `math/fast_math.h`, `math/softmax_ops.h` and the
  runtime's half/host_device headers (CUDA_TEXTUAL_DEPS), plus
  `cuda_textual_deps`.
- `:cuda_<name>`: what the op entry depends on: the kernels, or in a CPU-only
  build the stand-in launchers of `cuda/no_cuda_<name>.cc`.
- `:<name>_op`: the op's registration, `<name>_op.cc` (kernels/op_registry.h:
  its backends, dtypes, double-precision reference and gradient), linked only by
  the op harness (tests/kernels/op_harness_test.cc) through `:registered_ops`.

`zs_op_registry()` makes `:registered_ops` (every `<name>_op` above) and
`:op_families` (a generated header listing every family and whether it has
CUDA kernels), so the harness fails for an op declared here and not
registered, or registered without its CUDA case.
"""

load("//tools:cc.bzl", "cc_library")

load("@local_cuda//:defs.bzl", "if_cuda")
load("//tools/cuda:cuda.bzl", "cuda_library")

# Headers every kernels/cuda/*.cu may include.
CUDA_TEXTUAL_DEPS = [
    "cuda/common.cuh",
    "math/fast_math.h",
    "math/softmax_ops.h",
    "//runtime:half.h",
    "//runtime:host_device.h",
]

_REGISTRATION_TAG = "zs_op_registration"

def zs_cuda_kernels(
        name,
        srcs,
        hdrs = None,
        textual_deps = None,
        extra_textual_deps = [],
        nvcc_flags = ["--fmad=false"],
        no_cuda_srcs = None,
        visibility = None,
        max_registers = {}):
    """`:cuda_<name>_kernels` (nvcc) and `:cuda_<name>` (them, or the CPU-only stand-in).

    Args:
      name: the family ("softmax"): kernels in cuda/<name>.cu by default.
      srcs: the .cu files.
      hdrs: the launcher header; cuda/<name>_launch.h by default.
      textual_deps: the headers the .cu files include; CUDA_TEXTUAL_DEPS by default.
      extra_textual_deps: headers added to textual_deps.
      nvcc_flags: --fmad=false by default (bitwise the CPU kernels' rounding).
      no_cuda_srcs: the stand-in launchers of a CPU-only build; cuda/no_cuda_<name>.cc by default.
      visibility: of both targets; the package default when None.
      max_registers: {src: N}, registers per thread allowed to a .cu's kernels (cuda_library).
    """
    hdrs = hdrs if hdrs != None else ["cuda/%s_launch.h" % name]
    textual_deps = textual_deps if textual_deps != None else CUDA_TEXTUAL_DEPS
    no_cuda_srcs = no_cuda_srcs if no_cuda_srcs != None else ["cuda/no_cuda_%s.cc" % name]
    cuda_library(
        name = "cuda_%s_kernels" % name,
        srcs = srcs,
        hdrs = hdrs,
        nvcc_flags = nvcc_flags,
        textual_deps = textual_deps + extra_textual_deps,
        visibility = visibility,
        max_registers = max_registers,
    )
    cc_library(
        name = "cuda_" + name,
        srcs = if_cuda([], no_cuda_srcs),
        hdrs = hdrs,
        deps = if_cuda([":cuda_%s_kernels" % name]),
        visibility = visibility,
    )

def zs_op(
        name,
        srcs = None,
        hdrs = None,
        cpu_srcs = [],
        cpu_hdrs = [],
        cuda_srcs = [],
        cuda_hdrs = None,
        cuda_textual_deps = None,
        cuda_extra_textual_deps = [],
        nvcc_flags = ["--fmad=false"],
        no_cuda_srcs = None,
        cuda_max_registers = {},
        deps = [],
        registration = None,
        registration_deps = []):
    """One op family: its entry and CPU kernels, its CUDA kernels, its registration.

    Args:
      name: the family, as in kernels/<name>.{h,cc}.
      srcs: the op entry's sources; [<name>.cc] by default.
      hdrs: its headers (with the per-element math/ headers it owns); [<name>.h] by default.
      cpu_srcs: the CPU kernels (kernels/cpu/).
      cpu_hdrs: their headers.
      cuda_srcs: the CUDA kernels (kernels/cuda/*.cu); none for an op whose CUDA
        case is a vendor library (cuBLASLt, cuDNN) or that has none.
      cuda_hdrs: the launcher header; cuda/<name>_launch.h by default.
      cuda_textual_deps: what the .cu files include; CUDA_TEXTUAL_DEPS by default.
      cuda_extra_textual_deps: headers added to those (the family's math/ headers).
      nvcc_flags: --fmad=false by default.
      no_cuda_srcs: the CPU-only build's launchers; cuda/no_cuda_<name>.cc by default.
      cuda_max_registers: {src: N} for kernels launched with small blocks (cuda_library's max_registers).
      deps: of the op entry (`:cuda_<name>` is added when there are cuda_srcs).
      registration: the registration source; <name>_op.cc by default.
      registration_deps: what the registration needs beyond the op and the registry.
    """
    srcs = srcs if srcs != None else [name + ".cc"]
    hdrs = hdrs if hdrs != None else [name + ".h"]
    op_deps = list(deps)
    if cuda_srcs:
        zs_cuda_kernels(
            name = name,
            srcs = cuda_srcs,
            hdrs = cuda_hdrs,
            textual_deps = cuda_textual_deps,
            extra_textual_deps = cuda_extra_textual_deps,
            nvcc_flags = nvcc_flags,
            no_cuda_srcs = no_cuda_srcs,
            max_registers = cuda_max_registers,
        )
        if ":cuda_" + name not in op_deps:
            op_deps.append(":cuda_" + name)
    cc_library(
        name = name,
        # Sorted, as buildifier kept them: Bazel numbers the objects of sources
        # that share a basename (attention.cc, cpu/attention.cc) in this order.
        srcs = sorted(srcs + cpu_srcs),
        hdrs = sorted(hdrs + cpu_hdrs),
        deps = op_deps,
    )
    cc_library(
        name = name + "_op",
        srcs = [registration if registration != None else name + "_op.cc"],
        deps = [
            ":" + name,
            ":op_registry",
        ] + registration_deps,
        # Registers itself at static initialisation: nothing refers to it by name.
        alwayslink = 1,
        # The families with own CUDA kernels, for :op_families.
        tags = [_REGISTRATION_TAG, "zs_op_cuda" if cuda_srcs else "zs_op_no_cuda_kernels"],
    )

def zs_op_registry(name = "registered_ops", families = "op_families"):
    """`:<name>`, every registration of this package; `:<families>`, the families' list.

    Call it last in the BUILD file: it reads the zs_op declarations above it.
    """
    rules = native.existing_rules()
    regs = [
        rules[n]
        for n in sorted(rules.keys())
        if _REGISTRATION_TAG in rules[n].get("tags", [])
    ]
    cc_library(
        name = name,
        deps = [":" + r["name"] for r in regs],
    )
    lines = [
        '{"%s", %s},' % (r["name"][:-len("_op")], "true" if "zs_op_cuda" in r["tags"] else "false")
        for r in regs
    ]
    header = families + ".h"
    native.genrule(
        name = families + "_h",
        outs = [header],
        cmd = "\n".join([
            "cat > $@ <<'EOF'",
            "// Generated by zs_op_registry (tools/zs_op.bzl) from the zs_op declarations",
            "// of this package: each op family, and whether it has CUDA kernels of its own.",
            "#ifndef ZEROSHARD_KERNELS_OP_FAMILIES_H_",
            "#define ZEROSHARD_KERNELS_OP_FAMILIES_H_",
            "",
            "namespace zeroshard::ops {",
            "",
            "struct DeclaredFamily {",
            "  const char* name;",
            "  bool cuda_kernels;",
            "};",
            "",
            "inline constexpr DeclaredFamily kDeclaredFamilies[] = {",
        ] + ["    " + l for l in lines] + [
            "};",
            "",
            "}  // namespace zeroshard::ops",
            "",
            "#endif  // ZEROSHARD_KERNELS_OP_FAMILIES_H_",
            "EOF",
        ]),
    )
    cc_library(
        name = families,
        hdrs = [header],
    )
