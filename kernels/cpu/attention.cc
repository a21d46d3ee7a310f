// Attention on the CPU: per (batch, head) in the forward and per (batch, kv
// head) group of query heads in the backward, blocks of kRowBlock query rows
// go through GEMMs (kernels/cpu/gemm.h) and vectorised row loops; see
// kernels/attention.h for the math.
#include "zeroshard/kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "zeroshard/kernels/cpu/gemm.h"
#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/kernels/cpu/loops.h"
#include "zeroshard/kernels/math/attention_math.h"
#include "zeroshard/kernels/math/fast_math.h"

namespace zeroshard::cpu {

namespace {

// Query rows per block: big enough for GEMM efficiency, small enough that a
// causal block skips most of the masked upper triangle and the score block
// (kRowBlock x T floats) stays in cache.
constexpr int64_t kRowBlock = 64;

// ---------------------------------------------------------------- head access

// One head's T x D matrix as fp32 rows: element (t, d) at data[t * row_stride + d].
struct ConstRows {
  const float* data;
  int64_t row_stride;
};
struct Rows {
  float* data;
  int64_t row_stride;
  bool in_place;  // data points into the tensor itself (else a scratch copy)
};

// Element offset of head (b, h) in a [B, H, T, D] tensor.
int64_t HeadOffset(const Tensor& t, int64_t b, int64_t h) { return b * t.stride(0) + h * t.stride(1); }

// True when head rows can be addressed in place as an fp32 row-major matrix.
bool RowsInPlace(const Tensor& t, int64_t T, int64_t D) {
  return t.dtype() == DType::kF32 && (D == 1 || t.stride(3) == 1) &&
         (T == 1 || t.stride(2) >= D);
}

int64_t InPlaceRowStride(const Tensor& t, int64_t T, int64_t D) { return T == 1 ? D : t.stride(2); }

// Head (b, h) of `t` as fp32 rows: in place when possible, else converted into
// `scratch` (T x D, contiguous).
ConstRows LoadHead(const Tensor& t, int64_t b, int64_t h, int64_t T, int64_t D, float* scratch) {
  if (RowsInPlace(t, T, D)) {
    return {static_cast<const float*>(t.raw_data()) + HeadOffset(t, b, h), InPlaceRowStride(t, T, D)};
  }
  const int64_t s2 = t.stride(2), s3 = t.stride(3);
  DispatchFloatDType(t.dtype(), [&]<typename S>() {
    const S* src = static_cast<const S*>(t.raw_data()) + HeadOffset(t, b, h);
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t d = 0; d < D; ++d) scratch[i * D + d] = ConvertElement<float>(src[i * s2 + d * s3]);
    }
  });
  return {scratch, D};
}

// Where head (b, h) of output `t` is computed: in place when possible, else in
// `scratch`, to be written back by StoreHead.
Rows OutputHead(const Tensor& t, int64_t b, int64_t h, int64_t T, int64_t D, float* scratch) {
  if (RowsInPlace(t, T, D)) {
    return {static_cast<float*>(t.raw_data()) + HeadOffset(t, b, h), InPlaceRowStride(t, T, D), true};
  }
  return {scratch, D, false};
}

void StoreHead(const Rows& rows, const Tensor& t, int64_t b, int64_t h, int64_t T, int64_t D) {
  if (rows.in_place) return;
  const int64_t s2 = t.stride(2), s3 = t.stride(3);
  DispatchFloatDType(t.dtype(), [&]<typename S>() {
    S* dst = static_cast<S*>(t.raw_data()) + HeadOffset(t, b, h);
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t d = 0; d < D; ++d) dst[i * s2 + d * s3] = ConvertElement<S>(rows.data[i * D + d]);
    }
  });
}

void ZeroRows(const Rows& rows, int64_t T, int64_t D) {
  for (int64_t i = 0; i < T; ++i) std::fill_n(rows.data + i * rows.row_stride, D, 0.0f);
}

// The lse values of head (b, h): element t at ptr[t * stride].
struct LseRow {
  float* ptr;
  int64_t stride;
};
LseRow LseHead(const Tensor& lse, int64_t b, int64_t h) {
  return {static_cast<float*>(lse.raw_data()) + b * lse.stride(0) + h * lse.stride(1), lse.stride(2)};
}

// ---------------------------------------------------------------- GEMM views

