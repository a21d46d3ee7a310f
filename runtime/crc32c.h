// CRC-32C (Castagnoli), the checksum of checkpoint files and NVMe swap
// regions: incremental, the value iSCSI and ext4 use. The SSE4.2 crc32
// instruction when the CPU has it (picked once at run time), table-driven
// slicing by 8 otherwise; both give the same value.
//
//   uint32_t c = Crc32c(data, n);                 // one go
//   uint32_t c = Crc32cExtend(Crc32cExtend(0, a, n), b, m);   // a then b
//   Crc32c("123456789", 9) == 0xE3069283          // the standard check value
#ifndef ZEROSHARD_RUNTIME_CRC32C_H_
#define ZEROSHARD_RUNTIME_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace zeroshard {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
// The portable table-driven version (tests compare the two).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);
// The CRC-32C of a whole file, read in chunks.
absl::StatusOr<uint32_t> Crc32cOfFile(const std::string& path);

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_CRC32C_H_
