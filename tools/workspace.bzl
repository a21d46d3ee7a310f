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

# Bazel's own repositories, as offline stand-ins: (name, path under zeroshard
# or absolute).
_STAND_INS = [
    ("rules_cc", "third_party/rules_cc"),
    ("rules_java", "third_party/rules_java"),
    ("remote_coverage_tools", "third_party/remote_coverage_tools"),
    ("platforms", "/usr/share/bazel/tools/platforms"),
]

# Debian's libraries: (name, where the package puts them); each has its BUILD
# file in third_party/system/BUILD.<name>.
_SYSTEM_LIBRARIES = [
    ("absl", "/usr"),
    ("eigen", "/usr/include/eigen3"),
    ("gtest", "/usr"),
    ("benchmark", "/usr"),
    ("mpi", "/usr/lib/x86_64-linux-gnu/openmpi"),
    ("liburing", "/usr"),
    ("json", "/usr"),
]

def zeroshard_dependencies(path = "."):
    """Defines the repositories zeroshard builds with.

    Args:
      path: zeroshard's root relative to the calling workspace's root ("." in
        zeroshard's own WORKSPACE): the Bazel stand-ins live under it.
    """
    existing = native.existing_rules()
    for name, where in _STAND_INS:
        if name not in existing:
            native.local_repository(
                name = name,
                path = where if where.startswith("/") else path + "/" + where,
            )
    for name, where in _SYSTEM_LIBRARIES:
        if name not in existing:
            native.new_local_repository(
                name = name,
                # A label of this repository, whichever workspace calls.
                build_file = str(Label("//third_party/system:BUILD." + name)),
                path = where,
            )
    if "local_cuda" not in existing:
        cuda_configure(name = "local_cuda")
