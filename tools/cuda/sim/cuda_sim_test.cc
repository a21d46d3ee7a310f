// The simulator itself: barriers and shuffles give the device's values, and
// what the device leaves undefined or refuses is an error naming the block and
// threads. Kernels here are written as in a .cu file against cuda_sim.h.
#include "zeroshard/tools/cuda/sim/cuda_sim.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "zeroshard/tools/cuda/sim/include/cuda_bf16.h"
#include "zeroshard/tools/cuda/sim/include/cuda_fp16.h"
#include "zeroshard/tools/cuda/sim/include/mma.h"

namespace {

using zs_cuda_sim::LastError;
using zs_cuda_sim::Launch;
using zs_cuda_sim::Order;
using zs_cuda_sim::SetOrder;

// Tree sum in shared memory: out[block] = sum of in[block * blockDim ...].
__global__ void SharedTreeSum(const int* in, int* out) {
  __shared__ int s[1024];
  const unsigned t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

TEST(CudaSim, SharedMemoryTreeSumWithBarriers) {
  std::vector<int> in(4 * 256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i);
  std::vector<int> out(4, -1);
  for (Order order : {Order::kForward, Order::kReverse}) {
    SetOrder(order);
    Launch(SharedTreeSum, dim3(4), dim3(256), 0, in.data(), out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
    for (int b = 0; b < 4; ++b) EXPECT_EQ(out[b], 256 * 256 * b + 255 * 256 / 2) << "block " << b;
  }
  SetOrder(Order::kForward);
}

// Every lane gets the butterfly sum of the lane ids and lane 5's id * 10.
__global__ void Shuffles(int* sum, int* broadcast) {
  int v = static_cast<int>(threadIdx.x % 32);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  sum[threadIdx.x] = v;
  broadcast[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) * 10, 5);
}

TEST(CudaSim, WarpShufflesExchangeLaneValues) {
  std::vector<int> sum(64), broadcast(64);
  Launch(Shuffles, dim3(1), dim3(64), 0, sum.data(), broadcast.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(sum[t], 496) << t;  // 0 + 1 + ... + 31
    EXPECT_EQ(broadcast[t], (t / 32 * 32 + 5) * 10) << t;
  }
}

// A missing barrier: each thread reads its neighbour's slot right after
// writing its own. The result depends on the order threads run in.
__global__ void RacyNeighbour(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = static_cast<int>(threadIdx.x) + 1;
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

TEST(CudaSim, AnUnsynchronisedReadGivesDifferentBitsInTheTwoOrders) {
  std::vector<int> forward(64, 0), reverse(64, 0);
  SetOrder(Order::kForward);
  Launch(RacyNeighbour, dim3(1), dim3(64), 0, forward.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  SetOrder(Order::kReverse);
  Launch(RacyNeighbour, dim3(1), dim3(64), 0, reverse.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  SetOrder(Order::kForward);
  EXPECT_NE(forward, reverse);
}

__global__ void DivergentBarrier(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaSim, ABarrierSomeThreadsSkipIsAnError) {
  std::vector<int> out(32);
  Launch(DivergentBarrier, dim3(2), dim3(32), 0, out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastError().find("block (0,0,0)"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("16 of 32 threads wait at __syncthreads()"), std::string::npos)
      << LastError();
  EXPECT_NE(LastError().find("has exited"), std::string::npos) << LastError();
  // The error was taken: the next launch starts clean.
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

__global__ void FullMaskShuffle(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

TEST(CudaSim, AFullMaskShuffleInAPartialWarpIsAnError) {
  std::vector<int> out(40);
  Launch(FullMaskShuffle, dim3(1), dim3(40), 0, out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastError().find("which this block (40 threads) does not have"), std::string::npos)
      << LastError();
}

// What common.cuh's 16-byte loads do under the simulator: check, then copy.
__global__ void VectorCopy(const char* in, char* out) {
  zs_cuda_sim::CheckAligned(in + 16 * threadIdx.x, 16);
  std::memcpy(out + 16 * threadIdx.x, in + 16 * threadIdx.x, 16);
}

TEST(CudaSim, AMisalignedVectorAccessIsAnError) {
  alignas(16) char in[16 * 33] = {}, out[16 * 33] = {};
  Launch(VectorCopy, dim3(1), dim3(32), 0, in, out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  Launch(VectorCopy, dim3(1), dim3(32), 0, in + 2, out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMisalignedAddress);
  EXPECT_NE(LastError().find("misaligned 16-byte access"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("block (0,0,0)"), std::string::npos) << LastError();
}

__global__ void Nothing(int*) {}

TEST(CudaSim, LaunchShapesTheDeviceRefusesAreErrors) {
  int x = 0;
  Launch(Nothing, dim3(1), dim3(1025), 0, &x);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Launch(Nothing, dim3(1, 65536), dim3(32), 0, &x);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Launch(Nothing, dim3(1), dim3(32, 1, 65), 0, &x);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // Dynamic shared memory above 48 KiB needs the opt-in attribute, itself
  // bounded by the device's maximum.
  Launch(Nothing, dim3(1), dim3(32), 64 * 1024, &x);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_NE(LastError().find("65536 B of dynamic shared memory"), std::string::npos) << LastError();
  EXPECT_EQ(cudaFuncSetAttribute(Nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(Nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  Launch(Nothing, dim3(1), dim3(32), 64 * 1024, &x);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
}

// ------------------------------------------------------------ __syncwarp

// Lane `writer` stores `value` in shared memory and lane `reader` reads it
// back, ordered by __syncwarp (or not, with sync false). The scheduler runs
// lanes in order, so in one of the two orders the reader runs first.
__global__ void WarpHandOff(int writer, int reader, int value, bool sync, int* out) {
  __shared__ int slot;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (lane == writer) slot = value;
  if (sync) __syncwarp();
  if (lane == reader) *out = slot;
}

// The same with only the two lanes in the mask.
__global__ void PairHandOff(int writer, int reader, int value, int* out) {
  __shared__ int slot;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (lane != writer && lane != reader) return;
  if (lane == writer) slot = value;
  __syncwarp((1u << writer) | (1u << reader));
  if (lane == reader) *out = slot;
}

TEST(CudaSimSyncwarp, OrdersSharedMemoryBetweenLanesInBothOrders) {
  int value = 100;
  for (Order order : {Order::kForward, Order::kReverse}) {
    SetOrder(order);
    for (auto [writer, reader] : {std::pair{0, 31}, std::pair{31, 0}}) {
      int out = -1;
      Launch(WarpHandOff, dim3(1), dim3(32), 0, writer, reader, ++value, true, &out);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
      EXPECT_EQ(out, value) << "writer " << writer << ", reader " << reader;
      Launch(PairHandOff, dim3(1), dim3(32), 0, writer, reader, ++value, &out);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
      EXPECT_EQ(out, value) << "mask of lanes " << writer << " and " << reader;
    }
  }
  // Without the barrier the reader sees the old value whenever it runs first:
  // what makes the test above able to fail.
  SetOrder(Order::kForward);
  int out = -1;
  Launch(WarpHandOff, dim3(1), dim3(32), 0, 0, 31, ++value, false, &out);
  EXPECT_EQ(out, value);
  Launch(WarpHandOff, dim3(1), dim3(32), 0, 31, 0, ++value, false, &out);
  EXPECT_EQ(out, value - 1);
  SetOrder(Order::kForward);
}

// Half the warp meets on its own first; then the whole warp, exited lanes
// excepted (the device waits only for non-exited lanes of the mask).
__global__ void SyncwarpGroups(int* out) {
  __shared__ int s[32], t[32];
  const int lane = static_cast<int>(threadIdx.x % 32);
  s[lane] = lane;
  t[lane] = lane;
  if (lane >= 16) {
    __syncwarp(0xffff0000u);
    t[lane] = s[lane] + s[47 - lane];  // another lane of the upper half: 47
  }
  if (lane % 8 == 7) return;
  __syncwarp();
  out[lane] = t[lane];
}

__global__ void SyncwarpWithoutOwnLane(int*) { __syncwarp(0x1u); }

TEST(CudaSimSyncwarp, PartialMasksAndExitedLanes) {
  for (Order order : {Order::kForward, Order::kReverse}) {
    SetOrder(order);
    std::vector<int> out(32, -1);
    Launch(SyncwarpGroups, dim3(1), dim3(32), 0, out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
    for (int lane = 0; lane < 32; ++lane) {
      const int want = lane % 8 == 7 ? -1 : lane < 16 ? lane : 47;
      EXPECT_EQ(out[lane], want) << lane;
    }
  }
  SetOrder(Order::kForward);
  int x = 0;
  Launch(SyncwarpWithoutOwnLane, dim3(1), dim3(32), 0, &x);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastError().find("the mask must name the calling lane"), std::string::npos)
      << LastError();
}

// ------------------------------------------------------------ 16-bit types

// binary16's value from its fields, independently of the header's bit code.
double HalfValue(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

uint16_t Bits(__half h) { return std::bit_cast<uint16_t>(h); }
uint16_t Bits(__nv_bfloat16 b) { return std::bit_cast<uint16_t>(b); }

TEST(CudaSimHalf, HalfWidensExactlyAndRoundsToNearestEven) {
  static_assert(sizeof(__half) == 2 && std::is_trivially_copyable_v<__half>);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const __half v = std::bit_cast<__half>(static_cast<uint16_t>(h));
    const float f = __half2float(v);
    const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f && m != 0) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(__half2float(__float2half(f)))) << h;  // NaN stays NaN
      continue;
    }
    if (e == 0x1f) {
      EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY) << h;
    } else {
      EXPECT_EQ(f, HalfValue(static_cast<uint16_t>(h))) << h;  // subnormals included
    }
    EXPECT_EQ(Bits(__float2half(f)), h) << h;  // exact values convert back exactly
    EXPECT_EQ(static_cast<float>(v), f) << h;  // the implicit conversion is the same
  }
  // Every midpoint between neighbouring finite halves (exact in float: 12
  // significant bits) goes to the even one, and the floats either side of it
  // to the nearer one.
  for (uint16_t h = 0; h < 0x7bff; ++h) {
    const float lo = __half2float(std::bit_cast<__half>(h));
    const float hi = __half2float(std::bit_cast<__half>(static_cast<uint16_t>(h + 1)));
    const float mid = lo + (hi - lo) / 2;
    const uint16_t even = (h & 1) ? h + 1 : h;
    for (float sign : {1.0f, -1.0f}) {
      const uint16_t s = sign < 0 ? 0x8000 : 0;
      EXPECT_EQ(Bits(__float2half(sign * mid)), even | s) << h;
      EXPECT_EQ(Bits(__float2half(sign * std::nextafter(mid, 0.0f))), h | s) << h;
      EXPECT_EQ(Bits(__float2half(sign * std::nextafter(mid, INFINITY))), (h + 1) | s) << h;
    }
  }
  // The top: 65520, halfway from 65504 to 2^16, is rounded to Inf (even).
  EXPECT_EQ(Bits(__float2half(65520.0f)), 0x7c00);
  EXPECT_EQ(Bits(__float2half(std::nextafter(65520.0f, 0.0f))), 0x7bff);
  EXPECT_EQ(Bits(__float2half(-1e30f)), 0xfc00);
  // The bottom: 2^-25, halfway from 0 to the smallest subnormal, goes to 0.
  EXPECT_EQ(Bits(__float2half(std::ldexp(1.0f, -25))), 0x0000);
  EXPECT_EQ(Bits(__float2half(std::nextafter(std::ldexp(1.0f, -25), 1.0f))), 0x0001);
  EXPECT_EQ(Bits(__float2half(-std::ldexp(1.0f, -30))), 0x8000);
  EXPECT_TRUE(std::isnan(__half2float(__float2half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(__half2float(__float2half(-std::numeric_limits<float>::signaling_NaN()))));
}

TEST(CudaSimHalf, BFloat16WidensExactlyAndRoundsToNearestEven) {
  static_assert(sizeof(__nv_bfloat16) == 2 && std::is_trivially_copyable_v<__nv_bfloat16>);
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const __nv_bfloat16 v = std::bit_cast<__nv_bfloat16>(static_cast<uint16_t>(b));
    const float f = __bfloat162float(v);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), b << 16) << b;
    EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(v)), b << 16) << b;
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16(f)))) << b;
    } else {
      EXPECT_EQ(Bits(__float2bfloat16(f)), b) << b;
    }
  }
  // Midpoints between neighbours (bits << 16 | 0x8000, exact in float), the
  // largest finite value's included: its midpoint with 2^128 rounds to Inf.
  for (uint32_t b = 0; b < 0x7f80; ++b) {
    for (uint32_t s : {0u, 0x8000u}) {
      const float mid = std::bit_cast<float>(((b | s) << 16) | 0x8000u);
      const uint32_t even = (b & 1) ? b + 1 : b;
      EXPECT_EQ(Bits(__float2bfloat16(mid)), even | s) << b;
      EXPECT_EQ(Bits(__float2bfloat16(std::bit_cast<float>(std::bit_cast<uint32_t>(mid) - 1))),
                b | s)
          << b;
      EXPECT_EQ(Bits(__float2bfloat16(std::bit_cast<float>(std::bit_cast<uint32_t>(mid) + 1))),
                (b + 1) | s)
          << b;
    }
  }
  EXPECT_TRUE(
      std::isnan(__bfloat162float(__float2bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the dropped bits stays NaN, not Inf.
  EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16(std::bit_cast<float>(0x7f800001u)))));
}

// ------------------------------------------------------------ wmma

namespace wmma = nvcuda::wmma;

// 32-byte aligned storage, as the device's wmma loads and stores need
// (std::vector's allocations guarantee 16).
template <typename T>
struct Aligned {
  explicit Aligned(size_t n, T fill = T())
      : size(n), data(static_cast<T*>(std::aligned_alloc(32, (n * sizeof(T) + 31) / 32 * 32))) {
    for (size_t i = 0; i < n; ++i) data[i] = fill;
  }
  ~Aligned() { std::free(data); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  T& operator[](size_t i) { return data[i]; }
  size_t size;
  T* data;
};

// D (32 x 32) = A (32 x 48) * B (48 x 32) + C (32 x 32), float C and D row-major
// with ld 32; A row- or column-major (ld 48 or 32), B row- or column-major
// (ld 32 or 48). Four warps, warp w the 16 x 16 tile (w / 2, w % 2) of D.
template <typename T, typename LayoutA, typename LayoutB>
__global__ void WmmaGemm(const T* a, const T* b, const float* c, float* d) {
  constexpr bool kRowA = std::is_same_v<LayoutA, wmma::row_major>;
  constexpr bool kRowB = std::is_same_v<LayoutB, wmma::row_major>;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int tr = warp / 2, tc = warp % 2;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, c + tr * 16 * 32 + tc * 16, 32, wmma::mem_row_major);
  for (int k = 0; k < 48; k += 16) {
    wmma::load_matrix_sync(fa, kRowA ? a + tr * 16 * 48 + k : a + k * 32 + tr * 16,
                           kRowA ? 48 : 32);
    wmma::load_matrix_sync(fb, kRowB ? b + k * 32 + tc * 16 : b + tc * 16 * 48 + k,
                           kRowB ? 32 : 48);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(d + tr * 16 * 32 + tc * 16, acc, 32, wmma::mem_row_major);
}

// Runs WmmaGemm on values drawn by `draw` (rounded to T), returns the
// largest |D - reference| / bound, with the bound derived below; `exact`
// asks for bitwise equality instead.
template <typename T, typename LayoutA, typename LayoutB, typename Draw>
void CheckWmmaGemm(Draw draw, bool exact, const std::string& what) {
  constexpr int M = 32, N = 32, K = 48;
  constexpr bool kRowA = std::is_same_v<LayoutA, wmma::row_major>;
  constexpr bool kRowB = std::is_same_v<LayoutB, wmma::row_major>;
  std::mt19937 rng(7);
  std::vector<float> a(M * K), b(K * N), c(M * N);  // logical, row-major
  for (float& v : a) v = static_cast<float>(T(draw(rng)));
  for (float& v : b) v = static_cast<float>(T(draw(rng)));
  for (float& v : c) v = draw(rng);
  Aligned<T> da(M * K), db(K * N);
  Aligned<float> dc(M * N), dd(M * N, NAN);
  for (int i = 0; i < M; ++i) {
    for (int k = 0; k < K; ++k) da[kRowA ? i * K + k : k * M + i] = T(a[i * K + k]);
  }
  for (int k = 0; k < K; ++k) {
    for (int j = 0; j < N; ++j) db[kRowB ? k * N + j : j * K + k] = T(b[k * N + j]);
  }
  for (int i = 0; i < M * N; ++i) dc[i] = c[i];
  for (Order order : {Order::kForward, Order::kReverse}) {
    SetOrder(order);
    Launch(WmmaGemm<T, LayoutA, LayoutB>, dim3(1), dim3(128), 0, da.data, db.data, dc.data,
           dd.data);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << what << ": " << LastError();
    // The error bound. The inputs are exactly representable (drawn, then
    // rounded to T) and each product a*b is exact in float (at most 2 x 11
    // significant bits, in float's range), so the only error is the float
    // accumulation: D(i,j) is c + p_0 + ... + p_47 added one at a time (3
    // mma_syncs of 16 products each, chained through the accumulator), 48
    // additions rounded to nearest, so |D - exact| <= gamma_48 * S with
    // gamma_k = k*u / (1 - k*u), u = 2^-24, S = |c| + sum |a||b| (Higham,
    // Accuracy and Stability of Numerical Algorithms, eq. 4.4). The reference
    // sums the same 49 terms in double (products of two floats are exact in
    // double), so it is off by at most gamma_48 with u = 2^-53; and S itself,
    // computed in double, by at most that relative amount, hence (1 + g_d).
    const double uf = std::ldexp(1.0, -24), ud = std::ldexp(1.0, -53);
    const double gf = K * uf / (1 - K * uf), gd = K * ud / (1 - K * ud);
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        double ref = c[i * N + j], sum_abs = std::fabs(c[i * N + j]);
        for (int k = 0; k < K; ++k) {
          const double p = static_cast<double>(a[i * K + k]) * b[k * N + j];
          ref += p;
          sum_abs += std::fabs(p);
        }
        const float got = dd[i * N + j];
        if (exact) {
          // Small integers: every partial sum is an integer below 2^24, exact
          // in float, so D is the exact result whatever the order.
          ASSERT_EQ(got, ref) << what << " (" << i << "," << j << ")";
        } else {
          const double bound = (gf + gd) * sum_abs * (1 + gd);
          ASSERT_LE(std::fabs(got - ref), bound) << what << " (" << i << "," << j << ")";
        }
      }
    }
  }
  SetOrder(Order::kForward);
}

template <typename T, typename LayoutA, typename LayoutB>
void CheckWmmaGemms(const std::string& what) {
  CheckWmmaGemm<T, LayoutA, LayoutB>(
      [](std::mt19937& rng) { return std::uniform_real_distribution<float>(-1, 1)(rng); }, false,
      what + ", uniform(-1, 1)");
  CheckWmmaGemm<T, LayoutA, LayoutB>(
      [](std::mt19937& rng) {
        return static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(rng));
      },
      true, what + ", integers in [-8, 8]");
}

