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
#include "zeroshard/checkpoint/hf_folder.h"

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
#include "absl/strings/str_format.h"
#include "zeroshard/autograd/nn/layers.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/tests/testing.h"

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

// ================================================================ the model

// Llama's Hugging Face names on existing layers (no forward is run: loads and
// saves only need the tree).
struct ToyConfig {
  int64_t vocab = 37, dim = 32, hidden = 96;
  int layers = 3;
  bool tied = true;  // lm_head.weight is model.embed_tokens.weight
};

constexpr char kEmbed[] = "model.embed_tokens.weight";
constexpr char kHead[] = "lm_head.weight";

std::shared_ptr<nn::Module> MakeToy(const ToyConfig& c) {
  const nn::InitSpec normal = nn::InitSpec::Normal(0.0f, 1.0f);
  auto root = std::make_shared<nn::Module>("HfToy");
  auto model = root->RegisterModule("model", std::make_shared<nn::Module>("HfToyModel"));
  auto embed = model->RegisterModule("embed_tokens", std::make_shared<nn::Embedding>(c.vocab, c.dim, normal));
  auto layers = model->RegisterModule("layers", std::make_shared<nn::ModuleList>());
  for (int l = 0; l < c.layers; ++l) {
    auto layer = layers->Append(std::make_shared<nn::Module>("HfToyLayer"));
    auto attn = layer->RegisterModule("self_attn", std::make_shared<nn::Module>("Attention"));
    attn->RegisterModule("q_proj", std::make_shared<nn::Linear>(c.dim, c.dim, false, normal));
    auto mlp = layer->RegisterModule("mlp", std::make_shared<nn::Module>("Mlp"));
    mlp->RegisterModule("up_proj", std::make_shared<nn::Linear>(c.dim, c.hidden, false, normal));
    mlp->RegisterModule("down_proj", std::make_shared<nn::Linear>(c.hidden, c.dim, false, normal));
  }
  auto norm = model->RegisterModule("norm", std::make_shared<nn::Module>("Norm"));
  norm->RegisterParameter("weight", {c.dim}, nn::InitSpec::Normal(1.0f, 0.5f));
  auto head = root->RegisterModule("lm_head", std::make_shared<nn::Linear>(c.dim, c.vocab, false, normal));
  if (c.tied) {
    absl::Status s = head->TieParameter("weight", *embed->FindParameter("weight"));
    EXPECT_TRUE(s.ok()) << s;
  }
  return root;
}

// Every parameter's values by every name (a tied one under both).
using Values = std::map<std::string, std::vector<float>>;

Values ValuesOf(nn::Module& m) {
  Values out;
  for (auto& [n, t] : m.StateDict()) out[n] = Floats(t);
  return out;
}

// Each value rounded to `dtype` and back (what a file of that dtype holds).
Values Rounded(const Values& v, DType dtype) {
  Values out;
  for (const auto& [n, x] : v) {
    Tensor t = Tensor::FromVector(x, {static_cast<int64_t>(x.size())}).value();
    out[n] = Floats(t.To(dtype).value());
  }
  return out;
}

// The values of a toy model initialised from `seed` (what a sharded model with
// init_seed = seed holds: init depends on name and index only).
Values InitValues(const ToyConfig& c, uint64_t seed) {
  std::shared_ptr<nn::Module> m = MakeToy(c);
  EXPECT_TRUE(m->Materialize(seed).ok());
  return ValuesOf(*m);
}

ShardingOptions Options(ShardingStrategy strategy, int hybrid = 0) {
  ShardingOptions o;
  o.strategy = strategy;
  o.wrap = WrapPolicy::ByType({"HfToyLayer"});
  o.hybrid_shard_size = hybrid;
  return o;
}

