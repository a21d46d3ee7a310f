// Every CUDA kernel of the project, executed by the CPU simulator
// (tools/cuda/sim) through its real host launcher, against the CPU twin: the
// same comparisons and tolerances as the GPU tests (tests/kernels/cuda_*_test.cc),
// on machines without a GPU. Each launch runs twice, blocks and threads in
// forward and in reverse order, and both runs must give the same bits: a kernel
// whose result depends on the order of blocks or of unsynchronised threads
// fails here. Launches with undefined behaviour (divergent barriers, shuffles
// with absent lanes, launch shapes the device refuses) fail the launch.
#include "zeroshard/tools/cuda/sim/cuda_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "zeroshard/kernels/attention.h"
#include "zeroshard/kernels/batchnorm.h"
#include "zeroshard/kernels/conv2d.h"
#include "zeroshard/kernels/cross_entropy.h"
#include "zeroshard/kernels/dropout.h"
#include "zeroshard/kernels/elementwise.h"
#include "zeroshard/kernels/embedding.h"
#include "zeroshard/kernels/layernorm.h"
#include "zeroshard/kernels/math/dropout_math.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/kernels/softmax.h"
#include "zeroshard/optim/adamw_math.h"
#include "zeroshard/optim/sgd.h"
#include "zeroshard/optim/sgd_math.h"
#include "zeroshard/tests/kernels/attention_bound.h"
#include "zeroshard/tests/kernels/cuda_testing.h"
#include "zeroshard/tests/kernels/sim_launch.h"  // first: see its comment

namespace zeroshard {
namespace {

using ::zeroshard::testing::Describe;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::GpuTol;
using ::zeroshard::testing::kExact;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::RandomValues;
using ::zeroshard::testing::ToDoubles;
using ::zeroshard::testing::Tol;
namespace sim = ::zeroshard::testing::sim;
namespace sim_optim = ::zeroshard::testing::sim_optim;

int Code(DType d) { return static_cast<int>(d); }
std::string Name(DType d) { return std::string(DTypeName(d)); }

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.nbytes()));
}

// Runs `launch` (which fills `outputs` from fresh copies of their initial
// values) in forward and in reverse order: both must launch, give the same
// bytes, and leave the outputs of the forward run in place.
void RunBothOrders(const std::string& what, const std::vector<Tensor*>& outputs,
                   const std::function<int()>& launch) {
  std::vector<std::string> initial;
  for (Tensor* t : outputs) initial.push_back(Bytes(*t));
  std::vector<std::string> results[2];
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::memcpy(outputs[i]->raw_data(), initial[i].data(), initial[i].size());
    }
    zs_cuda_sim::SetOrder(pass == 0 ? zs_cuda_sim::Order::kReverse : zs_cuda_sim::Order::kForward);
    const int err = launch();
    zs_cuda_sim::SetOrder(zs_cuda_sim::Order::kForward);
    ASSERT_EQ(err, 0) << what << ": " << zs_cuda_sim::LastError();
    for (Tensor* t : outputs) results[pass].push_back(Bytes(*t));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_TRUE(results[0][i] == results[1][i])
        << what << ": output " << i << " differs between block/thread orders";
  }
}

Tensor Empty(std::vector<int64_t> shape, DType dtype) {
  return Tensor::Zeros(shape, dtype).value();
}

const std::vector<std::pair<int64_t, int64_t>>& RowShapes() {
  static const auto* shapes = new std::vector<std::pair<int64_t, int64_t>>{
      {1, 1}, {3, 7}, {17, 33}, {5, 257}, {5, 768}, {3, 769}, {9, 1000}, {2, 4099}, {2, 9000},
      {1, 25000}};
  return *shapes;
}

// The row kernels take 16-byte vectors when every row operand's base and stride
// allow it and cols is a multiple of the vector (kernels/cuda/common.cuh): the
// shapes above with cols % 8 == 0 take the vector path from the aligned test
// tensors, the others the scalar one. Rows of narrowed views reach the launchers
// as a base and a stride; RowView builds one: x's rows at element `offset` of
// rows of `stride` elements in a fresh buffer.
struct RowView {
  Tensor buffer;
  int64_t offset = 0, stride = 0;
  void* base() { return static_cast<char*>(buffer.raw_data()) + offset * DTypeSize(buffer.dtype()); }
};

RowView Spread(const Tensor& x, int64_t offset, int64_t stride) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  const size_t es = DTypeSize(x.dtype());
  RowView v{Tensor::Zeros({rows * stride + offset}, x.dtype()).value(), offset, stride};
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(v.base()) + r * stride * es,
                static_cast<const char*>(x.raw_data()) + r * cols * es, cols * es);
  }
  return v;
}

Tensor Gather(RowView& v, int64_t rows, int64_t cols) {
  Tensor out = Tensor::Zeros({rows, cols}, v.buffer.dtype()).value();
  const size_t es = DTypeSize(out.dtype());
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<char*>(out.raw_data()) + r * cols * es,
                static_cast<const char*>(v.base()) + r * v.stride * es, cols * es);
  }
  return out;
}

// (offset, stride) of row views of `cols`: the base one element off 16 bytes
// with a stride of whole vectors and the base aligned with a stride one element
// over (both the scalar path), and base and stride aligned with cols padded to
// a multiple of 8 (the vector path, with a scalar tail when cols % 8 != 0).
std::vector<std::pair<int64_t, int64_t>> NarrowedLayouts(int64_t cols) {
  return {{1, cols + 8}, {0, cols + 1}, {0, (cols + 7) / 8 * 8 + 8}};
}

// ------------------------------------------------------------ row kernels

TEST(CudaSim, SoftmaxForwardAndBackwardMatchCpu) {
  uint64_t seed = 1;
  for (DType dtype : kFloatDTypes) {
    for (auto [rows, cols] : RowShapes()) {
      const Tensor x = RandomTensor({rows, cols}, dtype, -8, 8, ++seed);
      const Tensor dy = RandomTensor({rows, cols}, dtype, -1, 1, ++seed);
      for (bool log : {false, true}) {
        const std::string what = Describe(log ? "LogSoftmax" : "Softmax", dtype, rows, cols);
        Tensor y = Empty({rows, cols}, dtype);
        RunBothOrders(what, {&y}, [&] {
          return sim::LaunchSoftmax(log, Code(dtype), Code(dtype), x.raw_data(), cols, y.raw_data(),
                                    cols, rows, cols, nullptr);
        });
        ZS_ASSERT_OK_AND_ASSIGN(Tensor want, log ? LogSoftmax(x) : Softmax(x));
        ExpectClose(y, want, GpuTol(dtype), what);
        Tensor dx = Empty({rows, cols}, dtype);
        RunBothOrders(what + " backward", {&dx}, [&] {
          return sim::LaunchSoftmaxBackward(log, Code(dtype), Code(dtype), want.raw_data(), cols,
                                            dy.raw_data(), cols, dx.raw_data(), cols, rows, cols,
                                            nullptr);
        });
        ZS_ASSERT_OK_AND_ASSIGN(Tensor dwant,
                                log ? LogSoftmaxBackward(want, dy) : SoftmaxBackward(want, dy));
        ExpectClose(dx, dwant, GpuTol(dtype), what + " backward");
      }
    }
  }
}

TEST(CudaSim, SoftmaxOfMaskedRowsAndInPlace) {
  const int64_t rows = 8, cols = 40;
  std::vector<float> v = RandomValues(rows * cols, -3, 3, 5);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = r + 1; c < cols; ++c)
      v[r * cols + c] = -std::numeric_limits<float>::infinity();
  }
  ZS_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromVector(v, {rows, cols}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Softmax(x));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor inout, Tensor::FromVector(v, {rows, cols}));
  RunBothOrders("masked softmax in place", {&inout}, [&] {
    return sim::LaunchSoftmax(false, 0, 0, inout.raw_data(), cols, inout.raw_data(), cols, rows,
                              cols, nullptr);
  });
  ExpectClose(inout, want, GpuTol(DType::kF32), "masked softmax in place");
}

TEST(CudaSim, LayerNormForwardBackwardAndParamGradsMatchCpu) {
  uint64_t seed = 100;
  for (DType dtype : kFloatDTypes) {
    for (auto [rows, cols] : RowShapes()) {
      const std::string what = Describe("LayerNorm", dtype, rows, cols);
      const Tensor x = RandomTensor({rows, cols}, dtype, -3, 3, ++seed);
      const Tensor dy = RandomTensor({rows, cols}, dtype, -1, 1, ++seed);
      const Tensor w = RandomTensor({cols}, DType::kF32, 0.5, 1.5, ++seed);
      const Tensor b = RandomTensor({cols}, DType::kF32, -0.5, 0.5, ++seed);
      Tensor y = Empty({rows, cols}, dtype), mean = Empty({rows}, DType::kF32),
             rstd = Empty({rows}, DType::kF32);
      RunBothOrders(what, {&y, &mean, &rstd}, [&] {
        return sim::LaunchLayerNormForward(
            Code(dtype), Code(dtype), x.raw_data(), cols, 0, w.raw_data(), 0, b.raw_data(), 1e-5f,
            y.raw_data(), cols, mean.data<float>(), rstd.data<float>(), rows, cols, nullptr);
      });
      Tensor y_cpu = Empty({rows, cols}, dtype), mean_cpu = Empty({rows}, DType::kF32),
             rstd_cpu = Empty({rows}, DType::kF32);
      ZS_ASSERT_OK(LayerNormForward(x, w, b, 1e-5, y_cpu, mean_cpu, rstd_cpu));
      ExpectClose(y, y_cpu, GpuTol(dtype), what);
      ExpectClose(mean, mean_cpu, GpuTol(DType::kF32), what + " mean");
      ExpectClose(rstd, rstd_cpu, GpuTol(DType::kF32), what + " rstd");

      // Backward from the CPU's statistics on both sides.
      const int64_t blocks = sim::LayerNormBackwardBlocks(rows);
      Tensor dx = Empty({rows, cols}, dtype), partials = Empty({blocks * 2 * cols}, DType::kF32);
      Tensor dw = Empty({cols}, DType::kF32), db = Empty({cols}, DType::kF32);
      RunBothOrders(what + " backward", {&dx, &partials}, [&] {
        return sim::LaunchLayerNormBackward(Code(dtype), Code(dtype), dy.raw_data(), cols,
                                            x.raw_data(), cols, mean_cpu.data<float>(),
                                            rstd_cpu.data<float>(), 0, w.raw_data(), dx.raw_data(),
                                            cols, partials.data<float>(), rows, cols, nullptr);
      });
      RunBothOrders(what + " param grads", {&dw, &db}, [&] {
        return sim::LaunchLayerNormParamGrads(partials.data<float>(), blocks, cols, 0,
                                              dw.raw_data(), 1, 0, db.raw_data(), 1, false,
                                              nullptr);
      });
      Tensor dx_cpu = Empty({rows, cols}, dtype), dw_cpu = Empty({cols}, DType::kF32),
             db_cpu = Empty({cols}, DType::kF32);
      ZS_ASSERT_OK(LayerNormBackward(dy, x, mean_cpu, rstd_cpu, w, dx_cpu, dw_cpu, db_cpu,
                                     GradMode::kOverwrite));
      ExpectClose(dx, dx_cpu, GpuTol(dtype), what + " dx");
      // Parameter gradients sum over rows: the tolerance grows with them.
      const Tol sum_tol{1e-4 * static_cast<double>(rows), 1e-4};
      ExpectClose(dw, dw_cpu, sum_tol, what + " dweight");
      ExpectClose(db, db_cpu, sum_tol, what + " dbias");
    }
  }
}

