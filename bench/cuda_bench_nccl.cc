// NCCL bus bandwidth over every visible GPU (one in-process rank per GPU):
// all-gather (bf16, FSDP's parameter gather) and reduce-scatter (f32, the
// gradient reduction, SUM) through our NcclCommunicator (validation, events,
// Work handles), beside the same collectives as raw NCCL calls on a
// communicator from ncclCommInitAll, same sizes and iterations.
//
//   algbw = bytes of the full buffer / time;  busbw = algbw (n - 1) / n
//   (nccl-tests' definitions, doc/PERFORMANCE.md). With one GPU there is no bus
//   traffic: busbw is 0 and only the time per call is meaningful.
// Check: after one all-gather every rank's slice holds that rank's value, and
// a reduce-scatter of (rank + 1) everywhere gives n (n + 1) / 2.
// Quick mode: 4 KiB, 32 KiB and 256 KiB per rank, 2 timed iterations. On the
// simulator one device only (see RunNcclBenches).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/bench/cuda_bench_util.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/nccl_communicator.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard::bench {

namespace {

constexpr int kSizeCount = 3;

// Bytes per rank, smallest first.
const int64_t* Sizes() {
  static const int64_t normal[kSizeCount] = {int64_t{1} << 20, int64_t{16} << 20, int64_t{128} << 20};
  static const int64_t quick[kSizeCount] = {int64_t{4} << 10, int64_t{32} << 10, int64_t{256} << 10};
  return Mode().quick ? quick : normal;
}

// "16 MiB", "32 KiB".
std::string SizeName(int64_t bytes) {
  return bytes % (int64_t{1} << 20) == 0 ? absl::StrCat(bytes >> 20, " MiB")
                                         : absl::StrCat(bytes >> 10, " KiB");
}

struct Timings {
  double ag_ms[kSizeCount] = {0, 0, 0};
  double rs_ms[kSizeCount] = {0, 0, 0};
};

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Ours: every rank issues the timed asynchronous collectives and waits for the last.
absl::Status OursRank(Communicator& local, Timings* t, std::mutex* mu) {
  const int rank = local.rank(), n = local.size();
  ZS_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::Create(local, Device::Cuda(rank)));
  CudaAllocator gpu(rank);
  const int64_t* sizes = Sizes();
  const int iters = Iters(20);
  for (int s = 0; s < kSizeCount; ++s) {
    const int64_t ag_count = sizes[s] / 2, rs_count = sizes[s] / 4;
    ZS_ASSIGN_OR_RETURN(Tensor ag_in, Tensor::Full({ag_count}, rank + 1, DType::kBF16, &gpu));
    ZS_ASSIGN_OR_RETURN(Tensor ag_out, Tensor::Empty({n * ag_count}, DType::kBF16, &gpu));
    ZS_ASSIGN_OR_RETURN(Tensor rs_in, Tensor::Full({n * rs_count}, rank + 1, DType::kF32, &gpu));
    ZS_ASSIGN_OR_RETURN(Tensor rs_out, Tensor::Empty({rs_count}, DType::kF32, &gpu));
    // Check the data once.
    ZS_RETURN_IF_ERROR(nccl->AllGather(ag_in, ag_out));
    ZS_RETURN_IF_ERROR(nccl->ReduceScatter(rs_in, rs_out, ReduceOp::kSum));
    for (int r = 0; r < n; ++r) {
      ZS_ASSIGN_OR_RETURN(Tensor e, ag_out.Narrow(0, r * ag_count + ag_count / 2, 1));
      ZS_ASSIGN_OR_RETURN(double v, e.Item());
      if (v != r + 1) Fail(absl::StrCat("all-gather: rank ", rank, " sees ", v, " in slice ", r));
    }
    ZS_ASSIGN_OR_RETURN(Tensor e, rs_out.Narrow(0, rs_count - 1, 1));
    ZS_ASSIGN_OR_RETURN(double v, e.Item());
    if (v != n * (n + 1) / 2.0) Fail(absl::StrCat("reduce-scatter: rank ", rank, " got ", v));

    for (int which = 0; which < 2; ++which) {
      ZS_RETURN_IF_ERROR(nccl->Barrier());
      const auto t0 = std::chrono::steady_clock::now();
      std::shared_ptr<Work> last;
      for (int i = 0; i < iters; ++i) {
        if (which == 0) {
          ZS_ASSIGN_OR_RETURN(last, nccl->AllGatherAsync(ag_in, ag_out));
        } else {
          ZS_ASSIGN_OR_RETURN(last, nccl->ReduceScatterAsync(rs_in, rs_out, ReduceOp::kSum));
        }
      }
      ZS_RETURN_IF_ERROR(last->Wait());
      const double ms = 1e3 * Seconds(t0) / iters;
      std::lock_guard<std::mutex> lock(*mu);
      double& slot = which == 0 ? t->ag_ms[s] : t->rs_ms[s];
      slot = std::max(slot, ms);  // the slowest rank
    }
  }
  return absl::OkStatus();
}

