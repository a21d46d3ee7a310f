#include "zeroshard/runtime/storage.h"

#include "zeroshard/runtime/status.h"

namespace zeroshard {

Storage::Storage(void* data, size_t nbytes, Device device, Allocator* allocator,
                 std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), allocator_(allocator),
      deleter_(std::move(deleter)) {}

absl::StatusOr<std::shared_ptr<Storage>> Storage::Allocate(size_t nbytes, Allocator* allocator) {
  if (allocator == nullptr) allocator = DefaultCpuAllocator();
  ZS_ASSIGN_OR_RETURN(void* data, allocator->Allocate(nbytes));
  return std::shared_ptr<Storage>(new Storage(data, nbytes, allocator->device(), allocator, nullptr));
}

std::shared_ptr<Storage> Storage::Wrap(void* data, size_t nbytes, Device device,
                                       std::function<void(void*)> deleter) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, nullptr, std::move(deleter)));
}

absl::Status Storage::Release() {
  if (allocator_ == nullptr) {
    return absl::FailedPreconditionError("Storage::Release: wrapped memory belongs to its owner");
  }
  if (released_) return absl::OkStatus();
  allocator_->Deallocate(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
  return absl::OkStatus();
}

absl::Status Storage::Reallocate() {
  if (!released_) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(data_, allocator_->Allocate(nbytes_));
  released_ = false;
  return absl::OkStatus();
}

Storage::~Storage() {
  if (released_) return;
  if (allocator_ != nullptr) {
    allocator_->Deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace zeroshard