// weight and bias in bf16 / f16 (a mixed-precision model's), read by the
// kernels in their own dtype at any element offset (one element in: not
// 16-byte aligned, so the vector path reads them element by element): out,
// mean, rstd, dx and the partial sums bitwise those of the same values in f32.
TEST(CudaSim, LayerNormSixteenBitParamsGiveTheBitsOfTheirF32Cast) {
  uint64_t seed = 150;
  for (DType dtype : kFloatDTypes) {
    for (auto [pdtype, offset] : {std::pair<DType, int64_t>{DType::kBF16, 0}, {DType::kBF16, 1},
                                  {DType::kF16, 1}}) {
      for (auto [rows, cols] : RowShapes()) {
        const std::string what = Describe("LayerNorm", dtype, rows, cols) + " params " +
                                 Name(pdtype) + " at element " + std::to_string(offset);
        const Tensor x = RandomTensor({rows, cols}, dtype, -3, 3, ++seed);
        const Tensor dy = RandomTensor({rows, cols}, dtype, -1, 1, ++seed);
        const Tensor wbuf = RandomTensor({cols + offset}, pdtype, 0.5, 1.5, ++seed);
        const Tensor bbuf = RandomTensor({cols + offset}, pdtype, -0.5, 0.5, ++seed);
        const Tensor w = wbuf.Narrow(0, offset, cols).value();
        const Tensor b = bbuf.Narrow(0, offset, cols).value();
        const Tensor w32 = w.To(DType::kF32).value(), b32 = b.To(DType::kF32).value();
        auto forward = [&](const Tensor& wt, const Tensor& bt, Tensor& yo, Tensor& mo, Tensor& ro) {
          return sim::LaunchLayerNormForward(
              Code(dtype), Code(dtype), x.raw_data(), cols, Code(wt.dtype()), wt.raw_data(),
              Code(bt.dtype()), bt.raw_data(), 1e-5f, yo.raw_data(), cols, mo.data<float>(),
              ro.data<float>(), rows, cols, nullptr);
        };
        Tensor y = Empty({rows, cols}, dtype), mean = Empty({rows}, DType::kF32),
               rstd = Empty({rows}, DType::kF32);
        Tensor y32 = Empty({rows, cols}, dtype), mean32 = Empty({rows}, DType::kF32),
               rstd32 = Empty({rows}, DType::kF32);
        RunBothOrders(what, {&y, &mean, &rstd}, [&] { return forward(w, b, y, mean, rstd); });
        ASSERT_EQ(forward(w32, b32, y32, mean32, rstd32), 0)
            << what << ": " << zs_cuda_sim::LastError();
        EXPECT_TRUE(Bytes(y) == Bytes(y32)) << what;
        EXPECT_TRUE(Bytes(mean) == Bytes(mean32)) << what << " mean";
        EXPECT_TRUE(Bytes(rstd) == Bytes(rstd32)) << what << " rstd";

        const int64_t blocks = sim::LayerNormBackwardBlocks(rows);
        auto backward = [&](const Tensor& wt, Tensor& dxo, Tensor& po) {
          return sim::LaunchLayerNormBackward(
              Code(dtype), Code(dtype), dy.raw_data(), cols, x.raw_data(), cols,
              mean.data<float>(), rstd.data<float>(), Code(wt.dtype()), wt.raw_data(),
              dxo.raw_data(), cols, po.data<float>(), rows, cols, nullptr);
        };
        Tensor dx = Empty({rows, cols}, dtype), partials = Empty({blocks * 2 * cols}, DType::kF32);
        Tensor dx32 = Empty({rows, cols}, dtype);
        Tensor partials32 = Empty({blocks * 2 * cols}, DType::kF32);
        RunBothOrders(what + " backward", {&dx, &partials},
                      [&] { return backward(w, dx, partials); });
        ASSERT_EQ(backward(w32, dx32, partials32), 0) << what << ": " << zs_cuda_sim::LastError();
        EXPECT_TRUE(Bytes(dx) == Bytes(dx32)) << what << " dx";
        EXPECT_TRUE(Bytes(partials) == Bytes(partials32)) << what << " partials";
      }
    }
  }
}

TEST(CudaSim, LayerNormRefusesAParamDtypeThatIsNotAFloat) {
  const Tensor x = RandomTensor({2, 8}, DType::kF32, -1, 1, 1);
  Tensor y = Empty({2, 8}, DType::kF32);
  const std::vector<int32_t> ints(8, 1);
  EXPECT_EQ(sim::LaunchLayerNormForward(0, 0, x.raw_data(), 8, Code(DType::kI32), ints.data(), 0,
                                        nullptr, 1e-5f, y.raw_data(), 8, nullptr, nullptr, 2, 8,
                                        nullptr),
            1 /* cudaErrorInvalidValue */);
  EXPECT_EQ(sim::LaunchLayerNormBackward(0, 0, x.raw_data(), 8, x.raw_data(), 8, nullptr, nullptr,
                                         Code(DType::kI64), ints.data(), y.raw_data(), 8, nullptr,
                                         2, 8, nullptr),
            1 /* cudaErrorInvalidValue */);
}

TEST(CudaSim, CrossEntropyForwardAndBackwardMatchCpu) {
  uint64_t seed = 200;
  for (DType dtype : kFloatDTypes) {
    for (auto [rows, cols] : RowShapes()) {
      const std::string what = Describe("CrossEntropy", dtype, rows, cols);
      const Tensor logits = RandomTensor({rows, cols}, dtype, -6, 6, ++seed);
      std::vector<int64_t> t(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) t[r] = (r * 7919 + 3) % cols;
      if (rows > 2) t[1] = -100;  // ignored
      ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, Tensor::FromVector(t, {rows}, DType::kI64));
      Tensor losses = Empty({rows}, DType::kF32), lse = Empty({rows}, DType::kF32);
      RunBothOrders(what, {&losses, &lse}, [&] {
        return sim::LaunchCrossEntropyForward(
            Code(dtype), logits.raw_data(), cols, Code(DType::kI64), targets.raw_data(), -100,
            losses.data<float>(), lse.data<float>(), rows, cols, nullptr);
      });
      Tensor losses_cpu = Empty({rows}, DType::kF32), lse_cpu = Empty({rows}, DType::kF32);
      ZS_ASSERT_OK(CrossEntropyForward(logits, targets, losses_cpu, lse_cpu).status());
      ExpectClose(losses, losses_cpu, GpuTol(DType::kF32), what + " losses");
      ExpectClose(lse, lse_cpu, GpuTol(DType::kF32), what + " lse");

      const Tensor dloss = RandomTensor({rows}, DType::kF32, 0.5, 1.5, ++seed);
      Tensor dlogits = Empty({rows, cols}, dtype);
      RunBothOrders(what + " backward", {&dlogits}, [&] {
        return sim::LaunchCrossEntropyBackward(Code(dtype), Code(dtype), logits.raw_data(), cols,
                                               Code(DType::kI64), targets.raw_data(), -100,
                                               lse_cpu.data<float>(), dloss.data<float>(), 1,
                                               dlogits.raw_data(), cols, rows, cols, nullptr);
      });
      Tensor dlogits_cpu = Empty({rows, cols}, dtype);
      ZS_ASSERT_OK(CrossEntropyBackward(logits, targets, lse_cpu, dloss, dlogits_cpu));
      ExpectClose(dlogits, dlogits_cpu, GpuTol(dtype), what + " dlogits");
    }
  }
}

