#include "zeroshard/data/token_file.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::StatusOr<TokenFileFormat> ParseTokenFileFormat(absl::string_view name) {
  if (name == "nanogpt") return TokenFileFormat::kNanoGpt;
  if (name == "llmc") return TokenFileFormat::kLlmc;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown token file format \"", name, "\", expected \"nanogpt\" or \"llmc\""));
}

absl::string_view TokenFileFormatName(TokenFileFormat format) {
  return format == TokenFileFormat::kNanoGpt ? "nanogpt" : "llmc";
}

absl::Status WriteTokenFile(const std::string& path, absl::Span<const int32_t> tokens, TokenFileFormat format) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("WriteTokenFile \"", path, "\": token ", tokens[i],
                                                     " at position ", i, " does not fit uint16 (0 to 65535)"));
    }
  }
  if (format == TokenFileFormat::kLlmc && tokens.size() >= (uint64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("WriteTokenFile \"", path, "\": ", tokens.size(),
                                                   " tokens, llm.c's header holds fewer than 2^31"));
  }
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("WriteTokenFile: cannot create \"", path, "\""));
  std::vector<unsigned char> bytes;
  if (format == TokenFileFormat::kLlmc) {
    const uint32_t header3[3] = {kLlmcMagic, kLlmcVersion, static_cast<uint32_t>(tokens.size())};
    bytes.assign(4 * kLlmcHeaderInts, 0);
    for (int k = 0; k < 3; ++k) {
      for (int b = 0; b < 4; ++b) bytes[4 * k + b] = static_cast<unsigned char>(header3[k] >> (8 * b));
    }
  }
  constexpr size_t kChunk = size_t{1} << 20;  // tokens per write
  for (size_t i = 0; i < tokens.size() || !bytes.empty();) {
    const size_t end = std::min(tokens.size(), i + kChunk);
    for (; i < end; ++i) {
      bytes.push_back(static_cast<unsigned char>(tokens[i] & 0xFF));
      bytes.push_back(static_cast<unsigned char>(tokens[i] >> 8));
    }
    if (std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) {
      return absl::DataLossError(absl::StrCat("WriteTokenFile: writing \"", path, "\" failed"));
    }
    bytes.clear();
  }
  if (std::fclose(f.release()) != 0) {
    return absl::DataLossError(absl::StrCat("WriteTokenFile: closing \"", path, "\" failed"));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
