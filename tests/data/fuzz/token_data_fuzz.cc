// libFuzzer target for token files (data/token_data.h): any bytes, read as a
// `.bin` token file (raw uint16, or llm.c's 1 KiB header + uint16) and as
// text, either fail with a Status or give tokens that hold the file's
// contents, and batches, splits and the entropy built on them stay in bounds.
// Built two ways: under Bazel into //tests/data:token_data_fuzz_test (the
// committed corpus and mutations, every build), and by `make fuzz` with
// clang's libFuzzer + ASan + UBSan (tools/fuzz.sh).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "zeroshard/data/token_data.h"
#include "zeroshard/runtime/check.h"

namespace {

using zeroshard::Batch;
using zeroshard::BatchSpec;
using zeroshard::TokenData;

uint32_t U32(absl::string_view b, size_t i) {
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) v |= static_cast<uint32_t>(static_cast<uint8_t>(b[4 * i + k])) << (8 * k);
  return v;
}

// Batches of a few shapes follow the batch rule of data/token_data.h: row b
// of rank r at step s, micro-step m is window w = g mod W of consecutive
// tokens, the targets the next tokens.
void CheckBatches(const TokenData& d, uint8_t seed) {
  const int64_t n = d.size();
  // A short window, and the longest (one window; n has none).
  for (int64_t block : {int64_t{1} + seed % 7, n - 1, n}) {
    for (int64_t world : {int64_t{1}, int64_t{1} + seed % 3}) {
      const BatchSpec spec{.step = seed % 5, .micro_step = 1, .accum_steps = 2, .rank = world - 1,
                           .world_size = world, .batch_size = 2, .block_size = block};
      absl::StatusOr<Batch> b = d.GetBatch(spec);
      const int64_t windows = d.NumWindows(block);
      ZS_CHECK(b.ok() == (windows >= 1), "batch of block ", block, " from ", n, " tokens: ", b.status().ToString());
      if (!b.ok()) continue;
      const int64_t* in = b->inputs.data<int64_t>();
      const int64_t* tg = b->targets.data<int64_t>();
      for (int64_t row = 0; row < spec.batch_size; ++row) {
        const int64_t g = (spec.step * spec.accum_steps + spec.micro_step) * (spec.batch_size * world) +
                          spec.rank * spec.batch_size + row;
        const int64_t w = g % windows;
        for (int64_t t = 0; t < block; ++t) {
          ZS_CHECK(in[row * block + t] == d.token(w * block + t), "input ", row, ",", t);
          ZS_CHECK(tg[row * block + t] == d.token(w * block + t + 1), "target ", row, ",", t);
        }
      }
    }
  }
}

void CheckTokens(const TokenData& d, uint8_t seed) {
  ZS_CHECK(d.size() >= 2, "at least 2 tokens");
  ZS_CHECK(d.vocab_size() >= 1 && d.vocab_size() <= 65536, "vocabulary ", d.vocab_size());
  for (int64_t i = 0; i < d.size(); ++i) ZS_CHECK(d.token(i) < d.vocab_size(), "token ", i);
  const double h = d.UnigramEntropy();
  ZS_CHECK(std::isfinite(h) && h >= 0 && h <= std::log(static_cast<double>(d.vocab_size())) + 1e-9, "entropy ", h);
  CheckBatches(d, seed);
  const double cut = (seed % 9 + 1) / 10.0;
  absl::StatusOr<TokenData> head = d.Split(0.0, cut), tail = d.Split(cut, 1.0);
  ZS_CHECK(head.ok() && tail.ok(), "split");
  ZS_CHECK(head->size() + tail->size() == d.size(), "splits cover the tokens");
  for (int64_t i = 0; i < tail->size(); ++i) ZS_CHECK(tail->token(i) == d.token(head->size() + i), "split token");
  if (tail->size() >= 2) CheckBatches(*tail, seed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  const uint8_t seed = size > 0 ? data[size - 1] : 0;

  // As text: one token per byte.
  absl::StatusOr<TokenData> text = TokenData::Parse(bytes, "fuzz.txt");
  ZS_CHECK(text.ok() == (size >= 2), "text of ", size, " bytes: ", text.status().ToString());
  if (text.ok()) {
    ZS_CHECK(text->size() == static_cast<int64_t>(size) && text->vocab_size() == 256, "text tokens");
    for (size_t i = 0; i < size; ++i) ZS_CHECK(text->token(static_cast<int64_t>(i)) == data[i], "byte ", i);
    CheckTokens(*text, seed);
  }

  // As a token file.
  absl::StatusOr<TokenData> bin = TokenData::Parse(bytes, "fuzz.bin");
  if (!bin.ok()) return 0;
  const bool llmc = size >= 1024 && U32(bytes, 0) == 20240520;
  const size_t first = llmc ? 1024 : 0;
  ZS_CHECK(size % 2 == 0 && (!llmc || U32(bytes, 1) == 1), "accepted a malformed file");
  ZS_CHECK(bin->size() == static_cast<int64_t>((size - first) / 2), "token count");
  if (llmc) ZS_CHECK(U32(bytes, 2) == bin->size(), "llm.c count");
  int64_t vocab = 0;
  for (int64_t i = 0; i < bin->size(); ++i) {
    const uint16_t t = static_cast<uint16_t>(data[first + 2 * i] | (data[first + 2 * i + 1] << 8));
    ZS_CHECK(bin->token(i) == t, "token ", i);
    vocab = std::max<int64_t>(vocab, t + 1);
  }
  ZS_CHECK(bin->vocab_size() == vocab, "vocabulary is the largest token + 1");
  CheckTokens(*bin, seed);
  return 0;
}
