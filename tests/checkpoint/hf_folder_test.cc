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

}  // namespace
}  // namespace zeroshard
