// The regression pass of a libFuzzer target in `make test`: its committed
// corpus (and simple mutations of it) fed to LLVMFuzzerTestOneInput, built
// normally, so every corpus file (seeds, and inputs that once crashed) stays
// handled in every build. `make fuzz` (tools/fuzz.sh) runs the same targets
// under libFuzzer with ASan and UBSan.
//
//   TEST(TokenDataFuzzTarget, CorpusAndMutations) {
//     const CorpusRun run = RunFuzzCorpus("tests/data/fuzz/corpus/token_data", {.flip_bytes = 1100});
//     EXPECT_GE(run.files, 5);
//   }
//
// The test binary links the target's cc_library (alwayslink), which defines
// LLVMFuzzerTestOneInput. A target reports a broken invariant by ZS_CHECK
// (abort), so a failing input ends the test with the input's name on stderr.
#ifndef ZEROSHARD_TESTS_FUZZ_CORPUS_H_
#define ZEROSHARD_TESTS_FUZZ_CORPUS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace zeroshard::testing {

// The regular files in `dir` (a path in the runfiles), sorted by name.
std::vector<std::string> CorpusFiles(const std::string& dir);
std::string ReadFileBytes(const std::string& path);

// Runs the target on a heap copy of exactly `bytes` (a sanitizer build sees any overrun).
void RunFuzzInput(const std::string& bytes);

struct CorpusMutations {
  size_t prefix_step = 1;    // every prefix of length 0, step, 2*step, ... (0: none)
  size_t flip_bytes = 256;   // bytes 0, flip_step, 2*flip_step, ... below flip_bytes
  size_t flip_step = 1;      // each XOR 0x01, 0x10 and 0x80
  size_t max_prefixes = 4096;  // at most this many prefixes per file (the step grows)
};
struct CorpusRun {
  int files = 0;
  int64_t inputs = 0;
};
// Each file of `dir` whole, its prefixes and its flipped bytes.
CorpusRun RunFuzzCorpus(const std::string& dir, const CorpusMutations& m = {});

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_FUZZ_CORPUS_H_
