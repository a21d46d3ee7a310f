// Every cuDNN operation graph this project builds, checked by cuDNN itself on
// a machine without a GPU. cuDNN's backend API finalizes tensor, operation
// and operation-graph descriptors without a device (only cudnnCreate, the
// heuristics and the plans need one), so CPU tensors of the real shapes and
// strides stand in for device ones and CudnnGraph::FinalizeGraph(nullptr)
// runs cuDNN's own checks of every tensor, operation and whole graph:
//   - attention forward and backward (kernels/cuda/attention_cudnn_graph.h):
//     bf16 / f16, causal or not, D 64 / 128 / 256, T 1 / 17 / 64 / 257, two
//     batch x heads, packed operands and the GPT's layout (q, k, v strided
//     views of the fused qkv buffer, dout a transposed view);
//   - grouped-query attention (k, v, dk, dv with Hkv heads dividing H: GQA
//     and MQA), packed and as views of Llama's fused [B, T, H + 2 Hkv, D]
//     projection, with the per-query-head dK, dV reduced over each group;
//   - convolution forward / backward data / backward filter
//     (kernels/cuda/conv_cudnn_graph.h) in f32 / bf16 / f16 over strides,
//     padding, dilation, groups, depthwise and odd sizes;
//   - inconsistent graphs are refused with an error naming what was refused
//     (by cuDNN: tensors, matmul and convolution shapes, the graph's wiring;
//     by CudnnGraph itself: pointwise / reduction broadcasting and reshape
//     sizes, which cuDNN 9.19 leaves to the engines on a GPU).
// Built only with the CUDA toolkit (tests/kernels/BUILD.bazel); no GPU needed.
#include <gtest/gtest.h>

#include <cudnn.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/kernels/cuda/attention_cudnn_graph.h"
#include "zeroshard/kernels/cuda/conv_cudnn_graph.h"
#include "zeroshard/kernels/cuda/cudnn_graph.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::cuda {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------- attention

// The operands of one attention call, on the CPU (never read: the builders
// take only dims, strides and dtype).
struct AttentionOperands {
  Tensor q, k, v, out, lse, dout, dq, dk, dv;
  Tensor storage;  // the fused qkv buffer, when there is one
};

// Every [B, H, T, D] operand packed, lse [B, H, T] packed.
AttentionOperands Packed(int64_t B, int64_t H, int64_t T, int64_t D, DType dtype) {
  AttentionOperands o;
  for (Tensor* t : {&o.q, &o.k, &o.v, &o.out, &o.dout, &o.dq, &o.dk, &o.dv}) {
    *t = Tensor::Empty({B, H, T, D}, dtype).value();
  }
  o.lse = Tensor::Empty({B, H, T}, DType::kF32).value();
  return o;
}

// As the GPT passes them (autograd/nn/layers.cc, CausalSelfAttention): q, k, v
// views of qkv [B, T, 3C] as [B, T, 3, H, D] permuted to [3, B, H, T, D]
// (strides [T 3C, D, 3C, 1]); out and lse fresh (packed); dout the gradient
// of out.Transpose(1, 2) as [B, T, C], i.e. a transposed view (strides
// [T C, D, C, 1]); dq, dk, dv fresh (packed).
AttentionOperands FusedQkv(int64_t B, int64_t H, int64_t T, int64_t D, DType dtype) {
  AttentionOperands o = Packed(B, H, T, D, dtype);
  const int64_t C = H * D;
  o.storage = Tensor::Empty({B, T, 3 * C}, dtype).value();
  const Tensor heads =
      o.storage.View({B, T, 3, H, D}).value().Permute({2, 0, 3, 1, 4}).value();
  o.q = heads.Select(0, 0).value();
  o.k = heads.Select(0, 1).value();
  o.v = heads.Select(0, 2).value();
  o.dout = Tensor::Empty({B, T, H, D}, dtype).value().Transpose(1, 2).value();
  return o;
}

struct AttentionCase {
  DType dtype;
  bool causal;
  int64_t batch, heads, seq, head_dim;
  bool fused;

