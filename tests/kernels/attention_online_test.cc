// The host side of the CUDA attention, on the CPU in every build:
// - the online-softmax recurrence of kernels/cuda/attention.cu (key tiles of
//   32, running max, rescaling) written on the host with the same shared
//   per-element functions (kernels/math/attention_math.h), against the CPU
//   kernel's two-pass softmax;
// - the launch configuration (lanes per row, shared memory per block);
// - the choice between cuDNN and our kernel (kernels/cuda/attention_select.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "zeroshard/kernels/attention.h"
#include "zeroshard/kernels/cuda/attention_launch.h"
#include "zeroshard/kernels/cuda/attention_select.h"
#include "zeroshard/kernels/math/attention_math.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::RandomTensor;
using ::zeroshard::testing::ToDoubles;

// The forward of the CUDA kernel for one contiguous [B*H, T, D] f32 problem:
// per query row, keys in tiles of kAttentionTile, one score per "lane".
void OnlineForward(int64_t BH, int64_t T, int64_t D, float scale, bool causal,
                   const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, std::vector<float>& out, std::vector<float>& lse) {
  constexpr int kTile = cuda::kAttentionTile;
  out.assign(BH * T * D, 0.0f);
  lse.assign(BH * T, 0.0f);
  for (int64_t bh = 0; bh < BH; ++bh) {
    const float* Q = q.data() + bh * T * D;
    const float* K = k.data() + bh * T * D;
    const float* V = v.data() + bh * T * D;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t visible = AttentionVisibleCount(i, T, causal);
      float m = -kInfF, l = 0.0f;
      std::vector<float> acc(D, 0.0f);
      for (int64_t k0 = 0; k0 < visible; k0 += kTile) {
        float s[kTile], p[kTile];
        float tile_max = -kInfF;
        for (int lane = 0; lane < kTile; ++lane) {
          const int64_t j = k0 + lane;
          s[lane] = -kInfF;
          if (j < visible) {
            float dot = 0.0f;
            for (int64_t d = 0; d < D; ++d) dot += Q[i * D + d] * K[j * D + d];
            s[lane] = AttentionScore(dot, scale);
          }
          tile_max = s[lane] > tile_max ? s[lane] : tile_max;
        }
        const float m_new = AttentionRunningMax(m, tile_max);
        const float c = AttentionRescale(m, m_new);
        float sum = 0.0f;
        for (int lane = 0; lane < kTile; ++lane) {
          p[lane] = AttentionWeight(s[lane], m_new);
          sum += p[lane];
        }
        l = l * c + sum;
        for (int64_t d = 0; d < D; ++d) acc[d] *= c;
        for (int lane = 0; lane < kTile && k0 + lane < visible; ++lane) {
          for (int64_t d = 0; d < D; ++d) acc[d] += p[lane] * V[(k0 + lane) * D + d];
        }
        m = m_new;
      }
      for (int64_t d = 0; d < D; ++d) out[(bh * T + i) * D + d] = acc[d] / l;
      lse[bh * T + i] = AttentionLse(m, l);
    }
  }
}

std::vector<float> Floats(const Tensor& t) { return t.ToVector<float>().value(); }

TEST(AttentionOnlineSoftmax, HostRecurrenceMatchesCpuKernel) {
  uint64_t seed = 7;
  struct Case { int64_t B, H, T, D; bool causal; };
  for (const Case& c : {Case{1, 1, 1, 1, true}, Case{2, 3, 31, 8, true}, Case{1, 2, 33, 16, false},
                        Case{2, 2, 100, 24, true}, Case{1, 1, 97, 64, false}}) {
    const Tensor q = RandomTensor({c.B, c.H, c.T, c.D}, DType::kF32, -2, 2, ++seed);
    const Tensor k = RandomTensor({c.B, c.H, c.T, c.D}, DType::kF32, -2, 2, ++seed);
    const Tensor v = RandomTensor({c.B, c.H, c.T, c.D}, DType::kF32, -1, 1, ++seed);
    ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs cpu, AttentionForward(q, k, v, {.causal = c.causal}));
    std::vector<float> out, lse;
    OnlineForward(c.B * c.H, c.T, c.D, DefaultAttentionScale(c.D), c.causal, Floats(q), Floats(k),
                  Floats(v), out, lse);
    const std::string what = "T=" + std::to_string(c.T) + " D=" + std::to_string(c.D);
    ExpectClose(std::vector<double>(out.begin(), out.end()), ToDoubles(cpu.out), 1e-6, 1e-5,
                "out " + what);
    ExpectClose(std::vector<double>(lse.begin(), lse.end()), ToDoubles(cpu.lse), 1e-6, 1e-5,
                "lse " + what);
  }
}

