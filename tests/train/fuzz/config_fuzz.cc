// libFuzzer target for the config reader (train/config.h ConfigFromText, what
// train_gpt and the vision job run on --config files and --set values): any
// input either fails with InvalidArgument naming the source, or gives a
// RunConfig whose resolved JSON reads back to the same run.
//
// Input: the config text, then optional --set overrides, each after a NUL
// byte: `{"train": {"steps": 3}}\0model.n_layer=2\0optimizer.lr=1e-3`.
// Inputs that name a `_base_` file are skipped (the reader would open it).
// Built two ways: under Bazel into //tests/train:config_fuzz_test (the
// committed corpus and mutations, every build), and by `make fuzz` with
// clang's libFuzzer + ASan + UBSan (tools/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "zeroshard/runtime/check.h"
#include "zeroshard/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zeroshard;
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (absl::StrContains(input, "_base_")) return 0;
  std::vector<std::string> parts = absl::StrSplit(input, '\0');
  const std::string text = parts[0];
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());

  absl::StatusOr<RunConfig> c = ConfigFromText(text, overrides, "fuzz.json");
  if (!c.ok()) {
    ZS_CHECK(c.status().code() == absl::StatusCode::kInvalidArgument, c.status().ToString());
    ZS_CHECK(absl::StartsWith(c.status().message(), "config fuzz.json"), c.status().ToString());
    return 0;
  }
  ZS_CHECK(c->source == "fuzz.json", c->source);
  for (int world = 1; world <= 8; world *= 2) (void)CheckWorldSize(*c, world);

  // "reading it back gives the same run" (train/config.h ResolvedConfigJson).
  const std::string resolved = ResolvedConfigJson(*c);
  absl::StatusOr<RunConfig> again = ConfigFromText(resolved, {}, "fuzz.json");
  ZS_CHECK(again.ok(), "the resolved config does not read back: ", again.status().ToString(), "\n", resolved);
  const std::string resolved_again = ResolvedConfigJson(*again);
  ZS_CHECK(resolved_again == resolved, "the resolved config reads back as another run:\n", resolved, "\nvs\n",
           resolved_again);
  return 0;
}