ConstMatrixRef RowBlock(const ConstRows& m, int64_t r0, int64_t rows, int64_t D) {
  return {m.data + r0 * m.row_stride, rows, D, m.row_stride, 1};
}
MatrixRef RowBlock(const Rows& m, int64_t r0, int64_t rows, int64_t D) {
  return {m.data + r0 * m.row_stride, rows, D, m.row_stride, 1};
}
// The first `cols` rows of m, transposed: D x cols.
ConstMatrixRef Transposed(const ConstRows& m, int64_t cols, int64_t D) {
  return {m.data, D, cols, 1, m.row_stride};
}
// A rows x cols block stored row-major with leading dimension cols, or its transpose.
ConstMatrixRef Block(const float* p, int64_t rows, int64_t cols) { return {p, rows, cols, cols, 1}; }
ConstMatrixRef BlockT(const float* p, int64_t rows, int64_t cols) { return {p, cols, rows, 1, cols}; }

// Number of key columns a block of query rows [r0, r0 + rows) needs.
int64_t BlockCols(const AttentionDims& dims, int64_t r0, int64_t rows) {
  return dims.causal ? r0 + rows : dims.seq;
}

// Query heads per kv head (Note [Grouped-query attention] in kernels/attention.h).
int64_t GroupSize(const AttentionDims& dims) { return dims.heads / dims.kv_heads; }

// Runs body(i, j, scratch) for i < n, j < m (task i * m + j) on OpenMP
// threads, each thread with its own scratch of `scratch_floats`. Always
// inside a parallel region, so every GEMM runs single-threaded on its thread
// whatever the thread count.
template <typename Body>
void ForEachTask(int64_t n, int64_t m, int64_t scratch_floats, const Body& body) {
  const int64_t tasks = n * m;
#pragma omp parallel
  {
    std::vector<float> scratch(static_cast<size_t>(scratch_floats));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) body(t / m, t % m, scratch.data());
  }
}

}  // namespace

// ---------------------------------------------------------------- forward

void AttentionForward(const AttentionDims& dims, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& out, const Tensor& lse) {
  const int64_t T = dims.seq, D = dims.head_dim;
  const int64_t R = std::min(kRowBlock, T);
  const int64_t td = T * D;
  // Scratch: scores R x T, row lse T, then q, k, v, out heads (used when not in place).
  const int64_t scratch_floats = R * T + T + 4 * td;
  const int64_t G = GroupSize(dims);
  // One task per query head h; it reads kv head h / G.
  ForEachTask(dims.batch, dims.heads, scratch_floats, [&](int64_t b, int64_t h, float* scratch) {
    float* scores = scratch;
    float* row_lse = scores + R * T;
    float* bufs = row_lse + T;
    const ConstRows Q = LoadHead(q, b, h, T, D, bufs);
    const ConstRows K = LoadHead(k, b, h / G, T, D, bufs + td);
    const ConstRows V = LoadHead(v, b, h / G, T, D, bufs + 2 * td);
    const Rows O = OutputHead(out, b, h, T, D, bufs + 3 * td);
    for (int64_t r0 = 0; r0 < T; r0 += R) {
      const int64_t rows = std::min(R, T - r0);
      const int64_t cols = BlockCols(dims, r0, rows);
      // S = scale Q_r K_c^T.
      Gemm(RowBlock(Q, r0, rows, D), Transposed(K, cols, D), {scores, rows, cols, cols, 1},
           dims.scale, 0.0f);
      // Row softmax over the visible columns; masked ones become exactly 0.
      RunWithIsa([&] {
        for (int64_t i = 0; i < rows; ++i) {
          float* s = scores + i * cols;
          const int64_t n = AttentionVisibleCount(r0 + i, cols, dims.causal);
          const float m = LaneReduce<float>(
              n, -kInfF, [&](int64_t j) { return s[j]; },
              [](float a, float c) { return c > a ? c : a; });
          for (int64_t j = 0; j < n; ++j) s[j] = ExpF(s[j] - m);
          const float l = LaneReduce<float>(
              n, 0.0f, [&](int64_t j) { return s[j]; }, [](float a, float c) { return a + c; });
          const float inv = 1.0f / l;
          for (int64_t j = 0; j < n; ++j) s[j] *= inv;
          for (int64_t j = n; j < cols; ++j) s[j] = 0.0f;
          row_lse[r0 + i] = AttentionLse(m, l);
        }
      });
      // O_r = P V_c.
      Gemm(Block(scores, rows, cols), RowBlock(V, 0, cols, D), RowBlock(O, r0, rows, D), 1.0f,
           0.0f);
    }
    StoreHead(O, out, b, h, T, D);
    const LseRow L = LseHead(lse, b, h);
    for (int64_t t = 0; t < T; ++t) L.ptr[t * L.stride] = row_lse[t];
  });
}

// ---------------------------------------------------------------- backward