// A folder written without SaveHfWeights: the state dict of a toy model from
// `seed`, by its names (lm_head.weight left out when tied and !both_tied_names),
// in `dtype`, in one file, or split into two files by an index when `indexed`.
// `edit` may change the tensors first. Returns what a load should give.
Values WriteToyFolder(const std::string& dir, const ToyConfig& c, uint64_t seed, DType dtype = DType::kF32,
                      bool both_tied_names = false, bool indexed = false,
                      const std::function<void(SafetensorsTensors&)>& edit = nullptr) {
  MakeDir(dir);
  std::shared_ptr<nn::Module> m = MakeToy(c);
  EXPECT_TRUE(m->Materialize(seed).ok());
  SafetensorsTensors tensors;
  for (auto& [n, t] : m->StateDict()) {
    if (c.tied && n == kHead && !both_tied_names) continue;
    tensors.emplace_back(n, t.To(dtype).value());
  }
  if (edit) edit(tensors);
  WriteText(dir + "/config.json", R"({"model_type": "llama"})");
  if (!indexed) {
    EXPECT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}}).ok());
  } else {
    const size_t half = tensors.size() / 2;
    const std::string names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    SafetensorsTensors parts[2];
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    for (size_t i = 0; i < tensors.size(); ++i) {
      parts[i >= half].push_back(tensors[i]);
      index["weight_map"][tensors[i].first] = names[i >= half];
    }
    for (int k = 0; k < 2; ++k) EXPECT_TRUE(WriteSafetensors(dir + "/" + names[k], parts[k]).ok());
    WriteText(dir + "/model.safetensors.index.json", index.dump(2));
  }
  return Rounded(ValuesOf(*m), dtype);
}

struct Loaded {
  std::vector<absl::Status> status;        // per rank
  std::vector<HfLoadResult> result;        // per rank
  std::vector<std::vector<int64_t>> real;  // per rank: real (unpadded) elements of its shards, per unit
  Values values;                           // rank 0's, after the load
};

Loaded LoadToy(const std::string& dir, int world, const ShardingOptions& options, const ToyConfig& c = {},
               const HfLoadOptions& lo = {}) {
  Loaded out;
  out.result.resize(world);
  out.real.resize(world);
  out.status = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    std::shared_ptr<nn::Module> toy = MakeToy(c);
    ShardingOptions o = options;
    o.init_seed = 1;  // other values than any saved ones
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(toy, comm, o));
    ZS_ASSIGN_OR_RETURN(out.result[comm.rank()], LoadHfWeights(dir, *sharded, lo));
    for (ShardedUnit* u : sharded->units()) {
      int64_t n = 0;
      for (const FlatParameter::Piece& p : u->flat.PiecesOfShard(u->flat.shard_rank())) n += p.count;
      out.real[comm.rank()].push_back(n);
    }
    return sharded->SummonFullParams([&]() -> absl::Status {
      if (comm.rank() == 0) out.values = ValuesOf(*toy);
      return absl::OkStatus();
    });
  });
  return out;
}

// Every rank returned `code` with the same message; returns it.
std::string AgreedError(const Loaded& l, absl::StatusCode code) {
  for (size_t r = 0; r < l.status.size(); ++r) {
    EXPECT_EQ(l.status[r].code(), code) << "rank " << r << ": " << l.status[r];
    EXPECT_EQ(l.status[r].message(), l.status[0].message()) << "rank " << r;
  }
  return std::string(l.status[0].message());
}

void ExpectOk(const Loaded& l) {
  for (size_t r = 0; r < l.status.size(); ++r) EXPECT_TRUE(l.status[r].ok()) << "rank " << r << ": " << l.status[r];
}

// ================================================================ LoadHfWeights

