// Runs the libFuzzer target (safetensors_fuzz.cc) over seed inputs under gtest, so
// the target compiles and holds its invariants in every build: the committed files,
// each of their prefixes, and single-byte changes to their headers.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "zeroshard/tests/fuzz_corpus.h"
#include "zeroshard/tests/testing.h"

namespace {

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void RunTarget(const std::string& bytes) {
  // A heap copy of exactly the input, so a sanitizer build sees any overrun.
  std::string copy = bytes;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(copy.data()), copy.size());
}

TEST(SafetensorsFuzzTargetTest, SeedsPrefixesAndByteFlips) {
  for (const char* path : {"tests/checkpoint/testdata/torch_reference.safetensors",
                           "tests/checkpoint/testdata/torch_shuffled.safetensors",
                           "tests/testdata/gpt_golden.safetensors"}) {
    SCOPED_TRACE(path);
    const std::string file = ReadFileBytes(path);
    ASSERT_GT(file.size(), 8u);
    RunTarget(file);
    const size_t step = file.size() > 4096 ? 97 : 1;
    for (size_t len = 0; len < file.size(); len += step) RunTarget(file.substr(0, len));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
    const size_t header_end = static_cast<size_t>(std::min<uint64_t>(8 + n, file.size()));
    for (size_t i = 0; i < header_end; i += step) {
      for (unsigned char flip : {0x01, 0x10, 0x80}) {
        std::string mutated = file;
        mutated[i] = static_cast<char>(mutated[i] ^ flip);
        RunTarget(mutated);
      }
    }
  }
}

// The committed corpus (tests/checkpoint/fuzz/corpus/safetensors: the seeds
// above, the [0, 2^62, 4] entry issue 26 reported, empty and two-tensor
// files), every prefix and every header byte flipped.
TEST(SafetensorsFuzzTargetTest, CommittedCorpus) {
  const zeroshard::testing::CorpusRun run =
      zeroshard::testing::RunFuzzCorpus("tests/checkpoint/fuzz/corpus/safetensors", {.flip_bytes = 512});
  EXPECT_GE(run.files, 5);
}

}  // namespace
