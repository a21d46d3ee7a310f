// Gpt2Bpe: GPT-2's byte-level BPE tokenizer, exactly as openai/gpt-2's encoder.py
// defines it, from its two files (encoder.json: token -> id; vocab.bpe: the merges
// in rank order).
//
//   ZS_ASSIGN_OR_RETURN(std::unique_ptr<Gpt2Bpe> bpe, Gpt2Bpe::Bundled());
//   bpe->Encode("Hello world!")   // {15496, 995, 0}: "Hello", " world", "!"
//
// Encoding, in GPT-2's three steps:
//  1. Pre-tokenize the text (UTF-8) with GPT-2's pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     written out by hand (Note [GPT-2 pre-tokenizer] in gpt2_bpe.cc), with \s
//     Unicode's White_Space as in Python's `regex` (data/unicode_classes.h).
//  2. Map each pre-token's UTF-8 bytes to the byte tokens (encoder.json spells byte b
//     as the character bytes_to_unicode()[b]; here tokens are kept as their bytes).
//  3. Merge: while some adjacent pair has a merge, take the pair of lowest rank and
//     merge every occurrence of it, left to right. A per-word cache remembers the
//     result for pre-tokens seen before (most words of a text recur).
// Bytes that are not valid UTF-8 (which Python's str cannot hold) pre-tokenize as
// one character each of the class "other" ([^\s\p{L}\p{N}]); they still encode to
// their byte tokens, so Decode(Encode(s)) == s for any bytes s.
//
// The checks: tests/data/gpt2_bpe_test.cc compares the ids with golden ids written by
// GPT-2's own algorithm (tools/golden/gpt2_bpe_golden.py) for the whole of
// data/tinyshakespeare.txt and for tests/data/testdata/bpe_hard_cases.txt.
#ifndef ZEROSHARD_DATA_GPT2_BPE_H_
#define ZEROSHARD_DATA_GPT2_BPE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "zeroshard/data/tokenizer.h"

namespace zeroshard {

struct Gpt2BpeOptions {
  // Pre-tokens whose ids are remembered; the cache is emptied when it is full.
  // 0 turns it off (every pre-token is merged afresh: the benchmark's baseline).
  size_t cache_entries = size_t{1} << 20;
  // Pre-tokens of at least this many bytes merge with a priority queue, in
  // O(n log n), instead of rescanning the pairs after every merge (O(n^2)); both
  // give the same ids (Note [Long words]).
  size_t heap_merge_min_bytes = 128;
};

class Gpt2Bpe final : public Tokenizer {
 public:
  using Options = Gpt2BpeOptions;

  // The vocabulary compiled into the library: data/gpt2/encoder.json and vocab.bpe.
  static absl::StatusOr<std::unique_ptr<Gpt2Bpe>> Bundled(const Options& options = {});
  // Reads encoder.json and vocab.bpe files in GPT-2's format.
  static absl::StatusOr<std::unique_ptr<Gpt2Bpe>> FromFiles(const std::string& encoder_json_path,
                                                            const std::string& vocab_bpe_path,
                                                            const Options& options = {});
  // The same from the files' contents; the names only go into error messages.
  static absl::StatusOr<std::unique_ptr<Gpt2Bpe>> FromText(absl::string_view encoder_json,
                                                           absl::string_view vocab_bpe,
                                                           const Options& options = {},
                                                           absl::string_view encoder_json_name = "encoder.json",
                                                           absl::string_view vocab_bpe_name = "vocab.bpe");

  absl::string_view name() const override { return "gpt2"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(token_bytes_.size()); }
  int32_t eot_token() const override { return eot_token_; }
  void EncodeTo(absl::string_view text, std::vector<int32_t>* out) override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  size_t NextCut(absl::string_view text, size_t from) const override;

  // GPT-2's pre-tokens of `text`, as views into it (step 1 alone).
  static std::vector<absl::string_view> PreTokenize(absl::string_view text);
  // The bytes token `id` stands for.
  absl::string_view token_bytes(int32_t id) const { return token_bytes_[id]; }
  int64_t num_merges() const { return static_cast<int64_t>(merge_by_rank_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  explicit Gpt2Bpe(const Options& options) : options_(options) {}
  // Steps 2 and 3 for one pre-token, without the cache; appends to *out.
  void MergeWord(absl::string_view word, std::vector<int32_t>* out) const;
  void MergeWordByScan(absl::string_view word, std::vector<int32_t>* out) const;
  void MergeWordByHeap(absl::string_view word, std::vector<int32_t>* out) const;
  void EncodeWord(absl::string_view word, std::vector<int32_t>* out);

  Options options_;
  std::vector<std::string> token_bytes_;  // id -> bytes
  int32_t byte_token_[256] = {};          // byte -> its one-byte token
  absl::flat_hash_map<uint64_t, Merge> merges_;  // PairKey(left, right) -> merge
  struct RankedMerge {
    int32_t left, right, id;
  };
  std::vector<RankedMerge> merge_by_rank_;  // rank -> the merge
  // The merges of two one-byte tokens by (first byte * 256 + second byte), rank
  // INT32_MAX where there is none: a word's first pairs without hashing.
  std::vector<Merge> byte_pair_merges_;
  int32_t eot_token_ = -1;
  // Per-word cache: pre-token bytes -> [offset, offset + length) in cache_ids_.
  absl::flat_hash_map<std::string, std::pair<uint32_t, uint32_t>> cache_;
  std::vector<int32_t> cache_ids_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_DATA_GPT2_BPE_H_
