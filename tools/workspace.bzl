"""zeroshard's external repositories, for its own WORKSPACE and for another
workspace that depends on it (tests/bazel_consumer):

    local_repository(name = "zeroshard", path = "...")
    load("@zeroshard//tools:workspace.bzl", "zeroshard_dependencies")
    zeroshard_dependencies(path = "...")   # the same path

Everything resolves offline: local stand-ins for the repositories Bazel would
download (rules_cc, rules_java, remote_coverage_tools, platforms), Debian's
system libraries (Abseil, Eigen, GoogleTest, Google Benchmark, Open MPI,
liburing, nlohmann-json; tools/install_deps.sh installs them), and the local
CUDA toolkit or an empty stand-in (tools/cuda/cuda_configure.bzl). A
repository the calling workspace already defines is left as it is.
See shared/BUILD_NOTES.md.
"""

load("//tools/cuda:cuda_configure.bzl", "cuda_configure")

def _build_file(name):
    # A label of this repository, whichever workspace calls.
    return str(Label("//third_party/system:" + name))

def zeroshard_dependencies(path = "."):
    """Defines the repositories zeroshard builds with.

    Args:
      path: zeroshard's root relative to the calling workspace's root ("." in
        zeroshard's own WORKSPACE): the Bazel stand-ins live under it.
    """
    existing = native.existing_rules()
    if "rules_cc" not in existing:
        native.local_repository(
            name = "rules_cc",
            path = path + "/third_party/rules_cc",
        )
    if "rules_java" not in existing:
        native.local_repository(
            name = "rules_java",
            path = path + "/third_party/rules_java",
        )
    if "remote_coverage_tools" not in existing:
        native.local_repository(
            name = "remote_coverage_tools",
            path = path + "/third_party/remote_coverage_tools",
        )
    if "platforms" not in existing:
        native.local_repository(
            name = "platforms",
            path = "/usr/share/bazel/tools/platforms",
        )
    if "absl" not in existing:
        native.new_local_repository(
            name = "absl",
            build_file = _build_file("BUILD.absl"),
            path = "/usr",
        )
    if "eigen" not in existing:
        native.new_local_repository(
            name = "eigen",
            build_file = _build_file("BUILD.eigen"),
            path = "/usr/include/eigen3",
        )
    if "gtest" not in existing:
        native.new_local_repository(
            name = "gtest",
            build_file = _build_file("BUILD.gtest"),
            path = "/usr",
        )
    if "benchmark" not in existing:
        native.new_local_repository(
            name = "benchmark",
            build_file = _build_file("BUILD.benchmark"),
            path = "/usr",
        )
    if "mpi" not in existing:
        native.new_local_repository(
            name = "mpi",
            build_file = _build_file("BUILD.mpi"),
            path = "/usr/lib/x86_64-linux-gnu/openmpi",
        )
    if "liburing" not in existing:
        native.new_local_repository(
            name = "liburing",
            build_file = _build_file("BUILD.liburing"),
            path = "/usr",
        )
    if "json" not in existing:
        native.new_local_repository(
            name = "json",
            build_file = _build_file("BUILD.json"),
            path = "/usr",
        )
    if "local_cuda" not in existing:
        cuda_configure(name = "local_cuda")
