#include "zeroshard/kernels/pool2d.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cpu/pool2d.h"
#include "zeroshard/kernels/cuda/op_util.h"
#include "zeroshard/kernels/cuda/pool2d_launch.h"
#include "zeroshard/kernels/device_check.h"
#include "zeroshard/kernels/math/conv_geometry.h"
#include "zeroshard/kernels/nchw.h"
#include "zeroshard/kernels/rows.h"
#include "zeroshard/kernels/virtual_cost.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

std::string Pool2dOptions::ToString() const {
  return absl::StrCat("kernel (", kernel[0], ", ", kernel[1], "), stride (", stride[0], ", ",
                      stride[1], "), padding (", padding[0], ", ", padding[1], "), dilation (",
                      dilation[0], ", ", dilation[1], ")",
                      count_include_pad ? "" : ", padding not counted");
}

namespace {

// The options with stride 0 replaced by the kernel size, validated.
absl::StatusOr<Pool2dOptions> Resolve(absl::string_view op, const Pool2dOptions& in, bool max) {
  Pool2dOptions o = in;
  for (int i = 0; i < 2; ++i) {
    if (o.stride[i] == 0) o.stride[i] = o.kernel[i];
    if (o.kernel[i] < 1 || o.stride[i] < 1 || o.dilation[i] < 1 || o.padding[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", in.ToString(), ", expected kernel and dilation >= 1, stride >= 0 (0: the kernel), padding >= 0"));
    }
    if (2 * o.padding[i] > o.kernel[i]) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", in.ToString(),
                                                     ", expected padding at most half the kernel"));
    }
    if (!max && o.dilation[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", in.ToString(),
                                                     ", expected dilation 1 (average pooling has none)"));
    }
  }
  return o;
}

absl::StatusOr<Shape> OutShape(absl::string_view op, const Shape& x, const Pool2dOptions& o) {
  if (x.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": x has shape ", ShapeToString(x),
                                                   ", expected 4 dimensions [N, C, H, W]"));
  }
  const int64_t oh = ConvOutputSize(x[2], o.kernel[0], o.stride[0], o.padding[0], o.dilation[0]);
  const int64_t ow = ConvOutputSize(x[3], o.kernel[1], o.stride[1], o.padding[1], o.dilation[1]);
  if (oh < 1 || ow < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", o.ToString(), " does not fit the ", x[2],
                                                   "x", x[3], " input; expected an output of at least 1x1"));
  }
  return Shape{x[0], x[1], oh, ow};
}

cpu::PoolPlanes Planes(const Tensor& x, const Tensor& y) {
  return {x.size(0) * x.size(1), x.size(2), x.size(3), y.size(2), y.size(3)};
}

// Windows of average pooling along one axis, plus (for the CUDA backward) the
// outputs whose window holds each input index.
struct AxisWindows {
  std::vector<int64_t> start, end, div, out_begin, out_end;
};

AxisWindows AvgAxis(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad,
                    bool count_pad) {
  AxisWindows a;
  for (int64_t o = 0; o < out; ++o) {
    const PoolWindow w = AvgPoolWindow(o, in, kernel, stride, pad);
    a.start.push_back(w.start);
    a.end.push_back(w.end);
    a.div.push_back(count_pad ? w.padded_len : w.end - w.start);
  }
  return a;
}

AxisWindows AdaptiveAxis(int64_t in, int64_t out) {
  AxisWindows a;
  for (int64_t o = 0; o < out; ++o) {
    const PoolWindow w = AdaptivePoolWindow(o, in, out);
    a.start.push_back(w.start);
    a.end.push_back(w.end);
    a.div.push_back(w.padded_len);
  }
  return a;
}