  std::string Name() const {
    return absl::StrCat(DTypeName(dtype), causal ? " causal" : " full", " B", batch, " H", heads,
                        " T", seq, " D", head_dim, fused ? " fused-qkv" : " packed");
  }
};

std::vector<AttentionCase> AttentionCases() {
  std::vector<AttentionCase> cases;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool causal : {true, false}) {
      for (int64_t D : {64, 128, 256}) {
        for (int64_t T : {1, 17, 64, 257}) {
          for (auto [B, H] : {std::pair<int64_t, int64_t>{1, 1}, {2, 3}}) {
            for (bool fused : {true, false}) cases.push_back({dtype, causal, B, H, T, D, fused});
          }
        }
      }
    }
  }
  return cases;
}

AttentionLaunchDims LaunchDims(const AttentionCase& c) {
  return {.batch = c.batch, .heads = c.heads, .seq = c.seq, .head_dim = c.head_dim,
          .scale = 0.125f, .causal = c.causal};
}

AttentionOperands Operands(const AttentionCase& c) {
  return c.fused ? FusedQkv(c.batch, c.heads, c.seq, c.head_dim, c.dtype)
                 : Packed(c.batch, c.heads, c.seq, c.head_dim, c.dtype);
}

// Operations in the graphs (attention_cudnn.cc's recipe): the causal mask adds four.
constexpr int64_t kForwardOps = 10;
constexpr int64_t kBackwardOps = 18;
constexpr int64_t kMaskOps = 4;

TEST(CudnnGraphFinalize, FusedQkvViewsHaveTheModelsStrides) {
  const AttentionOperands o = FusedQkv(2, 3, 5, 8, DType::kBF16);
  const int64_t C = 24;
  EXPECT_EQ(o.q.strides(), (Shape{5 * 3 * C, 8, 3 * C, 1}));
  EXPECT_EQ(o.k.strides(), o.q.strides());
  EXPECT_EQ(static_cast<char*>(o.k.raw_data()) - static_cast<char*>(o.q.raw_data()), C * 2);
  EXPECT_EQ(static_cast<char*>(o.v.raw_data()) - static_cast<char*>(o.q.raw_data()), 2 * C * 2);
  EXPECT_EQ(o.dout.strides(), (Shape{5 * C, 8, C, 1}));
  EXPECT_TRUE(o.out.is_contiguous());
}

TEST(CudnnGraphFinalize, AttentionForwardGraphs) {
  int64_t finalized = 0;
  for (const AttentionCase& c : AttentionCases()) {
    SCOPED_TRACE(c.Name());
    const AttentionOperands o = Operands(c);
    CudnnGraph g;
    ZS_ASSERT_OK(BuildCudnnAttentionForwardGraph(g, LaunchDims(c), o.q, o.k, o.v, o.out, o.lse));
    EXPECT_EQ(g.num_operations(), kForwardOps + (c.causal ? kMaskOps : 0));
    ZS_ASSERT_OK(g.FinalizeGraph(nullptr));
    EXPECT_TRUE(g.graph_finalized());
    ++finalized;
  }
  EXPECT_EQ(finalized, 192);
}

TEST(CudnnGraphFinalize, AttentionBackwardGraphs) {
  int64_t finalized = 0;
  for (const AttentionCase& c : AttentionCases()) {
    SCOPED_TRACE(c.Name());
    const AttentionOperands o = Operands(c);
    CudnnGraph g;
    ZS_ASSERT_OK(BuildCudnnAttentionBackwardGraph(g, LaunchDims(c), o.dout, o.q, o.k, o.v, o.out,
                                                  o.lse, o.dq, o.dk, o.dv));
    EXPECT_EQ(g.num_operations(), kBackwardOps + (c.causal ? kMaskOps : 0));
    ZS_ASSERT_OK(g.FinalizeGraph(nullptr));
    EXPECT_TRUE(g.graph_finalized());
    ++finalized;
  }
  EXPECT_EQ(finalized, 192);
}