TEST(CudaSimWmma, GemmOfBFloat16MatchesTheReference) {
  CheckWmmaGemms<__nv_bfloat16, wmma::row_major, wmma::row_major>("bf16 A row, B row");
  CheckWmmaGemms<__nv_bfloat16, wmma::row_major, wmma::col_major>("bf16 A row, B col");
  CheckWmmaGemms<__nv_bfloat16, wmma::col_major, wmma::col_major>("bf16 A col, B col");
}

TEST(CudaSimWmma, GemmOfHalfMatchesTheReference) {
  CheckWmmaGemms<__half, wmma::row_major, wmma::row_major>("half A row, B row");
  CheckWmmaGemms<__half, wmma::row_major, wmma::col_major>("half A row, B col");
  CheckWmmaGemms<__half, wmma::col_major, wmma::row_major>("half A col, B row");
}

// The row-index trick: out = diag(row_scale) * (A * B), the scale of each
// element's row found through an accumulator loaded from a matrix whose
// element (r, c) is r, as a kernel must do without knowing the lane mapping.
__global__ void RowScaledProduct(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                 const float* row_scale, float* out) {
  alignas(32) __shared__ float rows[16 * 16];
  __shared__ float scale[16];
  for (unsigned i = threadIdx.x; i < 256; i += 32) rows[i] = static_cast<float>(i / 16);
  if (threadIdx.x < 16) scale[threadIdx.x] = row_scale[threadIdx.x];
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, row_of;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::load_matrix_sync(row_of, rows, 16, wmma::mem_row_major);
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= scale[static_cast<int>(row_of.x[i])];
  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

TEST(CudaSimWmma, TheRowIndexTrickScalesEachRow) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-4, 4);
  Aligned<__nv_bfloat16> a(256), b(256);  // a row-major, b column-major
  std::vector<int> ai(256), bi(256);
  for (int i = 0; i < 256; ++i) {
    ai[i] = small(rng);
    bi[i] = small(rng);
    a[i] = static_cast<float>(ai[i]);
    b[i] = static_cast<float>(bi[i]);
  }
  std::vector<float> scale(16);
  for (int r = 0; r < 16; ++r) scale[r] = (r + 1) * (r % 2 ? -0.3f : 0.7f);
  Aligned<float> out(256, NAN);
  Launch(RowScaledProduct, dim3(1), dim3(32), 0, a.data, b.data, scale.data(), out.data);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      // The integer product (|sum| <= 16 * 16) is exact; scaling it rounds
      // once in float here and in the kernel alike: equal bits.
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += ai[r * 16 + k] * bi[c * 16 + k];
      EXPECT_EQ(out[r * 16 + c], static_cast<float>(sum) * scale[r]) << r << "," << c;
    }
  }
}

