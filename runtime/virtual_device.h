// VirtualDevice: a device whose tensors have shapes, dtypes and addresses but
// no bytes. Every op on it advances a clock instead of computing, so the real
// runtime (ShardedModel, its hooks, DeviceSchedule, the optimizer) can run a
// training step of a model of any size - a 405B Llama on a laptop - and say
// how long it would take and how much memory it would hold (sim/, issue 24).
//
//   MyCostModel cost;                                   // seconds per op (sim/cost_model.h)
//   ZS_ASSIGN_OR_RETURN(auto dev, VirtualDevice::Create(0, {.cost = &cost}));
//   ZS_ASSIGN_OR_RETURN(Tensor w, Tensor::Empty({8192, 8192}, DType::kBF16, dev->allocator()));
//   ... MatMul(x, w, y) charges a GEMM to the compute stream ...
//   dev->stream_time(VirtualDevice::kCompute);           // seconds of device time so far
//   dev->memory().peak_reserved_bytes;                   // as the caching allocator would hold
//
// Note [Virtual device]
// - Device "virtual:<index>". Created devices register under their index so
//   that a Stream, an Event or an op entry finds its device from a Device value.
// - Memory: the project's own CachingAllocator (runtime/cuda/caching_allocator.h)
//   over a backing that hands out address ranges nobody may read. Rounding,
//   pools, splitting, coalescing, segments and the out-of-memory retry are the
//   real allocator's, so peak reserved bytes include its fragmentation.
// - Time: a host clock (the thread issuing work) and one clock per stream, in
//   seconds. A launch costs the host `launch_seconds` and starts on its stream
//   at max(stream clock, host clock); it ends `OpSeconds(cost)` later. An
//   event records its stream's clock; Block makes a stream wait for it;
//   Synchronize makes the host wait. The GPU rules exactly, so a schedule's
//   overlap (or lack of it) shows in the clocks. Options::synchronous gives a
//   CPU's rules instead: the host waits for each op, and a wait of the compute
//   stream is a wait of the host (collectives still run beside it, as the
//   host backends' communication thread does).
// - Data: kernels never run. Reading a virtual tensor on the host gives zeros
//   (a loss reads 0, a grad norm 0), writing one is charged and dropped.
// - Thread-safe: one mutex around the clocks and spans.
//
// Note [Virtual host] (CPU offload in the simulator): with Options::host_index
// the device also has a host side, "virtual:<host_index>", standing for the
// host memory a GPU job offloads to. Its allocator (host_allocator()) counts
// bytes exactly as the CPU allocator does (no rounding, no caching) over
// addresses nobody may read, so a 70B model's offloaded shards cost no real
// memory. The runtime treats it as host memory (IsHostMemory): DeviceSchedule
// moves shards between it and the device with CopyAsync on its copy stream,
// charged HostCopySeconds there. A kernel on host-side tensors (the offloaded
// optimizer step, the add of a reduced gradient into its host shard, a fill)
// runs on the issuing thread, as a host kernel does: it advances the host
// clock by HostOpSeconds, after whatever the host waited for before it, and is
// recorded on a "host" track (a stream whose clock follows those kernels).
#ifndef ZEROSHARD_RUNTIME_VIRTUAL_DEVICE_H_
#define ZEROSHARD_RUNTIME_VIRTUAL_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/cuda/caching_allocator.h"
#include "zeroshard/runtime/device.h"
#include "zeroshard/runtime/dtype.h"

namespace zeroshard {

// What one op does, as the cost model needs it.
struct OpCost {
  absl::string_view op;  // "MatMul", "Binary", "AdamW", ... (a literal: spans keep it)
  double flops = 0;     // arithmetic operations
  double bytes = 0;     // bytes read from and written to device memory
  // A matrix product when gemm_batch > 0: batch x [m, k] x [k, n] in `dtype`.
  int64_t gemm_batch = 0, gemm_m = 0, gemm_n = 0, gemm_k = 0;
  DType dtype = DType::kF32;
  bool tf32 = false;  // an f32 GEMM on TF32 tensor cores (SetMatMulAllowTf32)
};

// Seconds per op, launch and host transfer (sim/ implements it from a hardware profile).
class VirtualCostModel {
 public:
  virtual ~VirtualCostModel() = default;
  virtual double OpSeconds(const OpCost& cost) const = 0;
  virtual double LaunchSeconds() const = 0;
  // A transfer of `bytes` between host and device memory.
  virtual double HostCopySeconds(int64_t bytes) const = 0;
  // A kernel the host runs on host memory (Note [Virtual host]); free unless
  // the model says otherwise.
  virtual double HostOpSeconds(const OpCost&) const { return 0; }
  // A transfer of `bytes` between host memory and the rank's share of the
  // node's NVMe drives (Note [Virtual NVMe] in runtime/nvme/virtual_swap_store.h);
  // free unless the model says otherwise.
  virtual double NvmeSeconds(bool /*write*/, int64_t /*bytes*/) const { return 0; }
};

// One piece of work on a stream, for traces and breakdowns.
struct VirtualSpan {
  int stream = 0;
  absl::string_view name;      // the op or collective
  absl::string_view category;  // "compute", "comm", "copy", "host"
  double start = 0, end = 0;  // seconds
  double flops = 0, bytes = 0;
  bool gemm = false;  // a matrix product (OpCost::gemm_batch > 0)
};

class VirtualDevice {
 public:
  static constexpr int kCompute = 0;  // the default stream: where op entries launch

