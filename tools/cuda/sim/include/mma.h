// <mma.h> for kernels compiled into a simulated library (tools/cuda/cuda.bzl;
// see tools/cuda/sim/cuda_sim.h): the part of CUDA's warp matrix API
// (nvcuda::wmma) that this project's kernels use, run on the CPU.
//
// What is emulated, exactly the toolkit's spellings:
//   - the shape m16n16k16 only; matrix_a and matrix_b fragments of
//     __nv_bfloat16 or __half, row_major or col_major (a and b of one element
//     type); accumulators of float (Layout void);
//   - fill_fragment(f, v);
//   - load_matrix_sync(a_or_b, p, ldm), the layout from the fragment's type;
//     load_matrix_sync(acc, p, ldm, mem_row_major | mem_col_major);
//   - store_matrix_sync(p, acc, ldm, mem_row_major | mem_col_major);
//   - mma_sync(d, a, b, c), d = a * b + c, d may be c;
//   - fragment<...>::num_elements, element_type, x[] for elementwise code.
// Other shapes, element types (half accumulators, int8, tf32, ...) and the
// experimental API do not compile here (the fragment's primary template has
// no definition).
//
// Representation: the device spreads a tile's elements over the 32 lanes in a
// fixed mapping it does not document; here every lane's fragment holds the
// whole tile, row-major in logical coordinates. x[i] is element (i / 16,
// i % 16) of the matrix: of the 16x16 m x k matrix for matrix_a, k x n for
// matrix_b, m x n for an accumulator, whatever the layout in memory; and
// num_elements is 256 (on the device 8 per lane for float accumulators and
// bfloat16 inputs, 16 for half inputs, CUDA 13's mma.h). So code that relies
// only on what the device promises runs alike on both:
//   - elementwise work over x[0 .. num_elements), e.g. scaling an accumulator;
//   - "the row-index trick": an accumulator loaded from a 16x16 float matrix
//     whose element (r, c) is r holds, in x[i], the row of the element that
//     x[i] holds in every other accumulator of the same type (loaded, mma'd or
//     filled), because all accumulators of one type share the mapping.
// Code that assumes the device's mapping (which lane holds which element, or
// how many) is wrong on both, and no test here can catch it.
//
// Warp-collective calls: load_matrix_sync, store_matrix_sync and mma_sync are
// `.aligned` instructions on the device, which all 32 lanes of the warp must
// execute at the same call. Each is a convergence point of the whole warp
// here (cuda_sim.h's WarpSync, keyed by the call's source line): lanes that
// reach different calls (a wmma call under a condition some lanes fail, or at
// two lines), a lane that has exited, or a warp of fewer than 32 threads fail
// the launch with cudaErrorLaunchFailure, naming the block and threads. Every
// lane loads and computes the whole tile itself (identical values in every
// lane) and stores the whole tile (identical values, so the repeated stores
// are harmless).
// Memory: a lane reads (load) or writes (store) the tile when it arrives, and
// no lane goes on before all have: what the warp does after the call sees the
// call done by every lane, as when the warp executes the instruction together.
// What other lanes did just before it is not ordered with it, as on the
// device: their writes before a load (or reads before a store) of the same
// memory need a __syncwarp or __syncthreads first. Without one, the lanes
// that run first load old values, and what they compute from their own
// fragment depends on SetOrder (a store from every lane then leaves the last
// lane's tile, so a test sees the missing barrier only through per-lane
// results).
// fill_fragment is not a convergence point: on the device it is plain
// register moves in each lane.
//
// Device rules that fail the launch (the kernel goes on; its results are then
// void), naming the thread:
//   - a load or store pointer that is not 256-bit (32-byte) aligned:
//     cudaErrorMisalignedAddress, as the device's access faults;
//   - ldm (in elements) that is not a multiple of 16 bytes (8 elements of a
//     16-bit type, 4 floats): cudaErrorLaunchFailure. The device leaves it
//     undefined (its wmma PTX requires the multiple).
//
// mma_sync's arithmetic here: d[i][j] = c[i][j] + a[i][0]*b[0][j] + ... +
// a[i][15]*b[15][j], added in float from left to right, each product exact in
// float (8- or 11-bit significands; bfloat16 products can over- or underflow
// float's range). The rounding relies on no fused multiply-add contraction,
// which every compile of this project sets (-ffp-contract=off). The device's
// tensor cores also take exact products and accumulate in fp32, but in an
// unspecified order and grouping, and measurements (Fasi, Higham, Mikaitis,
// Pranesh, "Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021) found
// they truncate rather than round in the additions. So a test comparing with
// a reference must allow the error bound of a k-term float sum,
// |err| <= gamma_k * sum |a||b| (plus |c|) with gamma_k = k*u / (1 - k*u),
// and not compare bits: u = 2^-24 bounds the simulator's round-to-nearest
// sums; on the device take u = 2^-23, which also bounds truncation. Inputs
// whose every partial sum is exact in float (small integers) give exact
// results on both.
//
// Not modelled: the device's lane mapping and per-lane element count, its
// accumulation order and rounding, timing and throughput, register and
// shared-memory bank pressure.
#ifndef ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_MMA_H_
#define ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_MMA_H_

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "zeroshard/tools/cuda/sim/cuda_sim.h"
#include "zeroshard/tools/cuda/sim/include/cuda_bf16.h"
#include "zeroshard/tools/cuda/sim/include/cuda_fp16.h"

