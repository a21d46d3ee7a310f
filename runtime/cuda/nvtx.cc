// nvtx.h over the toolkit's nvtx3 (header only; its loader dlopens the tool
// that NVTX_INJECTION64_PATH names, which nsys sets).
#include "zeroshard/runtime/cuda/nvtx.h"

#include <nvtx3/nvToolsExt.h>

#include <cstdlib>
#include <cstring>

namespace zeroshard::nvtx {

namespace {

nvtxDomainHandle_t Domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("zeroshard");
  return domain;
}

}  // namespace

bool BuiltIn() { return true; }

bool Requested() {
  const char* v = std::getenv("ZEROSHARD_NVTX");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

uint64_t RangeStart(const char* name) {
  nvtxEventAttributes_t attributes;
  std::memset(&attributes, 0, sizeof(attributes));
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = name;
  return nvtxDomainRangeStartEx(Domain(), &attributes);
}

void RangeEnd(uint64_t id) {
  if (id != 0) nvtxDomainRangeEnd(Domain(), id);
}

std::vector<RecordedRange> RecordedRanges() { return {}; }
void ClearRecordedRanges() {}

}  // namespace zeroshard::nvtx