#define BENCH_NCCL(call)                                                                   \
  do {                                                                                     \
    const ncclResult_t r_ = (call);                                                        \
    if (r_ != ncclSuccess) {                                                               \
      std::fprintf(stderr, "cuda_bench: %s failed: %s\n", #call, ncclGetErrorString(r_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// Raw NCCL: one thread drives every GPU through grouped calls.
Timings RawNccl(int n) {
  Timings t;
  std::vector<ncclComm_t> comms(n);
  std::vector<int> devs(n);
  for (int d = 0; d < n; ++d) devs[d] = d;
  BENCH_NCCL(ncclCommInitAll(comms.data(), n, devs.data()));
  std::vector<cudaStream_t> streams(n);
  std::vector<void*> in(n), out(n);
  const int64_t* sizes = Sizes();
  const int iters = Iters(20);
  const int64_t max_bytes = sizes[kSizeCount - 1];
  for (int d = 0; d < n; ++d) {
    cudaSetDevice(d);
    cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking);
    cudaMalloc(&in[d], n * max_bytes);
    cudaMalloc(&out[d], n * max_bytes);
  }
  auto sync = [&] {
    for (int d = 0; d < n; ++d) {
      cudaSetDevice(d);
      cudaStreamSynchronize(streams[d]);
    }
  };
  for (int s = 0; s < kSizeCount; ++s) {
    for (int which = 0; which < 2; ++which) {
      auto once = [&] {
        BENCH_NCCL(ncclGroupStart());
        for (int d = 0; d < n; ++d) {
          if (which == 0) {
            BENCH_NCCL(ncclAllGather(in[d], out[d], sizes[s] / 2, ncclBfloat16, comms[d], streams[d]));
          } else {
            BENCH_NCCL(ncclReduceScatter(in[d], out[d], sizes[s] / 4, ncclFloat32, ncclSum, comms[d],
                                         streams[d]));
          }
        }
        BENCH_NCCL(ncclGroupEnd());
      };
      once();
      sync();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) once();
      sync();
      (which == 0 ? t.ag_ms[s] : t.rs_ms[s]) = 1e3 * Seconds(t0) / iters;
    }
  }
  for (int d = 0; d < n; ++d) {
    cudaSetDevice(d);
    cudaFree(in[d]);
    cudaFree(out[d]);
    cudaStreamDestroy(streams[d]);
    ncclCommDestroy(comms[d]);
  }
  return t;
}

}  // namespace

void RunNcclBenches() {
  // One rank per visible GPU; on the simulator one only: its NCCL collectives
  // block until every rank has called them (tools/cuda/sim/fake_nccl.cc), so
  // RawNccl's single thread issuing the grouped calls of several ranks would
  // wait for itself forever (the real calls only enqueue).
  const int n = Mode().simulator ? 1 : Must(cuda::CudaDeviceCount(), "device count");
  Timings ours;
  std::mutex mu;
  const std::vector<absl::Status> statuses =
      RunRanks(n, [&](Communicator& local) { return OursRank(local, &ours, &mu); });
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) Fail(absl::StrCat("NCCL rank ", r, ": ", statuses[r].ToString()));
  }
  const Timings raw = RawNccl(n);
  std::printf("\nNCCL over %d GPU(s)%s\n", n,
              n == 1 ? " (one GPU: no bus traffic, busbw is 0; compare the times)" : "");
  std::printf("%-34s %10s %10s %10s %10s %8s\n", "collective (bytes per rank)", "ours us",
              "busbw GB/s", "raw us", "busbw GB/s", "of raw");
  const double factor = n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  const int64_t* sizes = Sizes();
  for (int s = 0; s < kSizeCount; ++s) {
    for (int which = 0; which < 2; ++which) {
      const double full_bytes = static_cast<double>(n) * sizes[s];  // the gathered / scattered buffer
      const double o = which == 0 ? ours.ag_ms[s] : ours.rs_ms[s];
      const double w = which == 0 ? raw.ag_ms[s] : raw.rs_ms[s];
      const std::string name = absl::StrCat(which == 0 ? "all-gather bf16 " : "reduce-scatter f32 ",
                                            SizeName(sizes[s]));
      std::printf("%-34s %10.1f %10.1f %10.1f %10.1f %7.0f%%\n", name.c_str(), o * 1e3,
                  full_bytes / (o * 1e6) * factor, w * 1e3, full_bytes / (w * 1e6) * factor,
                  o > 0 ? 100.0 * w / o : 0.0);
      const std::string json = absl::StrCat("cuda/nccl/", Slug(name), "_x", n, "/");
      Report().Add(json + "raw_nccl_us", "us", /*higher_is_better=*/false, {w * 1e3});
      Report().Add(json + "ours_us", "us", false, {o * 1e3}, json + "raw_nccl_us");
      EmitFigure("cuda_bench", absl::StrCat("nccl ", name, " x", n), o * 1e3, "us",
                 {{"busbw_gbs", full_bytes / (o * 1e6) * factor}, {"baseline_us", w * 1e3},
                  {"of_baseline", o > 0 ? w / o : 0.0}},
                 "baseline: raw grouped NCCL calls");
    }
  }
}

}  // namespace zeroshard::bench