// Scores that grow along the row: every tile raises the running maximum, so
// the rescaling carries the whole result (without it, exp overflows to Inf).
TEST(AttentionOnlineSoftmax, GrowingMaximumIsRescaled) {
  const int64_t T = 200, D = 4;
  std::vector<float> q(T * D, 1.0f), k(T * D), v(T * D);
  for (int64_t j = 0; j < T; ++j) {
    for (int64_t d = 0; d < D; ++d) {
      k[j * D + d] = 0.5f * static_cast<float>(j);  // s_ij = scale * 2 j: up to ~200
      v[j * D + d] = static_cast<float>(d + 1);
    }
  }
  std::vector<float> out, lse;
  OnlineForward(1, T, D, 1.0f, /*causal=*/true, q, k, v, out, lse);
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tq, Tensor::FromVector(q, {1, 1, T, D}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tk, Tensor::FromVector(k, {1, 1, T, D}));
  ZS_ASSERT_OK_AND_ASSIGN(Tensor tv, Tensor::FromVector(v, {1, 1, T, D}));
  ZS_ASSERT_OK_AND_ASSIGN(AttentionOutputs cpu,
                          AttentionForward(tq, tk, tv, {.causal = true, .scale = 1.0f}));
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  ExpectClose(std::vector<double>(out.begin(), out.end()), ToDoubles(cpu.out), 1e-5, 1e-5, "out");
  ExpectClose(std::vector<double>(lse.begin(), lse.end()), ToDoubles(cpu.lse), 1e-4, 1e-6, "lse");
}

TEST(AttentionOnlineSoftmax, MaskedAndFirstTileEdgeCases) {
  EXPECT_EQ(AttentionRescale(-kInfF, 3.0f), 0.0f);      // nothing summed yet
  EXPECT_EQ(AttentionRescale(2.0f, 2.0f), 1.0f);        // maximum unchanged
  EXPECT_EQ(AttentionWeight(-kInfF, 1.0f), 0.0f);       // masked score
  EXPECT_EQ(AttentionWeight(1.5f, 1.5f), 1.0f);
  EXPECT_EQ(AttentionRunningMax(-kInfF, -1.0f), -1.0f);
  EXPECT_FLOAT_EQ(AttentionScore(2.0f, 0.25f), 0.5f);
}

// ---------------------------------------------------------------- launch configuration

TEST(AttentionLaunch, LanesAndSharedMemory) {
  EXPECT_EQ(cuda::AttentionLanes(1), 1);
  EXPECT_EQ(cuda::AttentionLanes(32), 1);
  EXPECT_EQ(cuda::AttentionLanes(33), 2);
  EXPECT_EQ(cuda::AttentionLanes(64), 2);
  EXPECT_EQ(cuda::AttentionLanes(65), 4);
  EXPECT_EQ(cuda::AttentionLanes(128), 4);
  EXPECT_EQ(cuda::AttentionLanes(200), 8);
  EXPECT_EQ(cuda::AttentionLanes(cuda::kAttentionMaxHeadDim), 8);
  // Every lane element exists: lanes * 32 covers D.
  for (int64_t d = 1; d <= cuda::kAttentionMaxHeadDim; ++d) {
    EXPECT_GE(cuda::AttentionLanes(d) * 32, d) << d;
  }
  // D = 64: 8 query rows + two padded 32-row tiles.
  EXPECT_EQ(cuda::AttentionForwardSharedBytes(64), 4 * (8 * 64 + 2 * 32 * 65));
  // The largest head fits the opt-in shared memory of sm_80 (163 KiB) and
  // sm_90 (227 KiB) with room to spare.
  EXPECT_LE(cuda::AttentionForwardSharedBytes(cuda::kAttentionMaxHeadDim), 100 * 1024);
  EXPECT_LE(cuda::AttentionBackwardSharedBytes(cuda::kAttentionMaxHeadDim), 100 * 1024);
  // GPT-2 heads (D = 64) need no opt-in at all (<= 48 KiB).
  EXPECT_LE(cuda::AttentionBackwardSharedBytes(64), 48 * 1024);
}

// ---------------------------------------------------------------- cuDNN or ours

