// LayerNorm forward and backward over rows, fp32 sums with shuffles, the
// per-element math of kernels/math/layernorm_ops.h.
//
// Rows up to kHeld * 1024 elements are read once into registers: thread t of a
// row holds the elements (p * threads + t) * kN .. + kN - 1, p < kHeld / kN,
// loaded as 16-byte vectors (kN = 4 f32 or 8 bf16/f16) when every operand's
// base and row stride allow it and cols is a multiple of kN (VectorRows,
// common.cuh), one element at a time otherwise (kN = 1, fewer held elements).
// weight and bias come in their own dtype (f32, or the bf16 / f16 of a
// mixed-precision model: no cast kernel before the launch) and are widened to
// f32 as they are read (ParamPack, common.cuh), in vectors where aligned.
//   forward:  a warp per row (four rows per block) up to 32 * kHeld elements
//             (768 on the vector path), else a block of up to 1024 threads; the mean, then the
//             variance around it (as the CPU kernel), both from registers; then out, mean, rstd.
//   backward: a block per LayerNormRowsPerBlock rows, one row at a time; dy and
//             x of the row read once; each thread owns the same columns in
//             every row and keeps their partial dweight / dbias sums in
//             registers, adding the rows in order, and writes them to
//             `partials` at the end (no atomics: the same bits every run).
//   param grads: per column, the partials of each slice of blocks summed in
//             block order, then the slices in order.
// Longer rows take the block-per-row kernels below that read x (and dy) once
// per pass.
#include "zeroshard/kernels/cuda/common.cuh"
#include "zeroshard/kernels/cuda/layernorm_launch.h"
#include "zeroshard/kernels/math/layernorm_ops.h"

namespace zeroshard::cuda {

namespace {

// Elements per thread held in registers (as T; converted to float on use), for
// the vector path and the scalar one (whose every element has its own address),
// sized to stay within 64 registers (check_resources.sh): a warp takes a row of
// GPT-2's 768 in the forward.
constexpr int kForwardHeldVec = 24, kForwardHeldScalar = 8;
constexpr int kBackwardHeldVec = 8, kBackwardHeldScalar = 4;
// Rows per block when a warp takes a row.
constexpr int kWarpRowsPerBlock = 4;

// Threads per row for `held` elements each: a multiple of the warp, or 0 when
// the row needs more than 1024.
int HeldThreads(int64_t cols, int held) {
  const int64_t t = (cols + held - 1) / held;
  const int64_t threads = (t + kWarp - 1) / kWarp * kWarp;
  return threads <= 1024 ? static_cast<int>(threads) : 0;
}

// Threads per row of the long-row kernels: up to 512 (4 elements each).
int LayerNormRowThreads(int64_t cols) { return RowThreads(cols, 512, 4); }

// Whether the vector path may be taken for this parameter: an f32 one only when
// it is 16-byte aligned, as when the kernels took f32 parameters only (a 16-bit
// one reached them as a fresh, aligned f32 copy, so it never restricts it).
// The path fixes the order of the row sums, so the results stay bitwise those
// of the cast. The kernels read a parameter whatever its alignment (ParamPack).
bool ParamAllowsVectors(const void* p, int dtype) { return dtype != kF32 || VectorRows(p, 0, 4); }

// A row held in registers: x rows of `cols` with `threads` threads per row.
template <typename T, typename TOut, int kN, int kHeld>
__global__ void __launch_bounds__(1024)
    ForwardRowsHeld(const T* x, int64_t xs, F32Param w, F32Param b, float eps, TOut* out,
                    int64_t os, float* mean, float* rstd, int64_t rows, int cols, int threads) {
  constexpr int kPacks = kHeld / kN;
  static_assert(kHeld % kN == 0);
  __shared__ float scratch[kWarp];
  const bool warp_rows = threads == kWarp;
  const int64_t r = warp_rows
                        ? static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + threadIdx.x / kWarp
                        : blockIdx.x;
  const int t = warp_rows ? threadIdx.x % kWarp : threadIdx.x;
  if (r >= rows) return;  // a whole warp (warp rows only: a block has one row otherwise)
  auto row_sum = [&](float v) { return warp_rows ? WarpSum(v) : BlockSum(v, scratch); };
  const T* xr = x + r * xs;
  Pack<T, kN> held[kPacks] = {};
  float acc = 0.0f;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int i = (p * threads + t) * kN;
    if (i < cols) {
      held[p] = LoadPack<kN>(xr + i);
#pragma unroll
      for (int k = 0; k < kN; ++k) acc += ToFloat(held[p].v[k]);
    }
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float m = row_sum(acc) * inv_cols;
  acc = 0.0f;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    if ((p * threads + t) * kN < cols) {
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        const float d = ToFloat(held[p].v[k]) - m;
        acc += d * d;
      }
    }
  }
  const float rs = LayerNormRstd(row_sum(acc) * inv_cols, eps);
  TOut* o = out + r * os;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int i = (p * threads + t) * kN;
    if (i < cols) {
      const Pack<float, kN> wp = ParamPack<kN>(w, i), bp = ParamPack<kN>(b, i);
      Pack<TOut, kN> y;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        y.v[k] = FromFloat<TOut>(LayerNormElement(ToFloat(held[p].v[k]), m, rs, wp.v[k], bp.v[k]));
      }
      StorePack<kN>(o + i, y);
    }
  }
  if (t == 0) {
    if (mean != nullptr) mean[r] = m;
    if (rstd != nullptr) rstd[r] = rs;
  }
}