// An lse of the wrong length: the stats tensor does not match the scores'
// rows. cuDNN 9.19 would finalize that pointwise ADD (it leaves broadcasting
// to the engines), so CudnnGraph's own shape check refuses it, by name.
TEST(CudnnGraphFinalize, AttentionWithMismatchedStatsIsRefusedByName) {
  const AttentionCase c{DType::kBF16, true, 2, 3, 17, 64, false};
  AttentionOperands o = Operands(c);
  o.lse = Tensor::Empty({2, 3, 16}, DType::kF32).value();
  CudnnGraph g;
  const absl::Status s =
      BuildCudnnAttentionForwardGraph(g, LaunchDims(c), o.q, o.k, o.v, o.out, o.lse);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("(OPERATION_POINTWISE ADD): dims [2,3,17,1] do not broadcast to [2,3,16,1]"));
}

// K with another head dim than Q: cuDNN refuses the first matmul.
TEST(CudnnGraphFinalize, AttentionWithMismatchedHeadDimIsRefusedByCudnn) {
  const AttentionCase c{DType::kF16, false, 1, 2, 64, 64, false};
  AttentionOperands o = Operands(c);
  o.k = Tensor::Empty({1, 2, 64, 32}, DType::kF16).value();
  CudnnGraph g;
  const absl::Status s =
      BuildCudnnAttentionForwardGraph(g, LaunchDims(c), o.q, o.k, o.v, o.out, o.lse);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("cuDNN refused to finalize operation 0 (OPERATION_MATMUL)"));
}

// ---------------------------------------------------------------- grouped-query attention

struct GqaCase {
  DType dtype;
  bool causal;
  int64_t batch, heads, kv_heads, seq, head_dim;
  bool fused;

  std::string Name() const {
    return absl::StrCat(DTypeName(dtype), causal ? " causal" : " full", " B", batch, " H", heads,
                        " Hkv", kv_heads, " T", seq, " D", head_dim,
                        fused ? " fused-projection" : " packed");
  }
};

// q, out, dout, dq [B, H, T, D]; k, v, dk, dv [B, Hkv, T, D]; packed, or q, k,
// v as views of one [B, T, H + 2 Hkv, D] projection (Llama's layout) with
// dout a transposed view.
AttentionOperands GqaOperands(const GqaCase& c) {
  const int64_t B = c.batch, H = c.heads, Hkv = c.kv_heads, T = c.seq, D = c.head_dim;
  AttentionOperands o;
  for (Tensor* t : {&o.q, &o.out, &o.dout, &o.dq}) *t = Tensor::Empty({B, H, T, D}, c.dtype).value();
  for (Tensor* t : {&o.k, &o.v, &o.dk, &o.dv}) *t = Tensor::Empty({B, Hkv, T, D}, c.dtype).value();
  o.lse = Tensor::Empty({B, H, T}, DType::kF32).value();
  if (c.fused) {
    o.storage = Tensor::Empty({B, T, H + 2 * Hkv, D}, c.dtype).value();
    auto heads = [&](int64_t first, int64_t n) {
      return o.storage.Narrow(2, first, n).value().Transpose(1, 2).value();
    };
    o.q = heads(0, H);
    o.k = heads(H, Hkv);
    o.v = heads(H + Hkv, Hkv);
    o.dout = Tensor::Empty({B, T, H, D}, c.dtype).value().Transpose(1, 2).value();
  }
  return o;
}

std::vector<GqaCase> GqaCases() {
  std::vector<GqaCase> cases;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool causal : {true, false}) {
      for (int64_t D : {64, 128}) {
        for (int64_t T : {17, 64}) {
          for (auto [B, H, Hkv] : {std::tuple<int64_t, int64_t, int64_t>{2, 4, 2}, {1, 4, 1}, {2, 6, 3}}) {
            for (bool fused : {true, false}) cases.push_back({dtype, causal, B, H, Hkv, T, D, fused});
          }
        }
      }
    }
  }
  return cases;
}

AttentionLaunchDims GqaLaunchDims(const GqaCase& c) {
  return {.batch = c.batch, .heads = c.heads, .kv_heads = c.kv_heads, .seq = c.seq,
          .head_dim = c.head_dim, .scale = 0.125f, .causal = c.causal};
}

// The backward adds one REDUCTION per gradient (dK, dV) when grouped.
constexpr int64_t kGroupReductionOps = 2;