void AttentionBackward(const AttentionDims& dims, const Tensor& dout, const Tensor& q,
                       const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                       const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const int64_t T = dims.seq, D = dims.head_dim;
  const int64_t R = std::min(kRowBlock, T);
  const int64_t td = T * D;
  const int64_t G = GroupSize(dims);
  // Scratch: P and dP/dS blocks (R x T each), delta and lse rows (T each),
  // then q, k, v, out, dout, dq, dk, dv heads (used when not in place). The
  // group's query heads reuse the q, out, dout and dq buffers in turn.
  const int64_t scratch_floats = 2 * R * T + 2 * T + 8 * td;
  // One task per (b, kv head j): its G query heads h = j G + g in order of g,
  // each adding into the group's one dK and dV (fp32, rounded once at the
  // store), so the sums are in a fixed order whatever the thread count.
  ForEachTask(dims.batch, dims.kv_heads, scratch_floats, [&](int64_t b, int64_t j, float* scratch) {
    float* probs = scratch;
    float* dscores = probs + R * T;
    float* delta = dscores + R * T;
    float* row_lse = delta + T;
    float* bufs = row_lse + T;
    const ConstRows K = LoadHead(k, b, j, T, D, bufs + td);
    const ConstRows V = LoadHead(v, b, j, T, D, bufs + 2 * td);
    const Rows dK = OutputHead(dk, b, j, T, D, bufs + 6 * td);
    const Rows dV = OutputHead(dv, b, j, T, D, bufs + 7 * td);
    ZeroRows(dK, T, D);
    ZeroRows(dV, T, D);
    for (int64_t h = j * G; h < (j + 1) * G; ++h) {
      const ConstRows Q = LoadHead(q, b, h, T, D, bufs);
      const ConstRows O = LoadHead(out, b, h, T, D, bufs + 3 * td);
      const ConstRows dO = LoadHead(dout, b, h, T, D, bufs + 4 * td);
      const Rows dQ = OutputHead(dq, b, h, T, D, bufs + 5 * td);
      const LseRow L = LseHead(lse, b, h);
      for (int64_t t = 0; t < T; ++t) row_lse[t] = L.ptr[t * L.stride];
      // delta_t = sum_d dO_td O_td.
      RunWithIsa([&] {
        for (int64_t t = 0; t < T; ++t) {
          const float* o = O.data + t * O.row_stride;
          const float* g = dO.data + t * dO.row_stride;
          delta[t] = LaneReduce<float>(
              D, 0.0f, [&](int64_t d) { return g[d] * o[d]; }, [](float a, float c) { return a + c; });
        }
      });
      for (int64_t r0 = 0; r0 < T; r0 += R) {
        const int64_t rows = std::min(R, T - r0);
        const int64_t cols = BlockCols(dims, r0, rows);
        // P = exp(scale Q_r K_c^T - lse), masked entries exactly 0.
        Gemm(RowBlock(Q, r0, rows, D), Transposed(K, cols, D), {probs, rows, cols, cols, 1},
             dims.scale, 0.0f);
        RunWithIsa([&] {
          for (int64_t i = 0; i < rows; ++i) {
            float* p = probs + i * cols;
            const int64_t n = AttentionVisibleCount(r0 + i, cols, dims.causal);
            const float lse_i = row_lse[r0 + i];
            for (int64_t c = 0; c < n; ++c) p[c] = AttentionProb(p[c], lse_i);
            for (int64_t c = n; c < cols; ++c) p[c] = 0.0f;
          }
        });
        // dV_c += P^T dO_r.
        Gemm(BlockT(probs, rows, cols), RowBlock(dO, r0, rows, D), RowBlock(dV, 0, cols, D), 1.0f,
             1.0f);
        // dP = dO_r V_c^T, then dS = P o (dP - delta) in place.
        Gemm(RowBlock(dO, r0, rows, D), Transposed(V, cols, D), {dscores, rows, cols, cols, 1},
             1.0f, 0.0f);
        RunWithIsa([&] {
          for (int64_t i = 0; i < rows; ++i) {
            const float* p = probs + i * cols;
            float* ds = dscores + i * cols;
            const int64_t n = AttentionVisibleCount(r0 + i, cols, dims.causal);
            const float delta_i = delta[r0 + i];
            for (int64_t c = 0; c < n; ++c) ds[c] = AttentionScoreGrad(p[c], ds[c], delta_i);
            for (int64_t c = n; c < cols; ++c) ds[c] = 0.0f;
          }
        });
        // dQ_r = scale dS K_c;  dK_c += scale dS^T Q_r.
        Gemm(Block(dscores, rows, cols), RowBlock(K, 0, cols, D), RowBlock(dQ, r0, rows, D),
             dims.scale, 0.0f);
        Gemm(BlockT(dscores, rows, cols), RowBlock(Q, r0, rows, D), RowBlock(dK, 0, cols, D),
             dims.scale, 1.0f);
      }
      StoreHead(dQ, dq, b, h, T, D);
    }
    StoreHead(dK, dk, b, j, T, D);
    StoreHead(dV, dv, b, j, T, D);
  });
}

}  // namespace zeroshard::cpu