TEST(HfLoad, LoadsAtEveryWorldSizeAndStrategyBitwise) {
  const ToyConfig c;
  const std::string dir = TempDir("load_f32");
  const Values want = WriteToyFolder(dir, c, /*seed=*/7);
  ASSERT_EQ(want.count(kHead), 1u);  // the tie, by both names
  ASSERT_FALSE(HfWeights::Open(dir).value().Contains(kHead));  // stored once
  ASSERT_NE(want, InitValues(c, 1));
  struct Run {
    int world;
    ShardingOptions options;
  };
  const std::vector<Run> runs = {{1, Options(ShardingStrategy::kFullShard)},
                                 {2, Options(ShardingStrategy::kFullShard)},
                                 {3, Options(ShardingStrategy::kFullShard)},
                                 {4, Options(ShardingStrategy::kFullShard)},
                                 {3, Options(ShardingStrategy::kShardGradOp)},
                                 {2, Options(ShardingStrategy::kNoShard)},
                                 {4, Options(ShardingStrategy::kHybridShard, /*hybrid=*/2)}};
  for (const Run& run : runs) {
    SCOPED_TRACE(absl::StrCat("world ", run.world, " ", ShardingStrategyName(run.options.strategy)));
    const Loaded l = LoadToy(dir, run.world, run.options, c);
    ExpectOk(l);
    EXPECT_EQ(l.values, want);
    EXPECT_TRUE(l.result[0].missing_keys.empty());
    EXPECT_TRUE(l.result[0].unexpected_keys.empty());
  }
}

TEST(HfLoad, Bf16IndexedFolderWithBothTiedNamesLoadsTheRoundedValues) {
  const ToyConfig c;
  const std::string dir = TempDir("load_bf16");
  const Values want = WriteToyFolder(dir, c, 11, DType::kBF16, /*both_tied_names=*/true, /*indexed=*/true);
  HfWeights w = HfWeights::Open(dir).value();
  ASSERT_EQ(w.files().size(), 2u);
  ASSERT_TRUE(w.Contains(kHead));
  ASSERT_EQ(w.Entry(kEmbed).value()->dtype, DType::kBF16);
  for (int world : {1, 3}) {
    const Loaded l = LoadToy(dir, world, Options(ShardingStrategy::kFullShard), c);
    ExpectOk(l);
    EXPECT_EQ(l.values, want) << "world " << world;
  }
}

// Each rank reads the bytes of its own pieces only: over the world every
// tensor byte exactly once, each rank its shards' share.
TEST(HfLoad, EachRankReadsOnlyItsShare) {
  const ToyConfig c;
  const std::string dir = TempDir("load_share");
  WriteToyFolder(dir, c, 3, DType::kF32, false, /*indexed=*/true);
  // Bytes of tensor data in the folder: embed 37*32, per layer 32*32 + 2*96*32, norm 32; f32.
  const int64_t total = 4 * (37 * 32 + 3 * (32 * 32 + 2 * 96 * 32) + 32);
  const int world = 4;
  const Loaded l = LoadToy(dir, world, Options(ShardingStrategy::kFullShard), c);
  ExpectOk(l);
  const int units = 4;  // three layers and the root
  int64_t sum = 0;
  for (int r = 0; r < world; ++r) {
    const int64_t bytes = l.result[r].bytes_read;
    sum += bytes;
    // Exactly the real elements of its shards, 4 bytes each.
    int64_t real = 0;
    for (int64_t n : l.real[r]) real += n;
    EXPECT_EQ(bytes, 4 * real) << "rank " << r;
    // A unit of n elements is padded to 4 * ceil(n / 4) (< 3 more) and cut in
    // four: a rank holds between n/4 - 3 and n/4 + 3/4 real elements of it.
    EXPECT_LE(bytes, total / 4 + 4 * 3 * units / 4) << "rank " << r;
    EXPECT_GE(bytes, total / 4 - 4 * 3 * units) << "rank " << r;
  }
  EXPECT_EQ(sum, total);
}

TEST(HfLoad, MissingTensorIsAnErrorUnlessNotStrict) {
  const ToyConfig c;
  const std::string dir = TempDir("load_missing");
  const std::string gone = "model.layers.1.mlp.up_proj.weight";
  Values want = WriteToyFolder(dir, c, 5, DType::kF32, false, false, [&](SafetensorsTensors& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& e) { return e.first == gone; }), t.end());
  });
  Loaded l = LoadToy(dir, 2, Options(ShardingStrategy::kFullShard), c);
  EXPECT_THAT(AgreedError(l, absl::StatusCode::kInvalidArgument),
              HasSubstr("strict: missing tensors [model.layers.1.mlp.up_proj.weight], unexpected tensors []"));
  l = LoadToy(dir, 2, Options(ShardingStrategy::kFullShard), c, {.strict = false});
  ExpectOk(l);
  EXPECT_EQ(l.result[0].missing_keys, std::vector<std::string>{gone});
  EXPECT_EQ(l.result[1].missing_keys, std::vector<std::string>{gone});
  want[gone] = InitValues(c, 1)[gone];  // kept at its init
  EXPECT_EQ(l.values, want);
}

