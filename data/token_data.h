// TokenData: a token stream and the deterministic batch rule of the training
// program, written down so anyone can reproduce a run's data order.
//
//   ZS_ASSIGN_OR_RETURN(TokenData data, TokenData::Load("data/tinyshakespeare.txt"));
//   ZS_ASSIGN_OR_RETURN(TokenData train, data.Split(0.0, 0.9));   // first 90%
//   ZS_ASSIGN_OR_RETURN(Batch b, train.GetBatch({.step = s, .batch_size = B, .block_size = T}));
//   b.inputs, b.targets    // [B, T] i64
//
// Files: a `.bin` file is little-endian uint16 tokens, either raw (nanoGPT's
// prepare.py format) or after llm.c's 1 KiB header (256 int32: magic 20240520,
// version 1, token count; the count must match the file's size); any other
// file is read as bytes (vocabulary 256).
//
// The batch rule. With N tokens and block size T there are W = floor((N-1)/T)
// windows. Step s, accumulation micro-step m (of A), data-parallel rank r (of
// R ranks), row b (of B per rank) reads global row
//     g = (s*A + m) * (B*R) + r*B + b,
// which takes window w = g mod W: inputs are tokens w*T ... w*T+T-1, targets
// tokens w*T+1 ... w*T+T. With A = R = 1 this is g = s*B + b. The global batch
// of a step is the same set of rows whatever R and A are, which is what makes
// sharded runs comparable with the single-rank run.
#ifndef ZEROSHARD_DATA_TOKEN_DATA_H_
#define ZEROSHARD_DATA_TOKEN_DATA_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct BatchSpec {
  int64_t step = 0;
  int64_t micro_step = 0;       // m
  int64_t accum_steps = 1;      // A
  int64_t rank = 0;             // r
  int64_t world_size = 1;       // R
  int64_t batch_size = 1;       // B, rows per rank per micro-step
  int64_t block_size = 1;       // T
};

struct Batch {
  Tensor inputs;   // [B, T] i64
  Tensor targets;  // [B, T] i64
};

// How TokenData::Load reads a file. The defaults are for use; tests change
// the chunk size and use the hook to fail a read midway.
struct TokenFileReadOptions {
  size_t chunk_bytes = size_t{1} << 20;  // bytes per read(2)
  // Test hook: runs before each read(2) with the descriptor and the byte it
  // reads from (e.g. to truncate the file, or put another file behind fd).
  std::function<void(int fd, uint64_t offset)> before_read;
};

// The whole of a data file (token file or text). A read that fails (the
// errno text, the byte it failed at) or a regular file that ends before (or
// goes on after) the size it had when opened is an error naming the file:
// DataLoss for the size, the errno's code otherwise; never fewer bytes. Pipes
// are read to their end.
absl::StatusOr<std::string> ReadDataFile(const std::string& path, const TokenFileReadOptions& read = {});

class TokenData {
 public:
  // Reads the whole file with ReadDataFile (its errors are Load's), then Parse.
  static absl::StatusOr<TokenData> Load(const std::string& path, const TokenFileReadOptions& read = {});
  // The tokens of a file's `bytes`: `path` says the format (".bin": uint16
  // tokens, raw or after llm.c's header; else text as bytes) and names it in
  // errors. The fuzz target tests/data/fuzz/token_data_fuzz.cc calls this.
  static absl::StatusOr<TokenData> Parse(absl::string_view bytes, const std::string& path);
  static TokenData FromTokens(std::vector<uint16_t> tokens, int64_t vocab_size);

  // Tokens [begin_fraction * N, end_fraction * N).
  absl::StatusOr<TokenData> Split(double begin_fraction, double end_fraction) const;
  absl::StatusOr<Batch> GetBatch(const BatchSpec& spec, Allocator* allocator = nullptr) const;
  // Number of windows W for block size T.
  int64_t NumWindows(int64_t block_size) const;

  int64_t size() const { return end_ - begin_; }
  int64_t vocab_size() const { return vocab_size_; }
  uint16_t token(int64_t i) const { return (*tokens_)[begin_ + i]; }
  // Unigram entropy of the tokens in nats: the loss of a model that ignores context.
  double UnigramEntropy() const;

 private:
  std::shared_ptr<const std::vector<uint16_t>> tokens_;
  int64_t begin_ = 0;
  int64_t end_ = 0;
  int64_t vocab_size_ = 256;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_DATA_TOKEN_DATA_H_