namespace nvcuda {
namespace wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;

enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int m, int n, int k, typename T, typename Layout = void>
class fragment;

}  // namespace wmma
}  // namespace nvcuda

namespace zs_cuda_sim {
namespace wmma {

namespace nw = ::nvcuda::wmma;

constexpr int kTile = 16;  // m = n = k = 16

// A whole 16x16 tile in every lane, x[r * 16 + c] its element (r, c).
template <typename T>
struct Tile {
  enum { num_elements = kTile * kTile };
  enum { num_storage_elements = kTile * kTile };
  typedef T element_type;
  typedef T storage_element_type;
  T x[num_elements];
};

// The template parameters the emulated subset takes.
template <typename T>
concept Input = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;
template <typename Use>
concept AOrB = std::is_same_v<Use, nw::matrix_a> || std::is_same_v<Use, nw::matrix_b>;
template <typename Layout>
concept RowOrCol = std::is_same_v<Layout, nw::row_major> || std::is_same_v<Layout, nw::col_major>;

// Every lane of the warp at this call (the call's source line keys it).
inline void Converge(const char* what, const char* file, int line) {
  WarpSync(0xffffffffu, WarpCall{what, file, line, false});
}

// Element (r, c) of a row- or column-major matrix with stride ldm.
inline size_t Offset(int r, int c, unsigned ldm, bool row_major) {
  return row_major ? static_cast<size_t>(r) * ldm + static_cast<size_t>(c)
                   : static_cast<size_t>(c) * ldm + static_cast<size_t>(r);
}

}  // namespace wmma
}  // namespace zs_cuda_sim

