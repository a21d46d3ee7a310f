// The config reader's fuzz target (config_fuzz.cc) over its committed corpus
// (the example configs with their _base_ merged in, --set overrides, a
// DeepSpeed file, comments, and configs with errors), prefixes and byte flips;
// and which of the corpus files are valid configs.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "zeroshard/tests/fuzz_corpus.h"
#include "zeroshard/tests/testing.h"
#include "zeroshard/train/config.h"

namespace zeroshard {
namespace {

using ::testing::HasSubstr;

constexpr char kCorpus[] = "tests/train/fuzz/corpus/config";

TEST(ConfigFuzzTarget, CorpusPrefixesAndByteFlips) {
  // Every 5th prefix and every 11th byte flipped: a parse and two read-backs
  // per input, about 20k inputs.
  const testing::CorpusRun run =
      testing::RunFuzzCorpus(kCorpus, {.prefix_step = 5, .flip_bytes = 4096, .flip_step = 11});
  EXPECT_GE(run.files, 23);
  EXPECT_GT(run.inputs, 5000);
}

TEST(ConfigFuzzTarget, TheCorpusHoldsValidConfigsAndErrors) {
  const std::set<std::string> invalid = {"deep.json", "duplicate_key.json", "unknown_keys.json", "wrong_types.json"};
  int valid = 0;
  for (const std::string& path : testing::CorpusFiles(kCorpus)) {
    SCOPED_TRACE(path);
    std::vector<std::string> parts = absl::StrSplit(testing::ReadFileBytes(path), '\0');
    const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
    const absl::StatusOr<RunConfig> c = ConfigFromText(parts[0], overrides, "fuzz.json");
    if (invalid.count(path.substr(path.find_last_of('/') + 1))) {
      EXPECT_THAT(c, testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("config fuzz.json")));
    } else {
      ZS_EXPECT_OK(c.status());
      valid += c.ok();
    }
  }
  EXPECT_EQ(valid, 19);
}

}  // namespace
}  // namespace zeroshard