// An accumulator loaded column-major with ld 24 and stored row-major (ld 16)
// and column-major (ld 20); lane 5 also writes out its x[] (the logical,
// row-major tile).
__global__ void AccumulatorRoundTrip(const float* src, float* rows, float* cols, float* x) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, src, 24, wmma::mem_col_major);
  wmma::store_matrix_sync(rows, acc, 16, wmma::mem_row_major);
  wmma::store_matrix_sync(cols, acc, 20, wmma::mem_col_major);
  if (threadIdx.x == 5) {
    for (int i = 0; i < acc.num_elements; ++i) x[i] = acc.x[i];
  }
}

TEST(CudaSimWmma, AccumulatorLoadsAndStoresInBothLayouts) {
  Aligned<float> src(16 * 24), rows(256, NAN), cols(16 * 20, -7.0f), x(256, NAN);
  for (int i = 0; i < 16 * 24; ++i) src[i] = 0.5f * static_cast<float>(i) - 3;
  Launch(AccumulatorRoundTrip, dim3(1), dim3(32), 0, src.data, rows.data, cols.data, x.data);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      const float v = src[c * 24 + r];  // element (r, c), column-major
      EXPECT_EQ(rows[r * 16 + c], v) << r << "," << c;
      EXPECT_EQ(cols[c * 20 + r], v) << r << "," << c;
      EXPECT_EQ(x[r * 16 + c], v) << r << "," << c;
    }
  }
  // The stride's padding (rows 16..19 of each column) is left alone.
  for (int c = 0; c < 16; ++c) {
    for (int r = 16; r < 20; ++r) EXPECT_EQ(cols[c * 20 + r], -7.0f) << r << "," << c;
  }
}

