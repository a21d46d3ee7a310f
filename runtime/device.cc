#include "zeroshard/runtime/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace zeroshard {

std::string Device::ToString() const {
  switch (type) {
    case DeviceType::kCpu: return "cpu";
    case DeviceType::kCuda: return absl::StrCat("cuda:", index);
    case DeviceType::kVirtual: return absl::StrCat("virtual:", index);
  }
  return absl::StrCat("device(", static_cast<int>(type), "):", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  absl::string_view rest = text;
  int index = -1;
  if (absl::ConsumePrefix(&rest, "cuda:") && absl::SimpleAtoi(rest, &index) && index >= 0) {
    return Device::Cuda(index);
  }
  rest = text;
  if (absl::ConsumePrefix(&rest, "virtual:") && absl::SimpleAtoi(rest, &index) && index >= 0) {
    return Device::Virtual(index);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device \"", text, "\": expected \"cpu\", \"cuda\", \"cuda:<n>\" or \"virtual:<n>\""));
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.ToString(); }

}  // namespace zeroshard
