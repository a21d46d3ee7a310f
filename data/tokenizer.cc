#include "zeroshard/data/tokenizer.h"

#include "absl/strings/str_cat.h"
#include "zeroshard/data/gpt2_bpe.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

void ByteTokenizer::EncodeTo(absl::string_view text, std::vector<int32_t>* out) {
  out->reserve(out->size() + text.size());
  for (const char c : text) out->push_back(static_cast<unsigned char>(c));
}

absl::StatusOr<std::string> ByteTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > 255) {
      return absl::InvalidArgumentError(absl::StrCat("ByteTokenizer::Decode: token ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, 256)"));
    }
    text[i] = static_cast<char>(ids[i]);
  }
  return text;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(absl::string_view name) {
  if (name == "gpt2") {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Gpt2Bpe> bpe, Gpt2Bpe::Bundled());
    return std::unique_ptr<Tokenizer>(std::move(bpe));
  }
  if (name == "bytes") return std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>());
  return absl::InvalidArgumentError(
      absl::StrCat("MakeTokenizer: unknown tokenizer \"", name, "\", expected \"gpt2\" or \"bytes\""));
}

}  // namespace zeroshard