// Window starts and ends are non-decreasing in o, so the outputs holding input
// i form one range.
void InvertAxis(AxisWindows& a, int64_t in) {
  const int64_t out = static_cast<int64_t>(a.start.size());
  a.out_begin.assign(in, 0);
  a.out_end.assign(in, 0);
  int64_t lo = 0;
  for (int64_t i = 0; i < in; ++i) {
    while (lo < out && a.end[lo] <= i) ++lo;
    int64_t hi = lo;
    while (hi < out && a.start[hi] <= i) ++hi;
    a.out_begin[i] = lo;
    a.out_end[i] = std::max(lo, hi);
  }
}

cpu::AvgWindows CpuWindows(const AxisWindows& r, const AxisWindows& c) {
  return {r.start, r.end, r.div, c.start, c.end, c.div};
}

// ---------------------------------------------------------------- CUDA staging

struct CudaIo {
  Tensor in;   // contiguous f32 input on the device
  Tensor out;  // contiguous f32 output (the output itself, or a buffer)
};

absl::StatusOr<CudaIo> CudaStage(absl::string_view op, const Tensor& in, const Tensor& out) {
  CudaIo io;
  ZS_ASSIGN_OR_RETURN(io.in, cuda::ContiguousOnDevice(op, in, DType::kF32));
  if (out.dtype() == DType::kF32 && out.is_contiguous()) {
    io.out = out;
  } else {
    ZS_ASSIGN_OR_RETURN(io.out, cuda::DeviceEmpty(op, out, out.shape(), DType::kF32));
  }
  return io;
}

absl::Status CudaFinish(absl::string_view op, const CudaIo& io, const Tensor& out) {
  if (IsSameView(io.out, out)) return absl::OkStatus();
  if (!out.is_contiguous()) {
    return absl::UnimplementedError(absl::StrCat(op, " on ", out.device().ToString(), ": the output ",
                                                 out.DebugString(), " must be contiguous for the CUDA kernel"));
  }
  return cuda::CastInto(op, io.out, out);
}

// The ten window tables in one device buffer.
struct CudaTables {
  Tensor buffer;
  cuda::AvgPoolTables tables;
};

absl::StatusOr<CudaTables> UploadTables(const AxisWindows& r, const AxisWindows& c, const Tensor& like) {
  std::vector<int64_t> all;
  std::vector<size_t> offsets;
  for (const std::vector<int64_t>* v : {&r.start, &r.end, &r.div, &r.out_begin, &r.out_end,
                                         &c.start, &c.end, &c.div, &c.out_begin, &c.out_end}) {
    offsets.push_back(all.size());
    all.insert(all.end(), v->begin(), v->end());
  }
  CudaTables t;
  ZS_ASSIGN_OR_RETURN(t.buffer, Tensor::FromVector(all, {static_cast<int64_t>(all.size())},
                                                   DType::kI64, like.allocator()));
  const int64_t* base = static_cast<const int64_t*>(t.buffer.raw_data());
  t.tables = {base + offsets[0], base + offsets[1], base + offsets[2], base + offsets[3], base + offsets[4],
              base + offsets[5], base + offsets[6], base + offsets[7], base + offsets[8], base + offsets[9]};
  return t;
}

cuda::PoolShape CudaShape(const Tensor& x, const Tensor& y) {
  const cpu::PoolPlanes p = Planes(x, y);
  return {p.planes, p.h, p.w, p.oh, p.ow};
}

// Average pooling of either kind, given the per-axis windows.
absl::Status AvgForward(absl::string_view op, const Tensor& x, AxisWindows rows, AxisWindows cols,
                        const Tensor& y) {
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&y}, {&x}, 1);
    case DeviceType::kCpu: {
      if (y.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(Tensor xf, F32Input(x));
      ZS_ASSIGN_OR_RETURN(F32Output yo, F32Output::For(y));
      cpu::AvgPool2dForward(Planes(x, y), CpuWindows(rows, cols), F32Data(xf), yo.data());
      return yo.Finish();
    }
    case DeviceType::kCuda: {
      if (y.numel() == 0) return absl::OkStatus();
      InvertAxis(rows, x.size(2));
      InvertAxis(cols, x.size(3));
      ZS_ASSIGN_OR_RETURN(CudaTables t, UploadTables(rows, cols, x));
      ZS_ASSIGN_OR_RETURN(CudaIo io, CudaStage(op, x, y));
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchAvgPool2dForward(CudaShape(x, y), t.tables, F32Data(io.in),
                                       static_cast<float*>(io.out.raw_data()), cuda::kOpStream),
          cuda::LaunchWhat(op, x)));
      return CudaFinish(op, io, y);
    }
  }
  return NoDeviceKernel(op, x.device());
}

