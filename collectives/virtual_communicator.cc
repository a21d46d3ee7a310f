#include "zeroshard/collectives/virtual_communicator.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/virtual_device.h"

namespace zeroshard {

namespace {

// Note [Waking on shared cores]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// On a machine with more rank threads than cores (this project's CPU jobs: 4
// ranks, each a compute and a communication thread, on 2 cores), a collective
// issued ahead (a prefetched all-gather) does not move while the ranks
// compute: its communication threads get a core only when compute threads
// block. What a rank's wait costs there is measured to be nearly the same per
// wait whether or not the collective was issued early (about 0.8 ms at 4
// ranks on 2 cores, in FULL_SHARD's 16 waits a step as in SHARD_GRAD_OP's 11;
// docs/simulator.md), the time for the woken threads to get a core. So with
// wake_seconds W > 0 a wait that follows compute (the waiter's clock moved
// since the last wake ended), or that blocks, ends W after the later of the
// collective's end and the wait: a "wake" span on the communicator's stream,
// counted as exposed communication, as the job's traces count the wait.
// Back-to-back waits on collectives that ended meanwhile cost nothing more
// (one wake serves them all, as NO_SHARD's end-of-backward waits show).
class VirtualWork final : public Work {
 public:
  VirtualWork(VirtualDevice* device, double end, int comm_stream, double wake, std::shared_ptr<double> last_wake_end)
      : device_(device), end_(end), comm_stream_(comm_stream), wake_(wake), last_wake_end_(std::move(last_wake_end)) {}
  absl::Status Wait() override {
    device_->HostWait(WakeEnd(device_->host_time()));
    return absl::OkStatus();
  }
  bool IsCompleted() const override { return end_ <= device_->host_time(); }
  absl::Status Block(const Stream& stream) override {
    if (!stream.device().is_virtual()) return Wait();
    const int s = VirtualStreamIndex(stream.native_handle());
    device_->StreamWait(s, WakeEnd(device_->stream_time(s)));
    return absl::OkStatus();
  }

 private:
  // When a waiter whose clock reads `clock` runs again.
  double WakeEnd(double clock) const {
    if (wake_ <= 0 || (clock <= *last_wake_end_ && end_ <= clock)) return end_;
    const double start = std::max(clock, end_);
    const double end = device_->Enqueue(comm_stream_, "wake", "comm", wake_, start, 0, start);
    *last_wake_end_ = end;
    return end;
  }

  VirtualDevice* const device_;
  const double end_;
  const int comm_stream_;
  const double wake_;
  const std::shared_ptr<double> last_wake_end_;
};

int RanksPerNode(int size, int world_stride, int gpus_per_node) {
  if (world_stride >= gpus_per_node) return 1;
  return std::max(1, std::min(size, gpus_per_node / world_stride));
}

}  // namespace

int64_t VirtualCommTotals::total_count() const {
  int64_t n = 0;
  for (int64_t c : count) n += c;
  return n;
}

double VirtualCommTotals::total_bytes_sent() const {
  double b = 0;
  for (double x : bytes_sent) b += x;
  return b;
}

double VirtualCommTotals::total_seconds() const {
  double s = 0;
  for (double x : seconds) s += x;
  return s;
}

absl::StatusOr<std::unique_ptr<VirtualCommunicator>> VirtualCommunicator::Create(int rank, int size,
                                                                                 Device device,
                                                                                 Options options) {
  if (options.network == nullptr) {
    return absl::InvalidArgumentError("VirtualCommunicator: expected a network model, got none");
  }
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("VirtualCommunicator: rank ", rank, " of ", size, "; expected 0 <= rank < size"));
  }
  if (options.gpus_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("VirtualCommunicator: gpus_per_node is ", options.gpus_per_node, ", expected >= 1"));
  }
  VirtualDevice* d = device.is_virtual() ? VirtualDevice::Find(device.index) : nullptr;
  if (d == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("VirtualCommunicator: expected a live virtual device, got ",
                                                   device.ToString()));
  }
  const VirtualGroup group{.size = size,
                           .ranks_per_node = RanksPerNode(size, 1, options.gpus_per_node),
                           .world_stride = 1};
  const int stream = d->NewStream(absl::StrCat("comm world (", size, " ranks)"));
  return std::unique_ptr<VirtualCommunicator>(new VirtualCommunicator(rank, group, device, std::move(options), stream));
}

VirtualCommunicator::VirtualCommunicator(int rank, VirtualGroup group, Device device, Options options,
                                         int stream)
    : Communicator(rank, group.size, device, options.common),
      group_(group),
      options_(std::move(options)),
      stream_(stream),
      pending_splits_(options_.splits.begin(), options_.splits.end()),
      last_wake_end_(std::make_shared<double>(-1.0)) {}

VirtualCommunicator::~VirtualCommunicator() { StopWatchdog(); }

