// Tokenizer: text to token ids and back. Two implementations: GPT-2's byte-level
// BPE (data/gpt2_bpe.h, vocabulary 50257) and plain bytes (vocabulary 256, what
// TokenData reads from a text file).
//
//   ZS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, MakeTokenizer("gpt2"));
//   std::vector<int32_t> ids = tok->Encode("Hello world");    // {15496, 995}
//   ZS_ASSIGN_OR_RETURN(std::string text, tok->Decode(ids));   // "Hello world"
//
// Encode never fails: every byte string has an encoding (invalid UTF-8 included),
// and Decode(Encode(s)) == s for every s. Decode fails on an id outside the
// vocabulary. Encode may cache (the GPT-2 tokenizer keeps a per-word cache), so a
// Tokenizer is not safe to use from two threads at once: make one per thread.
#ifndef ZEROSHARD_DATA_TOKENIZER_H_
#define ZEROSHARD_DATA_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace zeroshard {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "gpt2", "bytes": the name MakeTokenizer takes.
  virtual absl::string_view name() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;
  // The end-of-text token (GPT-2's <|endoftext|>, 50256), or -1 where there is none.
  // Encode never produces it from text: "<|endoftext|>" in a text is ordinary text.
  virtual int32_t eot_token() const { return -1; }

  // Appends the ids of `text` to *out.
  virtual void EncodeTo(absl::string_view text, std::vector<int32_t>* out) = 0;
  std::vector<int32_t> Encode(absl::string_view text) {
    std::vector<int32_t> ids;
    EncodeTo(text, &ids);
    return ids;
  }
  // The bytes of the tokens, concatenated (not necessarily valid UTF-8 for a slice
  // of a longer sequence: a token may hold part of a character).
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;

  // The first position p >= `from` where `text` may be cut without changing its
  // ids: Encode(text[0, p)) followed by Encode(text[p, end)) is Encode(text). Returns
  // text.size() where there is none. Lets a caller encode a large text in pieces
  // (prepare_data's progress bar) and get the ids of the whole.
  virtual size_t NextCut(absl::string_view text, size_t from) const = 0;
};

// Bytes as tokens: id = byte value, vocabulary 256, no end-of-text token.
class ByteTokenizer final : public Tokenizer {
 public:
  absl::string_view name() const override { return "bytes"; }
  int64_t vocab_size() const override { return 256; }
  void EncodeTo(absl::string_view text, std::vector<int32_t>* out) override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  size_t NextCut(absl::string_view text, size_t from) const override {
    return from < text.size() ? from : text.size();
  }
};

// "gpt2": GPT-2's BPE with the vocabulary compiled into the library
// (data/gpt2/encoder.json and vocab.bpe; Gpt2Bpe::FromFiles loads other files);
// "bytes": ByteTokenizer.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(absl::string_view name);

}  // namespace zeroshard

#endif  // ZEROSHARD_DATA_TOKENIZER_H_
