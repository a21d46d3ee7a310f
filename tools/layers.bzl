"""Who may depend on each layer (docs/design.md, "Layers"; tools/check_layers.sh).

A layer's targets are visible to the layers above it and to the folders that
are not layers (examples, bench, tools, tests), never to a layer below, so a
BUILD dependency that points up a layer fails the build:

    load("//tools:layers.bzl", "layer_visibility")
    package(default_visibility = layer_visibility("sharding"))
"""

# Bottom to top; each layer with the layers that may depend on it.
_ABOVE = {
    "runtime": ["kernels", "data", "collectives", "autograd", "sharding", "optim", "checkpoint", "train", "sim"],
    "kernels": ["collectives", "autograd", "sharding", "optim", "checkpoint", "train", "sim"],
    "data": ["train", "sim"],
    "collectives": ["sharding", "optim", "checkpoint", "train", "sim"],
    "autograd": ["sharding", "optim", "checkpoint", "train", "sim"],
    "sharding": ["optim", "checkpoint", "train", "sim"],
    "optim": ["checkpoint", "train", "sim"],
    "checkpoint": ["train", "sim"],
    "train": ["sim"],
    # The simulator and planner run the real schedule (train's step) on a virtual cluster.
    "sim": [],
}

# Not layers: the programs, benchmarks, build tools and tests use any layer.
_TOP = ["examples", "bench", "tools", "tests"]

def layer_visibility(layer):
    """The visibility of a package in `layer`: its own layer, the ones above, the top folders."""
    if layer not in _ABOVE:
        fail("unknown layer %r; the layers are %s" % (layer, ", ".join(_ABOVE.keys())))
    # "//:__pkg__": the umbrella library and the install tree (BUILD.bazel at the root).
    return ["//%s:__subpackages__" % p for p in [layer] + _ABOVE[layer] + _TOP] + ["//:__pkg__"]