absl::Status AvgBackward(absl::string_view op, const Tensor& dy, AxisWindows rows, AxisWindows cols,
                         const Tensor& dx) {
  switch (dy.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&dx}, {&dy}, 1);
    case DeviceType::kCpu: {
      if (dx.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(Tensor dyf, F32Input(dy));
      ZS_ASSIGN_OR_RETURN(F32Output dxo, F32Output::For(dx));
      cpu::AvgPool2dBackward(Planes(dx, dy), CpuWindows(rows, cols), F32Data(dyf), dxo.data());
      return dxo.Finish();
    }
    case DeviceType::kCuda: {
      if (dx.numel() == 0) return absl::OkStatus();
      InvertAxis(rows, dx.size(2));
      InvertAxis(cols, dx.size(3));
      ZS_ASSIGN_OR_RETURN(CudaTables t, UploadTables(rows, cols, dy));
      ZS_ASSIGN_OR_RETURN(CudaIo io, CudaStage(op, dy, dx));
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchAvgPool2dBackward(CudaShape(dx, dy), t.tables, F32Data(io.in),
                                        static_cast<float*>(io.out.raw_data()), cuda::kOpStream),
          cuda::LaunchWhat(op, dy)));
      return CudaFinish(op, io, dx);
    }
  }
  return NoDeviceKernel(op, dy.device());
}

// Forward checks shared by the pooling entries: x an image, y of `want`, no overlap.
absl::Status CheckForward(absl::string_view op, const Tensor& x, const Tensor& y, const Shape& want) {
  ZS_RETURN_IF_ERROR(CheckFloatShape(op, "y", y, want, "from x and the options"));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "y", y, {&x}, false));
  return CheckSameDevice({&x, &y}, op);
}

absl::Status CheckBackward(absl::string_view op, const Tensor& dy, const Tensor& dx, const Shape& want_dy) {
  ZS_RETURN_IF_ERROR(CheckFloatShape(op, "dy", dy, want_dy, "y's shape, from dx and the options"));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&dy}, false));
  return CheckSameDevice({&dy, &dx}, op);
}

}  // namespace

absl::StatusOr<Shape> Pool2dOutputShape(const Shape& x, const Pool2dOptions& o) {
  ZS_ASSIGN_OR_RETURN(Pool2dOptions r, Resolve("Pool2d", o, /*max=*/true));
  return OutShape("Pool2d", x, r);
}

absl::Status MaxPool2dForward(const Tensor& x, const Pool2dOptions& options, const Tensor& y,
                              const Tensor& indices) {
  constexpr absl::string_view op = "MaxPool2dForward";
  ZS_RETURN_IF_ERROR(CheckImage(op, "x", x));
  ZS_ASSIGN_OR_RETURN(const Pool2dOptions o, Resolve(op, options, true));
  ZS_ASSIGN_OR_RETURN(const Shape want, OutShape(op, x.shape(), o));
  ZS_RETURN_IF_ERROR(CheckForward(op, x, y, want));
  if (indices.defined()) {
    if (indices.dtype() != DType::kI64 || indices.shape() != want || !indices.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": indices ", indices.DebugString(),
                                                     ", expected a contiguous i64 tensor of shape ",
                                                     ShapeToString(want)));
    }
    ZS_RETURN_IF_ERROR(CheckRowOutput(op, "indices", indices, {&x, &y}, false));
    ZS_RETURN_IF_ERROR(CheckSameDevice({&x, &indices}, op));
  }
  const cpu::MaxWindow win{o.kernel[0], o.kernel[1], o.stride[0], o.stride[1],
                           o.padding[0], o.padding[1], o.dilation[0], o.dilation[1]};
  int64_t* const idx = indices.defined() ? static_cast<int64_t*>(indices.raw_data()) : nullptr;
  switch (x.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&y, &indices}, {&x}, 1);
    case DeviceType::kCpu: {
      if (y.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(Tensor xf, F32Input(x));
      ZS_ASSIGN_OR_RETURN(F32Output yo, F32Output::For(y));
      cpu::MaxPool2dForward(Planes(x, y), win, F32Data(xf), yo.data(), idx);
      return yo.Finish();
    }
    case DeviceType::kCuda: {
      if (y.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(CudaIo io, CudaStage(op, x, y));
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchMaxPool2dForward(CudaShape(x, y), {win.kh, win.kw, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw},
                                       F32Data(io.in), static_cast<float*>(io.out.raw_data()), idx,
                                       cuda::kOpStream),
          cuda::LaunchWhat(op, x)));
      return CudaFinish(op, io, y);
    }
  }
  return NoDeviceKernel(op, x.device());
}

