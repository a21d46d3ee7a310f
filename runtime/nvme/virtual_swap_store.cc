#include "zeroshard/runtime/nvme/virtual_swap_store.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

// Done once the host clock has reached the transfer's end (Note [Virtual NVMe]).
class VirtualIoTicket final : public IoTicket {
 public:
  VirtualIoTicket(VirtualDevice* device, double end) : device_(device), end_(end) {}
  absl::Status Wait() override {
    device_->HostWait(end_);
    return absl::OkStatus();
  }
  bool Done() override { return device_->host_time() >= end_; }

 private:
  VirtualDevice* device_;
  double end_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<VirtualSwapStore>> VirtualSwapStore::Create(VirtualDevice* device,
                                                                           const std::string& name,
                                                                           const std::vector<int64_t>& region_bytes,
                                                                           std::vector<std::string> region_names) {
  if (device == nullptr || !device->has_host()) {
    return absl::InvalidArgumentError(
        absl::StrCat("simulated NVMe swap of ", name, ": expected a virtual device with a host side, found none"));
  }
  std::unique_ptr<VirtualSwapStore> s(new VirtualSwapStore());
  ZS_RETURN_IF_ERROR(s->Layout(region_bytes, std::move(region_names), absl::StrCat("simulated NVMe swap of ", name)));
  s->device_ = device;
  s->name_ = name;
  s->written_.assign(region_bytes.size(), false);
  return s;
}

std::shared_ptr<IoTicket> VirtualSwapStore::Write(int r, const void*) {
  written_[r] = true;
  return std::make_shared<VirtualIoTicket>(device_, device_->SwapTransfer(/*write=*/true, sizes_[r]));
}

std::shared_ptr<IoTicket> VirtualSwapStore::Read(int r, void*) {
  if (!written_[r]) {
    return IoTicket::Completed(absl::InternalError(absl::StrCat("simulated NVMe swap of ", name_, " region ", r, " (",
                                                                names_[r], "): read before it was ever written")));
  }
  return std::make_shared<VirtualIoTicket>(device_, device_->SwapTransfer(/*write=*/false, sizes_[r]));
}

std::string VirtualSwapStore::Describe() const {
  return absl::StrCat("the simulated NVMe of ", device_->host_device().ToString(), " (no file)");
}

}  // namespace zeroshard