TEST(CudnnGraphFinalize, GroupedQueryAttentionForwardAndBackwardGraphs) {
  int64_t finalized = 0;
  for (const GqaCase& c : GqaCases()) {
    SCOPED_TRACE(c.Name());
    const AttentionOperands o = GqaOperands(c);
    CudnnGraph fwd;
    ZS_ASSERT_OK(BuildCudnnAttentionForwardGraph(fwd, GqaLaunchDims(c), o.q, o.k, o.v, o.out, o.lse));
    EXPECT_EQ(fwd.num_operations(), kForwardOps + (c.causal ? kMaskOps : 0));
    ZS_ASSERT_OK(fwd.FinalizeGraph(nullptr));
    CudnnGraph bwd;
    ZS_ASSERT_OK(BuildCudnnAttentionBackwardGraph(bwd, GqaLaunchDims(c), o.dout, o.q, o.k, o.v,
                                                  o.out, o.lse, o.dq, o.dk, o.dv));
    EXPECT_EQ(bwd.num_operations(),
              kBackwardOps + kGroupReductionOps + (c.causal ? kMaskOps : 0));
    ZS_ASSERT_OK(bwd.FinalizeGraph(nullptr));
    EXPECT_TRUE(fwd.graph_finalized() && bwd.graph_finalized());
    finalized += 2;
  }
  EXPECT_EQ(finalized, 2 * 96);
}

TEST(CudnnGraphFinalize, LlamaProjectionViewsHaveTheirStrides) {
  const AttentionOperands o = GqaOperands({DType::kBF16, true, 2, 4, 2, 5, 8, true});
  const int64_t W = 4 + 2 * 2;  // heads in the projection
  EXPECT_EQ(o.q.strides(), (Shape{5 * W * 8, 8, W * 8, 1}));
  EXPECT_EQ(o.k.shape(), (Shape{2, 2, 5, 8}));
  EXPECT_EQ(o.k.strides(), o.q.strides());
  EXPECT_EQ(static_cast<char*>(o.k.raw_data()) - static_cast<char*>(o.q.raw_data()), 4 * 8 * 2);
  EXPECT_EQ(static_cast<char*>(o.v.raw_data()) - static_cast<char*>(o.q.raw_data()), 6 * 8 * 2);
}

// K and V with heads that do not divide Q's: cuDNN refuses the first matmul
// (the op entry refuses such a call before it gets here).
TEST(CudnnGraphFinalize, AttentionWithHeadsThatDoNotDivideIsRefusedByCudnn) {
  GqaCase c{DType::kBF16, true, 1, 4, 3, 64, 64, false};
  const AttentionOperands o = GqaOperands(c);
  CudnnGraph g;
  const absl::Status s =
      BuildCudnnAttentionForwardGraph(g, GqaLaunchDims(c), o.q, o.k, o.v, o.out, o.lse);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("cuDNN refused to finalize operation 0 (OPERATION_MATMUL)"));
}

// A grouped reduction whose group does not divide: CudnnGraph refuses it by
// name, as it does any reduction to an unrelated shape.
TEST(CudnnGraphFinalize, GroupedReductionNeedsADivisor) {
  CudnnGraph g;
  ZS_ASSERT_OK_AND_ASSIGN(auto x, g.Virtual({2, 6, 8, 8}));
  ZS_ASSERT_OK_AND_ASSIGN(auto y3, g.Virtual({2, 3, 8, 8}));
  ZS_ASSERT_OK(g.Reduction(CUDNN_REDUCE_TENSOR_ADD, x, y3));
  ZS_ASSERT_OK_AND_ASSIGN(auto y4, g.Virtual({2, 4, 8, 8}));
  const absl::Status s = g.Reduction(CUDNN_REDUCE_TENSOR_ADD, x, y4);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("(OPERATION_REDUCTION ADD): dims [2,4,8,8] do not broadcast to "
                                     "[2,6,8,8] (each must equal the other's or be 1, or divide it)"));
}

// ---------------------------------------------------------------- convolution

struct ConvCase {
  const char* name;
  Conv2dGeometry g;
};

