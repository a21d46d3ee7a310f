#include "zeroshard/data/token_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

// With read(2) so that every failure is seen: an istreambuf_iterator stops at
// a read error as it stops at the end, and the data set came out shorter
// without a word.
absl::StatusOr<std::string> ReadDataFile(const std::string& path, const TokenFileReadOptions& o) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open \"", path, "\""));
  const std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  struct stat st;
  if (::fstat(fd, &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fstat of \"", path, "\""));
  // A regular file has a size to check the bytes against; a pipe has none.
  const bool regular = S_ISREG(st.st_mode);
  const uint64_t size = regular ? static_cast<uint64_t>(st.st_size) : 0;
  const size_t chunk = std::max<size_t>(o.chunk_bytes, 1);
  std::string bytes;
  bytes.reserve(size);
  uint64_t offset = 0;
  for (;;) {
    bytes.resize(offset + chunk);
    if (o.before_read) o.before_read(fd, offset);
    const ssize_t got = ::read(fd, bytes.data() + offset, chunk);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("reading \"", path, "\" at byte ", offset,
                                                     regular ? absl::StrCat(" of ", size) : ""));
    }
    if (got == 0) break;
    offset += static_cast<uint64_t>(got);
  }
  bytes.resize(offset);
  if (regular && offset != size) {
    return absl::DataLossError(absl::StrCat(
        "\"", path, "\" ended at byte ", offset, " but had ", size,
        " bytes when it was opened (it changed while being read; every rank must read the same tokens)"));
  }
  return bytes;
}

absl::StatusOr<TokenData> TokenData::Load(const std::string& path, const TokenFileReadOptions& read) {
  ZS_ASSIGN_OR_RETURN(const std::string bytes, ReadDataFile(path, read));
  return Parse(bytes, path);
}

absl::StatusOr<TokenData> TokenData::Parse(absl::string_view bytes, const std::string& path) {
  std::vector<uint16_t> tokens;
  int64_t vocab = 256;
  if (absl::EndsWith(path, ".bin")) {
    auto u32 = [&](size_t i) {
      uint32_t v = 0;
      for (int k = 0; k < 4; ++k) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[4 * i + k])) << (8 * k);
      return v;
    };
    size_t first = 0;  // byte offset of the first token
    constexpr uint32_t kLlmcGpt2Magic = 20240520, kLlmcLlama3Magic = 20240801;
    constexpr size_t kLlmcHeaderBytes = 256 * 4;
    if (bytes.size() >= kLlmcHeaderBytes && (u32(0) == kLlmcGpt2Magic || u32(0) == kLlmcLlama3Magic)) {
      if (u32(0) == kLlmcLlama3Magic) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TokenData: \"", path, "\" is an llm.c LLaMA-3 file (uint32 tokens); only uint16 tokens are read"));
      }
      if (u32(1) != 1) {
        return absl::InvalidArgumentError(absl::StrCat("TokenData: \"", path,
                                                       "\": llm.c header version ", u32(1), ", expected 1"));
      }
      const uint64_t n = u32(2);
      if (bytes.size() != kLlmcHeaderBytes + 2 * n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TokenData: \"", path, "\": the llm.c header announces ", n, " tokens (", kLlmcHeaderBytes + 2 * n,
            " bytes with the header), found ", bytes.size(), " bytes"));
      }
      first = kLlmcHeaderBytes;
    } else if (bytes.size() % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("TokenData: \"", path, "\" has ", bytes.size(),
                                                     " bytes, expected an even number (uint16 tokens)"));
    }
    tokens.resize((bytes.size() - first) / 2);
    vocab = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<uint16_t>(static_cast<uint8_t>(bytes[first + 2 * i]) |
                                        (static_cast<uint8_t>(bytes[first + 2 * i + 1]) << 8));
      vocab = std::max<int64_t>(vocab, tokens[i] + 1);
    }
  } else {
    tokens.resize(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) tokens[i] = static_cast<uint8_t>(bytes[i]);
  }
  if (tokens.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("TokenData: \"", path, "\" holds ", tokens.size(),
                                                   " tokens, expected at least 2"));
  }
  return FromTokens(std::move(tokens), vocab);
}

TokenData TokenData::FromTokens(std::vector<uint16_t> tokens, int64_t vocab_size) {
  TokenData d;
  d.end_ = static_cast<int64_t>(tokens.size());
  d.tokens_ = std::make_shared<const std::vector<uint16_t>>(std::move(tokens));
  d.vocab_size_ = vocab_size;
  return d;
}

absl::StatusOr<TokenData> TokenData::Split(double begin_fraction, double end_fraction) const {
  if (!(0 <= begin_fraction && begin_fraction < end_fraction && end_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("TokenData::Split: [", begin_fraction, ", ",
                                                   end_fraction, ") is not a range within [0, 1]"));
  }
  const int64_t n = end_ - begin_;
  TokenData d = *this;
  d.begin_ = begin_ + static_cast<int64_t>(begin_fraction * n);
  d.end_ = begin_ + static_cast<int64_t>(end_fraction * n);
  return d;
}

int64_t TokenData::NumWindows(int64_t block_size) const {
  return block_size > 0 ? (size() - 1) / block_size : 0;
}

absl::StatusOr<Batch> TokenData::GetBatch(const BatchSpec& s, Allocator* allocator) const {
  const int64_t windows = NumWindows(s.block_size);
  if (windows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("GetBatch: ", size(), " tokens hold no window of ",
                                                   s.block_size, " + 1 tokens"));
  }
  if (s.rank < 0 || s.rank >= s.world_size || s.micro_step < 0 || s.micro_step >= s.accum_steps) {
    return absl::InvalidArgumentError(absl::StrCat("GetBatch: rank ", s.rank, " of ", s.world_size,
                                                   ", micro-step ", s.micro_step, " of ",
                                                   s.accum_steps, " is out of range"));
  }
  Batch b;
  ZS_ASSIGN_OR_RETURN(b.inputs, Tensor::Empty({s.batch_size, s.block_size}, DType::kI64, allocator));
  ZS_ASSIGN_OR_RETURN(b.targets, Tensor::Empty({s.batch_size, s.block_size}, DType::kI64, allocator));
  int64_t* in = b.inputs.data<int64_t>();
  int64_t* tg = b.targets.data<int64_t>();
  const int64_t base = (s.step * s.accum_steps + s.micro_step) * (s.batch_size * s.world_size) +
                       s.rank * s.batch_size;
  for (int64_t row = 0; row < s.batch_size; ++row) {
    const int64_t w = (base + row) % windows;
    for (int64_t t = 0; t < s.block_size; ++t) {
      in[row * s.block_size + t] = token(w * s.block_size + t);
      tg[row * s.block_size + t] = token(w * s.block_size + t + 1);
    }
  }
  return b;
}

double TokenData::UnigramEntropy() const {
  std::vector<int64_t> counts(static_cast<size_t>(std::max<int64_t>(vocab_size_, 1)), 0);
  for (int64_t i = 0; i < size(); ++i) ++counts[token(i)];
  double h = 0;
  for (int64_t c : counts) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / size();
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace zeroshard
