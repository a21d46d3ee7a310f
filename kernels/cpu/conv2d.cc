#include "zeroshard/kernels/cpu/conv2d.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "zeroshard/kernels/cpu/gemm.h"
#include "zeroshard/kernels/cpu/isa.h"

namespace zeroshard::cpu {

namespace {

// Below this many elements of copying, one thread does it all.
constexpr int64_t kParallelCopy = int64_t{1} << 15;

// A [rows, L] matrix of a chunk laid out in NCHW: row r of sample s starts at
// base + s * sample_stride + r * plane, `plane` contiguous elements long.
struct ChunkMatrix {
  int64_t rows, plane, samples, sample_stride;
};

// dst [rows, samples * plane] (row-major) <- the chunk rows of an NCHW tensor.
void GatherChunk(const ChunkMatrix& m, const float* base, float* dst) {
  const int64_t len = m.samples * m.plane;
#pragma omp parallel for schedule(static) if (m.rows * len >= kParallelCopy && m.rows > 1)
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t s = 0; s < m.samples; ++s) {
      std::memcpy(dst + r * len + s * m.plane, base + s * m.sample_stride + r * m.plane,
                  sizeof(float) * m.plane);
    }
  }
}

// The chunk rows of an NCHW tensor <- src [rows, samples * plane] (+ bias[r]).
void ScatterChunk(const ChunkMatrix& m, const float* src, const float* bias, float* base) {
  const int64_t len = m.samples * m.plane;
#pragma omp parallel for schedule(static) if (m.rows * len >= kParallelCopy && m.rows > 1)
  for (int64_t r = 0; r < m.rows; ++r) {
    const float b = bias != nullptr ? bias[r] : 0.0f;
    for (int64_t s = 0; s < m.samples; ++s) {
      const float* in = src + r * len + s * m.plane;
      float* out = base + s * m.sample_stride + r * m.plane;
      RunWithIsa([&] {
        for (int64_t p = 0; p < m.plane; ++p) out[p] = in[p] + b;
      });
    }
  }
}

// Note [Conv2d GEMM threads]
// The GEMMs of a convolution run as up to kGemmBlocks independent
// single-threaded GEMMs over column blocks of their output, on OpenMP threads
// (Eigen runs single-threaded inside a parallel region), instead of one GEMM
// that Eigen parallelises itself: Eigen's threads spin-wait on each other
// between packed panels, which on a machine with other work costs a scheduler
// time slice per wait (measured: 10-20x slower steps with 2 threads on 2 busy
// cores). The blocks depend only on the shapes, so every output element is
// computed by the same single-threaded GEMM whatever the thread count: the
// results are bitwise the same for any number of threads.
constexpr int64_t kGemmBlocks = 8;
constexpr int64_t kGemmMinBlockCols = 64;

// C = alpha A B + beta C in fixed blocks along C's longer side (columns of B
// and C, or rows of A and C). Always inside a parallel region, so Eigen never
// threads (or spins) itself; one block runs on one thread.
void BlockedGemm(const ConstMatrixRef& a, const ConstMatrixRef& b, const MatrixRef& c, float alpha,
                 float beta) {
  const bool by_cols = c.cols >= c.rows;
  const int64_t extent = by_cols ? c.cols : c.rows;
  const int64_t blocks = std::clamp<int64_t>(extent / kGemmMinBlockCols, 1, kGemmBlocks);
  const int64_t width = (extent + blocks - 1) / blocks;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t j0 = k * width, n = std::min(width, extent - j0);
    if (n <= 0) continue;
    if (by_cols) {
      Gemm(a, {b.data + j0 * b.col_stride, b.rows, n, b.row_stride, b.col_stride},
           {c.data + j0 * c.col_stride, c.rows, n, c.row_stride, c.col_stride}, alpha, beta);
    } else {
      Gemm({a.data + j0 * a.row_stride, n, a.cols, a.row_stride, a.col_stride}, b,
           {c.data + j0 * c.row_stride, n, c.cols, c.row_stride, c.col_stride}, alpha, beta);
    }
  }
}

// The outputs along one axis whose tap k reads inside the input.
OutputRange RowRange(const Conv2dGeometry& g, int64_t ki) {
  return ValidOutputs(g.h, g.oh, ki, g.sh, g.ph, g.dh);
}
OutputRange ColRange(const Conv2dGeometry& g, int64_t kj) {
  return ValidOutputs(g.w, g.ow, kj, g.sw, g.pw, g.dw);
}

}  // namespace

int64_t Conv2dChunkSamples(const Conv2dGeometry& g) {
  const int64_t per_sample = std::max<int64_t>(1, g.taps() * g.out_plane());
  return std::clamp<int64_t>(kConvColBudget / per_sample, 1, std::max<int64_t>(g.n, 1));
}

void Im2Col(const Conv2dGeometry& g, const float* x, int64_t n0, int64_t s, int64_t group,
            float* col) {
  const int64_t len = s * g.out_plane();
  const int64_t k = g.taps();
#pragma omp parallel for schedule(static) if (k * len >= kParallelCopy && k > 1)
  for (int64_t r = 0; r < k; ++r) {
    const int64_t c = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const OutputRange rows = RowRange(g, ki), cols = ColRange(g, kj);
    const int64_t col_off = kj * g.dw - g.pw;  // input column = ow * sw + col_off
    for (int64_t si = 0; si < s; ++si) {
      const float* plane = x + ((n0 + si) * g.c + group * g.cg() + c) * g.in_plane();
      float* dst = col + r * len + si * g.out_plane();
      std::fill(dst, dst + rows.begin * g.ow, 0.0f);
      for (int64_t oh = rows.begin; oh < rows.end; ++oh) {
        const float* src = plane + ConvInputIndex(oh, ki, g.sh, g.ph, g.dh) * g.w;
        float* d = dst + oh * g.ow;
        std::fill(d, d + cols.begin, 0.0f);
        if (g.sw == 1) {
          std::memcpy(d + cols.begin, src + cols.begin + col_off,
                      sizeof(float) * (cols.end - cols.begin));
        } else {
          for (int64_t ow = cols.begin; ow < cols.end; ++ow) d[ow] = src[ow * g.sw + col_off];
        }
        std::fill(d + cols.end, d + g.ow, 0.0f);
      }
      std::fill(dst + rows.end * g.ow, dst + g.out_plane(), 0.0f);
    }
  }
}