Conv2dGeometry Geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh,
                        int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                        int64_t dw, int64_t groups) {
  Conv2dGeometry g{};
  g.n = n, g.c = c, g.h = h, g.w = w, g.o = o, g.kh = kh, g.kw = kw;
  g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh, g.dw = dw, g.groups = groups;
  g.oh = ConvOutputSize(h, kh, sh, ph, dh);
  g.ow = ConvOutputSize(w, kw, sw, pw, dw);
  return g;
}

std::vector<ConvCase> ConvCases() {
  return {
      {"3x3 same", Geometry(2, 8, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1)},
      {"3x3 stride 2", Geometry(1, 3, 17, 13, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1)},
      {"7x7 stride 2 pad 3 (ResNet stem)", Geometry(2, 3, 32, 32, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1)},
      {"1x1", Geometry(4, 7, 5, 3, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1)},
      {"1x1 stride 2 (ResNet downsample)", Geometry(2, 16, 8, 8, 32, 1, 1, 2, 2, 0, 0, 1, 1, 1)},
      {"dilation 2", Geometry(2, 4, 11, 10, 6, 3, 3, 1, 1, 2, 2, 2, 2, 1)},
      {"groups 3, 3x5, stride (2,1), pad (1,2), dilation (1,2)",
       Geometry(2, 12, 9, 11, 6, 3, 5, 2, 1, 1, 2, 1, 2, 3)},
      {"depthwise 3x3", Geometry(1, 8, 5, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8)},
      {"depthwise multiplier 2", Geometry(2, 8, 7, 6, 16, 3, 3, 2, 2, 1, 1, 1, 1, 8)},
      {"odd: 1x3 on a 1-row image", Geometry(3, 5, 1, 7, 3, 1, 3, 1, 1, 0, 1, 1, 1, 1)},
      {"kernel covers the image", Geometry(2, 3, 5, 5, 4, 5, 5, 1, 1, 0, 0, 1, 1, 1)},
      {"stride (1,3), asymmetric pad", Geometry(1, 6, 10, 14, 9, 3, 2, 1, 3, 0, 1, 1, 1, 3)},
      {"single everything", Geometry(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1)},
  };
}

TEST(CudnnGraphFinalize, ConvolutionGraphs) {
  int64_t finalized = 0;
  for (const ConvCase& c : ConvCases()) {
    ASSERT_GT(c.g.oh, 0) << c.name;
    ASSERT_GT(c.g.ow, 0) << c.name;
    for (ConvGraphPass pass :
         {ConvGraphPass::kForward, ConvGraphPass::kBackwardData, ConvGraphPass::kBackwardFilter}) {
      for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
        SCOPED_TRACE(absl::StrCat(c.name, " ", ConvGraphPassName(pass), " ", DTypeName(dtype)));
        CudnnGraph g;
        ZS_ASSERT_OK(BuildConvGraph(g, pass, c.g, dtype));
        EXPECT_EQ(g.num_operations(), 1);
        ZS_ASSERT_OK(g.FinalizeGraph(nullptr));
        ++finalized;
      }
    }
  }
  EXPECT_EQ(finalized, 13 * 3 * 3);
}

// A filter whose C dim is not the input's C / groups: cuDNN refuses the operation.
TEST(CudnnGraphFinalize, ConvolutionWithWrongFilterChannelsIsRefusedByName) {
  CudnnGraph g;
  const CudnnDims x{1, 4, 8, 8}, w{8, 3, 3, 3}, y{1, 8, 6, 6};
  ZS_ASSERT_OK_AND_ASSIGN(auto tx, g.Tensor(1, CUDNN_DATA_FLOAT, x, PackedStrides(x)));
  ZS_ASSERT_OK_AND_ASSIGN(auto tw, g.Tensor(2, CUDNN_DATA_FLOAT, w, PackedStrides(w)));
  ZS_ASSERT_OK_AND_ASSIGN(auto ty, g.Tensor(3, CUDNN_DATA_FLOAT, y, PackedStrides(y)));
  ZS_ASSERT_OK_AND_ASSIGN(auto conv, g.Convolution({0, 0}, {1, 1}, {1, 1}));
  const absl::Status s = g.ConvForward(conv, tx, tw, ty);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("operation 0 (OPERATION_CONVOLUTION_FORWARD)"));
}

