"""The project's C++ rules: `cc_library`, `cc_binary` and `cc_test` as Bazel's,
plus what every target of zeroshard needs wherever it is built from.

1. The include prefix. Every header is included as
   `"zeroshard/<package>/<file>"` (never `"runtime/tensor.h"`, which would
   collide with an embedder's own `runtime/`): each library's headers get
   `include_prefix = "zeroshard/<package>"`, so Bazel presents
   `runtime/tensor.h` as `zeroshard/runtime/tensor.h` to everything that
   depends on it, here or in another workspace (`@zeroshard//runtime:tensor`).
   A header listed in `srcs` (a private one) is moved to `hdrs` so that it is
   reachable under the same prefix; a test's or binary's own header gets a
   small header library, `<name>_hdrs`. Headers of other packages that a file
   includes textually (the CUDA kernels' `//runtime:half.h`) go through
   `zs_prefixed_headers`. The installed tree (`make install`) has the same
   layout, `include/zeroshard/...`.

2. The flags the results rest on, carried by the targets and not only by
   `.bazelrc`, so that another workspace depending on this one compiles the
   library the same way (ZS_COPTS, ZS_LINKOPTS). They are the compile
   features: C++20, OpenMP, no implicit fused multiply-add (the bitwise
   equality of the AVX2, AVX-512 and baseline paths rests on it) and no
   FP-exception or errno semantics (which let comparisons and clamps
   vectorise). Optimisation (`-O2`, `-c opt`) stays the builder's choice:
   .bazelrc sets -O2 here.

`load("//tools:cc.bzl", "cc_library", "cc_test")` in every BUILD file of the
project instead of `@rules_cc//cc:defs.bzl`; tools/check_layers.sh refuses an
include without the prefix.
"""

load("@rules_cc//cc:defs.bzl", _cc_binary = "cc_binary", _cc_library = "cc_library", _cc_test = "cc_test")

# The flags, on every compile of the project's sources (after .bazelrc's, so
# they win). `make fuzz` compiles with clang without OpenMP (.bazelrc
# config:fuzz sets --define=zs_openmp=0).
ZS_COPTS = [
    "-std=c++20",
    "-ffp-contract=off",
    "-fno-trapping-math",
    "-fno-math-errno",
] + select({
    "//tools:no_openmp": ["-fno-openmp"],
    "//conditions:default": ["-fopenmp"],
})

# Linked into whatever depends on a library of the project (cc_library
# linkopts propagate to the final link).
ZS_LINKOPTS = ["-fopenmp"]

HEADER_EXTENSIONS = (".h", ".hh", ".hpp", ".cuh", ".inc")

def _is_header(src):
    return type(src) == "string" and src.endswith(HEADER_EXTENSIONS)

def include_prefix():
    """`zeroshard/<package>`: where this package's headers are included from."""
    package = native.package_name()
    return "zeroshard/" + package if package else "zeroshard"

def _split_headers(srcs):
    """(sources, headers) of a plain list; a select() is left whole."""
    if type(srcs) != "list":
        return srcs, []
    return [s for s in srcs if not _is_header(s)], [s for s in srcs if _is_header(s)]

def cc_library(name, srcs = [], hdrs = [], copts = [], linkopts = [], **kwargs):
    srcs, private = _split_headers(srcs)
    _cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs + private,
        include_prefix = include_prefix(),
        copts = ZS_COPTS + copts,
        linkopts = ZS_LINKOPTS + linkopts,
        **kwargs
    )

def _own_headers(name, srcs, kwargs, testonly):
    """Moves a binary's or test's headers into `<name>_hdrs`; returns (srcs, deps)."""
    srcs, headers = _split_headers(srcs)
    deps = kwargs.pop("deps", [])
    if headers:
        _cc_library(
            name = name + "_hdrs",
            hdrs = headers,
            include_prefix = include_prefix(),
            deps = deps,
            testonly = testonly or kwargs.get("testonly", False),
            tags = ["manual"] if "manual" in kwargs.get("tags", []) else [],
        )
        deps = deps + [":" + name + "_hdrs"]
    return srcs, deps

def cc_binary(name, srcs = [], copts = [], **kwargs):
    srcs, deps = _own_headers(name, srcs, kwargs, testonly = False)
    _cc_binary(name = name, srcs = srcs, deps = deps, copts = ZS_COPTS + copts, **kwargs)

def cc_test(name, srcs = [], copts = [], **kwargs):
    srcs, deps = _own_headers(name, srcs, kwargs, testonly = True)
    _cc_test(name = name, srcs = srcs, deps = deps, copts = ZS_COPTS + copts, **kwargs)

def _prefixed_path(f):
    path = f.short_path
    if path.startswith("../"):  # a file of an external repository: ../<repo>/<path>
        path = path.split("/", 2)[2]
    return path

def _zs_prefixed_headers_impl(ctx):
    headers = []
    include_dir = None
    for f in ctx.files.hdrs:
        path = _prefixed_path(f)
        out = ctx.actions.declare_file("%s_prefixed/zeroshard/%s" % (ctx.label.name, path))
        ctx.actions.symlink(output = out, target_file = f)
        headers.append(out)
        include_dir = out.path[:-len("/zeroshard/" + path)]
    context = cc_common.create_compilation_context(
        headers = depset(headers),
        includes = depset([include_dir] if include_dir else []),
    )
    return [DefaultInfo(files = depset(headers)), CcInfo(compilation_context = context)]

zs_prefixed_headers = rule(
    implementation = _zs_prefixed_headers_impl,
    doc = """Headers of any package, reachable as `zeroshard/<their path>`.

    For a library that includes another package's header textually, without
    depending on the library that owns it (the CUDA kernels compiled for the
    simulator, tools/cuda/cuda.bzl). Provides CcInfo: put it in `deps`.""",
    attrs = {"hdrs": attr.label_list(allow_files = HEADER_EXTENSIONS)},
)