TEST(HfLoad, UnexpectedTensorIsAnErrorUnlessNotStrict) {
  const ToyConfig c;
  const std::string dir = TempDir("load_unexpected");
  const std::string extra = "model.layers.1.mlp.gate_proj.weight";
  const Values want = WriteToyFolder(dir, c, 5, DType::kF32, false, false, [&](SafetensorsTensors& t) {
    t.emplace_back(extra, Arange({96, 32}, 0.0f));
  });
  Loaded l = LoadToy(dir, 3, Options(ShardingStrategy::kFullShard), c);
  EXPECT_THAT(AgreedError(l, absl::StatusCode::kInvalidArgument),
              HasSubstr("strict: missing tensors [], unexpected tensors [model.layers.1.mlp.gate_proj.weight]"));
  l = LoadToy(dir, 3, Options(ShardingStrategy::kFullShard), c, {.strict = false});
  ExpectOk(l);
  EXPECT_EQ(l.result[2].unexpected_keys, std::vector<std::string>{extra});
  EXPECT_EQ(l.values, want);
}

TEST(HfLoad, UntiedModelMissesTheAbsentHead) {
  const std::string dir = TempDir("load_untied");
  WriteToyFolder(dir, ToyConfig{}, 5);  // tied: no lm_head.weight
  ToyConfig untied;
  untied.tied = false;
  const Loaded l = LoadToy(dir, 2, Options(ShardingStrategy::kFullShard), untied);
  EXPECT_THAT(AgreedError(l, absl::StatusCode::kInvalidArgument),
              HasSubstr("missing tensors [lm_head.weight], unexpected tensors []"));
}

TEST(HfLoad, WrongShapeNamesTheTensorAndBothShapes) {
  const std::string dir = TempDir("load_shape");
  ToyConfig narrow;
  narrow.hidden = 64;
  WriteToyFolder(dir, narrow, 5);
  const Loaded l = LoadToy(dir, 2, Options(ShardingStrategy::kFullShard), ToyConfig{});
  const std::string message = AgreedError(l, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(message, HasSubstr(absl::StrCat("LoadHfWeights('", dir, "'): model.layers.0.mlp.up_proj.weight: the "
                                              "folder has [64, 32], the model expects [96, 32]")));
  EXPECT_THAT(message, HasSubstr("model.layers.2.mlp.down_proj.weight: the folder has [32, 64], the model expects "
                                 "[32, 96]"));
}

TEST(HfLoad, IntegerTensorIsRefused) {
  const std::string dir = TempDir("load_int");
  WriteToyFolder(dir, ToyConfig{}, 5, DType::kF32, false, false, [&](SafetensorsTensors& t) {
    for (auto& [n, x] : t) {
      if (n == "model.norm.weight") x = Tensor::Zeros({32}, DType::kI32).value();
    }
  });
  const Loaded l = LoadToy(dir, 2, Options(ShardingStrategy::kFullShard));
  EXPECT_THAT(AgreedError(l, absl::StatusCode::kInvalidArgument),
              HasSubstr("model.norm.weight: the folder has I32 [32], the model expects a floating dtype (F32, BF16 "
                        "or F16) [32]"));
}

TEST(HfLoad, TiedNamesThatDisagreeAreRefused) {
  const std::string dir = TempDir("load_tie_disagrees");
  WriteToyFolder(dir, ToyConfig{}, 5, DType::kF32, /*both_tied_names=*/true, false, [&](SafetensorsTensors& t) {
    for (auto& [n, x] : t) {
      if (n != kHead) continue;
      x = x.Clone().value();  // its own bytes (the tie shares them with the embedding)
      ASSERT_TRUE(x.Narrow(0, 36, 1).value().Fill(0.25).ok());  // the last row
    }
  });
  const Loaded l = LoadToy(dir, 2, Options(ShardingStrategy::kFullShard));
  EXPECT_THAT(AgreedError(l, absl::StatusCode::kInvalidArgument),
              HasSubstr("tied parameter names \"model.embed_tokens.weight\" and \"lm_head.weight\" are both present "
                        "with different values"));
}

TEST(HfLoad, FolderFaultsReachEveryRank) {
  TwoFileFolder f = WriteTwoFileFolder("load_fault");
  ::unlink((f.dir + "/model-00002-of-00002.safetensors").c_str());
  const Loaded l = LoadToy(f.dir, 3, Options(ShardingStrategy::kFullShard));
  EXPECT_THAT(AgreedError(l, absl::StatusCode::kNotFound),
              HasSubstr("file 'model-00002-of-00002.safetensors' (named by model.safetensors.index.json)"));
}

// ================================================================ SaveHfWeights

// Saves a toy model initialised from `seed` at `world`; returns every rank's status.
std::vector<absl::Status> SaveToy(const std::string& dir, int world, const ShardingOptions& options,
                                  const ToyConfig& c, uint64_t seed, HfSaveOptions so) {
  so.file.fsync = false;  // tests: speed
  return RunRanks(world, [&](Communicator& comm) -> absl::Status {
    std::shared_ptr<nn::Module> toy = MakeToy(c);
    ShardingOptions o = options;
    o.init_seed = seed;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(toy, comm, o));
    return SaveHfWeights(dir, *sharded, so);
  });
}