TEST(AttentionSelect, CudnnTakesHalfPrecisionFlashShapes) {
  const cuda::CudnnAttentionInfo h100{.built = true, .version = 91900, .sm = 90};
  const cuda::CudnnAttentionInfo a100{.built = true, .version = 91900, .sm = 80};
  cuda::AttentionCall call{.dtype = DType::kBF16, .head_dim = 64, .seq = 1024};
  EXPECT_EQ(cuda::CudnnAttentionRefusal(call, h100), "");
  EXPECT_EQ(cuda::CudnnAttentionRefusal(call, a100), "");
  call.dtype = DType::kF16;
  EXPECT_EQ(cuda::CudnnAttentionRefusal(call, h100), "");
  call.head_dim = 256;
  EXPECT_EQ(cuda::CudnnAttentionRefusal(call, h100), "");
  EXPECT_THAT(cuda::CudnnAttentionRefusal(call, a100), ::testing::HasSubstr("up to 128"));
}

TEST(AttentionSelect, EverythingElseRunsOurs) {
  const cuda::CudnnAttentionInfo h100{.built = true, .version = 91900, .sm = 90};
  const cuda::AttentionCall good{.dtype = DType::kBF16, .head_dim = 64, .seq = 128};
  auto refusal = [&](cuda::AttentionCall c, cuda::CudnnAttentionInfo info) {
    return cuda::CudnnAttentionRefusal(c, info);
  };
  cuda::AttentionCall c = good;
  c.dtype = DType::kF32;
  EXPECT_THAT(refusal(c, h100), ::testing::HasSubstr("dtype f32"));
  c = good;
  c.head_dim = 60;
  EXPECT_THAT(refusal(c, h100), ::testing::HasSubstr("head dim 60"));
  c = good;
  c.unit_stride_d = false;
  EXPECT_THAT(refusal(c, h100), ::testing::HasSubstr("strided"));
  c = good;
  c.aligned = false;
  EXPECT_THAT(refusal(c, h100), ::testing::HasSubstr("aligned"));
  EXPECT_THAT(refusal(good, {.built = false}), ::testing::HasSubstr("not available"));
  EXPECT_THAT(refusal(good, {.built = true, .version = 8907, .sm = 90}), ::testing::HasSubstr("older"));
  EXPECT_THAT(refusal(good, {.built = true, .version = 91900, .sm = 75}), ::testing::HasSubstr("sm_75"));
  // Our kernel: any dtype and stride, D up to its register budget.
  c = good;
  c.dtype = DType::kF32;
  c.unit_stride_d = false;
  EXPECT_EQ(cuda::OwnAttentionRefusal(c), "");
  c.head_dim = cuda::kAttentionMaxHeadDim + 1;
  EXPECT_THAT(cuda::OwnAttentionRefusal(c), ::testing::HasSubstr("at most 256"));
}

// Our tensor-core kernel (kernels/cuda/attention_tc.cu): bf16/f16, D a
// multiple of 16 up to 128, the 16-byte layout; and its shared memory within
// an A100's opt-in 163 KiB (166912 B) at every head dim, so the same binary
// runs on sm_80.
TEST(AttentionSelect, TensorCoreKernelTakesHalfTypesAtHeadDims64And128) {
  const cuda::AttentionCall good{.dtype = DType::kBF16, .head_dim = 64, .seq = 1024, .heads = 12, .kv_heads = 12};
  EXPECT_EQ(cuda::TensorCoreAttentionRefusal(good), "");
  cuda::AttentionCall c = good;
  c.dtype = DType::kF16;
  c.head_dim = 128;
  c.kv_heads = 4;
  EXPECT_EQ(cuda::TensorCoreAttentionRefusal(c), "");
  c = good;
  c.dtype = DType::kF32;
  EXPECT_THAT(cuda::TensorCoreAttentionRefusal(c), ::testing::HasSubstr("dtype f32, our tensor-core kernel takes bf16 or f16"));
  for (int64_t d : {16, 32, 48, 80, 96, 112}) {
    c = good;
    c.head_dim = d;
    EXPECT_EQ(cuda::TensorCoreAttentionRefusal(c), "") << d;
  }
  for (int64_t d : {1, 8, 24, 72, 144, 256}) {
    c = good;
    c.head_dim = d;
    EXPECT_THAT(cuda::TensorCoreAttentionRefusal(c), ::testing::HasSubstr("takes multiples of 16 up to 128")) << d;
  }
  c = good;
  c.unit_stride_d = false;
  EXPECT_THAT(cuda::TensorCoreAttentionRefusal(c), ::testing::HasSubstr("strided"));
  c = good;
  c.aligned = false;
  EXPECT_THAT(cuda::TensorCoreAttentionRefusal(c), ::testing::HasSubstr("aligned"));
  c = good;
  c.kv_heads = 5;
  EXPECT_THAT(cuda::TensorCoreAttentionRefusal(c), ::testing::HasSubstr("does not divide"));
  for (int64_t d = 16; d <= 128; d += 16) {
    for (int64_t bytes : {cuda::AttentionTcForwardSharedBytes(d), cuda::AttentionTcDqSharedBytes(d),
                          cuda::AttentionTcDkvSharedBytes(d)}) {
      EXPECT_LE(bytes, 166912) << d;
    }
  }
  // The largest, dK/dV at D 128: four 64 x 136 tiles of 2 bytes, per warp two
  // 16 x 68 float tiles and two 16 x 72 16-bit ones, lse and delta, 128 slack.
  EXPECT_EQ(cuda::AttentionTcDkvSharedBytes(128),
            128 + 4 * 64 * 136 * 2 + 4 * (2 * 16 * 68 * 4 + 2 * 16 * 72 * 2) + 2 * 64 * 4);
}