  struct Options {
    const VirtualCostModel* cost = nullptr;  // required; must outlive the device
    int64_t capacity_bytes = 0;              // device memory; 0 = unlimited
    bool record_spans = true;                // keep every span (traces)
    // A CPU's rules: the host waits for every op it launches (and for the
    // compute stream whenever the stream waits), so nothing runs ahead.
    bool synchronous = false;
    // The caching allocator's sizes (rounding, pools, segments); its name,
    // device and capacity come from the fields above.
    CachingAllocatorOptions allocator;
    // >= 0: a host side registered as virtual:<host_index> (Note [Virtual host]).
    int host_index = -1;
  };

  // Registers virtual:<index> (and virtual:<host_index>); AlreadyExists if a
  // live device has either index.
  // Unregistered when destroyed (after every tensor on it is gone).
  static absl::StatusOr<std::unique_ptr<VirtualDevice>> Create(int index, Options options);
  // The live device with that index (its own or its host side's), or nullptr.
  static VirtualDevice* Find(int index);
  ~VirtualDevice();
  VirtualDevice(const VirtualDevice&) = delete;
  VirtualDevice& operator=(const VirtualDevice&) = delete;

  Device device() const { return Device::Virtual(index_); }
  // Tensors on this device (a view of the caching allocator on the compute stream).
  Allocator* allocator();
  const VirtualCostModel& cost() const { return *options_.cost; }
  // The caching allocator's figures: allocated, reserved and their peaks.
  CachingAllocatorStats memory() const;
  // Resets the device's and the host side's peaks.
  void ResetPeakMemory();

  // ------------------------------------------------------------ host side (Note [Virtual host])
  bool has_host() const { return options_.host_index >= 0; }
  // virtual:<host_index>; only with has_host().
  Device host_device() const { return Device::Virtual(options_.host_index); }
  // Whether `d` is this device's host side.
  bool IsHostSide(Device d) const { return has_host() && d == host_device(); }
  // Host memory with no bytes, counted exactly; nullptr without a host side.
  Allocator* host_allocator();
  // The stream index of the host track (host kernels' spans); -1 without a host side.
  int host_stream() const { return host_stream_; }
  // A kernel on host-side tensors: the host clock advances by HostOpSeconds.
  void HostRun(const OpCost& cost);
  // An NVMe transfer of a swap region (Note [Virtual NVMe]): charged
  // NvmeSeconds on the "nvme" track (made at the first transfer), starting
  // at max(host clock, track clock); returns its end. Only with has_host().
  double SwapTransfer(bool write, int64_t bytes);

  // ------------------------------------------------------------ clocks
  int NewStream(std::string name);
  int num_streams() const;
  std::string stream_name(int stream) const;
  double host_time() const;
  double stream_time(int stream) const;
  // The latest clock of all (host and streams): when everything issued is done.
  double Now() const;

  // An op on `stream` (the op entries: ChargeVirtual).
  void Launch(int stream, const OpCost& cost);
  // Work of known duration on `stream` that starts after `after` (e.g. the
  // producer stream's work so far); no launch cost. Its busy part starts no
  // earlier than `not_before` (a collective's late peers): the wait before it
  // is a span of its own, "wait for peers" of category "peers", as the
  // in-process backend traces it (Note [Communication spans]). Returns its end.
  double Enqueue(int stream, absl::string_view name, absl::string_view category, double seconds,
                 double after = 0, double bytes = 0, double not_before = 0);
  void StreamWait(int stream, double time);
  void HostWait(double time);
  void HostAdvance(double seconds);

  std::vector<VirtualSpan> spans() const;
  void ClearSpans();
  // Every clock to Now() and the spans cleared: the start of a measured step.
  void Settle();

 private:
  VirtualDevice(int index, Options options);
  void AddSpan(int stream, absl::string_view name, absl::string_view category, double start,
               double end, double flops, double bytes, bool gemm = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  class Backing;
  const int index_;
  const Options options_;
  std::unique_ptr<Backing> backing_;
  std::unique_ptr<CachingAllocator> cache_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Allocator> host_allocator_;  // with a host side
  int host_stream_ = -1;

  mutable absl::Mutex mu_;
  int nvme_stream_ ABSL_GUARDED_BY(mu_) = -1;  // made by the first SwapTransfer
  double host_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> streams_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> stream_names_ ABSL_GUARDED_BY(mu_);
  std::vector<VirtualSpan> spans_ ABSL_GUARDED_BY(mu_);
};

// The stream index a virtual Stream's native handle carries (0: compute).
inline int VirtualStreamIndex(const void* native_handle) {
  return static_cast<int>(reinterpret_cast<intptr_t>(native_handle));
}

// The op entries' virtual kernel: charges `cost` to the compute stream of
// `device`, or to the host clock when `device` is a host side (Note [Virtual
// host]); FailedPrecondition if no virtual device has its index.
absl::Status ChargeVirtual(Device device, const OpCost& cost);

// A host <-> device transfer of `bytes` on `stream` of a virtual device,
// synchronous (the host waits) unless `async`. On a host side, where the
// "host" is the memory itself, a host kernel moving the bytes.
absl::Status ChargeVirtualCopy(Device device, int stream, int64_t bytes, bool async);

// Memory the host reads directly: the CPU's, or a virtual device's host side.
bool IsHostMemory(Device device);
// Whether `host` is the host side of the virtual device `device`.
bool IsHostSideOf(Device host, Device device);

// Tensor::CopyFrom between a virtual device and its host side (either way):
// a synchronous transfer on the compute stream, as a copy through the
// device allocator's CopyFromHost / CopyToHost is; InvalidArgument between
// unrelated virtual devices.
absl::Status ChargeVirtualTransfer(Device dst, Device src, int64_t bytes);

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_VIRTUAL_DEVICE_H_
