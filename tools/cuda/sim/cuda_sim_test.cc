// The simulator itself: barriers and shuffles give the device's values, and
// what the device leaves undefined or refuses is an error naming the block and
// threads. Kernels here are written as in a .cu file against cuda_sim.h.
#include "zeroshard/tools/cuda/sim/cuda_sim.h"

#include <gtest/gtest.h>

#include <vector>

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

}  // namespace