__global__ void LoadA(const __nv_bfloat16* p, unsigned ldm, float* out) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::load_matrix_sync(fa, p, ldm);
  out[threadIdx.x] = static_cast<float>(fa.x[0]);
}

__global__ void StoreC(float* p, unsigned ldm) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 1.0f);
  wmma::store_matrix_sync(p, acc, ldm, wmma::mem_row_major);
}

TEST(CudaSimWmma, MisalignedPointersAndBadStridesFailTheLaunch) {
  Aligned<__nv_bfloat16> a(16 * 32, 1.0f);
  Aligned<float> c(16 * 32), out(32);
  Launch(LoadA, dim3(1), dim3(32), 0, a.data, 16u, out.data);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  // 16 bytes past a 32-byte boundary.
  Launch(LoadA, dim3(1), dim3(32), 0, a.data + 8, 16u, out.data);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMisalignedAddress);
  EXPECT_NE(LastError().find("block (0,0,0): thread (0,0,0): wmma::load_matrix_sync at"),
            std::string::npos)
      << LastError();
  EXPECT_NE(LastError().find("256-bit (32-byte) aligned"), std::string::npos) << LastError();
  Launch(StoreC, dim3(1), dim3(32), 0, c.data + 4, 16u);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMisalignedAddress);
  EXPECT_NE(LastError().find("wmma::store_matrix_sync at"), std::string::npos) << LastError();
  // ldm: multiples of 16 bytes, 8 bf16 or 4 floats.
  Launch(LoadA, dim3(1), dim3(32), 0, a.data, 24u, out.data);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  Launch(LoadA, dim3(1), dim3(32), 0, a.data, 20u, out.data);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastError().find("thread (0,0,0): wmma::load_matrix_sync with ldm 20: ldm must be a "
                             "multiple of 8 elements (16 bytes) for 2-byte elements"),
            std::string::npos)
      << LastError();
  Launch(StoreC, dim3(1), dim3(32), 0, c.data, 20u);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  Launch(StoreC, dim3(1), dim3(32), 0, c.data, 18u);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastError().find("wmma::store_matrix_sync with ldm 18: ldm must be a multiple of 4 "
                             "elements (16 bytes) for 4-byte elements"),
            std::string::npos)
      << LastError();
}

