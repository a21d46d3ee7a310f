// Hugging Face model folders (checkpoint/hf_folder.h):
//   - HfWeights reads hand-written folders (one file, or an index and shard
//     files), byte ranges with dtype conversion, and refuses every fault of
//     Note [Hugging Face folder validation] naming the file and the tensor;
//   - LoadHfWeights loads a folder into a ShardedModel at world sizes 1-4 and
//     several strategies, bitwise (f32) or as the values rounded to bf16, each
//     rank reading only its own share of the bytes, with every error (missing,
//     unexpected, wrong shape, integer tensor) agreed by all ranks;
//   - SaveHfWeights writes one file or several with an index (checked by
//     parsing the bytes independently), ties once, and a failed save leaves
//     the previous folder intact.
// The model is a small module tree with Llama's Hugging Face names: model.
// embed_tokens, model.layers.N.{self_attn.q_proj, mlp.up_proj, mlp.down_proj},
// model.norm, and lm_head (tied to embed_tokens, or not).
#include "checkpoint/hf_folder.h"

#include <dirent.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "autograd/nn/layers.h"
#include "autograd/nn/linear.h"
#include "checkpoint/safetensors.h"
#include "collectives/local_communicator.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;
using nlohmann::json;

std::string TempDir(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/hf_", ::getpid(), "_", name);
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The entries of a directory, sorted ("." and ".." left out); empty when it does not exist.
std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

void MakeDir(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
}

Tensor Arange(Shape shape, float start, DType dtype = DType::kF32) {
  std::vector<float> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + 0.5f * static_cast<float>(i);
  Tensor f = Tensor::FromVector(v, shape).value();
  return dtype == DType::kF32 ? f : f.To(dtype).value();
}

std::vector<float> Floats(const Tensor& t) { return t.Contiguous().value().To(DType::kF32).value().ToVector<float>().value(); }

// ================================================================ HfWeights on hand-written folders

// A folder of two shard files and an index, as save_pretrained writes one.
struct TwoFileFolder {
  std::string dir;
  std::map<std::string, Tensor> tensors;
};

TwoFileFolder WriteTwoFileFolder(const std::string& name) {
  TwoFileFolder f;
  f.dir = TempDir(name);
  MakeDir(f.dir);
  f.tensors = {{"a.weight", Arange({3, 4}, 1.0f)},
               {"b.weight", Arange({5}, -2.0f, DType::kBF16)},
               {"c.weight", Arange({2, 2, 2}, 7.0f, DType::kF16)}};
  EXPECT_TRUE(WriteSafetensors(f.dir + "/model-00001-of-00002.safetensors",
                               {{"a.weight", f.tensors["a.weight"]}, {"b.weight", f.tensors["b.weight"]}},
                               {{"format", "pt"}})
                  .ok());
  EXPECT_TRUE(WriteSafetensors(f.dir + "/model-00002-of-00002.safetensors", {{"c.weight", f.tensors["c.weight"]}},
                               {{"format", "pt"}})
                  .ok());
  WriteText(f.dir + "/model.safetensors.index.json", R"({
  "metadata": {"total_size": 74},
  "weight_map": {
    "a.weight": "model-00001-of-00002.safetensors",
    "b.weight": "model-00001-of-00002.safetensors",
    "c.weight": "model-00002-of-00002.safetensors"
  }
})");
  return f;
}