// The process-wide default behind kAuto: names round-trip, an unknown
// ZEROSHARD_ATTENTION is an error naming the accepted values (this binary
// makes no CUDA attention call before, so the environment is read here),
// and SetDefaultAttentionImpl overrides it.
TEST(AttentionSelect, DefaultImplFromTheEnvironmentOrSet) {
  for (AttentionImpl i : {AttentionImpl::kAuto, AttentionImpl::kOwn, AttentionImpl::kCudnn, AttentionImpl::kTensorCore}) {
    EXPECT_EQ(ParseAttentionImpl(AttentionImplName(i)), i);
  }
  EXPECT_FALSE(ParseAttentionImpl("flash").has_value());
  EXPECT_FALSE(ParseAttentionImpl("").has_value());
  ASSERT_EQ(setenv("ZEROSHARD_ATTENTION", "flash", 1), 0);
  const absl::StatusOr<AttentionImpl> bad = DefaultAttentionImpl();
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("ZEROSHARD_ATTENTION is \"flash\", expected auto, own, cudnn or tensor_core"));
  SetDefaultAttentionImpl(AttentionImpl::kTensorCore);
  EXPECT_EQ(DefaultAttentionImpl().value(), AttentionImpl::kTensorCore);
  SetDefaultAttentionImpl(AttentionImpl::kAuto);
  EXPECT_EQ(DefaultAttentionImpl().value(), AttentionImpl::kAuto);
  unsetenv("ZEROSHARD_ATTENTION");
}

TEST(AttentionSelect, GroupedQueryCallsGoWhereMultiHeadOnesGo) {
  // k and v with fewer heads (GQA, MQA) change neither choice: cuDNN's SDPA
  // takes h_k = h_v dividing h_q, and so does our kernel.
  const cuda::CudnnAttentionInfo h100{.built = true, .version = 91900, .sm = 90};
  for (int64_t kv_heads : {32, 8, 1}) {
    const cuda::AttentionCall c{.dtype = DType::kBF16, .head_dim = 128, .seq = 2048, .heads = 32,
                                .kv_heads = kv_heads};
    EXPECT_EQ(cuda::CudnnAttentionRefusal(c, h100), "") << kv_heads;
    EXPECT_EQ(cuda::OwnAttentionRefusal(c), "") << kv_heads;
  }
  // A caller that skipped the op entry's check is still refused, with why.
  const cuda::AttentionCall bad{.dtype = DType::kBF16, .head_dim = 64, .seq = 8, .heads = 8,
                                .kv_heads = 3};
  EXPECT_THAT(cuda::CudnnAttentionRefusal(bad, h100),
              ::testing::HasSubstr("k and v have 3 heads, which does not divide q's 8"));
  // The launch dims: kv_heads 0 means as many as q's (callers from before GQA).
  EXPECT_EQ(cuda::AttentionKvHeads({.heads = 8}), 8);
  EXPECT_EQ(cuda::AttentionKvHeads({.heads = 8, .kv_heads = 2}), 2);
}

}  // namespace
}  // namespace zeroshard
