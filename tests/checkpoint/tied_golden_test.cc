// The tied GPT against PyTorch (tools/golden/tied_golden.py; the files are
// committed, so this test needs no Python):
//   - tests/testdata/gpt_tied_hf.safetensors is the golden nanoGPT stored as
//     Hugging Face / safetensors tools store it (transformer.wte.weight only,
//     no lm_head.weight); read the --init_from way, it gives the model every
//     value of the file, the tie under both names.
//   - the same model saved as a full checkpoint with write_tied_once gives,
//     byte for byte, tests/testdata/gpt_tied_once_zeroshard.safetensors, the
//     file `tied_golden.py check` loads into the PyTorch nanoGPT with
//     load_state_dict(strict=True) after restoring the alias. Set
//     ZEROSHARD_TIED_GOLDEN_OUT=<path> to write the file there instead
//     (regeneration, tools/golden/README.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/collectives/local_communicator.h"

namespace zeroshard {
namespace {

constexpr char kHf[] = "tests/testdata/gpt_tied_hf.safetensors";
constexpr char kOnce[] = "tests/testdata/gpt_tied_once_zeroshard.safetensors";

// gpt_golden.py's CONFIG.
nn::GptConfig GoldenConfig() {
  return nn::GptConfig{.vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

// As train/trainer.cc's --init_from: every model name the file holds.
std::shared_ptr<nn::Gpt> LoadLikeInitFrom(const SafetensorsFile& file) {
  auto gpt = std::make_shared<nn::Gpt>(GoldenConfig());
  nn::NamedTensors state;
  for (const auto& [name, slot] : gpt->NamedParameterSlots()) {
    if (file.Contains(name)) state.emplace_back(name, file.Read(name).value());
  }
  absl::StatusOr<nn::LoadStateDictResult> r = gpt->LoadStateDict(state, /*strict=*/false);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) { EXPECT_TRUE(r->missing_keys.empty()) << r->missing_keys[0]; }
  return gpt;
}

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TiedGolden, HuggingFaceLayoutLoadsWithTheTieUnderBothNames) {
  SafetensorsFile file = SafetensorsFile::Open(kHf).value();
  ASSERT_FALSE(file.Contains("lm_head.weight"));
  auto gpt = LoadLikeInitFrom(file);
  const Tensor wte = file.Read("transformer.wte.weight").value();
  int checked = 0;
  for (auto& [name, t] : gpt->StateDict()) {
    const std::string stored = name == "lm_head.weight" ? "transformer.wte.weight" : name;
    EXPECT_EQ(t.ToVector<float>().value(), file.Read(stored).value().ToVector<float>().value()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(file.entries().size()) + 1);  // + lm_head.weight
}

TEST(TiedGolden, WriteOnceFileIsTheOnePyTorchLoaded) {
  SafetensorsFile file = SafetensorsFile::Open(kHf).value();
  auto gpt = LoadLikeInitFrom(file);
  const std::string dir = absl::StrCat(::testing::TempDir(), "/tied_golden_", ::getpid());
  std::vector<absl::Status> st = RunRanks(1, [&](Communicator& comm) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, ShardingOptions{}));
    return SaveCheckpoint(dir, *sharded, nullptr, TrainingState{},
                          {.type = StateDictType::kFull, .write_tied_once = true});
  });
  ASSERT_TRUE(st[0].ok()) << st[0];
  const std::string written = Bytes(dir + "/model.safetensors");
  if (const char* out = std::getenv("ZEROSHARD_TIED_GOLDEN_OUT")) {
    std::ofstream(out, std::ios::binary) << written;
    GTEST_SKIP() << "wrote " << out;
  }
  EXPECT_TRUE(written == Bytes(kOnce)) << "the write-once model file differs from the committed " << kOnce
                                       << ", which tools/golden/tied_golden.py check loaded into PyTorch";
}

}  // namespace
}  // namespace zeroshard
