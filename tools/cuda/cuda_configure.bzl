"""Repository rule that exposes the local CUDA toolkit, or an empty stand-in.

CUDA is enabled when `$ZEROSHARD_CUDA_PATH` (default `/usr/local/cuda`) holds
`bin/nvcc`, unless `ZEROSHARD_CUDA=0`. Switch it off for a CPU-only build with

    bazel build --repo_env=ZEROSHARD_CUDA=0 //...      (or: make CUDA=0 ...)

The generated repository `@local_cuda` holds:
  defs.bzl   CUDA_ENABLED, NVCC, CUDA_ARCHS and `if_cuda(yes, no)`
  BUILD      cc_library targets cudart, cublas, cudnn, nccl (empty when disabled;
             cudart, cublas and nccl are the simulator's stand-ins under
             --define=cuda_sim=1, see tools/cuda/sim)
"""

_HEADER_GLOB = """glob([
        "include/*.h",
        "include/*.hpp",
        "include/crt/**",
        "include/nv/**",
        "include/nvtx3/**",
    ])"""

def _lib(name, libs):
    return """
cc_library(
    name = "{name}",
    deps = [":headers"],
    linkopts = ["-L{{root}}/lib64", "-Wl,-rpath,{{root}}/lib64"] + {libs},
    visibility = ["//visibility:public"],
)
""".format(name = name, libs = repr(["-l" + l for l in libs]))

def _repo_label(label):
    """`label` of this repository as @local_cuda's BUILD must spell it: @//...
    in zeroshard's own workspace, @zeroshard//... when another workspace
    builds it (tests/bazel_consumer)."""
    l = Label(label)
    return "@%s//%s:%s" % (l.workspace_name, l.package, l.name)

# `name` links the toolkit's `libs`, or under --define=cuda_sim=1
# (tools/cuda:sim_device) the simulator's stand-ins tools/cuda/sim:<fake> for
# each of `fakes`.
def _lib_or_sim(name, libs, fakes):
    return _lib(name + "_library", libs) + """
cc_library(
    name = "{name}",
    deps = [":headers"] + select({{
        "{sim_device}": {fakes},
        "//conditions:default": [":{name}_library"],
    }}),
    visibility = ["//visibility:public"],
)
""".format(name = name, sim_device = _repo_label("//tools/cuda:sim_device"), fakes = repr([_repo_label("//tools/cuda/sim:" + f) for f in fakes]))

def _cuda_configure_impl(rctx):
    root = rctx.os.environ.get("ZEROSHARD_CUDA_PATH", "/usr/local/cuda")
    switch = rctx.os.environ.get("ZEROSHARD_CUDA", "1").lower()
    archs = rctx.os.environ.get("ZEROSHARD_CUDA_ARCHS", "80,90")
    nvcc = rctx.path(root + "/bin/nvcc")
    enabled = switch not in ("0", "off", "false", "no") and nvcc.exists

    build = ""
    if enabled:
        rctx.symlink(root + "/include", "include")
        build += """
cc_library(
    name = "headers",
    hdrs = {glob},
    includes = ["include"],
    visibility = ["//visibility:public"],
)
""".format(glob = _HEADER_GLOB)
        build += _lib_or_sim("cudart", ["cudart"], ["fake_cudart"])
        build += _lib_or_sim("cublas", ["cublasLt", "cublas"], ["fake_cublaslt", "fake_cublas"])
        build += _lib("cudnn", ["cudnn"])
        build += _lib_or_sim("nccl", ["nccl"], ["fake_nccl"])
        build = build.replace("{root}", root)
    else:
        for name in ["headers", "cudart", "cublas", "cudnn", "nccl"]:
            build += 'cc_library(name = "%s", visibility = ["//visibility:public"])\n' % name
    rctx.file("BUILD", build)
    rctx.file("WORKSPACE", 'workspace(name = "local_cuda")\n')
    rctx.file("defs.bzl", """
CUDA_ENABLED = {enabled}
CUDA_ROOT = "{root}"
NVCC = "{root}/bin/nvcc"
CUDA_ARCHS = {archs}

def if_cuda(if_true, if_false = []):
    \"\"\"Returns `if_true` when the CUDA toolkit is enabled, else `if_false`.\"\"\"
    return if_true if CUDA_ENABLED else if_false
""".format(
        enabled = "True" if enabled else "False",
        root = root,
        archs = repr([a.strip() for a in archs.split(",") if a.strip()]),
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["ZEROSHARD_CUDA", "ZEROSHARD_CUDA_PATH", "ZEROSHARD_CUDA_ARCHS"],
    local = True,
)
