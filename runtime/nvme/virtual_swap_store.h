// VirtualSwapStore: NVMe offload in the simulator (issue 24). A SwapSpace
// whose host allocator is a virtual device's host side (Note [Virtual host]
// in runtime/virtual_device.h) keeps its regions here instead of in a file:
// nothing is written to disk and no buffer byte is touched, and every
// transfer is charged to the device's "nvme" track, so the runtime's own swap
// schedule (read-ahead, write-behind, buffer reuse: Note [Swap buffers])
// shows in the virtual clocks exactly as it runs.
//
// Note [Virtual NVMe]: one "nvme" track per virtual device, shared by every
// swap space of the rank (the parameters' and the optimizer state's), as one
// rank's share of the node's drives is. A transfer starts when the host
// issues it (the host clock) or when the track is free, whichever is later,
// and takes VirtualCostModel::NvmeSeconds(write, bytes): reads and writes
// queue behind each other. A ticket is done once the host clock has passed
// its end; Wait moves the host clock there (the host blocks on the read), so
// an Acquire of a region whose read-ahead finished early costs nothing and
// one that was not read ahead costs the whole read.
#ifndef ZEROSHARD_RUNTIME_NVME_VIRTUAL_SWAP_STORE_H_
#define ZEROSHARD_RUNTIME_NVME_VIRTUAL_SWAP_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/runtime/nvme/swap_file.h"
#include "zeroshard/runtime/virtual_device.h"

namespace zeroshard {

class VirtualSwapStore final : public SwapStore {
 public:
  // `device`'s host side holds the swap buffers; `name` ("optimizer state")
  // names the store in errors.
  static absl::StatusOr<std::unique_ptr<VirtualSwapStore>> Create(VirtualDevice* device, const std::string& name,
                                                                   const std::vector<int64_t>& region_bytes,
                                                                   std::vector<std::string> region_names);

  std::shared_ptr<IoTicket> Write(int r, const void* buffer) override;
  std::shared_ptr<IoTicket> Read(int r, void* buffer) override;
  absl::Status Verify(int, const void*) const override { return absl::OkStatus(); }
  bool holds_bytes() const override { return false; }
  double Now() const override { return device_->host_time(); }
  std::string Describe() const override;

 private:
  VirtualSwapStore() = default;

  VirtualDevice* device_ = nullptr;
  std::string name_;
  std::vector<bool> written_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_NVME_VIRTUAL_SWAP_STORE_H_