void ExpectAllOk(const std::vector<absl::Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
}

// The names of the toy's parameters in registration order (tied head once).
std::vector<std::string> ParameterOrder(const ToyConfig& c) {
  std::vector<std::string> out = {kEmbed};
  for (int l = 0; l < c.layers; ++l) {
    for (const char* p : {"self_attn.q_proj", "mlp.up_proj", "mlp.down_proj"}) {
      out.push_back(absl::StrCat("model.layers.", l, ".", p, ".weight"));
    }
  }
  out.push_back("model.norm.weight");
  if (!c.tied) out.push_back(kHead);
  return out;
}

// A safetensors file parsed here, independently of checkpoint/safetensors.cc:
// the 8-byte little-endian header size, the JSON header, the data section.
struct RawFile {
  std::string header_text;
  json header;
  std::string data;
};

RawFile ParseRaw(const std::string& path) {
  const std::string bytes = ReadText(path);
  RawFile f;
  EXPECT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  f.header_text = bytes.substr(8, n);
  f.header = json::parse(f.header_text);
  f.data = bytes.substr(8 + n);
  return f;
}

// The names of a raw file's tensors in the order the header lists them.
std::vector<std::string> HeaderOrder(const RawFile& f) {
  std::vector<std::pair<size_t, std::string>> at;
  for (auto it = f.header.begin(); it != f.header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    at.emplace_back(f.header_text.find(absl::StrCat("\"", it.key(), "\":")), it.key());
  }
  std::sort(at.begin(), at.end());
  std::vector<std::string> out;
  for (const auto& [pos, name] : at) out.push_back(name);
  return out;
}

// bf16 bits of a finite float, rounded to nearest-even (written out here, not
// the runtime's conversion): add 0x7fff plus the lowest kept bit, drop 16 bits.
uint16_t Bf16Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