// Row kernels on narrowed views: where a base or stride is not 16-byte aligned
// the launchers must take the scalar path (a misaligned vector access fails the
// simulated launch, as it faults on the device), and a vector walk of a row
// with cols % 8 != 0 ends in scalar elements; all give the CPU's results.
TEST(CudaSim, RowKernelsOnNarrowedViewsMatchCpu) {
  uint64_t seed = 300;
  for (DType dtype : kFloatDTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 768}, {3, 1000}, {3, 769}}) {
      for (auto [offset, stride] : NarrowedLayouts(cols)) {
        const std::string what = Describe("narrowed", dtype, rows, cols) + " offset " +
                                 std::to_string(offset) + " stride " + std::to_string(stride);
        const Tensor x = RandomTensor({rows, cols}, dtype, -3, 3, ++seed);
        const Tensor dy = RandomTensor({rows, cols}, dtype, -1, 1, ++seed);
        RowView xv = Spread(x, offset, stride), dyv = Spread(dy, offset, stride);

        // LayerNorm forward and backward (dx and the partial sums).
        const Tensor w = RandomTensor({cols}, DType::kF32, 0.5, 1.5, ++seed);
        const Tensor b = RandomTensor({cols}, DType::kF32, -0.5, 0.5, ++seed);
        RowView yv = Spread(Empty({rows, cols}, dtype), offset, stride);
        Tensor mean = Empty({rows}, DType::kF32), rstd = Empty({rows}, DType::kF32);
        RunBothOrders(what + " LayerNorm", {&yv.buffer, &mean, &rstd}, [&] {
          return sim::LaunchLayerNormForward(Code(dtype), Code(dtype), xv.base(), stride,
                                             0, w.raw_data(), 0, b.raw_data(), 1e-5f, yv.base(),
                                             stride, mean.data<float>(), rstd.data<float>(), rows,
                                             cols, nullptr);
        });
        Tensor y_cpu = Empty({rows, cols}, dtype), mean_cpu = Empty({rows}, DType::kF32),
               rstd_cpu = Empty({rows}, DType::kF32);
        ZS_ASSERT_OK(LayerNormForward(x, w, b, 1e-5, y_cpu, mean_cpu, rstd_cpu));
        ExpectClose(Gather(yv, rows, cols), y_cpu, GpuTol(dtype), what + " LayerNorm");
        ExpectClose(rstd, rstd_cpu, GpuTol(DType::kF32), what + " LayerNorm rstd");
        const int64_t blocks = sim::LayerNormBackwardBlocks(rows);
        RowView dxv = Spread(Empty({rows, cols}, dtype), offset, stride);
        Tensor partials = Empty({blocks * 2 * cols}, DType::kF32);
        Tensor dw = Empty({cols}, DType::kF32), db = Empty({cols}, DType::kF32);
        RunBothOrders(what + " LayerNorm backward", {&dxv.buffer, &partials}, [&] {
          return sim::LaunchLayerNormBackward(
              Code(dtype), Code(dtype), dyv.base(), stride, xv.base(), stride,
              mean_cpu.data<float>(), rstd_cpu.data<float>(), 0, w.raw_data(), dxv.base(), stride,
              partials.data<float>(), rows, cols, nullptr);
        });
        ASSERT_EQ(sim::LaunchLayerNormParamGrads(partials.data<float>(), blocks, cols, 0,
                                                 dw.raw_data(), 1, 0, db.raw_data(), 1, false,
                                                 nullptr),
                  0);
        Tensor dx_cpu = Empty({rows, cols}, dtype), dw_cpu = Empty({cols}, DType::kF32),
               db_cpu = Empty({cols}, DType::kF32);
        ZS_ASSERT_OK(LayerNormBackward(dy, x, mean_cpu, rstd_cpu, w, dx_cpu, dw_cpu, db_cpu,
                                       GradMode::kOverwrite));
        ExpectClose(Gather(dxv, rows, cols), dx_cpu, GpuTol(dtype), what + " LayerNorm dx");
        const Tol sum_tol{1e-4 * static_cast<double>(rows), 1e-4};  // sums over rows
        ExpectClose(dw, dw_cpu, sum_tol, what + " LayerNorm dweight");
        ExpectClose(db, db_cpu, sum_tol, what + " LayerNorm dbias");

        // Softmax forward and backward.
        RowView sv = Spread(Empty({rows, cols}, dtype), offset, stride);
        RunBothOrders(what + " Softmax", {&sv.buffer}, [&] {
          return sim::LaunchSoftmax(false, Code(dtype), Code(dtype), xv.base(), stride, sv.base(),
                                    stride, rows, cols, nullptr);
        });
        ZS_ASSERT_OK_AND_ASSIGN(Tensor s_cpu, Softmax(x));
        ExpectClose(Gather(sv, rows, cols), s_cpu, GpuTol(dtype), what + " Softmax");
        RowView s_cpu_v = Spread(s_cpu, offset, stride);
        RowView dsv = Spread(Empty({rows, cols}, dtype), offset, stride);
        RunBothOrders(what + " Softmax backward", {&dsv.buffer}, [&] {
          return sim::LaunchSoftmaxBackward(false, Code(dtype), Code(dtype), s_cpu_v.base(),
                                            stride, dyv.base(), stride, dsv.base(), stride, rows,
                                            cols, nullptr);
        });
        ZS_ASSERT_OK_AND_ASSIGN(Tensor ds_cpu, SoftmaxBackward(s_cpu, dy));
        ExpectClose(Gather(dsv, rows, cols), ds_cpu, GpuTol(dtype), what + " Softmax backward");

        // Cross-entropy forward and backward.
        std::vector<int64_t> t(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) t[r] = (r * 7919 + 3) % cols;
        ZS_ASSERT_OK_AND_ASSIGN(Tensor targets, Tensor::FromVector(t, {rows}, DType::kI64));
        Tensor losses = Empty({rows}, DType::kF32), lse = Empty({rows}, DType::kF32);
        RunBothOrders(what + " CrossEntropy", {&losses, &lse}, [&] {
          return sim::LaunchCrossEntropyForward(Code(dtype), xv.base(), stride, Code(DType::kI64),
                                                targets.raw_data(), -100, losses.data<float>(),
                                                lse.data<float>(), rows, cols, nullptr);
        });
        Tensor losses_cpu = Empty({rows}, DType::kF32), lse_cpu = Empty({rows}, DType::kF32);
        ZS_ASSERT_OK(CrossEntropyForward(x, targets, losses_cpu, lse_cpu).status());
        ExpectClose(losses, losses_cpu, GpuTol(DType::kF32), what + " CrossEntropy losses");
        ExpectClose(lse, lse_cpu, GpuTol(DType::kF32), what + " CrossEntropy lse");
        const Tensor dloss = RandomTensor({rows}, DType::kF32, 0.5, 1.5, ++seed);
        RowView dlv = Spread(Empty({rows, cols}, dtype), offset, stride);
        RunBothOrders(what + " CrossEntropy backward", {&dlv.buffer}, [&] {
          return sim::LaunchCrossEntropyBackward(Code(dtype), Code(dtype), xv.base(), stride,
                                                 Code(DType::kI64), targets.raw_data(), -100,
                                                 lse_cpu.data<float>(), dloss.data<float>(), 1,
                                                 dlv.base(), stride, rows, cols, nullptr);
        });
        Tensor dl_cpu = Empty({rows, cols}, dtype);
        ZS_ASSERT_OK(CrossEntropyBackward(x, targets, lse_cpu, dloss, dl_cpu));
        ExpectClose(Gather(dlv, rows, cols), dl_cpu, GpuTol(dtype),
                    what + " CrossEntropy dlogits");
      }
    }
  }
}

// ------------------------------------------------------------ reductions

TEST(CudaSim, SumAllAndSumOfSquaresMatchCpu) {
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{70001}, int64_t{200003}}) {
      const Tensor x = RandomTensor({n}, dtype, -1, 1, static_cast<uint64_t>(n));
      for (bool square : {false, true}) {
        Tensor partials = Empty({sim::SumAllPartials(n)}, DType::kF32);
        double out = 0;
        std::vector<double> results;
        for (auto order : {zs_cuda_sim::Order::kForward, zs_cuda_sim::Order::kReverse}) {
          zs_cuda_sim::SetOrder(order);
          ASSERT_EQ(sim::LaunchSumAll(Code(dtype), x.raw_data(), n, square, partials.data<float>(),
                                      &out, nullptr),
                    0)
              << zs_cuda_sim::LastError();
          results.push_back(out);
        }
        zs_cuda_sim::SetOrder(zs_cuda_sim::Order::kForward);
        EXPECT_EQ(results[0], results[1]) << "SumAll order dependence";
        ZS_ASSERT_OK_AND_ASSIGN(double want, square ? SumOfSquares(x) : SumAll(x));
        EXPECT_NEAR(out, want, 1e-5 * static_cast<double>(n) * 1e-2 + 1e-5)
            << Name(dtype) << " n=" << n << " square=" << square;
      }
    }
  }
}

TEST(CudaSim, ReduceAlongEachAxisMatchesCpu) {
  uint64_t seed = 300;
  const std::vector<int64_t> shape{5, 67, 33};
  for (DType dtype : kFloatDTypes) {
    const Tensor x = RandomTensor(shape, dtype, -4, 4, ++seed);
    for (int64_t dim = 0; dim < 3; ++dim) {
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
      for (int64_t d = dim + 1; d < 3; ++d) inner *= shape[d];
      for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kMean, ReduceKind::kMax}) {
        const std::string what = std::string("Reduce ") + Name(dtype) + " kind " +
                                 std::to_string(static_cast<int>(kind)) + " dim " +
                                 std::to_string(dim);
        ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Reduce(kind, x, dim));
        Tensor out = Empty(std::vector<int64_t>(want.shape().begin(), want.shape().end()), dtype);
        RunBothOrders(what, {&out}, [&] {
          return sim::LaunchReduceAxis(static_cast<int>(kind), Code(dtype), Code(dtype),
                                       x.raw_data(), out.raw_data(), outer, shape[dim], inner,
                                       nullptr);
        });
        ExpectClose(out, want, GpuTol(dtype), what);
      }
    }
  }
}

// ------------------------------------------------------------ attention

struct AttentionCase {
  int64_t batch, heads, seq, dim;
  bool causal;
  int64_t kv_heads = 0;  // 0: heads (multi-head); else grouped-query
  int64_t KvHeads() const { return kv_heads == 0 ? heads : kv_heads; }
};