absl::StatusOr<std::shared_ptr<Work>> VirtualCommunicator::Launch(CollectiveCall call) {
  const CollectiveDesc& desc = call.desc;
  if (desc.invalid_args) {
    return absl::InvalidArgumentError(absl::StrCat(ErrorPrefix(desc, rank(), size()),
                                                   "this rank's arguments failed their check"));
  }
  VirtualDevice* d = VirtualDevice::Find(device().index);
  if (d == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(ErrorPrefix(desc, rank(), size()), device().ToString(),
                                                      " is gone"));
  }
  int64_t bytes = 0;  // the full buffer
  switch (desc.op) {
    case CollectiveOp::kAllGather: bytes = static_cast<int64_t>(call.output.nbytes()); break;
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllReduce: bytes = static_cast<int64_t>(call.input.nbytes()); break;
    case CollectiveOp::kBroadcast: bytes = static_cast<int64_t>(call.output.nbytes()); break;
    case CollectiveOp::kAllToAll: bytes = static_cast<int64_t>(call.input.nbytes()); break;
    default: bytes = 0; break;
  }
  MarkRunning(desc);
  const double seconds = options_.network->CollectiveSeconds(desc.op, bytes, group_);
  const double sent = options_.network->BytesSent(desc.op, bytes, group_);
  // Starts after the caller's stream's work so far (NCCL's event) and the host's issue.
  double after = d->host_time();
  if (call.stream != nullptr && call.stream->device() == device()) {
    after = std::max(after, d->stream_time(VirtualStreamIndex(call.stream->native_handle())));
  }
  double late = options_.straggler_seconds;
  if (options_.jitter_seconds > 0 && size() > 1) {
    // splitmix64 of (seed, draw): a uniform u in (0, 1); the last of n - 1 exponential peers.
    uint64_t z = options_.seed * 0x9E3779B97F4A7C15ull + ++draws_ * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
    late += -options_.jitter_seconds * std::log1p(-std::pow(u, 1.0 / (size() - 1)));
  }
  // The wait for the late peers is a "peers" span before the transfer's (Note [Communication spans]).
  const double end = d->Enqueue(stream_, CollectiveOpName(desc.op), "comm", seconds, after, sent, after + late);
  const int k = static_cast<int>(desc.op);
  if (k >= 0 && k < kNumCollectiveOps) {
    ++totals_.count[k];
    totals_.bytes_sent[k] += sent;
    totals_.seconds[k] += seconds;
  }
  (void)MarkDone(desc, absl::OkStatus());
  const double wake = options_.wake_group_size > 1 ? options_.wake_seconds * (group_.size - 1) /
                                                         (options_.wake_group_size - 1)
                                                   : options_.wake_seconds;
  std::shared_ptr<Work> work = std::make_shared<VirtualWork>(d, end, stream_, wake, last_wake_end_);
  if (call.blocking) ZS_RETURN_IF_ERROR(work->Wait());
  return work;
}

absl::StatusOr<std::unique_ptr<Communicator>> VirtualCommunicator::DoSplit(const CollectiveDesc& desc) {
  if (pending_splits_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ErrorPrefix(desc, rank(), size()),
        "the virtual communicator needs each Split's groups declared (Options::splits; "
        "Note [One representative rank]); none is left for this one"));
  }
  const VirtualSplit split = pending_splits_.front();
  pending_splits_.pop_front();
  if (split.size < 1 || split.stride < 1 || size() % (split.size * (split.stride == 1 ? 1 : split.stride)) != 0 ||
      (split.stride > 1 && split.size * split.stride != size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        ErrorPrefix(desc, rank(), size()), "declared split of size ", split.size, " and stride ", split.stride,
        " does not tile ", size(), " ranks (expected size dividing the group for stride 1, or size * stride == ",
        size(), ")"));
  }
  if (desc.color < 0) return std::unique_ptr<Communicator>();
  const int new_rank = split.stride == 1 ? rank() % split.size : rank() / split.stride;
  const int world_stride = group_.world_stride * split.stride;
  const VirtualGroup group{.size = split.size,
                           .ranks_per_node = RanksPerNode(split.size, world_stride, options_.gpus_per_node),
                           .world_stride = world_stride};
  VirtualDevice* d = VirtualDevice::Find(device().index);
  if (d == nullptr) return absl::FailedPreconditionError(absl::StrCat(device().ToString(), " is gone"));
  const int stream = d->NewStream(absl::StrCat("comm group (", split.size, " ranks, stride ", world_stride, ")"));
  Options child = options_;
  child.splits.clear();
  auto split_comm =
      std::unique_ptr<VirtualCommunicator>(new VirtualCommunicator(new_rank, group, device(), std::move(child), stream));
  split_comm->last_wake_end_ = last_wake_end_;  // the same rank's thread
  return std::unique_ptr<Communicator>(std::move(split_comm));
}

}  // namespace zeroshard