// An output of the wrong spatial size (8x8 with a 3x3 kernel and no padding is 6x6).
TEST(CudnnGraphFinalize, ConvolutionWithWrongOutputSizeIsRefused) {
  CudnnGraph g;
  const CudnnDims x{1, 4, 8, 8}, w{8, 4, 3, 3}, y{1, 8, 5, 5};
  ZS_ASSERT_OK_AND_ASSIGN(auto tx, g.Tensor(1, CUDNN_DATA_FLOAT, x, PackedStrides(x)));
  ZS_ASSERT_OK_AND_ASSIGN(auto tw, g.Tensor(2, CUDNN_DATA_FLOAT, w, PackedStrides(w)));
  ZS_ASSERT_OK_AND_ASSIGN(auto ty, g.Tensor(3, CUDNN_DATA_FLOAT, y, PackedStrides(y)));
  ZS_ASSERT_OK_AND_ASSIGN(auto conv, g.Convolution({0, 0}, {1, 1}, {1, 1}));
  absl::Status s = g.ConvForward(conv, tx, tw, ty);
  if (s.ok()) s = g.FinalizeGraph(nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("OPERATION_CONVOLUTION_FORWARD"));
}

// ---------------------------------------------------------------- the graph class

// A, B, C of a matmul whose inner dims disagree ([4, 8] @ [7, 5]).
TEST(CudnnGraphFinalize, MismatchedMatmulIsRefusedByName) {
  CudnnGraph g;
  const CudnnDims a{1, 1, 4, 8}, b{1, 1, 7, 5}, c{1, 1, 4, 5};
  ZS_ASSERT_OK_AND_ASSIGN(auto ta, g.Tensor(1, CUDNN_DATA_BFLOAT16, a, PackedStrides(a)));
  ZS_ASSERT_OK_AND_ASSIGN(auto tb, g.Tensor(2, CUDNN_DATA_BFLOAT16, b, PackedStrides(b)));
  ZS_ASSERT_OK_AND_ASSIGN(auto tc, g.Tensor(3, CUDNN_DATA_FLOAT, c, PackedStrides(c)));
  const absl::Status s = g.Matmul(ta, tb, tc);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("cuDNN refused to finalize operation 0 (OPERATION_MATMUL)"));
  EXPECT_THAT(s.message(), HasSubstr("CUDNN_STATUS_BAD_PARAM"));
  EXPECT_EQ(g.num_operations(), 0);
}

TEST(CudnnGraphFinalize, MatchingMatmulFinalizes) {
  CudnnGraph g;
  const CudnnDims a{1, 1, 4, 8}, b{1, 1, 8, 5}, c{1, 1, 4, 5};
  ZS_ASSERT_OK_AND_ASSIGN(auto ta, g.Tensor(1, CUDNN_DATA_BFLOAT16, a, PackedStrides(a)));
  ZS_ASSERT_OK_AND_ASSIGN(auto tb, g.Tensor(2, CUDNN_DATA_BFLOAT16, b, PackedStrides(b)));
  ZS_ASSERT_OK_AND_ASSIGN(auto tc, g.Tensor(3, CUDNN_DATA_FLOAT, c, PackedStrides(c)));
  ZS_ASSERT_OK(g.Matmul(ta, tb, tc));
  ZS_ASSERT_OK(g.FinalizeGraph(nullptr));
  // Idempotent with the same handle; another handle cannot be given afterwards.
  ZS_ASSERT_OK(g.FinalizeGraph(nullptr));
  const absl::Status again = g.FinalizeGraph(reinterpret_cast<cudnnHandle_t>(uintptr_t{16}));
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CudnnGraphFinalize, PointwiseOfUnbroadcastableShapesIsRefusedByName) {
  CudnnGraph g;
  ZS_ASSERT_OK_AND_ASSIGN(auto x, g.Tensor(1, CUDNN_DATA_FLOAT, {1, 1, 4, 4}, {16, 16, 4, 1}));
  ZS_ASSERT_OK_AND_ASSIGN(auto b, g.Tensor(2, CUDNN_DATA_FLOAT, {1, 1, 3, 3}, {9, 9, 3, 1}));
  ZS_ASSERT_OK_AND_ASSIGN(auto y, g.Tensor(3, CUDNN_DATA_FLOAT, {1, 1, 4, 4}, {16, 16, 4, 1}));
  const absl::Status s = g.Pointwise(CUDNN_POINTWISE_ADD, x, b, nullptr, y);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("operation 0 (OPERATION_POINTWISE ADD): dims [1,1,3,3]"));
  // A row vector broadcasts.
  ZS_ASSERT_OK_AND_ASSIGN(auto r, g.Tensor(4, CUDNN_DATA_FLOAT, {1, 1, 4, 1}, {4, 4, 1, 1}));
  ZS_ASSERT_OK(g.Pointwise(CUDNN_POINTWISE_SUB, x, r, nullptr, y));
}