sim::AttentionOperand Operand(const Tensor& t) {
  sim::AttentionOperand o;
  o.data = t.raw_data();
  for (int64_t d = 0; d < t.dim(); ++d) o.stride[d] = t.stride(d);
  return o;
}

// Heads [first, first + n) of a fused [B, T, W, D] buffer as [B, n, T, D].
Tensor HeadsOf(const Tensor& fused, int64_t first, int64_t n) {
  return fused.Narrow(2, first, n).value().Permute({0, 2, 1, 3}).value();
}

// A case's operands: q, k, v as views of one fused [B, T, H + 2 Hkv, D]
// buffer (H query heads, then Hkv key and Hkv value heads), as the GPT's qkv
// projection lays them out ([B, T, 3, H, D] when Hkv = H) and Llama's with
// GQA; dout [B, H, T, D]; the launch dims.
struct AttentionViews {
  Tensor qkv, q, k, v, dout;
  sim::AttentionLaunchDims dims;
  int64_t W = 0;
};

AttentionViews MakeAttentionViews(const AttentionCase& c, DType dtype, uint64_t* seed) {
  AttentionViews a;
  const int64_t H = c.heads, Hkv = c.KvHeads();
  a.W = H + 2 * Hkv;
  a.qkv = RandomTensor({c.batch, c.seq, a.W, c.dim}, dtype, -1, 1, ++*seed);
  a.q = HeadsOf(a.qkv, 0, H);
  a.k = HeadsOf(a.qkv, H, Hkv);
  a.v = HeadsOf(a.qkv, H + Hkv, Hkv);
  a.dout = RandomTensor({c.batch, c.heads, c.seq, c.dim}, dtype, -1, 1, ++*seed);
  a.dims.batch = c.batch;
  a.dims.heads = c.heads;
  a.dims.kv_heads = Hkv;
  a.dims.seq = c.seq;
  a.dims.head_dim = c.dim;
  a.dims.scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  a.dims.causal = c.causal;
  return a;
}

TEST(CudaSim, AttentionForwardAndBackwardMatchCpu) {
  const std::vector<AttentionCase> cases{{1, 1, 1, 16, true},   {2, 3, 17, 32, true},
                                         {1, 2, 40, 64, false}, {1, 1, 33, 80, true},
                                         {1, 1, 9, 256, true},  {2, 1, 70, 64, true},
                                         // Grouped-query (Hkv 2, 3) and multi-query (Hkv 1).
                                         {2, 4, 17, 32, true, 2},  {1, 4, 40, 64, false, 1},
                                         {1, 6, 33, 80, true, 3}};
  uint64_t seed = 400;
  for (DType dtype : kFloatDTypes) {
    for (const AttentionCase& c : cases) {
      const std::string what = std::string("attention ") + Name(dtype) + " B" +
                               std::to_string(c.batch) + " H" + std::to_string(c.heads) + " T" +
                               std::to_string(c.seq) + " D" + std::to_string(c.dim) +
                               " Hkv" + std::to_string(c.KvHeads()) + (c.causal ? " causal" : "");
      const AttentionViews a = MakeAttentionViews(c, dtype, &seed);
      const Tensor &q = a.q, &k = a.k, &v = a.v, &dout = a.dout;
      const sim::AttentionLaunchDims& dims = a.dims;
      const int64_t H = c.heads, Hkv = c.KvHeads(), W = a.W;
      AttentionOptions options;
      options.causal = c.causal;
      ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs want, AttentionForward(q, k, v, options));
      Tensor out = Empty({c.batch, c.heads, c.seq, c.dim}, dtype);
      Tensor lse = Empty({c.batch, c.heads, c.seq}, DType::kF32);
      RunBothOrders(what, {&out, &lse}, [&] {
        return sim::LaunchAttentionForward(Code(dtype), dims, Operand(q), Operand(k), Operand(v),
                                           Operand(out), Operand(lse), nullptr);
      });
      ExpectClose(out, want.out, GpuTol(dtype), what + " out");
      ExpectClose(lse, want.lse, GpuTol(DType::kF32), what + " lse");

      ZS_ASSERT_OK_AND_ASSIGN(AttentionGrads grads,
                              AttentionBackward(dout, q, k, v, want.out, want.lse, options));
      // Gradients into one fused dqkv buffer, as the GPT's backward writes them.
      Tensor dqkv = Empty({c.batch, c.seq, W, c.dim}, dtype);
      const Tensor dq = HeadsOf(dqkv, 0, H), dk = HeadsOf(dqkv, H, Hkv), dv = HeadsOf(dqkv, H + Hkv, Hkv);
      Tensor delta = Empty({c.batch * c.heads * c.seq}, DType::kF32);
      RunBothOrders(what + " backward", {&dqkv, &delta}, [&] {
        return sim::LaunchAttentionBackward(
            Code(dtype), dims, Operand(dout), Operand(q), Operand(k), Operand(v), Operand(want.out),
            Operand(want.lse), Operand(dq), Operand(dk), Operand(dv), delta.data<float>(), nullptr);
      });
      const Tol tol = dtype == DType::kF32 ? Tol{1e-4, 1e-3} : GpuTol(dtype);
      // dk, dv sum the G = H / Hkv query heads of a group: G times the terms
      // of one head's sums, so G times the absolute part of the bound.
      const Tol group_tol{tol.atol * (H / Hkv), tol.rtol};
      ExpectClose(dq.Contiguous().value(), grads.dq, tol, what + " dq");
      ExpectClose(dk.Contiguous().value(), grads.dk, group_tol, what + " dk");
      ExpectClose(dv.Contiguous().value(), grads.dv, group_tol, what + " dv");
    }
  }
}

// Our tensor-core kernels (kernels/cuda/attention_tc.cu) against attention in
// double, within the bound derived in tests/kernels/attention_bound.h (their
// products on the emulated warp matrix API, tools/cuda/sim/include/mma.h):
// bf16 and f16, head dims 16 to 128, T across tile edges (1, 17, 64, 70,
// 130), causal and not, grouped- and multi-query, q/k/v as views of a fused
// qkv buffer and the gradients written into a fused dqkv buffer.
TEST(CudaSim, TensorCoreAttentionWithinTheDerivedBound) {
  const std::vector<AttentionCase> cases{{1, 2, 130, 64, true},    {1, 1, 64, 128, false},
                                         {1, 1, 1, 64, true},      {2, 4, 70, 64, true, 2},
                                         {1, 2, 17, 128, true, 1}, {1, 2, 70, 64, false},
                                         {1, 1, 33, 16, true},     {1, 2, 40, 80, false, 1},
                                         {1, 1, 65, 112, true}};
  uint64_t seed = 900;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const AttentionCase& c : cases) {
      const std::string what = std::string("tensor-core attention ") + Name(dtype) + " B" +
                               std::to_string(c.batch) + " H" + std::to_string(c.heads) + " T" +
                               std::to_string(c.seq) + " D" + std::to_string(c.dim) + " Hkv" +
                               std::to_string(c.KvHeads()) + (c.causal ? " causal" : "");
      SCOPED_TRACE(what);
      const AttentionViews a = MakeAttentionViews(c, dtype, &seed);
      const Tensor &q = a.q, &k = a.k, &v = a.v, &dout = a.dout;
      const sim::AttentionLaunchDims& dims = a.dims;
      const int64_t H = c.heads, Hkv = c.KvHeads(), W = a.W;
      Tensor out = Empty({c.batch, c.heads, c.seq, c.dim}, dtype);
      Tensor lse = Empty({c.batch, c.heads, c.seq}, DType::kF32);
      RunBothOrders(what, {&out, &lse}, [&] {
        return sim::LaunchAttentionForwardTc(Code(dtype), dims, Operand(q), Operand(k), Operand(v),
                                             Operand(out), Operand(lse), nullptr);
      });
      Tensor dqkv = Empty({c.batch, c.seq, W, c.dim}, dtype);
      const Tensor dq = HeadsOf(dqkv, 0, H), dk = HeadsOf(dqkv, H, Hkv), dv = HeadsOf(dqkv, H + Hkv, Hkv);
      Tensor delta = Empty({c.batch * c.heads * c.seq}, DType::kF32);
      RunBothOrders(what + " backward", {&dqkv, &delta}, [&] {
        return sim::LaunchAttentionBackwardTc(Code(dtype), dims, Operand(dout), Operand(q), Operand(k),
                                              Operand(v), Operand(out), Operand(lse), Operand(dq),
                                              Operand(dk), Operand(dv), delta.data<float>(), nullptr);
      });
      const testing::AttentionBound ref =
          testing::ReferenceAttention(q, k, v, dout, out, lse, dims.scale, c.causal, dtype);
      testing::ExpectWithinBound(out, ref.out, ref.out_bound, what + " out");
      testing::ExpectWithinBound(lse, ref.lse, ref.lse_bound, what + " lse");
      testing::ExpectWithinBound(dq, ref.dq, ref.dq_bound, what + " dq");
      testing::ExpectWithinBound(dk, ref.dk, ref.dk_bound, what + " dk");
      testing::ExpectWithinBound(dv, ref.dv, ref.dv_bound, what + " dv");
    }
  }
  // What the kernels do not take is refused, not run: f32, head dim 72, a
  // row stride that is not a whole number of 16-byte vectors.
  sim::AttentionLaunchDims dims;
  dims.batch = 1;
  dims.heads = 1;
  dims.seq = 8;
  dims.head_dim = 64;
  dims.scale = 0.125f;
  const Tensor x = RandomTensor({1, 1, 8, 64}, DType::kBF16, -1, 1, 7);
  Tensor o = Empty({1, 1, 8, 64}, DType::kBF16), l = Empty({1, 1, 8}, DType::kF32);
  EXPECT_EQ(sim::LaunchAttentionForwardTc(Code(DType::kF32), dims, Operand(x), Operand(x), Operand(x),
                                          Operand(o), Operand(l), nullptr),
            1);
  sim::AttentionLaunchDims d72 = dims;
  d72.head_dim = 72;
  EXPECT_EQ(sim::LaunchAttentionForwardTc(Code(DType::kBF16), d72, Operand(x), Operand(x), Operand(x),
                                          Operand(o), Operand(l), nullptr),
            1);
  sim::AttentionOperand odd = Operand(x);
  odd.stride[2] = 68;  // 136 bytes: not a whole number of 16-byte vectors
  EXPECT_EQ(sim::LaunchAttentionForwardTc(Code(DType::kBF16), dims, odd, Operand(x), Operand(x),
                                          Operand(o), Operand(l), nullptr),
            1);
  // The stride of a size-1 dim is never used (B = H = 1 here): any value runs,
  // as kernels/attention.cc's DescribeCall lets such a call through.
  sim::AttentionOperand unused = Operand(x);
  unused.stride[0] = 13;
  unused.stride[1] = 7;
  EXPECT_EQ(sim::LaunchAttentionForwardTc(Code(DType::kBF16), dims, unused, Operand(x), Operand(x),
                                          Operand(o), Operand(l), nullptr),
            0)
      << zs_cuda_sim::LastError();
}