struct Sum2 {
  float g, gx;
};

__device__ __forceinline__ Sum2 BlockSum2(Sum2 v, Sum2* scratch) {
  return BlockReduce(v, scratch, Sum2{0.0f, 0.0f}, [](Sum2 s) {
    return Sum2{WarpSum(s.g), WarpSum(s.gx)};
  });
}

// The backward of rows [blockIdx.x * per_block, + per_block) with blockDim.x
// threads per row, each holding kHeld elements of dy and of x.
template <typename T, typename TOut, int kN, int kHeld>
__global__ void __launch_bounds__(1024)
    BackwardRowsHeld(const T* dy, int64_t ds, const T* x, int64_t xs, const float* mean,
                     const float* rstd, F32Param w, TOut* dx, int64_t os, float* partials,
                     int64_t rows, int cols, int64_t per_block) {
  constexpr int kPacks = kHeld / kN;
  static_assert(kHeld % kN == 0);
  __shared__ Sum2 scratch[kWarp];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int threads = blockDim.x, t = threadIdx.x;
  // This thread's columns' partial sums over the block's rows, in row order.
  float pw[kPacks][kN], pb[kPacks][kN];
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
#pragma unroll
    for (int k = 0; k < kN; ++k) pw[p][k] = pb[p][k] = 0.0f;
  }
  const int64_t r0 = blockIdx.x * per_block;
  const int64_t r1 = r0 + per_block < rows ? r0 + per_block : rows;
  for (int64_t r = r0; r < r1; ++r) {
    const T* dr = dy + r * ds;
    const T* xr = x + r * xs;
    const float m = mean[r], rs = rstd[r];
    Pack<T, kN> hd[kPacks] = {}, hx[kPacks] = {};
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int i = (p * threads + t) * kN;
      if (i < cols) {
        hd[p] = LoadPack<kN>(dr + i);
        hx[p] = LoadPack<kN>(xr + i);
      }
    }
    Sum2 mg{0.0f, 0.0f};
    if (dx != nullptr) {
      Sum2 acc{0.0f, 0.0f};
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int i = (p * threads + t) * kN;
        if (i < cols) {
          const Pack<float, kN> wp = ParamPack<kN>(w, i);
#pragma unroll
          for (int k = 0; k < kN; ++k) {
            const float g = ToFloat(hd[p].v[k]) * wp.v[k];
            acc.g += g;
            acc.gx += g * ((ToFloat(hx[p].v[k]) - m) * rs);
          }
        }
      }
      mg = BlockSum2(acc, scratch);
      mg.g *= inv_cols;
      mg.gx *= inv_cols;
    }
    // dx may be dy or x: this thread writes only the elements it read.
    TOut* o = dx != nullptr ? dx + r * os : nullptr;
    const F32Param wo{o != nullptr ? w.p : nullptr, w.dtype, 1.0f};  // no dx: no weight read
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int i = (p * threads + t) * kN;
      if (i < cols) {
        Pack<TOut, kN> y;
        const Pack<float, kN> wp = ParamPack<kN>(wo, i);
#pragma unroll
        for (int k = 0; k < kN; ++k) {
          const float d = ToFloat(hd[p].v[k]);
          const float xhat = (ToFloat(hx[p].v[k]) - m) * rs;
          pw[p][k] += d * xhat;
          pb[p][k] += d;
          y.v[k] = FromFloat<TOut>(LayerNormGradInput(d * wp.v[k], xhat, rs, mg.g, mg.gx));
        }
        if (o != nullptr) StorePack<kN>(o + i, y);
      }
    }
  }
  if (partials == nullptr) return;
  float* bw = partials + static_cast<int64_t>(blockIdx.x) * 2 * cols;
  float* bb = bw + cols;
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const int i = (p * threads + t) * kN;
    if (i < cols) {
      Pack<float, kN> a, c;
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        a.v[k] = pw[p][k];
        c.v[k] = pb[p][k];
      }
      StorePack<kN>(bw + i, a);
      StorePack<kN>(bb + i, c);
    }
  }
}