TEST(CudnnGraphFinalize, ReductionToAnUnrelatedShapeIsRefusedByName) {
  CudnnGraph g;
  ZS_ASSERT_OK_AND_ASSIGN(auto x, g.Virtual({2, 3, 8, 8}));
  ZS_ASSERT_OK_AND_ASSIGN(auto y, g.Virtual({2, 3, 7, 1}));
  const absl::Status s = g.Reduction(CUDNN_REDUCE_TENSOR_MAX, x, y);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("operation 0 (OPERATION_REDUCTION MAX)"));
}

TEST(CudnnGraphFinalize, ReshapeChangingTheSizeIsRefusedByName) {
  CudnnGraph g;
  ZS_ASSERT_OK_AND_ASSIGN(auto x, g.Virtual({1, 2, 4, 8}));
  ZS_ASSERT_OK_AND_ASSIGN(auto y, g.Virtual({1, 2, 8, 8}));
  const absl::Status s = g.Reshape(x, y);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("operation 0 (OPERATION_RESHAPE)"));
}

TEST(CudnnGraphFinalize, NegativeStrideIsRefusedByName) {
  CudnnGraph g;
  const absl::Status s = g.Tensor(7, CUDNN_DATA_HALF, {1, 2, 4, 4}, {32, 16, -4, 1}).status();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(),
              HasSubstr("cuDNN refused to finalize the TENSOR descriptor uid 7 dims [1,2,4,4] "
                        "strides [32,16,-4,1]: CUDNN_STATUS_BAD_PARAM"));
}

// Two operations writing one tensor: every operation finalizes, the graph does not.
TEST(CudnnGraphFinalize, TwoWritersOfOneTensorAreRefusedByTheGraph) {
  CudnnGraph g;
  const CudnnDims d{1, 1, 4, 4};
  ZS_ASSERT_OK_AND_ASSIGN(auto x, g.Tensor(1, CUDNN_DATA_FLOAT, d, PackedStrides(d)));
  ZS_ASSERT_OK_AND_ASSIGN(auto b, g.Tensor(2, CUDNN_DATA_FLOAT, d, PackedStrides(d)));
  ZS_ASSERT_OK_AND_ASSIGN(auto y, g.Tensor(3, CUDNN_DATA_FLOAT, d, PackedStrides(d)));
  ZS_ASSERT_OK(g.Pointwise(CUDNN_POINTWISE_ADD, x, b, nullptr, y));
  ZS_ASSERT_OK(g.Pointwise(CUDNN_POINTWISE_MUL, x, b, nullptr, y));
  const absl::Status s = g.FinalizeGraph(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);  // as Build reports it: the caller falls back
  EXPECT_THAT(s.message(), HasSubstr("cuDNN refused the operation graph of 2 operations"));
  EXPECT_FALSE(g.graph_finalized());
}

TEST(CudnnGraphFinalize, GraphWithoutOperationsIsAnError) {
  CudnnGraph g;
  EXPECT_EQ(g.FinalizeGraph(nullptr).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(g.graph_finalized());
}

}  // namespace
}  // namespace zeroshard::cuda
