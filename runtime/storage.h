// Storage: one contiguous block of bytes on one device, shared by the tensors
// that view it.
//
//   ZS_ASSIGN_OR_RETURN(std::shared_ptr<Storage> s, Storage::Allocate(1024, &allocator));
//   s->data();                               // 64-byte aligned
//   auto w = Storage::Wrap(user_ptr, n, Device::Cpu());   // borrows, never frees
//
// Allocated storage returns its bytes to the allocator when the last tensor
// viewing it goes away. Wrapped storage belongs to the caller, who keeps it
// alive while tensors view it (or passes a deleter).
#ifndef ZEROSHARD_RUNTIME_STORAGE_H_
#define ZEROSHARD_RUNTIME_STORAGE_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/device.h"

namespace zeroshard {

class Storage {
 public:
  // `allocator` == nullptr means DefaultCpuAllocator().
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(size_t nbytes, Allocator* allocator);
  static std::shared_ptr<Storage> Wrap(void* data, size_t nbytes, Device device,
                                       std::function<void(void*)> deleter = nullptr);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Gives the bytes back to the allocator while every Tensor viewing this
  // storage stays valid as an object (FSDP frees a gathered parameter buffer
  // this way while autograd still holds views of it). Until Reallocate(),
  // data() is nullptr and the views must not be read. Allocated storage only.
  absl::Status Release();
  // Allocates `nbytes()` bytes again (contents undefined) after Release().
  absl::Status Reallocate();
  bool is_released() const { return released_; }

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // The allocator the bytes came from; nullptr for wrapped storage.
  Allocator* allocator() const { return allocator_; }

 private:
  Storage(void* data, size_t nbytes, Device device, Allocator* allocator,
          std::function<void(void*)> deleter);

  void* data_;
  size_t nbytes_;
  Device device_;
  Allocator* allocator_;
  std::function<void(void*)> deleter_;
  bool released_ = false;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_STORAGE_H_