// ------------------------------------------------------------ elementwise

TEST(CudaSim, CastFillUnaryBinaryAffineAndPowMatchCpu) {
  const int64_t n = 4099;
  uint64_t seed = 500;
  for (DType in : kFloatDTypes) {
    const Tensor x = RandomTensor({n}, in, 0.25, 3, ++seed);
    const Tensor y = RandomTensor({n}, in, 0.25, 3, ++seed);
    for (DType out : kFloatDTypes) {
      const std::string pair = Name(in) + "->" + Name(out);
      Tensor got = Empty({n}, out);
      RunBothOrders("cast " + pair, {&got}, [&] {
        return sim::LaunchCast(Code(in), Code(out), x.raw_data(), got.raw_data(), n, nullptr);
      });
      Tensor want = Empty({n}, out);
      ZS_ASSERT_OK(Cast(x, want));
      ExpectClose(got, want, kExact, "cast " + pair);
      if (in != out && in != DType::kF32) {
        // The elementwise launchers take equal dtypes or f32 in, 16-bit out
        // (elementwise.cu's DispatchFloatPair); the op entries cast first.
        EXPECT_EQ(
            sim::LaunchUnary(0, Code(in), Code(out), x.raw_data(), got.raw_data(), n, nullptr), 1)
            << pair;
        continue;
      }

      for (int op = 0; op <= static_cast<int>(UnaryOp::kSilu); ++op) {
        const std::string what = "unary " + std::to_string(op) + " " + pair;
        RunBothOrders(what, {&got}, [&] {
          return sim::LaunchUnary(op, Code(in), Code(out), x.raw_data(), got.raw_data(), n,
                                  nullptr);
        });
        ZS_ASSERT_OK(Unary(static_cast<UnaryOp>(op), x, want));
        ExpectClose(got, want, kExact, what);
      }
      for (int op = 0; op <= static_cast<int>(BinaryOp::kDiv); ++op) {
        const std::string what = "binary " + std::to_string(op) + " " + pair;
        RunBothOrders(what, {&got}, [&] {
          return sim::LaunchBinary(op, Code(in), Code(out), x.raw_data(), y.raw_data(),
                                   got.raw_data(), n, nullptr);
        });
        ZS_ASSERT_OK(Binary(static_cast<BinaryOp>(op), x, y, want));
        ExpectClose(got, want, kExact, what);
      }
      RunBothOrders("affine " + pair, {&got}, [&] {
        return sim::LaunchAffine(Code(in), Code(out), x.raw_data(), got.raw_data(), 1.5f, -0.25f, n,
                                 nullptr);
      });
      ZS_ASSERT_OK(Affine(x, 1.5, -0.25, want));
      ExpectClose(got, want, kExact, "affine " + pair);
      for (float p : {2.0f, 0.5f, -1.0f, 3.0f}) {
        RunBothOrders("pow " + pair, {&got}, [&] {
          return sim::LaunchPowScalar(Code(in), Code(out), x.raw_data(), got.raw_data(), p, n,
                                      nullptr);
        });
        ZS_ASSERT_OK(PowScalar(x, p, want));
        ExpectClose(got, want, kExact, "pow " + std::to_string(p) + " " + pair);
      }
    }
    Tensor filled = Empty({n}, in);
    RunBothOrders("fill", {&filled},
                  [&] { return sim::LaunchFill(Code(in), filled.raw_data(), n, 0.1f, nullptr); });
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Tensor::Full({n}, 0.1f, in));
    ExpectClose(filled, want, kExact, "fill");
  }
}

// The residual add and the other elementwise launches take 16-byte packs when
// every buffer is aligned (above, with n % 8 = 3 left to the scalar tail) and
// the scalar path when any one is not: here a, b or y one element off.
TEST(CudaSim, ElementwiseOnMisalignedBuffersMatchesCpu) {
  uint64_t seed = 600;
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {1, 7, 4099}) {
      const Tensor a = RandomTensor({1, n}, dtype, 0.25, 3, ++seed);
      const Tensor b = RandomTensor({1, n}, dtype, 0.25, 3, ++seed);
      Tensor add_want = Empty({1, n}, dtype), exp_want = Empty({1, n}, dtype);
      ZS_ASSERT_OK(Binary(BinaryOp::kAdd, a, b, add_want));
      ZS_ASSERT_OK(Unary(UnaryOp::kExp, a, exp_want));
      for (int off = 0; off < 3; ++off) {
        const std::string what = Describe("misaligned", dtype, 1, n) + " operand " +
                                 std::to_string(off);
        RowView av = Spread(a, off == 0 ? 1 : 0, n + 8), bv = Spread(b, off == 1 ? 1 : 0, n + 8);
        RowView yv = Spread(Empty({1, n}, dtype), off == 2 ? 1 : 0, n + 8);
        RunBothOrders(what + " add", {&yv.buffer}, [&] {
          return sim::LaunchBinary(static_cast<int>(BinaryOp::kAdd), Code(dtype), Code(dtype),
                                   av.base(), bv.base(), yv.base(), n, nullptr);
        });
        ExpectClose(Gather(yv, 1, n), add_want, kExact, what + " add");
        // The unary: x one element off, or (operand 2) y.
        RowView ev = Spread(Empty({1, n}, dtype), off == 2 ? 1 : 0, n + 8);
        RowView ax = Spread(a, off == 2 ? 0 : 1, n + 8);
        RunBothOrders(what + " exp", {&ev.buffer}, [&] {
          return sim::LaunchUnary(static_cast<int>(UnaryOp::kExp), Code(dtype), Code(dtype),
                                  ax.base(), ev.base(), n, nullptr);
        });
        ExpectClose(Gather(ev, 1, n), exp_want, kExact, what + " exp");
      }
    }
  }
}

TEST(CudaSim, DropoutMaskIsTheCpuMask) {
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{1027}, int64_t{40001}}) {
      for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{1} << 33}) {
        const Tensor x = RandomTensor({n}, dtype, -2, 2, static_cast<uint64_t>(n) + offset);
        const PhiloxStream stream{1234, offset};
        const DropoutParams dp = MakeDropoutParams(0.1);
        Tensor got = Empty({n}, dtype);
        RunBothOrders("dropout", {&got}, [&] {
          return sim::LaunchDropout(Code(dtype), x.raw_data(), got.raw_data(), n, stream.seed,
                                    stream.offset, dp.keep_prob, dp.scale, false, nullptr);
        });
        ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Dropout(x, 0.1, stream));
        ExpectClose(got, want, kExact, std::string("dropout ") + Name(dtype));
      }
    }
  }
}

TEST(CudaSim, EmbeddingForwardMatchesCpu) {
  for (DType dtype : kFloatDTypes) {
    const int64_t vocab = 301, cols = 77, rows = 45;
    const Tensor w = RandomTensor({vocab, cols}, dtype, -1, 1, 7);
    std::vector<int64_t> ids(rows);
    for (int64_t i = 0; i < rows; ++i) ids[i] = (i * 131 + 11) % vocab;
    ZS_ASSERT_OK_AND_ASSIGN(Tensor idt, Tensor::FromVector(ids, {rows}, DType::kI64));
    Tensor got = Empty({rows, cols}, dtype);
    RunBothOrders("embedding", {&got}, [&] {
      return sim::LaunchEmbeddingForward(Code(dtype), Code(dtype), w.raw_data(), cols,
                                         Code(DType::kI64), idt.raw_data(), vocab, got.raw_data(), cols,
                                         rows, cols, nullptr);
    });
    ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Embedding(w, idt));
    ExpectClose(got, want, kExact, std::string("embedding ") + Name(dtype));
  }
}

