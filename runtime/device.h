// Device: where a tensor's bytes live. A small value type.
//
//   Device cpu = Device::Cpu();
//   Device gpu = Device::Cuda(1);
//   gpu.ToString();                 // "cuda:1"
//   ParseDevice("cuda:0");          // Device::Cuda(0)
//   Device::Virtual(0).ToString();  // "virtual:0" (runtime/virtual_device.h)
#ifndef ZEROSHARD_RUNTIME_DEVICE_H_
#define ZEROSHARD_RUNTIME_DEVICE_H_

#include <ostream>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace zeroshard {

// kVirtual: a simulated device with clocks and byte accounting but no bytes
// (runtime/virtual_device.h), which runs the GPU's schedule for the simulator.
enum class DeviceType : uint8_t { kCpu = 0, kCuda = 1, kVirtual = 2 };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static constexpr Device Cpu() { return Device{DeviceType::kCpu, 0}; }
  static constexpr Device Cuda(int index) { return Device{DeviceType::kCuda, index}; }
  static constexpr Device Virtual(int index) { return Device{DeviceType::kVirtual, index}; }

  constexpr bool is_cpu() const { return type == DeviceType::kCpu; }
  constexpr bool is_cuda() const { return type == DeviceType::kCuda; }
  constexpr bool is_virtual() const { return type == DeviceType::kVirtual; }
  // A device with its own memory, streams and events (CUDA or virtual): the
  // schedule of sharding/device_schedule.h runs its GPU form there.
  constexpr bool is_accelerator() const { return type != DeviceType::kCpu; }

  // "cpu", "cuda:<index>" or "virtual:<index>".
  std::string ToString() const;

  friend constexpr bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend constexpr bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// Accepts "cpu", "cuda" (index 0), "cuda:<n>" and "virtual:<n>".
absl::StatusOr<Device> ParseDevice(absl::string_view text);

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_DEVICE_H_