TEST(HfSave, SavesOneFileAndReloadsAtEveryWorldSizeBitwise) {
  const ToyConfig c;
  const std::string dir = TempDir("save_single");
  const std::string config = "{\n  \"model_type\": \"llama\",\n  \"tie_word_embeddings\": true\n}\n";
  ExpectAllOk(SaveToy(dir, 1, Options(ShardingStrategy::kFullShard), c, 7, {.config_json = config}));
  EXPECT_EQ(List(dir), (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(ReadText(dir + "/config.json"), config);  // verbatim
  const RawFile raw = ParseRaw(dir + "/model.safetensors");
  EXPECT_EQ(raw.header["__metadata__"], json({{"format", "pt"}}));
  EXPECT_EQ(HeaderOrder(raw), ParameterOrder(c));  // no lm_head.weight: the tie once
  const Values want = InitValues(c, 7);
  for (int world : {1, 2, 3, 4}) {
    const Loaded l = LoadToy(dir, world, Options(ShardingStrategy::kFullShard), c);
    ExpectOk(l);
    EXPECT_EQ(l.values, want) << "world " << world;
  }
  const Loaded hybrid = LoadToy(dir, 4, Options(ShardingStrategy::kHybridShard, 2), c);
  ExpectOk(hybrid);
  EXPECT_EQ(hybrid.values, want);
  // A save at another world size and strategy writes the same bytes.
  for (const auto& [world, options] : std::vector<std::pair<int, ShardingOptions>>{
           {3, Options(ShardingStrategy::kFullShard)},
           {4, Options(ShardingStrategy::kHybridShard, 2)},
           {2, Options(ShardingStrategy::kNoShard)}}) {
    const std::string other =
        TempDir(absl::StrCat("save_single_world", world, "_", ShardingStrategyName(options.strategy)));
    ExpectAllOk(SaveToy(other, world, options, c, 7, {.config_json = config}));
    EXPECT_EQ(ReadText(other + "/model.safetensors"), ReadText(dir + "/model.safetensors")) << "world " << world;
  }
}

TEST(HfSave, Bf16AndF16StoreTheRoundedValues) {
  const ToyConfig c;
  const Values init = InitValues(c, 9);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::string dir = TempDir(absl::StrCat("save_", DTypeName(dtype)));
    ExpectAllOk(SaveToy(dir, 2, Options(ShardingStrategy::kFullShard), c, 9, {.dtype = dtype}));
    HfWeights w = HfWeights::Open(dir).value();
    for (const std::string& n : w.names()) EXPECT_EQ(w.Entry(n).value()->dtype, dtype) << n;
    const Loaded l = LoadToy(dir, 3, Options(ShardingStrategy::kFullShard), c);
    ExpectOk(l);
    EXPECT_EQ(l.values, Rounded(init, dtype));
    if (dtype != DType::kBF16) continue;
    // The stored bits of one tensor against rounding written out here.
    const RawFile raw = ParseRaw(dir + "/model.safetensors");
    const json& e = raw.header["model.layers.1.mlp.up_proj.weight"];
    EXPECT_EQ(e["dtype"], "BF16");
    EXPECT_EQ(e["shape"], json({96, 32}));
    const uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    ASSERT_EQ(end - begin, 96u * 32u * 2u);
    const std::vector<float>& x = init.at("model.layers.1.mlp.up_proj.weight");
    int differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      uint16_t stored;
      std::memcpy(&stored, raw.data.data() + begin + 2 * i, 2);  // little-endian host
      differ += stored != Bf16Bits(x[i]);
    }
    EXPECT_EQ(differ, 0);
  }
}