absl::Status MaxPool2dBackward(const Tensor& dy, const Tensor& indices, const Pool2dOptions& options,
                               const Tensor& dx) {
  constexpr absl::string_view op = "MaxPool2dBackward";
  ZS_RETURN_IF_ERROR(CheckImage(op, "dx", dx));
  ZS_ASSIGN_OR_RETURN(const Pool2dOptions o, Resolve(op, options, true));
  ZS_ASSIGN_OR_RETURN(const Shape want, OutShape(op, dx.shape(), o));
  ZS_RETURN_IF_ERROR(CheckFloatShape(op, "dy", dy, want, "y's shape, from dx and the options"));
  if (!indices.defined() || indices.dtype() != DType::kI64 || indices.shape() != dy.shape() ||
      !indices.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": indices ", indices.DebugString(),
                                                   ", expected the contiguous i64 tensor of shape ",
                                                   ShapeToString(dy.shape()), " MaxPool2dForward saved"));
  }
  ZS_RETURN_IF_ERROR(CheckBackward(op, dy, dx, dy.shape()));
  ZS_RETURN_IF_ERROR(CheckRowOutput(op, "dx", dx, {&indices}, false));
  ZS_RETURN_IF_ERROR(CheckSameDevice({&dy, &indices, &dx}, op));
  const int64_t* const idx = static_cast<const int64_t*>(indices.raw_data());
  switch (dx.device().type) {
    case DeviceType::kVirtual: return ChargeMemoryBound(op, {&dx}, {&dy, &indices}, 1);
    case DeviceType::kCpu: {
      if (dx.numel() == 0) return absl::OkStatus();
      const int64_t plane = dx.size(2) * dx.size(3);
      for (int64_t i = 0; i < indices.numel(); ++i) {
        if (idx[i] < 0 || idx[i] >= plane) {
          return absl::InvalidArgumentError(absl::StrCat(op, ": indices[", i, "] = ", idx[i],
                                                         ", expected an index into a ", dx.size(2), "x",
                                                         dx.size(3), " plane"));
        }
      }
      ZS_ASSIGN_OR_RETURN(Tensor dyf, F32Input(dy));
      ZS_ASSIGN_OR_RETURN(F32Output dxo, F32Output::For(dx));
      cpu::MaxPool2dBackward(Planes(dx, dy), F32Data(dyf), idx, dxo.data());
      return dxo.Finish();
    }
    case DeviceType::kCuda: {
      if (dx.numel() == 0) return absl::OkStatus();
      ZS_ASSIGN_OR_RETURN(CudaIo io, CudaStage(op, dy, dx));
      ZS_RETURN_IF_ERROR(cuda::CudaLaunchStatus(
          cuda::LaunchMaxPool2dBackward(CudaShape(dx, dy),
                                        {o.kernel[0], o.kernel[1], o.stride[0], o.stride[1], o.padding[0],
                                         o.padding[1], o.dilation[0], o.dilation[1]},
                                        F32Data(io.in), idx, static_cast<float*>(io.out.raw_data()),
                                        cuda::kOpStream),
          cuda::LaunchWhat(op, dy)));
      return CudaFinish(op, io, dx);
    }
  }
  return NoDeviceKernel(op, dx.device());
}