// Rows too long for registers: a block per row, two passes over x as the CPU
// kernel (the mean, then the variance around it), then out.
template <typename T, typename TOut>
__global__ void ForwardRows(const T* x, int64_t xs, F32Param w, F32Param b, float eps,
                            TOut* out, int64_t os, float* mean, float* rstd, int64_t cols) {
  __shared__ float scratch[kWarp];
  const T* xr = x + blockIdx.x * xs;
  TOut* o = out + blockIdx.x * os;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) acc += ToFloat(xr[i]);
  const float m = BlockSum(acc, scratch) * inv_cols;
  acc = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float d = ToFloat(xr[i]) - m;
    acc += d * d;
  }
  const float var = BlockSum(acc, scratch) * inv_cols;
  const float rs = LayerNormRstd(var, eps);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    o[i] = FromFloat<TOut>(LayerNormElement(ToFloat(xr[i]), m, rs, ParamAt(w, i), ParamAt(b, i)));
  }
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[blockIdx.x] = m;
    if (rstd != nullptr) rstd[blockIdx.x] = rs;
  }
}

// Rows too long for registers: dy and x read per pass, the partial sums
// accumulated in `partials` (each column owned by one thread).
template <typename T, typename TOut>
__global__ void BackwardRows(const T* dy, int64_t ds, const T* x, int64_t xs, const float* mean,
                             const float* rstd, F32Param w, TOut* dx, int64_t os,
                             float* partials, int64_t rows, int64_t cols, int64_t per_block) {
  __shared__ float scratch[kWarp];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  // This block's partial sums [2, cols]: each column is owned by one thread,
  // which adds the rows in order.
  float* pw = partials != nullptr ? partials + blockIdx.x * 2 * cols : nullptr;
  float* pb = pw != nullptr ? pw + cols : nullptr;
  if (pw != nullptr) {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) pw[i] = pb[i] = 0.0f;
  }
  const int64_t r0 = blockIdx.x * per_block;
  const int64_t r1 = r0 + per_block < rows ? r0 + per_block : rows;
  for (int64_t r = r0; r < r1; ++r) {
    const T* dr = dy + r * ds;
    const T* xr = x + r * xs;
    const float m = mean[r], rs = rstd[r];
    float mean_g = 0.0f, mean_gx = 0.0f;
    if (dx != nullptr) {
      float ag = 0.0f, agx = 0.0f;
      for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float g = ToFloat(dr[i]) * ParamAt(w, i);
        ag += g;
        agx += g * ((ToFloat(xr[i]) - m) * rs);
      }
      mean_g = BlockSum(ag, scratch) * inv_cols;
      mean_gx = BlockSum(agx, scratch) * inv_cols;
    }
    TOut* o = dx != nullptr ? dx + r * os : nullptr;
    // Reads dy[i] and x[i] before writing dx[i] (dx may be dy or x), and only
    // the elements this thread read in the sums above.
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
      const float d = ToFloat(dr[i]);
      const float xhat = (ToFloat(xr[i]) - m) * rs;
      if (pw != nullptr) {
        pw[i] += d * xhat;
        pb[i] += d;
      }
      if (o != nullptr) {
        o[i] = FromFloat<TOut>(LayerNormGradInput(d * ParamAt(w, i), xhat, rs, mean_g, mean_gx));
      }
    }
    if (dx != nullptr) __syncthreads();  // the next row's sums reuse scratch
  }
}