// mma_sync under a condition only the first `lanes` of the 32 meet; the
// others go on to the store (kStore), exit (kExit), or call mma_sync at
// another line (kOtherMma).
enum Others { kStore, kExit, kOtherMma };

__global__ void DivergentMma(int lanes, Others others, float* out) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(fa, 1.0f);
  wmma::fill_fragment(fb, 2.0f);
  wmma::fill_fragment(acc, 0.0f);
  if (static_cast<int>(threadIdx.x % 32) < lanes) {
    wmma::mma_sync(acc, fa, fb, acc);
  } else if (others == kExit) {
    return;
  } else if (others == kOtherMma) {
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

TEST(CudaSimWmma, AMmaSomeLanesSkipFailsTheLaunch) {
  Aligned<float> out(256);
  Launch(DivergentMma, dim3(1), dim3(32), 0, 32, kStore, out.data);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  EXPECT_EQ(out[0], 32.0f);  // 16 products 1 * 2
  Launch(DivergentMma, dim3(1), dim3(32), 0, 16, kStore, out.data);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  const std::string diverged = LastError();
  EXPECT_NE(diverged.find("block (0,0,0): lanes of one warp at different warp-collective calls: "
                          "thread (0,0,0) at wmma::mma_sync (tools/cuda/sim/cuda_sim_test.cc:"),
            std::string::npos)
      << diverged;
  EXPECT_NE(diverged.find("thread (16,0,0) at wmma::store_matrix_sync ("), std::string::npos)
      << diverged;
  // The same function at two lines is two instructions: the device's
  // `.aligned` rule wants one.
  Launch(DivergentMma, dim3(1), dim3(32), 0, 16, kOtherMma, out.data);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastError().find("thread (16,0,0) at wmma::mma_sync ("), std::string::npos)
      << LastError();
  Launch(DivergentMma, dim3(1), dim3(32), 0, 16, kExit, out.data);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastError().find("waits for thread (16,0,0), which has exited"), std::string::npos)
      << LastError();
  // A warp of 16 threads cannot run wmma at all.
  Launch(DivergentMma, dim3(1), dim3(16), 0, 32, kStore, out.data);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(LastError().find("which this block (16 threads) does not have"), std::string::npos)
      << LastError();
}

