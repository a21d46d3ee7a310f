// cuda_sim: runs this project's CUDA kernels on the CPU, so a machine without a
// GPU (every developer and CI machine) executes the very kernel code the GPU
// runs: its indexing, its block and warp synchronisation, its shared memory,
// its launch shapes. `cuda_library` (tools/cuda/cuda.bzl) compiles every `.cu`
// a second time with the host compiler into `<name>_sim`, where <cuda_runtime.h>
// is include/cuda_runtime.h, which is this header.
//
// How a launch runs: the blocks of the grid one after another; the threads of a
// block as fibers (one stack each) on the calling thread. A fiber runs until it
// reaches `__syncthreads()` or a warp-collective call (a shuffle, `__syncwarp`,
// a wmma load, store or mma: include/mma.h), then the next runs; a barrier
// opens when every thread it concerns has reached it. So block- and warp-level
// communication behaves as on the device, and what the device leaves undefined
// becomes an error of the launch, naming the block and threads:
//   - a `__syncthreads()` that some threads of the block never reach (they
//     exited, or wait at a warp-collective call);
//   - a warp-collective call whose mask names a lane that does not exist, or
//     that has exited (except for `__syncwarp`, which the device lets exited
//     lanes skip), or does not name the calling lane;
//   - lanes named by a mask that wait at different warp-collective calls and
//     so can never meet. Shuffles meet any shuffle and `__syncwarp` any
//     `__syncwarp` of the same mask, wherever they are in the code (PTX's
//     shfl.sync and bar.warp.sync on sm_70+); a wmma call is an `.aligned`
//     instruction, which all 32 lanes must execute at the same call: the
//     simulator compares source lines;
//   - a 16-byte vector access (common.cuh's LoadVec16/StoreVec16) at an address
//     that is not 16-byte aligned, which faults on the device
//     (cudaErrorMisalignedAddress); the kernel reports it through
//     CheckAligned, as plain host code would not fault (and a wmma load or
//     store breaking the alignment and stride rules, through CheckWmmaAccess);
//   - launch shapes the device refuses: more than 1024 threads per block, grid
//     y/z above 65535, dynamic shared memory above 48 KiB without
//     cudaFuncAttributeMaxDynamicSharedMemorySize, or above the device's
//     227 KiB opt-in maximum (H100; see SetMaxSharedBytesOptin for A100's).
// Dynamic shared memory starts filled with 0xFF bytes (NaN floats), so reading
// what no thread wrote shows up in the results.
// Blocks and the threads of a block can be run in reverse order
// (SetOrder(kReverse)): a kernel whose result depends on the order of its
// blocks or of unsynchronised threads gives different bits in the two orders.
//
// What it does not model: timing, memory coalescing, registers, concurrency
// between blocks or streams (a launch runs to completion before it returns;
// the stream is ignored), atomics, device memory (kernels read and write the
// host pointers they are given). The kernels are compiled with the host
// compiler without FMA contraction, like nvcc's --fmad=false.
//
// Names here live in namespace zs_cuda_sim: the simulated kernels are compiled
// with -Dzeroshard=zeroshard_sim so they can link beside the real ones, and that
// rename must not touch the simulator itself.
#ifndef ZEROSHARD_TOOLS_CUDA_SIM_CUDA_SIM_H_
#define ZEROSHARD_TOOLS_CUDA_SIM_CUDA_SIM_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "zeroshard/tools/cuda/sim/sim_errors.h"

// ------------------------------------------------------------ CUDA spellings

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
// Shared memory: one copy for the whole launch (blocks run one at a time).
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

using cudaStream_t = struct CUstream_st*;

