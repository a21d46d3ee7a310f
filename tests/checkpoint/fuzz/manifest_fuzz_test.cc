// Runs the manifest fuzz target over the committed seed corpus, every prefix
// of each seed, single-byte changes, and structural mutations, so the target
// compiles and its invariants hold in every build (no crash, no exception).
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/manifest.h"
#include "tests/testing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void RunTarget(const std::string& bytes) {
  std::string copy = bytes;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(copy.data()), copy.size());
}

const char* kSeeds[] = {"tests/checkpoint/fuzz/corpus/manifest/sharded.json",
                        "tests/checkpoint/fuzz/corpus/manifest/full.json"};

TEST(ManifestFuzzTarget, SeedsParseAndMutationsNeverCrash) {
  for (const char* path : kSeeds) {
    const std::string seed = ReadFileBytes(path);
    ASSERT_FALSE(seed.empty()) << path;
    ASSERT_TRUE(zeroshard::ParseCheckpointManifest(seed, path).ok()) << path;
    for (size_t n = 0; n < seed.size(); n += 7) RunTarget(seed.substr(0, n));
    for (size_t i = 0; i < seed.size(); i += 3) {
      std::string m = seed;
      m[i] = static_cast<char>(m[i] ^ 0x5a);
      RunTarget(m);
    }
  }
}

TEST(ManifestFuzzTarget, StructuralMutationsGiveStatuses) {
  const nlohmann::json seed = nlohmann::json::parse(ReadFileBytes(kSeeds[0]));
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