void Col2ImAdd(const Conv2dGeometry& g, const float* col, int64_t n0, int64_t s, int64_t group,
               float* dx) {
  const int64_t len = s * g.out_plane();
  const int64_t planes = s * g.cg();
  // One thread per input plane: each plane's sums run in a fixed order.
#pragma omp parallel for schedule(static) if (planes * g.kh * g.kw * g.out_plane() >= kParallelCopy && planes > 1)
  for (int64_t pi = 0; pi < planes; ++pi) {
    const int64_t si = pi / g.cg(), c = pi % g.cg();
    float* plane = dx + ((n0 + si) * g.c + group * g.cg() + c) * g.in_plane();
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const OutputRange rows = RowRange(g, ki);
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const OutputRange cols = ColRange(g, kj);
        const int64_t col_off = kj * g.dw - g.pw;
        const float* src = col + ((c * g.kh + ki) * g.kw + kj) * len + si * g.out_plane();
        for (int64_t oh = rows.begin; oh < rows.end; ++oh) {
          float* d = plane + ConvInputIndex(oh, ki, g.sh, g.ph, g.dh) * g.w;
          const float* v = src + oh * g.ow;
          if (g.sw == 1) {
            float* dd = d + col_off;
            RunWithIsa([&] {
              for (int64_t ow = cols.begin; ow < cols.end; ++ow) dd[ow] += v[ow];
            });
          } else {
            for (int64_t ow = cols.begin; ow < cols.end; ++ow) d[ow * g.sw + col_off] += v[ow];
          }
        }
      }
    }
  }
}

void Conv2dForward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                   float* y) {
  const int64_t chunk = Conv2dChunkSamples(g);
  const int64_t k = g.taps(), og = g.og(), op = g.out_plane();
  std::vector<float> col(static_cast<size_t>(k * chunk * op));
  std::vector<float> out(static_cast<size_t>(og * chunk * op));
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t s = std::min(chunk, g.n - n0);
    const int64_t len = s * op;
    for (int64_t group = 0; group < g.groups; ++group) {
      Im2Col(g, x, n0, s, group, col.data());
      BlockedGemm({w + group * og * k, og, k, k, 1}, {col.data(), k, len, len, 1},
                  {out.data(), og, len, len, 1}, 1.0f, 0.0f);
      ScatterChunk({og, op, s, g.o * op}, out.data(), bias != nullptr ? bias + group * og : nullptr,
                   y + (n0 * g.o + group * og) * op);
    }
  }
}

void Conv2dBackward(const Conv2dGeometry& g, const float* dy, const float* x, const float* w,
                    float* dx, float* dw, float* db, bool accumulate) {
  const int64_t chunk = Conv2dChunkSamples(g);
  const int64_t k = g.taps(), og = g.og(), op = g.out_plane();
  if (db != nullptr) {
    // Per output channel: samples in order, each plane's sum in a fixed order.
#pragma omp parallel for schedule(static) if (g.n * g.o * op >= kParallelCopy && g.o > 1)
    for (int64_t o = 0; o < g.o; ++o) {
      float acc = 0.0f;
      for (int64_t n = 0; n < g.n; ++n) {
        const float* p = dy + (n * g.o + o) * op;
        float part = 0.0f;
        for (int64_t i = 0; i < op; ++i) part += p[i];
        acc += part;
      }
      db[o] = accumulate ? db[o] + acc : acc;
    }
  }
  if (dw != nullptr && g.n == 0 && !accumulate) std::fill(dw, dw + g.o * k, 0.0f);
  if (dx == nullptr && dw == nullptr) return;
  if (dx != nullptr) std::fill(dx, dx + g.n * g.c * g.in_plane(), 0.0f);
  std::vector<float> col(static_cast<size_t>(k * chunk * op));
  std::vector<float> dyc(static_cast<size_t>(og * chunk * op));
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t s = std::min(chunk, g.n - n0);
    const int64_t len = s * op;
    for (int64_t group = 0; group < g.groups; ++group) {
      GatherChunk({og, op, s, g.o * op}, dy + (n0 * g.o + group * og) * op, dyc.data());
      const ConstMatrixRef dy_m{dyc.data(), og, len, len, 1};
      if (dw != nullptr) {
        Im2Col(g, x, n0, s, group, col.data());
        const float beta = (accumulate || n0 > 0) ? 1.0f : 0.0f;
        // dW_g [O/g, K] (+)= dY [O/g, L] col^T [L, K]
        BlockedGemm(dy_m, {col.data(), len, k, 1, len}, {dw + group * og * k, og, k, k, 1}, 1.0f, beta);
      }
      if (dx != nullptr) {
        // dcol [K, L] = W_g^T [K, O/g] dY [O/g, L], reusing the col buffer.
        BlockedGemm({w + group * og * k, k, og, 1, k}, dy_m, {col.data(), k, len, len, 1}, 1.0f, 0.0f);
        Col2ImAdd(g, col.data(), n0, s, group, dx);
      }
    }
  }
}

}  // namespace zeroshard::cpu
