// Token files: how prepare_data writes token ids, in the two formats TokenData::Load
// reads back (data/token_data.h).
//
//   ZS_RETURN_IF_ERROR(WriteTokenFile("shakespeare.bin", ids, TokenFileFormat::kLlmc));
//   ZS_ASSIGN_OR_RETURN(TokenData data, TokenData::Load("shakespeare.bin"));
//
// kNanoGpt: the ids as little-endian uint16, nothing else (nanoGPT's prepare.py,
//   `np.array(ids, dtype=np.uint16).tofile(path)`).
// kLlmc: llm.c's file (dev/data/data_common.py write_datafile): a header of 256
//   little-endian int32, [0] = 20240520 (the magic of GPT-2 token files), [1] = 1
//   (the version), [2] = the number of tokens, the rest 0; then the ids as
//   little-endian uint16.
// Both hold ids up to 65535 only; llm.c's count is below 2^31.
#ifndef ZEROSHARD_DATA_TOKEN_FILE_H_
#define ZEROSHARD_DATA_TOKEN_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace zeroshard {

enum class TokenFileFormat { kNanoGpt, kLlmc };

inline constexpr uint32_t kLlmcMagic = 20240520;
inline constexpr uint32_t kLlmcVersion = 1;
inline constexpr int kLlmcHeaderInts = 256;

// "nanogpt" or "llmc".
absl::StatusOr<TokenFileFormat> ParseTokenFileFormat(absl::string_view name);
absl::string_view TokenFileFormatName(TokenFileFormat format);

// Writes `tokens` to `path` (replacing it) in `format`.
absl::Status WriteTokenFile(const std::string& path, absl::Span<const int32_t> tokens, TokenFileFormat format);

}  // namespace zeroshard

#endif  // ZEROSHARD_DATA_TOKEN_FILE_H_