namespace nvcuda {
namespace wmma {

// The fragments of m16n16k16 with 16-bit inputs and float accumulators.
template <>
class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major>
    : public zs_cuda_sim::wmma::Tile<__nv_bfloat16> {};
template <>
class fragment<matrix_a, 16, 16, 16, __nv_bfloat16, col_major>
    : public zs_cuda_sim::wmma::Tile<__nv_bfloat16> {};
template <>
class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major>
    : public zs_cuda_sim::wmma::Tile<__nv_bfloat16> {};
template <>
class fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major>
    : public zs_cuda_sim::wmma::Tile<__nv_bfloat16> {};
template <>
class fragment<matrix_a, 16, 16, 16, __half, row_major> : public zs_cuda_sim::wmma::Tile<__half> {};
template <>
class fragment<matrix_a, 16, 16, 16, __half, col_major> : public zs_cuda_sim::wmma::Tile<__half> {};
template <>
class fragment<matrix_b, 16, 16, 16, __half, row_major> : public zs_cuda_sim::wmma::Tile<__half> {};
template <>
class fragment<matrix_b, 16, 16, 16, __half, col_major> : public zs_cuda_sim::wmma::Tile<__half> {};
template <>
class fragment<accumulator, 16, 16, 16, float> : public zs_cuda_sim::wmma::Tile<float> {};

// Each lane's own fragment (no convergence, as on the device).
template <typename Use, int m, int n, int k, typename T, typename Layout>
inline void fill_fragment(fragment<Use, m, n, k, T, Layout>& f, const std::type_identity_t<T>& v) {
  for (auto& e : f.x) e = v;
}

// The trailing zs_file and zs_line (defaulted to the caller's line) key the
// convergence check; kernels never pass them.

template <zs_cuda_sim::wmma::AOrB Use, zs_cuda_sim::wmma::Input T,
          zs_cuda_sim::wmma::RowOrCol Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm,
                             const char* zs_file = __builtin_FILE(),
                             int zs_line = __builtin_LINE()) {
  namespace sw = ::zs_cuda_sim::wmma;
  ::zs_cuda_sim::CheckWmmaAccess("wmma::load_matrix_sync", p, ldm, static_cast<int>(sizeof(T)));
  constexpr bool kRowMajor = std::is_same_v<Layout, row_major>;
  for (int r = 0; r < sw::kTile; ++r) {
    for (int c = 0; c < sw::kTile; ++c) {
      f.x[r * sw::kTile + c] = p[sw::Offset(r, c, ldm, kRowMajor)];
    }
  }
  sw::Converge("wmma::load_matrix_sync", zs_file, zs_line);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout, const char* zs_file = __builtin_FILE(),
                             int zs_line = __builtin_LINE()) {
  namespace sw = ::zs_cuda_sim::wmma;
  ::zs_cuda_sim::CheckWmmaAccess("wmma::load_matrix_sync", p, ldm, static_cast<int>(sizeof(float)));
  for (int r = 0; r < sw::kTile; ++r) {
    for (int c = 0; c < sw::kTile; ++c) {
      f.x[r * sw::kTile + c] = p[sw::Offset(r, c, ldm, layout == mem_row_major)];
    }
  }
  sw::Converge("wmma::load_matrix_sync", zs_file, zs_line);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout, const char* zs_file = __builtin_FILE(),
                              int zs_line = __builtin_LINE()) {
  namespace sw = ::zs_cuda_sim::wmma;
  ::zs_cuda_sim::CheckWmmaAccess("wmma::store_matrix_sync", p, ldm,
                                 static_cast<int>(sizeof(float)));
  for (int r = 0; r < sw::kTile; ++r) {
    for (int c = 0; c < sw::kTile; ++c) {
      p[sw::Offset(r, c, ldm, layout == mem_row_major)] = f.x[r * sw::kTile + c];
    }
  }
  sw::Converge("wmma::store_matrix_sync", zs_file, zs_line);
}

// d = a * b + c; the sums in float from k = 0 to 15 (see the header comment).
template <zs_cuda_sim::wmma::Input T, typename LayoutA, typename LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c,
                     const char* zs_file = __builtin_FILE(), int zs_line = __builtin_LINE()) {
  namespace sw = ::zs_cuda_sim::wmma;
  sw::Converge("wmma::mma_sync", zs_file, zs_line);
  constexpr int n = sw::kTile;
  float out[n * n];  // d may be c
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      float s = c.x[i * n + j];
      for (int k = 0; k < n; ++k) {
        s += static_cast<float>(a.x[i * n + k]) * static_cast<float>(b.x[k * n + j]);
      }
      out[i * n + j] = s;
    }
  }
  std::memcpy(d.x, out, sizeof(out));
}

}  // namespace wmma
}  // namespace nvcuda

#endif  // ZEROSHARD_TOOLS_CUDA_SIM_INCLUDE_MMA_H_