// The device range check: the first failing position and its value in the
// slot (the slot keeps an earlier failure), bad ids sanitized; a bad id
// gathers a zero row.
TEST(CudaSim, EmbeddingIdCheckFindsTheFirstBadId) {
  const int64_t vocab = 50, n = 700;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7) % vocab);
  ids[613] = -100;  // ignore_index: fine when allowed
  ids[401] = 50;
  ids[650] = -3;
  ZS_ASSERT_OK_AND_ASSIGN(Tensor idt, Tensor::FromVector(ids, {n}, DType::kI32));
  for (bool allow_ignore : {false, true}) {
    Tensor slot = Empty({3}, DType::kI64);
    Tensor sanitized = Empty({n}, DType::kI64);
    std::memset(slot.raw_data(), 0, 24);
    RunBothOrders("check ids", {&slot, &sanitized}, [&] {
      return sim::LaunchCheckIds(Code(DType::kI32), idt.raw_data(), n, vocab, allow_ignore, -100, 4,
                                 static_cast<int64_t*>(slot.raw_data()),
                                 static_cast<int64_t*>(sanitized.raw_data()), nullptr);
    });
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> got, slot.ToVector<int64_t>());
    EXPECT_EQ(got, (std::vector<int64_t>{5, 401, 50}));
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> clean, sanitized.ToVector<int64_t>());
    EXPECT_EQ(clean[401], -100);
    EXPECT_EQ(clean[650], -100);
    EXPECT_EQ(clean[613], -100);
    EXPECT_EQ(clean[3], 21);
  }
  // A slot already holding a failure keeps it.
  Tensor slot = Empty({3}, DType::kI64);
  const int64_t earlier[3] = {2, 9, 99};
  std::memcpy(slot.raw_data(), earlier, sizeof(earlier));
  RunBothOrders("check ids, slot taken", {&slot}, [&] {
    return sim::LaunchCheckIds(Code(DType::kI32), idt.raw_data(), n, vocab, false, -100, 4,
                               static_cast<int64_t*>(slot.raw_data()), nullptr, nullptr);
  });
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> kept, slot.ToVector<int64_t>());
  EXPECT_EQ(kept, (std::vector<int64_t>{2, 9, 99}));
  // The gather writes zeros for the bad ids and never reads past the table.
  const Tensor w = RandomTensor({vocab, 3}, DType::kF32, -1, 1, 5);
  Tensor out = Empty({n, 3}, DType::kF32);
  RunBothOrders("gather with bad ids", {&out}, [&] {
    return sim::LaunchEmbeddingForward(Code(DType::kF32), Code(DType::kF32), w.raw_data(), 3,
                                       Code(DType::kI32), idt.raw_data(), vocab, out.raw_data(), 3, n, 3,
                                       nullptr);
  });
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> rows, out.ToVector<float>());
  EXPECT_EQ(rows[401 * 3], 0.0f);
  EXPECT_EQ(rows[650 * 3 + 2], 0.0f);
}

// The backward's device sort and scatter-add against the CPU twin, bit for
// bit: within one tile of the sort (45 ids) and across tiles with the global
// merge passes (4500 ids: 8192 keys, 4 tiles), with many repeats of each id.
TEST(CudaSim, EmbeddingBackwardIsTheCpuSumBitForBit) {
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {45, 4500}) {
      const int64_t vocab = 37, cols = 3;
      std::vector<int64_t> ids(n);
      for (int64_t i = 0; i < n; ++i) ids[i] = (i * i * 13 + i * 5 + 3) % vocab;
      ZS_ASSERT_OK_AND_ASSIGN(Tensor idt, Tensor::FromVector(ids, {n}, DType::kI64));
      const Tensor dout = RandomTensor({n, cols}, dtype, -1, 1, 11);
      const Tensor start = RandomTensor({vocab, cols}, dtype, -1, 1, 12);
      Tensor got = Empty({vocab, cols}, dtype);
      Tensor keys = Empty({sim::EmbeddingSortKeys(n)}, DType::kI64);
      std::memcpy(got.raw_data(), start.raw_data(), static_cast<size_t>(start.nbytes()));
      const std::string what = "embedding backward " + Name(dtype) + " n " + std::to_string(n);
      RunBothOrders(what, {&got, &keys}, [&] {
        return sim::LaunchEmbeddingBackward(Code(dtype), Code(dtype), dout.raw_data(), cols, Code(DType::kI64),
                                            idt.raw_data(), n, vocab, static_cast<uint64_t*>(keys.raw_data()),
                                            got.raw_data(), cols, cols, nullptr);
      });
      ZS_ASSERT_OK_AND_ASSIGN(Tensor want, start.Clone());
      ZS_ASSERT_OK(EmbeddingBackward(dout, idt, want, GradMode::kAccumulate));
      ExpectClose(got, want, kExact, what);
    }
  }
}

// ------------------------------------------------------------ copies

TEST(CudaSim, FlatCopiesAndStridedCopiesAreExact) {
  // FSDP's pack: pieces of odd sizes and alignments into one flat buffer.
  std::vector<std::vector<char>> pieces;
  std::vector<char> flat(100000, 0);
  std::vector<sim::FlatCopy> copies;
  int64_t at = 0, max_bytes = 0;
  for (int i = 0; i < 37; ++i) {
    const int64_t bytes = 1 + (i * 997) % 3001;
    pieces.emplace_back(static_cast<size_t>(bytes));
    for (int64_t b = 0; b < bytes; ++b) pieces.back()[b] = static_cast<char>((b * 31 + i) & 0x7f);
    copies.push_back({pieces.back().data(), flat.data() + at, bytes});
    at += bytes + (i % 3);
    max_bytes = std::max(max_bytes, bytes);
  }
  ASSERT_LT(at, static_cast<int64_t>(flat.size()));
  ASSERT_EQ(
      sim::LaunchFlatCopies(copies.data(), static_cast<int64_t>(copies.size()), max_bytes, nullptr),
      0)
      << zs_cuda_sim::LastError();
  for (size_t i = 0; i < copies.size(); ++i) {
    ASSERT_EQ(std::memcmp(copies[i].dst, pieces[i].data(), static_cast<size_t>(copies[i].bytes)), 0)
        << "piece " << i;
  }

  // A transposed, narrowed view copied into a contiguous tensor of another dtype.
  const Tensor src = RandomTensor({13, 9, 21}, DType::kF32, -3, 3, 9);
  const Tensor view = src.Permute({2, 0, 1}).value().Narrow(0, 2, 15).value();
  ZS_ASSERT_OK_AND_ASSIGN(Tensor contiguous, view.Contiguous());
  for (DType dst_dtype : kFloatDTypes) {
    Tensor dst = Empty(std::vector<int64_t>(view.shape().begin(), view.shape().end()), dst_dtype);
    sim::StridedCopyArgs a;
    a.ndim = static_cast<int>(view.dim());
    a.numel = view.numel();
    for (int64_t d = 0; d < view.dim(); ++d) {
      a.sizes[d] = view.size(d);
      a.src_strides[d] = view.stride(d);
      a.dst_strides[d] = dst.stride(d);
    }
    a.src_dtype = Code(DType::kF32);
    a.dst_dtype = Code(dst_dtype);
    a.src = view.raw_data();
    a.dst = dst.raw_data();
    sim::CollapseDims(a);
    RunBothOrders("strided copy", {&dst}, [&] { return sim::LaunchStridedCopy(a, nullptr); });
    Tensor want = Empty(std::vector<int64_t>(view.shape().begin(), view.shape().end()), dst_dtype);
    ZS_ASSERT_OK(Cast(contiguous, want));
    ExpectClose(dst, want, kExact, std::string("strided copy to ") + Name(dst_dtype));
  }
}

// Tensor::Fill's kernel: every element of a strided view set to the value's
// bits, the elements outside the view untouched.
TEST(CudaSim, StridedFillSetsTheViewOnly) {
  Tensor buf = Empty({6, 5}, DType::kBF16);
  std::memset(buf.raw_data(), 0x11, static_cast<size_t>(buf.nbytes()));
  sim::StridedCopyArgs a;
  a.ndim = 2;
  a.numel = 6 * 2;
  a.sizes[0] = 6;
  a.sizes[1] = 2;
  a.dst_strides[0] = 5;
  a.dst_strides[1] = 2;  // columns 0 and 2
  a.dst_dtype = a.src_dtype = Code(DType::kBF16);
  a.dst = buf.raw_data();
  RunBothOrders("strided fill", {&buf}, [&] { return sim::LaunchStridedFill(a, 0x3f80, nullptr); });
  const uint16_t* v = static_cast<const uint16_t*>(buf.raw_data());
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 5; ++c) {
      EXPECT_EQ(v[r * 5 + c], (c == 0 || c == 2) ? 0x3f80 : 0x1111) << r << ", " << c;
    }
  }
}