TEST(HfSave, SmallShardsGiveSeveralFilesAndAnIndex) {
  const ToyConfig c;
  const std::string dir = TempDir("save_sharded");
  ExpectAllOk(SaveToy(dir, 2, Options(ShardingStrategy::kFullShard), c, 13, {.max_shard_bytes = 10000}));
  // f32 bytes in parameter order: embed 4736, then per layer q_proj 4096,
  // up_proj 12288, down_proj 12288, then norm 128. Greedy at 10000: embed +
  // q_proj.0 (8832); each up/down_proj alone (above the limit); each later
  // q_proj alone (after a 12288 file); the norm alone.
  const std::vector<std::vector<std::string>> want_files = {
      {kEmbed, "model.layers.0.self_attn.q_proj.weight"},
      {"model.layers.0.mlp.up_proj.weight"},
      {"model.layers.0.mlp.down_proj.weight"},
      {"model.layers.1.self_attn.q_proj.weight"},
      {"model.layers.1.mlp.up_proj.weight"},
      {"model.layers.1.mlp.down_proj.weight"},
      {"model.layers.2.self_attn.q_proj.weight"},
      {"model.layers.2.mlp.up_proj.weight"},
      {"model.layers.2.mlp.down_proj.weight"},
      {"model.norm.weight"}};
  const int64_t total = 4736 + 3 * (4096 + 2 * 12288) + 128;
  std::vector<std::string> want_listing = {"model.safetensors.index.json"};
  json want_map = json::object();
  for (size_t i = 0; i < want_files.size(); ++i) {
    const std::string name = absl::StrFormat("model-%05d-of-00010.safetensors", i + 1);
    want_listing.push_back(name);
    for (const std::string& t : want_files[i]) want_map[t] = name;
  }
  std::sort(want_listing.begin(), want_listing.end());
  EXPECT_EQ(List(dir), want_listing);  // no config.json: none was given
  const std::string index_text = ReadText(dir + "/model.safetensors.index.json");
  const json index = json::parse(index_text);
  EXPECT_EQ(index, json({{"metadata", {{"total_size", total}}}, {"weight_map", want_map}}));
  EXPECT_EQ(index_text.back(), '\n');
  EXPECT_LT(index_text.find("\"metadata\""), index_text.find("\"weight_map\""));  // sorted keys
  int64_t sum = 0;
  for (size_t i = 0; i < want_files.size(); ++i) {
    const RawFile raw = ParseRaw(absl::StrCat(dir, "/", absl::StrFormat("model-%05d-of-00010.safetensors", i + 1)));
    EXPECT_EQ(raw.header["__metadata__"], json({{"format", "pt"}}));
    EXPECT_EQ(HeaderOrder(raw), want_files[i]);
    sum += static_cast<int64_t>(raw.data.size());
  }
  EXPECT_EQ(sum, total);
  // Reloads exactly, each of four ranks reading about a quarter.
  const Loaded l = LoadToy(dir, 4, Options(ShardingStrategy::kFullShard), c);
  ExpectOk(l);
  EXPECT_EQ(l.values, InitValues(c, 13));
  int64_t read = 0;
  for (const HfLoadResult& r : l.result) {
    EXPECT_LT(r.bytes_read, total / 3);
    read += r.bytes_read;
  }
  EXPECT_EQ(read, total);
  // ReadHfStateDict sees the same tensors.
  const nn::NamedTensors all = ReadHfStateDict(dir).value();
  const Values init = InitValues(c, 13);
  EXPECT_EQ(all.size(), init.size() - 1);  // lm_head.weight is the embedding
  for (const auto& [n, t] : all) EXPECT_EQ(Floats(t), init.at(n)) << n;
}

TEST(HfSave, WriteTiedTwiceAndUntiedModels) {
  ToyConfig c;
  const std::string both = TempDir("save_tied_both");
  ExpectAllOk(SaveToy(both, 3, Options(ShardingStrategy::kFullShard), c, 21, {.write_tied_once = false}));
  std::vector<std::string> order = ParameterOrder(c);
  order.push_back(kHead);
  EXPECT_EQ(HeaderOrder(ParseRaw(both + "/model.safetensors")), order);
  Loaded l = LoadToy(both, 2, Options(ShardingStrategy::kFullShard), c);
  ExpectOk(l);
  EXPECT_EQ(l.values, InitValues(c, 21));
  c.tied = false;
  const std::string untied = TempDir("save_untied");
  ExpectAllOk(SaveToy(untied, 2, Options(ShardingStrategy::kShardGradOp), c, 22, {}));
  EXPECT_EQ(HeaderOrder(ParseRaw(untied + "/model.safetensors")), ParameterOrder(c));
  l = LoadToy(untied, 3, Options(ShardingStrategy::kFullShard), c);
  ExpectOk(l);
  EXPECT_EQ(l.values, InitValues(c, 22));
}