absl::Status AvgPool2dForward(const Tensor& x, const Pool2dOptions& options, const Tensor& y) {
  constexpr absl::string_view op = "AvgPool2dForward";
  ZS_RETURN_IF_ERROR(CheckImage(op, "x", x));
  ZS_ASSIGN_OR_RETURN(const Pool2dOptions o, Resolve(op, options, false));
  ZS_ASSIGN_OR_RETURN(const Shape want, OutShape(op, x.shape(), o));
  ZS_RETURN_IF_ERROR(CheckForward(op, x, y, want));
  return AvgForward(op, x, AvgAxis(x.size(2), want[2], o.kernel[0], o.stride[0], o.padding[0], o.count_include_pad),
                    AvgAxis(x.size(3), want[3], o.kernel[1], o.stride[1], o.padding[1], o.count_include_pad), y);
}

absl::Status AvgPool2dBackward(const Tensor& dy, const Pool2dOptions& options, const Tensor& dx) {
  constexpr absl::string_view op = "AvgPool2dBackward";
  ZS_RETURN_IF_ERROR(CheckImage(op, "dx", dx));
  ZS_ASSIGN_OR_RETURN(const Pool2dOptions o, Resolve(op, options, false));
  ZS_ASSIGN_OR_RETURN(const Shape want, OutShape(op, dx.shape(), o));
  ZS_RETURN_IF_ERROR(CheckBackward(op, dy, dx, want));
  return AvgBackward(op, dy, AvgAxis(dx.size(2), want[2], o.kernel[0], o.stride[0], o.padding[0], o.count_include_pad),
                     AvgAxis(dx.size(3), want[3], o.kernel[1], o.stride[1], o.padding[1], o.count_include_pad), dx);
}

absl::Status AdaptiveAvgPool2dForward(const Tensor& x, const Tensor& y) {
  constexpr absl::string_view op = "AdaptiveAvgPool2dForward";
  ZS_RETURN_IF_ERROR(CheckImage(op, "x", x));
  ZS_RETURN_IF_ERROR(CheckImage(op, "y", y));
  if (y.size(0) != x.size(0) || y.size(1) != x.size(1) || y.size(2) < 1 || y.size(3) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": y ", ShapeToString(y.shape()), " for x ",
                                                   ShapeToString(x.shape()),
                                                   ", expected [N, C, OH, OW] with x's N and C, OH, OW >= 1"));
  }
  ZS_RETURN_IF_ERROR(CheckForward(op, x, y, y.shape()));
  return AvgForward(op, x, AdaptiveAxis(x.size(2), y.size(2)), AdaptiveAxis(x.size(3), y.size(3)), y);
}

absl::Status AdaptiveAvgPool2dBackward(const Tensor& dy, const Tensor& dx) {
  constexpr absl::string_view op = "AdaptiveAvgPool2dBackward";
  ZS_RETURN_IF_ERROR(CheckImage(op, "dx", dx));
  ZS_RETURN_IF_ERROR(CheckImage(op, "dy", dy));
  if (dy.size(0) != dx.size(0) || dy.size(1) != dx.size(1) || dy.size(2) < 1 || dy.size(3) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dy ", ShapeToString(dy.shape()), " for dx ",
                                                   ShapeToString(dx.shape()),
                                                   ", expected [N, C, OH, OW] with dx's N and C, OH, OW >= 1"));
  }
  ZS_RETURN_IF_ERROR(CheckBackward(op, dy, dx, dy.shape()));
  return AvgBackward(op, dy, AdaptiveAxis(dx.size(2), dy.size(2)), AdaptiveAxis(dx.size(3), dy.size(3)), dx);
}

}  // namespace zeroshard
