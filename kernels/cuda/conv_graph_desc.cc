#include "zeroshard/kernels/cuda/conv_graph_desc.h"

#include <atomic>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace zeroshard::cuda {

std::array<int64_t, 4> PackedNchwStrides(const std::array<int64_t, 4>& dims) {
  std::array<int64_t, 4> s{};
  int64_t acc = 1;
  for (int i = 3; i >= 0; --i) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

ConvGraphDesc ConvGraphDescFor(const Conv2dGeometry& g) {
  ConvGraphDesc d;
  d.x.dims = {g.n, g.c, g.h, g.w};
  d.w.dims = {g.o, g.cg(), g.kh, g.kw};
  d.y.dims = {g.n, g.o, g.oh, g.ow};
  for (ConvGraphTensor* t : {&d.x, &d.w, &d.y}) t->strides = PackedNchwStrides(t->dims);
  d.padding = {g.ph, g.pw};
  d.strides = {g.sh, g.sw};
  d.dilations = {g.dh, g.dw};
  d.spatial_dims = 2;
  return d;
}

absl::string_view ConvGraphPassName(ConvGraphPass pass) {
  switch (pass) {
    case ConvGraphPass::kForward: return "fwd";
    case ConvGraphPass::kBackwardData: return "bwd_data";
    case ConvGraphPass::kBackwardFilter: return "bwd_filter";
  }
  return "?";
}

std::string ConvGraphKey(ConvGraphPass pass, int device, const Conv2dGeometry& g, DType dtype) {
  return absl::StrCat(ConvGraphPassName(pass), " dev", device, " x", g.n, "x", g.c, "x", g.h, "x", g.w,
                      " w", g.o, "x", g.kh, "x", g.kw, " y", g.oh, "x", g.ow, " s", g.sh, ",", g.sw,
                      " p", g.ph, ",", g.pw, " d", g.dh, ",", g.dw, " g", g.groups, " ",
                      DTypeName(dtype));
}

absl::string_view CudnnConvPathName(CudnnConvPath path) {
  switch (path) {
    case CudnnConvPath::kAuto: return "auto";
    case CudnnConvPath::kGraph: return "graph";
    case CudnnConvPath::kLegacy: return "legacy";
    case CudnnConvPath::kOwn: return "own";
  }
  return "?";
}

std::optional<CudnnConvPath> ParseCudnnConvPath(absl::string_view s) {
  for (CudnnConvPath p : {CudnnConvPath::kAuto, CudnnConvPath::kGraph, CudnnConvPath::kLegacy, CudnnConvPath::kOwn}) {
    if (s == CudnnConvPathName(p)) return p;
  }
  return std::nullopt;
}

namespace {

// -1: not set yet (the environment decides on first read).
std::atomic<int>& PathSlot() {
  static std::atomic<int> slot(-1);
  return slot;
}

}  // namespace

CudnnConvPath GetCudnnConvPath() {
  int v = PathSlot().load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<CudnnConvPath>(v);
  CudnnConvPath path = CudnnConvPath::kAuto;
  if (const char* env = std::getenv("ZEROSHARD_CUDNN_CONV"); env != nullptr) {
    path = ParseCudnnConvPath(env).value_or(CudnnConvPath::kAuto);
  }
  int expected = -1;
  PathSlot().compare_exchange_strong(expected, static_cast<int>(path));
  return static_cast<CudnnConvPath>(PathSlot().load(std::memory_order_relaxed));
}

void SetCudnnConvPath(CudnnConvPath path) {
  PathSlot().store(static_cast<int>(path), std::memory_order_relaxed);
}

namespace {
std::atomic<int64_t> graph_passes(0), legacy_passes(0), own_passes(0);
}  // namespace

CudnnConvPathCounts GetCudnnConvPathCounts() {
  return {graph_passes.load(std::memory_order_relaxed), legacy_passes.load(std::memory_order_relaxed),
          own_passes.load(std::memory_order_relaxed)};
}

void CountOwnConvPass() { own_passes.fetch_add(1, std::memory_order_relaxed); }

void CountCudnnConvPass(bool graph) {
  (graph ? graph_passes : legacy_passes).fetch_add(1, std::memory_order_relaxed);
}

}  // namespace zeroshard::cuda