TEST(HfSave, AFailedSaveLeavesThePreviousFolderIntact) {
  const ToyConfig c;
  const std::string parent = TempDir("save_failed");
  MakeDir(parent);
  const std::string dir = parent + "/hf";
  ExpectAllOk(SaveToy(dir, 2, Options(ShardingStrategy::kFullShard), c, 31,
                      {.max_shard_bytes = 10000, .config_json = "{\"a\": 1}"}));
  const std::vector<std::string> listing = List(dir);
  std::map<std::string, std::string> before;
  for (const std::string& f : listing) before[f] = ReadText(dir + "/" + f);
  // Fails in the second file (the first holds 8832 bytes of data, the second 12288),
  // then, in one file, in the middle.
  for (const HfSaveOptions& so : {HfSaveOptions{.max_shard_bytes = 10000, .file = {.fail_after_bytes = 10000}},
                                  HfSaveOptions{.file = {.fail_after_bytes = 40000}}}) {
    const std::vector<absl::Status> st = SaveToy(dir, 2, Options(ShardingStrategy::kFullShard), c, 32, so);
    for (size_t r = 0; r < st.size(); ++r) {
      // The hook is a full disk (Note [Full disk] in checkpoint/atomic_file.h), on the lead.
      EXPECT_THAT(st[r], StatusIs(absl::StatusCode::kResourceExhausted,
                                  ::testing::AllOf(HasSubstr("rank 0: "), HasSubstr(".safetensors.tmp."),
                                        HasSubstr("No space left on device (injected: fail_after_bytes)"))))
          << "rank " << r;
    }
    EXPECT_EQ(List(parent), std::vector<std::string>{"hf"});  // no hf.tmp, nothing else
    EXPECT_EQ(List(dir), listing);
    for (const auto& [f, bytes] : before) EXPECT_EQ(ReadText(dir + "/" + f), bytes) << f;
  }
  const Loaded l = LoadToy(dir, 3, Options(ShardingStrategy::kFullShard), c);
  ExpectOk(l);
  EXPECT_EQ(l.values, InitValues(c, 31));
  // A save that succeeds replaces the folder whole (no file of the old one stays).
  ExpectAllOk(SaveToy(dir, 2, Options(ShardingStrategy::kFullShard), c, 33, {}));
  EXPECT_EQ(List(dir), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(List(parent), std::vector<std::string>{"hf"});
}

// Master shards resident on NVMe (Note [NVMe offload]) are read for a save and
// filled by a load unit by unit through their swap buffer (one: every unit goes
// back to disk); the values and bytes are those of shards in memory.
TEST(HfSave, NvmeResidentShardsSaveAndLoad) {
  const ToyConfig c;
  const std::string swap = TempDir("nvme_swap");
  MakeDir(swap);
  ShardingOptions nvme = Options(ShardingStrategy::kFullShard);
  nvme.offload.nvme_params = true;
  nvme.offload.param_nvme = {.path = swap, .buffer_count = 1};
  nvme.offload.aio.block_size = 8192;
  const std::string in_memory = TempDir("nvme_reference");
  const std::string from_nvme = TempDir("nvme_saved");
  ExpectAllOk(SaveToy(in_memory, 2, Options(ShardingStrategy::kFullShard), c, 41, {}));
  ExpectAllOk(SaveToy(from_nvme, 2, nvme, c, 41, {}));
  EXPECT_EQ(ReadText(from_nvme + "/model.safetensors"), ReadText(in_memory + "/model.safetensors"));
  const Loaded l = LoadToy(from_nvme, 3, nvme, c);
  ExpectOk(l);
  EXPECT_EQ(l.values, InitValues(c, 41));
}

TEST(HfSave, RefusesBadOptions) {
  const std::string dir = TempDir("save_bad_options");
  struct Case {
    HfSaveOptions options;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{.dtype = DType::kI32}, "dtype should be f32, bf16 or f16, found i32"},
      {{.max_shard_bytes = 0}, "max_shard_bytes should be at least 1, found 0"},
      {{.config_json = "{\"a\": "}, "config_json should be a JSON object (config.json), found text that is not JSON"},
      {{.config_json = "[1]"}, "config_json should be a JSON object (config.json), found array [1]"},
  };
  for (const Case& k : cases) {
    const std::vector<absl::Status> st = SaveToy(dir, 2, Options(ShardingStrategy::kFullShard), ToyConfig{}, 1,
                                                 k.options);
    for (const absl::Status& s : st) EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(k.message)));
  }
  EXPECT_TRUE(List(dir).empty());
}

}  // namespace
}  // namespace zeroshard