// Each lane writes its 8 elements of a shared tile, then the warp loads the
// tile (after __syncwarp, or not) and each lane reports the element lane 31
// wrote from its own fragment.
__global__ void LoadAfterLaneWrites(float base, bool sync, float* out) {
  alignas(32) __shared__ float tile[256];
  const unsigned lane = threadIdx.x % 32;
  for (unsigned i = 8 * lane; i < 8 * lane + 8; ++i) tile[i] = base + static_cast<float>(i);
  if (sync) __syncwarp();
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, tile, 16, wmma::mem_row_major);
  out[lane] = acc.x[255];
}

TEST(CudaSimWmma, ALoadDoesNotOrderOtherLanesWrites) {
  float base = 0;
  for (Order order : {Order::kForward, Order::kReverse}) {
    SetOrder(order);
    std::vector<float> out(32, NAN);
    base += 1000;
    Launch(LoadAfterLaneWrites, dim3(1), dim3(32), 0, base, true, out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
    for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(out[lane], base + 255) << lane;
  }
  // Without the __syncwarp, lane 0 runs first and loads before lane 31 has
  // written: it sees the previous launch's value (shared memory persists).
  SetOrder(Order::kForward);
  std::vector<float> out(32, NAN);
  Launch(LoadAfterLaneWrites, dim3(1), dim3(32), 0, base + 1000, false, out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << LastError();
  EXPECT_EQ(out[0], base + 255);
  EXPECT_EQ(out[31], base + 1000 + 255);
}

}  // namespace