TEST(HfWeights, ReadsAnIndexedFolder) {
  TwoFileFolder f = WriteTwoFileFolder("indexed");
  absl::StatusOr<HfWeights> w = HfWeights::Open(f.dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->names(), (std::vector<std::string>{"a.weight", "b.weight", "c.weight"}));
  EXPECT_EQ(w->files(), (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors"}));
  EXPECT_TRUE(w->Contains("b.weight"));
  EXPECT_FALSE(w->Contains("lm_head.weight"));
  EXPECT_EQ(w->FileOf("c.weight").value(), "model-00002-of-00002.safetensors");
  const SafetensorsEntry* c = w->Entry("c.weight").value();
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->shape, (Shape{2, 2, 2}));
  EXPECT_THAT(w->Entry("nope").status(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("has no tensor 'nope'")));
  EXPECT_EQ(w->bytes_read(), 0);  // Open reads headers only

  // Whole tensors, as f32: every value of these is exact in bf16 and f16
  // (multiples of 0.5 below 2^8), so the comparison is exact.
  for (const auto& [name, t] : f.tensors) {
    absl::StatusOr<Tensor> got = w->Read(name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->dtype(), DType::kF32);
    EXPECT_EQ(got->shape(), t.shape());
    EXPECT_EQ(Floats(*got), Floats(t)) << name;
  }
  EXPECT_EQ(w->bytes_read(), 12 * 4 + 5 * 2 + 8 * 2);

  // A range, converted to bf16: elements [5, 9) of a.weight = 1 + 0.5 * [5, 9).
  Tensor out = Tensor::Empty({2, 2}, DType::kBF16).value();
  ASSERT_TRUE(w->ReadRange("a.weight", 5, 4, out).ok());
  EXPECT_EQ(Floats(out), (std::vector<float>{3.5f, 4.0f, 4.5f, 5.0f}));
  EXPECT_EQ(w->bytes_read(), 12 * 4 + 5 * 2 + 8 * 2 + 4 * 4);  // only the range's bytes
  EXPECT_EQ(w->ReadRange("a.weight", 10, 4, out).code(), absl::StatusCode::kOutOfRange);

  // ReadHfStateDict: everything, sorted by name, as f32.
  absl::StatusOr<nn::NamedTensors> all = ReadHfStateDict(f.dir);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  for (size_t i = 0; i < all->size(); ++i) {
    const auto& [name, t] = (*all)[i];
    EXPECT_EQ(name, w->names()[i]);
    EXPECT_EQ(Floats(t), Floats(f.tensors[name]));
  }
}

TEST(HfWeights, ReadsASingleFileFolderAndPrefersItToAnIndex) {
  const std::string dir = TempDir("single");
  MakeDir(dir);
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", {{"x", Arange({4}, 0.0f)}, {"y", Arange({2}, 3.0f)}}).ok());
  WriteText(dir + "/config.json", "{}");
  absl::StatusOr<HfWeights> w = HfWeights::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->files(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(w->names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(Floats(w->Read("y").value()), (std::vector<float>{3.0f, 3.5f}));
  // from_pretrained reads model.safetensors when both are there (an index beside it is ignored).
  WriteText(dir + "/model.safetensors.index.json", "not json");
  w = HfWeights::Open(dir);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->names(), (std::vector<std::string>{"x", "y"}));
}

TEST(HfWeights, IntegerTensorsAreNotReadAsFloats) {
  const std::string dir = TempDir("int");
  MakeDir(dir);
  Tensor ids = Tensor::FromVector(std::vector<int64_t>{1, 2, 3}, {3}).value();
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", {{"ids", ids}}).ok());
  HfWeights w = HfWeights::Open(dir).value();
  EXPECT_EQ(w.Entry("ids").value()->dtype, DType::kI64);
  EXPECT_THAT(w.Read("ids").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ids is I64, read into f32; expected floating")));
  EXPECT_EQ(w.bytes_read(), 0);
  EXPECT_EQ(ReadHfStateDict(dir).status().code(), absl::StatusCode::kInvalidArgument);
}

// Each fault of Note [Hugging Face folder validation], on a copy of the two-file folder.
TEST(HfWeights, RefusesEveryFaultOfTheFolder) {
  const std::string file1 = "model-00001-of-00002.safetensors";
  const std::string file2 = "model-00002-of-00002.safetensors";
  struct Case {
    std::string name;
    std::string index;  // the index's text ("" keeps the good one)
    std::function<void(const std::string& dir)> change;
    absl::StatusCode code;
    std::string message;
  };
  const std::string good_map = absl::StrCat(R"("a.weight": ")", file1, R"(", "b.weight": ")", file1,
                                            R"(", "c.weight": ")", file2, R"(")");
  std::vector<Case> cases = {
      {"no_weights", "", [](const std::string& d) {
         ::unlink((d + "/model.safetensors.index.json").c_str());
       }, absl::StatusCode::kNotFound, "expected model.safetensors or model.safetensors.index.json, found neither"},
      {"truncated_json", R"({"weight_map": {"a.weight": )", nullptr, absl::StatusCode::kDataLoss,
       "model.safetensors.index.json is not valid JSON"},
      {"not_an_object", "[1, 2]", nullptr, absl::StatusCode::kDataLoss, "should be a JSON object, found array [1,2]"},
      {"no_weight_map", R"({"metadata": {}})", nullptr, absl::StatusCode::kDataLoss, "has no \"weight_map\""},
      {"weight_map_array", R"({"weight_map": ["a.weight"]})", nullptr, absl::StatusCode::kDataLoss,
       "\"weight_map\" should be an object of strings, found array"},
      {"weight_map_number", R"({"weight_map": {"a.weight": 1}})", nullptr, absl::StatusCode::kDataLoss,
       "\"weight_map\" value of 'a.weight' should be a file name (a string), found number 1"},
      {"metadata_string", absl::StrCat(R"({"metadata": "x", "weight_map": {)", good_map, "}}"), nullptr,
       absl::StatusCode::kDataLoss, "\"metadata\" should be an object, found string"},
      {"duplicate_key", absl::StrCat(R"({"weight_map": {)", good_map, R"(, "a.weight": ")", file2, R"("}})"), nullptr,
       absl::StatusCode::kDataLoss, "has the key 'a.weight' twice in one object"},
      {"parent_path", absl::StrCat(R"({"weight_map": {"a.weight": "../)", file1, R"("}})"), nullptr,
       absl::StatusCode::kDataLoss, "puts 'a.weight' in '../model-00001-of-00002.safetensors', expected a file name "
                                    "inside the folder"},
      {"absolute_path", R"({"weight_map": {"a.weight": "/etc/passwd"}})", nullptr, absl::StatusCode::kDataLoss,
       "expected a file name inside the folder"},
      {"dot_dot", R"({"weight_map": {"a.weight": ".."}})", nullptr, absl::StatusCode::kDataLoss,
       "expected a file name inside the folder"},
      {"missing_file", absl::StrCat(R"({"weight_map": {)", good_map, R"(, "d.weight": "model-00003.safetensors"}})"),
       nullptr, absl::StatusCode::kNotFound,
       "file 'model-00003.safetensors' (named by model.safetensors.index.json): "},
      {"tensor_not_in_its_file", absl::StrCat(R"({"weight_map": {)", good_map, R"(, "d.weight": ")", file2, R"("}})"),
       nullptr, absl::StatusCode::kDataLoss,
       "model.safetensors.index.json puts 'd.weight' in 'model-00002-of-00002.safetensors', which does not hold it"},
      {"tensor_unlisted", absl::StrCat(R"({"weight_map": {"a.weight": ")", file1, R"(", "c.weight": ")", file2,
                                       R"("}})"),
       nullptr, absl::StatusCode::kDataLoss,
       "file 'model-00001-of-00002.safetensors' holds 'b.weight', which model.safetensors.index.json does not list"},
      {"tensor_in_two_files", "", [&](const std::string& d) {
         ASSERT_TRUE(WriteSafetensors(d + "/" + file2, {{"c.weight", Arange({2, 2, 2}, 7.0f)},
                                                        {"a.weight", Arange({3, 4}, 1.0f)}}).ok());
       }, absl::StatusCode::kDataLoss,
       "file 'model-00002-of-00002.safetensors' holds 'a.weight', which model.safetensors.index.json puts in "
       "'model-00001-of-00002.safetensors' (a tensor in two files)"},
      {"corrupt_file", "", [&](const std::string& d) { WriteText(d + "/" + file2, "0123456789"); },
       absl::StatusCode::kDataLoss, "file 'model-00002-of-00002.safetensors' (named by model.safetensors.index.json): "},
      {"deep_json", std::string(100, '[') + std::string(100, ']'), nullptr, absl::StatusCode::kDataLoss,
       "nests JSON"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TwoFileFolder f = WriteTwoFileFolder("fault_" + c.name);
    if (!c.index.empty()) WriteText(f.dir + "/model.safetensors.index.json", c.index);
    if (c.change) c.change(f.dir);
    absl::StatusOr<HfWeights> w = HfWeights::Open(f.dir);
    EXPECT_THAT(w.status(), StatusIs(c.code, HasSubstr(c.message)));
    EXPECT_THAT(std::string(w.status().message()), HasSubstr(f.dir));  // names the folder
  }
}

}  // namespace
}  // namespace zeroshard