// The step's device scalars: the mean loss of the valid rows, the clipping
// factor, and the scale by it, both orders, against the host arithmetic.
TEST(CudaSim, DeviceScalarsMatchTheHostArithmetic) {
  const int64_t rows = 1000;
  std::vector<float> loss(rows);
  std::vector<int64_t> targets(rows);
  double sum = 0;
  int64_t valid = 0;
  for (int64_t r = 0; r < rows; ++r) {
    loss[r] = 0.001f * static_cast<float>((r * 37) % 1000);
    targets[r] = r % 7 == 3 ? -100 : r % 50;
    if (targets[r] != -100) {
      sum += loss[r];
      ++valid;
    }
  }
  ZS_ASSERT_OK_AND_ASSIGN(Tensor lt, Tensor::FromVector(loss, {rows}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tt, Tensor::FromVector(targets, {rows}, DType::kI64));
  Tensor out = Empty({2}, DType::kF32);
  float* o = static_cast<float*>(out.raw_data());
  RunBothOrders("mean of valid rows", {&out}, [&] {
    return sim::LaunchMeanOfValidRows(static_cast<const float*>(lt.raw_data()), Code(DType::kI64), tt.raw_data(),
                                      rows, -100, o, o + 1, nullptr);
  });
  // Another order of double additions of f32 values: within a few ulps of
  // double, far below f32's rounding, so the f32 result is the host's unless
  // the sum sits on a rounding boundary (it does not here: checked exactly).
  EXPECT_EQ(o[0], static_cast<float>(sum / static_cast<double>(valid)));
  EXPECT_EQ(o[1], static_cast<float>(1.0 / static_cast<double>(valid)));
  // Clipping: total 16 (norm 4), max_norm 1: factor f32(1 / (4 + 1e-6)).
  Tensor total = Empty({1}, DType::kF32);
  *static_cast<float*>(total.raw_data()) = 16.0f;
  Tensor norm = Empty({1}, DType::kI64);
  Tensor factor = Empty({1}, DType::kF32);
  RunBothOrders("clip factor", {&norm, &factor}, [&] {
    return sim::LaunchClipFactor(static_cast<const float*>(total.raw_data()), false, 1.0,
                                 static_cast<double*>(norm.raw_data()), static_cast<float*>(factor.raw_data()),
                                 nullptr);
  });
  EXPECT_EQ(*static_cast<const double*>(norm.raw_data()), 4.0);
  const float f = static_cast<float>(1.0 / (4.0 + 1e-6));
  EXPECT_EQ(*static_cast<const float*>(factor.raw_data()), f);
  const Tensor x = RandomTensor({3000}, DType::kF32, -1, 1, 3);
  Tensor y = Empty({3000}, DType::kF32);
  std::memcpy(y.raw_data(), x.raw_data(), static_cast<size_t>(x.nbytes()));
  RunBothOrders("scale by device scalar", {&y}, [&] {
    return sim::LaunchScaleByDeviceScalar(Code(DType::kF32), y.raw_data(), 3000,
                                          static_cast<const float*>(factor.raw_data()), nullptr);
  });
  ZS_ASSERT_OK_AND_ASSIGN(Tensor want, Affine(x, f, 0.0));
  ExpectClose(y, want, kExact, "scale by the clip factor");
}

TEST(CudaSim, CollectiveWidenAndNarrowAreExact) {
  const int64_t n = 3001;
  const Tensor x = RandomTensor({n}, DType::kF32, -100, 100, 11);
  for (auto [type, dtype] : {std::pair{sim::ConvertType::kBF16, DType::kBF16},
                             std::pair{sim::ConvertType::kF16, DType::kF16}}) {
    Tensor narrow = Empty({n}, dtype), wide = Empty({n}, DType::kF32);
    RunBothOrders("narrow", {&narrow}, [&] {
      return sim::LaunchNarrow(type, x.data<float>(), narrow.raw_data(), n, nullptr);
    });
    Tensor want = Empty({n}, dtype);
    ZS_ASSERT_OK(Cast(x, want));
    ExpectClose(narrow, want, kExact, "narrow");
    RunBothOrders("widen", {&wide}, [&] {
      return sim::LaunchWiden(type, narrow.raw_data(), wide.data<float>(), n, nullptr);
    });
    ExpectClose(wide, want, kExact, "widen");
  }
}

// ------------------------------------------------------------ optimizer

TEST(CudaSim, FusedAdamWStepIsTheCpuStepBitForBit) {
  const int64_t n = 5003;
  const optim::AdamScalars s = optim::MakeAdamScalars(optim::AdamHyper{}, 3, 1e-3, 0.1, 0.5);
  sim_optim::AdamScalars ss;
  static_assert(sizeof(ss) == sizeof(s));
  std::memcpy(&ss, &s, sizeof(s));
  for (DType grad_dtype : kFloatDTypes) {
    std::vector<float> p = RandomValues(n, -1, 1, 1), m = RandomValues(n, -0.1f, 0.1f, 2),
                       v = RandomValues(n, 0, 0.01f, 3);
    const Tensor g = RandomTensor({n}, grad_dtype, -1, 1, 4);
    const std::vector<double> gd = ToDoubles(g);
    std::vector<float> pw = p, mw = m, vw = v;
    for (int64_t i = 0; i < n; ++i)
      optim::AdamWUpdate(pw[i], static_cast<float>(gd[i]), mw[i], vw[i], s);
    Tensor copy = Empty({n}, DType::kBF16);
    ASSERT_EQ(sim_optim::cuda::LaunchAdamStep(true, ss, p.data(), g.raw_data(), Code(grad_dtype),
                                              m.data(), v.data(), copy.raw_data(),
                                              Code(DType::kBF16), n, nullptr),
              0)
        << zs_cuda_sim::LastError();
    EXPECT_EQ(std::memcmp(p.data(), pw.data(), n * sizeof(float)), 0) << "param";
    EXPECT_EQ(std::memcmp(m.data(), mw.data(), n * sizeof(float)), 0) << "exp_avg";
    EXPECT_EQ(std::memcmp(v.data(), vw.data(), n * sizeof(float)), 0) << "exp_avg_sq";
    ZS_ASSERT_OK_AND_ASSIGN(Tensor pt, Tensor::FromVector(pw, {n}));
    Tensor want = Empty({n}, DType::kBF16);
    ZS_ASSERT_OK(Cast(pt, want));
    ExpectClose(copy, want, kExact, "bf16 param copy");
  }
}

// The SGD step of the vision job on GPUs against SgdStep on the CPU (its
// vectorised kernel): the same per-element math without FMA, so the same
// bits; a first step (the buffer starts as the gradient) and a later one,
// nesterov and plain momentum, no momentum, weight decay, a grad scale.
TEST(CudaSim, FusedSgdStepIsTheCpuStepBitForBit) {
  const int64_t n = 5003;
  for (DType grad_dtype : kFloatDTypes) {
    for (const optim::SgdOptions& o : {optim::SgdOptions{.momentum = 0.9, .nesterov = true},
                                       optim::SgdOptions{.momentum = 0.8, .dampening = 0.1},
                                       optim::SgdOptions{}}) {
      const std::string what = o.ToString() + " grad " + Name(grad_dtype);
      const std::vector<optim::ParamGroup> groups = {optim::ParamGroup::Whole(n, 0.05, 5e-4)};
      ZS_ASSERT_OK_AND_ASSIGN(Tensor p_cpu, Tensor::FromVector(RandomValues(n, -1, 1, 1), {n}));
      ZS_ASSERT_OK_AND_ASSIGN(optim::SgdState state, optim::SgdState::Create(n, o));
      std::vector<float> p = p_cpu.ToVector<float>().value();
      std::vector<float> buf(static_cast<size_t>(n), 0.0f);
      for (int step = 0; step < 2; ++step) {
        const Tensor g = RandomTensor({n}, grad_dtype, -1, 1, 10 + step);
        Tensor copy_cpu = Empty({n}, DType::kBF16), copy = Empty({n}, DType::kBF16);
        const optim::SgdScalars s = optim::MakeSgdScalars({o.momentum, o.dampening, o.nesterov}, step == 0, 0.05,
                                                          5e-4, 0.5);
        ZS_ASSERT_OK(optim::SgdStep(o, groups, p_cpu, g, state, {.grad_scale = 0.5, .param_copy = copy_cpu}));
        sim_optim::SgdScalars ss;
        static_assert(sizeof(ss) == sizeof(s));
        std::memcpy(&ss, &s, sizeof(s));
        ASSERT_EQ(sim_optim::cuda::LaunchSgdStep(ss, p.data(), g.raw_data(), Code(grad_dtype),
                                                 o.momentum != 0 ? buf.data() : nullptr, copy.raw_data(),
                                                 Code(DType::kBF16), n, nullptr),
                  0)
            << zs_cuda_sim::LastError();
        const std::vector<float> pw = p_cpu.ToVector<float>().value();
        EXPECT_EQ(std::memcmp(p.data(), pw.data(), n * sizeof(float)), 0) << what << " step " << step << " param";
        if (o.momentum != 0) {
          const std::vector<float> bw = state.momentum_buffer.ToVector<float>().value();
          EXPECT_EQ(std::memcmp(buf.data(), bw.data(), n * sizeof(float)), 0) << what << " step " << step << " buffer";
        }
        ExpectClose(copy, copy_cpu, kExact, what + " bf16 param copy");
      }
    }
  }
}

// ------------------------------------------------------------ image kernels
// Our convolution and BatchNorm kernels (the CUDA path where cuDNN does not
// run: the simulator, or CudnnConvPath::kOwn) against the CPU twins.

std::vector<int64_t> Dims(const Shape& s) { return {s.begin(), s.end()}; }

Tensor Abs(const Tensor& t) {
  std::vector<float> v = t.ToVector<float>().value();
  for (float& e : v) e = std::fabs(e);
  return Tensor::FromVector(v, t.shape()).value();
}

// |got - want| <= 2 gamma_k |terms| element by element, gamma_k = k u / (1 - k u)
// (u = 2^-24): two fp32 sums of the same k rounded terms in any two orders
// each lie within gamma_k sum|terms| of the exact sum (Higham, Accuracy and
// Stability, 3.1). `terms` is the same computation on |operands|.
void ExpectWithinSumBound(const Tensor& got, const Tensor& want, const Tensor& terms, int64_t k,
                          const std::string& what) {
  const double ku = static_cast<double>(k) * std::ldexp(1.0, -24), gamma = ku / (1 - ku);
  const std::vector<double> g = ToDoubles(got), w = ToDoubles(want), t = ToDoubles(terms);
  ASSERT_EQ(g.size(), w.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double bound = 2 * gamma * t[i];
    if (!(std::fabs(g[i] - w[i]) <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: " << g[i] << " vs " << w[i] << ", bound " << bound;
    }
  }
}

TEST(CudaSim, Conv2dEveryPassMatchesCpu) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 8}, {4, 3, 3, 3}, {.stride = {2, 1}, .padding = {1, 1}}},
      {{2, 6, 7, 7}, {6, 2, 3, 3}, {.padding = {2, 2}, .dilation = {2, 2}, .groups = 3}},
      {{3, 4, 5, 6}, {5, 4, 1, 1}, {.stride = {2, 2}}},
      {{1, 2, 4, 4}, {3, 2, 4, 4}, {}},  // 1x1 output
  };
  uint64_t seed = 700;
  for (const Case& k : cases) {
    const std::string what = "Conv2d x" + ShapeToString(k.x) + " w" + ShapeToString(k.w) + " " + k.o.ToString();
    const Tensor x = RandomTensor(k.x, DType::kF32, -1, 1, ++seed), w = RandomTensor(k.w, DType::kF32, -1, 1, ++seed);
    const Tensor b = RandomTensor({k.w[0]}, DType::kF32, -1, 1, ++seed);
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y_cpu, Conv2dForward(x, w, b, k.o));
    ZS_ASSERT_OK_AND_ASSIGN(Tensor y_terms, Conv2dForward(Abs(x), Abs(w), Abs(b), k.o));
    ::zeroshard_sim::Conv2dGeometry g{};
    g.n = k.x[0], g.c = k.x[1], g.h = k.x[2], g.w = k.x[3], g.o = k.w[0], g.kh = k.w[2], g.kw = k.w[3];
    g.oh = y_cpu.size(2), g.ow = y_cpu.size(3);
    g.sh = k.o.stride[0], g.sw = k.o.stride[1], g.ph = k.o.padding[0], g.pw = k.o.padding[1];
    g.dh = k.o.dilation[0], g.dw = k.o.dilation[1], g.groups = k.o.groups;
    Tensor y = Empty(Dims(y_cpu.shape()), DType::kF32);
    RunBothOrders(what, {&y}, [&] {
      return sim::LaunchConv2dForward(g, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(), nullptr);
    });
    ExpectWithinSumBound(y, y_cpu, y_terms, g.taps() + 1, what + " y");  // the taps and the bias

    // Backward: dx written; dweight and dbias added to ones.
    const Tensor dy = RandomTensor(y_cpu.shape(), DType::kF32, -1, 1, ++seed);
    Tensor dx_cpu = Empty(Dims(k.x), DType::kF32), dw_cpu = Empty(Dims(k.w), DType::kF32), db_cpu = Empty({k.w[0]}, DType::kF32);
    ZS_ASSERT_OK(dw_cpu.Fill(1));
    ZS_ASSERT_OK(db_cpu.Fill(1));
    ZS_ASSERT_OK(Conv2dBackward(dy, x, w, k.o, dx_cpu, dw_cpu, db_cpu, GradMode::kAccumulate));
    Tensor dx_terms = Empty(Dims(k.x), DType::kF32), dw_terms = Empty(Dims(k.w), DType::kF32), db_terms = Empty({k.w[0]}, DType::kF32);
    ZS_ASSERT_OK(dw_terms.Fill(1));
    ZS_ASSERT_OK(db_terms.Fill(1));
    ZS_ASSERT_OK(Conv2dBackward(Abs(dy), Abs(x), Abs(w), k.o, dx_terms, dw_terms, db_terms, GradMode::kAccumulate));
    Tensor dx = Empty(Dims(k.x), DType::kF32), dw = Empty(Dims(k.w), DType::kF32), db = Empty({k.w[0]}, DType::kF32);
    ZS_ASSERT_OK(dw.Fill(1));
    ZS_ASSERT_OK(db.Fill(1));
    RunBothOrders(what + " backward data", {&dx}, [&] {
      return sim::LaunchConv2dBackwardData(g, dy.data<float>(), w.data<float>(), dx.data<float>(), nullptr);
    });
    RunBothOrders(what + " backward weight", {&dw}, [&] {
      return sim::LaunchConv2dBackwardWeight(g, dy.data<float>(), x.data<float>(), dw.data<float>(), true, nullptr);
    });
    RunBothOrders(what + " backward bias", {&db}, [&] {
      return sim::LaunchConv2dBackwardBias(g, dy.data<float>(), db.data<float>(), true, nullptr);
    });
    const int64_t positions = g.n * g.out_plane();  // the terms of dweight and dbias
    ExpectWithinSumBound(dx, dx_cpu, dx_terms, g.og() * g.kh * g.kw, what + " dx");
    ExpectWithinSumBound(dw, dw_cpu, dw_terms, positions + 1, what + " dweight");  // + the 1 it started at
    ExpectWithinSumBound(db, db_cpu, db_terms, positions + 1, what + " dbias");
  }
}

