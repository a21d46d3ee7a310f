// Runs the manifest fuzz target over its committed corpus
// (tests/checkpoint/fuzz/corpus/manifest), prefixes, single-byte changes and
// structural mutations, so the target compiles and its invariants hold in
// every build (no crash, no exception); `make fuzz` runs it under libFuzzer.
#include <string>

#include <nlohmann/json.hpp>

#include "zeroshard/checkpoint/manifest.h"
#include "zeroshard/tests/fuzz_corpus.h"
#include "zeroshard/tests/testing.h"

namespace {

using zeroshard::testing::ReadFileBytes;

void RunTarget(const std::string& bytes) { zeroshard::testing::RunFuzzInput(bytes); }

constexpr char kCorpus[] = "tests/checkpoint/fuzz/corpus/manifest";

// Every file of the corpus (the fuzzer's seeds, and the manifests issue 26
// reported: an offset near 2^63, a shard size times count that wraps), every
// 7th prefix and every 3rd byte flipped.
TEST(ManifestFuzzTarget, CorpusPrefixesAndByteFlips) {
  const zeroshard::testing::CorpusRun run = zeroshard::testing::RunFuzzCorpus(
      kCorpus, {.prefix_step = 7, .flip_bytes = 1 << 16, .flip_step = 3});
  EXPECT_GE(run.files, 6);
}

TEST(ManifestFuzzTarget, TheCorpusHoldsValidManifestsAndTheIssueInputs) {
  for (const char* name : {"sharded.json", "full.json", "small.json"}) {
    const std::string path = std::string(kCorpus) + "/" + name;
    ZS_EXPECT_OK(zeroshard::ParseCheckpointManifest(ReadFileBytes(path), path).status());
  }
  for (const char* name : {"offset_near_2p63.json", "shard_product_wraps.json", "int_beyond_field.json"}) {
    const std::string path = std::string(kCorpus) + "/" + name;
    EXPECT_THAT(zeroshard::ParseCheckpointManifest(ReadFileBytes(path), path),
                zeroshard::testing::StatusIs(absl::StatusCode::kDataLoss, ::testing::HasSubstr(path)));
  }
}

TEST(ManifestFuzzTarget, StructuralMutationsGiveStatuses) {
  const nlohmann::json seed = nlohmann::json::parse(ReadFileBytes(std::string(kCorpus) + "/sharded.json"));
  auto expect_error = [](nlohmann::json j, const std::string& what) {
    const absl::StatusOr<zeroshard::CheckpointManifest> m = zeroshard::ParseCheckpointManifest(j.dump(), "mutated");
    EXPECT_FALSE(m.ok()) << what;
    RunTarget(j.dump());
  };
  nlohmann::json j = seed;
  j["layout"][0]["params"][0]["offset"] = -5;
  expect_error(j, "negative offset");
  j = seed;
  j["layout"][0]["params"][0]["shape"] = {1 << 30, 1 << 30};
  expect_error(j, "huge shape");
  j = seed;
  j["layout"][0]["shard_numel"] = "many";
  expect_error(j, "string for a number");
  j = seed;
  j["files"]["../../etc/passwd"] = {{"bytes", 1}, {"crc32c", 1}};
  expect_error(j, "path in a file name");
  j = seed;
  j["version"] = 99;
  expect_error(j, "future version");
  j = seed;
  j.erase("layout");
  expect_error(j, "no layout");
  expect_error(nlohmann::json::array(), "not an object");
}

}  // namespace