// Per column c: slice s of the blocks (kParamSlices slices of consecutive
// blocks) summed in block order by thread (s, c), then the slices in order.
// blockDim.x = kWarp * kParamSlices: lanes are columns (coalesced reads).
constexpr int kParamSlices = 16;

template <typename G>
__global__ void ParamGrad(const float* partials, int64_t blocks, int64_t cols, int64_t offset,
                          G* grad, int64_t gs, bool accumulate) {
  __shared__ float slice_sums[kParamSlices][kWarp];
  const int lane = threadIdx.x % kWarp, s = threadIdx.x / kWarp;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarp + lane;
  const int64_t per = (blocks + kParamSlices - 1) / kParamSlices;
  const int64_t k0 = s * per, k1 = k0 + per < blocks ? k0 + per : blocks;
  float acc = 0.0f;
  if (c < cols) {
    for (int64_t k = k0; k < k1; ++k) acc += partials[k * 2 * cols + offset + c];
  }
  slice_sums[s][lane] = acc;
  __syncthreads();
  if (s != 0 || c >= cols) return;
  acc = 0.0f;
  for (int j = 0; j < kParamSlices; ++j) acc += slice_sums[j][lane];
  G* dst = grad + c * gs;
  *dst = FromFloat<G>(accumulate ? ToFloat(*dst) + acc : acc);
}

}  // namespace

int LaunchLayerNormForward(int x_dtype, int out_dtype, const void* x, int64_t x_stride,
                           int w_dtype, const void* weight, int b_dtype, const void* bias,
                           float eps, void* out, int64_t out_stride, float* mean, float* rstd,
                           int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff || !IsFloatCode(w_dtype) || !IsFloatCode(b_dtype)) return InvalidValue();
  const F32Param w{weight, w_dtype, 1.0f}, b{bias, b_dtype, 0.0f};
  return DispatchFloatPair(x_dtype, out_dtype, [&]<typename T, typename TOut>() {
    const T* xp = static_cast<const T*>(x);
    TOut* op = static_cast<TOut*>(out);
    constexpr int kV = VecElems<T, TOut, float>();
    const bool vec = cols % kV == 0 && VectorRows(x, x_stride, sizeof(T)) &&
                     VectorRows(out, out_stride, sizeof(TOut)) &&
                     ParamAllowsVectors(weight, w_dtype) && ParamAllowsVectors(bias, b_dtype);
    const int threads = HeldThreads(cols, vec ? kForwardHeldVec : kForwardHeldScalar);
    if (threads == 0) {
      Launch(ForwardRows<T, TOut>, static_cast<int>(rows), LayerNormRowThreads(cols), 0,
             AsStream(stream), xp, x_stride, w, b, eps, op, out_stride, mean, rstd, cols);
      return Launched();
    }
    const bool warp_rows = threads == kWarp;
    const int block = warp_rows ? kWarp * kWarpRowsPerBlock : threads;
    const int grid =
        static_cast<int>(warp_rows ? (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock : rows);
    if (vec) {
      Launch(ForwardRowsHeld<T, TOut, kV, kForwardHeldVec>, grid, block, 0, AsStream(stream), xp,
             x_stride, w, b, eps, op, out_stride, mean, rstd, rows, cols, threads);
    } else {
      Launch(ForwardRowsHeld<T, TOut, 1, kForwardHeldScalar>, grid, block, 0, AsStream(stream), xp,
             x_stride, w, b, eps, op, out_stride, mean, rstd, rows, cols, threads);
    }
    return Launched();
  });
}