TEST(CudaSim, BatchNormTrainingEvalAndBackwardMatchCpu) {
  uint64_t seed = 800;
  for (const Shape& shape : {Shape{4, 3, 5, 7}, Shape{2, 5, 1, 1}, Shape{3, 2, 33, 40}}) {
    const int64_t n = shape[0], c = shape[1], l = shape[2] * shape[3];
    const ::zeroshard_sim::cuda::BatchNormDims dims{n, c, l};
    const std::string what = "BatchNorm " + ShapeToString(shape);
    const Tensor x = RandomTensor(shape, DType::kF32, -2, 3, ++seed);
    const Tensor w = RandomTensor({c}, DType::kF32, 0.5, 1.5, ++seed), b = RandomTensor({c}, DType::kF32, -1, 1, ++seed);
    const Tensor rm0 = RandomTensor({c}, DType::kF32, -1, 1, ++seed), rv0 = RandomTensor({c}, DType::kF32, 0.5, 2, ++seed);
    for (bool training : {true, false}) {
      const std::string mode = what + (training ? " training" : " eval");
      const BatchNormOptions o{.training = training, .momentum = 0.1, .eps = 1e-5};
      Tensor rm_cpu = rm0.Clone().value(), rv_cpu = rv0.Clone().value();
      Tensor y_cpu = Empty(Dims(shape), DType::kF32), mean_cpu = Empty({c}, DType::kF32), rstd_cpu = Empty({c}, DType::kF32);
      ZS_ASSERT_OK(BatchNormForward(x, w, b, rm_cpu, rv_cpu, o, y_cpu, mean_cpu, rstd_cpu));
      Tensor rm = rm0.Clone().value(), rv = rv0.Clone().value();
      Tensor y = Empty(Dims(shape), DType::kF32), mean = Empty({c}, DType::kF32), rstd = Empty({c}, DType::kF32);
      RunBothOrders(mode + " statistics", {&mean, &rstd, &rm, &rv}, [&] {
        return training ? sim::LaunchBatchNormTrainStats(dims, x.data<float>(), 1e-5f, 0.1f, mean.data<float>(),
                                                         rstd.data<float>(), rm.data<float>(), rv.data<float>(), nullptr)
                        : sim::LaunchBatchNormEvalStats(c, rm.data<float>(), rv.data<float>(), 1e-5f,
                                                        mean.data<float>(), rstd.data<float>(), nullptr);
      });
      RunBothOrders(mode + " apply", {&y}, [&] {
        return sim::LaunchBatchNormApply(dims, x.data<float>(), mean.data<float>(), rstd.data<float>(),
                                         w.data<float>(), b.data<float>(), y.data<float>(), nullptr);
      });
      // The statistics are sums over the channel's N L values, in double
      // here and per plane in fp32 on the CPU: a few ulp of f32 apart
      // (GpuTol's "order of row sums"); eval's are the same per-element math.
      ExpectClose(mean, mean_cpu, GpuTol(DType::kF32), mode + " mean");
      ExpectClose(rstd, rstd_cpu, GpuTol(DType::kF32), mode + " rstd");
      ExpectClose(rm, rm_cpu, GpuTol(DType::kF32), mode + " running_mean");
      ExpectClose(rv, rv_cpu, GpuTol(DType::kF32), mode + " running_var");
      ExpectClose(y, y_cpu, GpuTol(DType::kF32), mode + " y");

      // Backward from the CPU's statistics on both sides; dweight and dbias added to twos.
      const Tensor dy = RandomTensor(shape, DType::kF32, -1, 1, ++seed);
      Tensor dx_cpu = Empty(Dims(shape), DType::kF32), dw_cpu = Empty({c}, DType::kF32), db_cpu = Empty({c}, DType::kF32);
      ZS_ASSERT_OK(dw_cpu.Fill(2));
      ZS_ASSERT_OK(db_cpu.Fill(2));
      ZS_ASSERT_OK(BatchNormBackward(dy, x, mean_cpu, rstd_cpu, w, training, dx_cpu, dw_cpu, db_cpu,
                                     GradMode::kAccumulate));
      Tensor dx = Empty(Dims(shape), DType::kF32), dw = Empty({c}, DType::kF32), db = Empty({c}, DType::kF32);
      ZS_ASSERT_OK(dw.Fill(2));
      ZS_ASSERT_OK(db.Fill(2));
      RunBothOrders(mode + " backward", {&dx, &dw, &db}, [&] {
        return sim::LaunchBatchNormBackward(dims, dy.data<float>(), x.data<float>(), mean_cpu.data<float>(),
                                            rstd_cpu.data<float>(), w.data<float>(), training, dx.data<float>(),
                                            dw.data<float>(), db.data<float>(), true, nullptr);
      });
      // As the GPU test of cuDNN's BatchNorm (cuda_vision_test): dx carries
      // the channel sums' difference times rstd, the parameter gradients are the sums.
      ExpectClose(dx, dx_cpu, {1e-4, 1e-3}, mode + " dx");
      ExpectClose(dw, dw_cpu, {1e-3, 1e-4}, mode + " dweight");
      ExpectClose(db, db_cpu, {1e-3, 1e-4}, mode + " dbias");
    }
  }
}

// ------------------------------------------------------------ what ran

TEST(CudaSim, LaunchesRunOnTheSimulator) {
  // A softmax of 3 rows of 100: 3 blocks of one warp each (softmax.cu's
  // SoftmaxRowThreads), with the barriers and shuffles of its block reduction.
  const zs_cuda_sim::Stats before = zs_cuda_sim::GetStats();
  const Tensor x = RandomTensor({3, 100}, DType::kF32, -1, 1, 1);
  Tensor y = Empty({3, 100}, DType::kF32);
  ASSERT_EQ(sim::LaunchSoftmax(false, 0, 0, x.raw_data(), 100, y.raw_data(), 100, 3, 100, nullptr),
            0);
  const zs_cuda_sim::Stats after = zs_cuda_sim::GetStats();
  EXPECT_EQ(after.launches - before.launches, 1);
  EXPECT_EQ(after.blocks - before.blocks, 3);
  EXPECT_EQ(after.threads - before.threads, 3 * 32);
  EXPECT_GT(after.barriers - before.barriers, 0);
  EXPECT_GT(after.shuffles - before.shuffles, 0);
}

}  // namespace
}  // namespace zeroshard