// The values the CUDA runtime gives these errors.
enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorMisalignedAddress = 716,
  cudaErrorLaunchFailure = 719,
};
enum cudaFuncAttribute : int {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

// Device math spelled as the CUDA headers spell it in global scope.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::isfinite;
using std::isinf;
using std::isnan;

namespace zs_cuda_sim {

// The built-in variables of the running thread.
struct ThreadVars {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

// The running fiber's variables (null outside a launch).
const ThreadVars* Current();
void SyncThreads();
// Exchanges `bytes` of `value` across the calling thread's warp: every lane of
// `mask` offers its value, waits for the others, and copies lane `src`'s value
// into `out`. `src` is computed per lane by the caller.
void Shuffle(unsigned mask, const void* value, int src, void* out, int bytes);

// A warp-collective call as the convergence check sees it.
struct WarpCall {
  const char* name;  // in messages, and lanes meet only at calls of one name
  // Where set, lanes meet only at this same source line (wmma's `.aligned`
  // instructions, which all lanes must execute at the same call); null: at any
  // call of `name` (shfl.sync, bar.warp.sync on sm_70+).
  const char* file;
  int line;
  // Exited lanes of the mask count as arrived (__syncwarp: the device waits
  // only for the non-exited lanes it names); otherwise waiting for one is an
  // error.
  bool exited_lanes_arrive;
};
// Waits until every lane of `mask` in the calling thread's warp is at the same
// call with the same mask.
void WarpSync(unsigned mask, const WarpCall& call);

void* DynamicShared();
// A device fault of the running thread: the launch fails with `code` (a
// cudaError_t value) and "thread (x,y,z): what", the launch's first fault
// winning. The kernel goes on (host code would not fault); its results are
// then void. Outside a launch, nothing.
void Fault(int code, const std::string& what);
// The device's alignment rule for a vector access of `bytes` (4, 8, 16) at p:
// a misaligned one faults with cudaErrorMisalignedAddress.
void CheckAligned(const void* p, int bytes);
// wmma::load_matrix_sync's and store_matrix_sync's rules (include/mma.h): the
// pointer 256-bit aligned (cudaErrorMisalignedAddress, as the device's
// misaligned access would), the stride `ldm` (in elements of `element_bytes`)
// a multiple of 16 bytes. The device leaves a bad stride undefined (its wmma
// PTX requires the multiple); here it faults with cudaErrorLaunchFailure.
void CheckWmmaAccess(const char* op, const void* p, unsigned ldm, int element_bytes);

enum class Order { kForward, kReverse };
// The order of blocks and of threads within a block (process-wide).
void SetOrder(Order order);
Order GetOrder();
// The opt-in dynamic shared memory limit (default 232448 B, an H100's 227 KiB;
// an A100's is 166912 B).
void SetMaxSharedBytesOptin(int64_t bytes);

// Launch statistics, for tests that want to know a kernel ran.
struct Stats {
  int64_t launches = 0;
  int64_t blocks = 0;
  int64_t threads = 0;
  int64_t barriers = 0;    // block barriers opened
  int64_t shuffles = 0;    // warp shuffles completed (per warp)
  int64_t warp_syncs = 0;  // other warp-collective calls completed (per group of lanes)
};
Stats GetStats();

// Runs `body` on grid x block threads; returns 0 or a cudaError_t value.
int Run(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
        const std::function<void()>& body);
int SetFuncAttribute(const void* kernel, cudaFuncAttribute attr, int value);

template <typename... Params, typename... Args>
int Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, Args&&... args) {
  // Arguments are copied as the device launch copies them, once per launch.
  auto bound = std::make_tuple(static_cast<Params>(std::forward<Args>(args))...);
  return Run(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes,
             [&] { std::apply(kernel, bound); });
}

}  // namespace zs_cuda_sim

#define threadIdx (::zs_cuda_sim::Current()->thread_idx)
#define blockIdx (::zs_cuda_sim::Current()->block_idx)
#define blockDim (::zs_cuda_sim::Current()->block_dim)
#define gridDim (::zs_cuda_sim::Current()->grid_dim)

inline void __syncthreads() { ::zs_cuda_sim::SyncThreads(); }

// A convergence point of the lanes of `mask`, ordering their shared and global
// memory accesses as on the device. Lanes that have exited are not waited for.
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::zs_cuda_sim::WarpSync(mask, {"__syncwarp", nullptr, 0, true});
}

template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a 1-8 byte value");
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int src = (lane / width) * width + (src_lane % width);
  T out;
  ::zs_cuda_sim::Shuffle(mask, &value, src, &out, sizeof(T));
  return out;
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a 1-8 byte value");
  const int lane = static_cast<int>(threadIdx.x % 32);
  int src = lane ^ lane_mask;
  if (src / width != lane / width) src = lane;  // outside the lane's segment: its own value
  T out;
  ::zs_cuda_sim::Shuffle(mask, &value, src, &out, sizeof(T));
  return out;
}

inline cudaError_t cudaGetLastError() {
  return static_cast<cudaError_t>(::zs_cuda_sim::TakeLastLaunchError());
}

template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attr, int value) {
  return static_cast<cudaError_t>(
      ::zs_cuda_sim::SetFuncAttribute(reinterpret_cast<const void*>(kernel), attr, value));
}

#endif  // ZEROSHARD_TOOLS_CUDA_SIM_CUDA_SIM_H_