int LaunchLayerNormBackward(int in_dtype, int dx_dtype, const void* dy, int64_t dy_stride,
                            const void* x, int64_t x_stride, const float* mean, const float* rstd,
                            int w_dtype, const void* weight, void* dx, int64_t dx_stride,
                            float* partials, int64_t rows, int64_t cols, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (!IsFloatCode(w_dtype)) return InvalidValue();
  const F32Param w{weight, w_dtype, 1.0f};
  const int64_t per = LayerNormRowsPerBlock(rows);
  const int blocks = static_cast<int>(LayerNormBackwardBlocks(rows));
  return DispatchFloatPair(
      in_dtype, dx != nullptr ? dx_dtype : kF32, [&]<typename T, typename TOut>() {
        const T* dp = static_cast<const T*>(dy);
        const T* xp = static_cast<const T*>(x);
        TOut* op = static_cast<TOut*>(dx);
        constexpr int kV = VecElems<T, TOut, float>();
        const bool vec = cols % kV == 0 && VectorRows(dy, dy_stride, sizeof(T)) &&
                         VectorRows(x, x_stride, sizeof(T)) &&
                         VectorRows(dx, dx_stride, sizeof(TOut)) &&
                         ParamAllowsVectors(weight, w_dtype) && VectorRows(partials, 0, 4);
        const int threads = HeldThreads(cols, vec ? kBackwardHeldVec : kBackwardHeldScalar);
        if (threads == 0) {
          Launch(BackwardRows<T, TOut>, blocks, LayerNormRowThreads(cols), 0, AsStream(stream), dp,
                 dy_stride, xp, x_stride, mean, rstd, w, op, dx_stride, partials, rows, cols, per);
          return Launched();
        }
        if (vec) {
          Launch(BackwardRowsHeld<T, TOut, kV, kBackwardHeldVec>, blocks, threads, 0,
                 AsStream(stream), dp, dy_stride, xp, x_stride, mean, rstd, w, op, dx_stride,
                 partials, rows, cols, per);
        } else {
          Launch(BackwardRowsHeld<T, TOut, 1, kBackwardHeldScalar>, blocks, threads, 0,
                 AsStream(stream), dp, dy_stride, xp, x_stride, mean, rstd, w, op, dx_stride,
                 partials, rows, cols, per);
        }
        return Launched();
      });
}

int LaunchLayerNormParamGrads(const float* partials, int64_t blocks, int64_t cols, int dw_dtype,
                              void* dweight, int64_t dw_stride, int db_dtype, void* dbias,
                              int64_t db_stride, bool accumulate, void* stream) {
  if (cols == 0) return 0;
  const int grid = GridFor(cols, kWarp, 0x7fffffff);
  auto launch = [&](int dtype, void* grad, int64_t stride, int64_t offset) {
    if (grad == nullptr) return 0;
    return DispatchFloat(dtype, [&]<typename G>() {
      Launch(ParamGrad<G>, grid, kWarp * kParamSlices, 0, AsStream(stream), partials, blocks, cols,
             offset, static_cast<G*>(grad), stride, accumulate);
      return Launched();
    });
  };
  if (const int rc = launch(dw_dtype, dweight, dw_stride, 0); rc != 0) return rc;
  return launch(db_dtype, dbias, db_stride, cols);
}

}  // namespace zeroshard::cuda
