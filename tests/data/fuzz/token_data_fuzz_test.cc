// The token file fuzz target (token_data_fuzz.cc) over its committed corpus,
// every prefix and every byte of the llm.c header flipped; and each corpus
// file loaded from disk as the job loads it, agreeing with Parse.
#include <string>

#include "zeroshard/data/token_data.h"
#include "zeroshard/tests/fuzz_corpus.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

constexpr char kCorpus[] = "tests/data/fuzz/corpus/token_data";

TEST(TokenDataFuzzTarget, CorpusPrefixesAndHeaderFlips) {
  // 1100 bytes: the llm.c header (1024) and the first tokens after it.
  const testing::CorpusRun run = testing::RunFuzzCorpus(kCorpus, {.flip_bytes = 1100});
  EXPECT_GE(run.files, 9);
  EXPECT_GT(run.inputs, 10000);
}

TEST(TokenDataFuzzTarget, LoadFromDiskAgreesWithParse) {
  int accepted = 0;
  for (const std::string& path : testing::CorpusFiles(kCorpus)) {
    SCOPED_TRACE(path);
    const absl::StatusOr<TokenData> loaded = TokenData::Load(path);
    const absl::StatusOr<TokenData> parsed = TokenData::Parse(testing::ReadFileBytes(path), path);
    ASSERT_EQ(loaded.ok(), parsed.ok()) << loaded.status() << " / " << parsed.status();
    if (!loaded.ok()) {
      EXPECT_EQ(loaded.status(), parsed.status());
      continue;
    }
    ++accepted;
    ASSERT_EQ(loaded->size(), parsed->size());
    EXPECT_EQ(loaded->vocab_size(), parsed->vocab_size());
    for (int64_t i = 0; i < loaded->size(); ++i) ASSERT_EQ(loaded->token(i), parsed->token(i)) << i;
  }
  // llmc_gpt2.bin, nanogpt.bin, two_tokens.bin, shakespeare.txt.
  EXPECT_EQ(accepted, 4);
}

}  // namespace
}  // namespace zeroshard
