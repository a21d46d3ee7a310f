// The simulator's hardware profiles and cost model (sim/profile.h,
// sim/cost_model.h): the shipped profiles load with a source for every figure;
// bad files fail naming the file and the key; every formula equals its closed
// form in the header's notes.
//
// Tolerances: the closed forms are evaluated here with the same operations in
// the same order where the test says "exactly" (EXPECT_EQ); where the order of
// operations differs, EXPECT_DOUBLE_EQ (4 ulps) covers the few roundings of a
// handful of multiplications and divisions (each at most 0.5 ulp).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "zeroshard/runtime/cuda/caching_allocator.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/sim/cost_model.h"
#include "zeroshard/sim/profile.h"

namespace zeroshard::sim {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kMiB = 1 << 20;

HardwareProfile MustLoad(const std::string& name) {
  absl::StatusOr<HardwareProfile> p = LoadProfile(name);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : HardwareProfile{};
}

std::string ShippedText(const std::string& name) {
  absl::StatusOr<std::string> dir = ProfileDirectory();
  EXPECT_TRUE(dir.ok()) << dir.status();
  std::ifstream in(absl::StrCat(*dir, "/", name, ".json"));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : testing::TempDir();
}

// Sets an environment variable for one scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// ---------------------------------------------------------------------------
// Profiles
// ---------------------------------------------------------------------------

TEST(Profile, EveryShippedProfileLoadsWithASourceForEveryFigure) {
  for (const std::string& name : ProfileNames()) {
    SCOPED_TRACE(name);
    HardwareProfile p = MustLoad(name);
    EXPECT_EQ(p.name, name);
    EXPECT_FALSE(p.description.empty());
    // Every figure the file holds (the required ones and the optional ones it
    // sets) has a note, and nothing else does.
    const std::vector<std::string> held = ProfileFigureKeys(p);
    for (const std::string& key : held) {
      auto it = p.sources.find(key);
      EXPECT_TRUE(it != p.sources.end() && !it->second.empty()) << "no source note for " << key;
    }
    EXPECT_EQ(p.sources.size(), held.size());
    EXPECT_THAT(p.ToString(), HasSubstr("memory.hbm_bytes_per_s = "));
  }
}

// The optional keys (Note [Attention efficiency], Note [Per-op memory
// efficiency]): every required key is held by every profile; the optional ones
// only where set.
TEST(Profile, OptionalKeysAreHeldOnlyWhereSet) {
  const std::vector<std::string> all = ProfileFigureKeys();
  const HardwareProfile a100 = MustLoad("a100_80g");
  const std::vector<std::string> held = ProfileFigureKeys(a100);
  for (const char* key : {"compute.attention_efficiency", "memory.cross_entropy_forward_efficiency",
                          "memory.gelu_backward_efficiency", "memory.softmax_backward_efficiency"}) {
    EXPECT_THAT(all, ::testing::Contains(key));
    EXPECT_THAT(held, ::testing::Not(::testing::Contains(key)));
  }
  EXPECT_EQ(all.size(), held.size() + 9);  // the attention points and 8 memory kinds
  EXPECT_THAT(a100.ToString(), ::testing::Not(HasSubstr("efficiency = unset")));
  EXPECT_THAT(a100.ToString(), ::testing::Not(HasSubstr("attention_efficiency = ")));
  const HardwareProfile h100 = MustLoad("h100_dgx");
  EXPECT_THAT(ProfileFigureKeys(h100), ::testing::Contains("memory.layernorm_backward_efficiency"));
  EXPECT_THAT(ProfileFigureKeys(h100), ::testing::Not(::testing::Contains("memory.softmax_backward_efficiency")));
  EXPECT_THAT(h100.ToString(),
              AllOf(HasSubstr("compute.attention_efficiency = D 64: 0.21 forward, 0.21 backward; D 128 T 2048: "
                              "0.445 forward, 0.326 backward; D 128 T 4096: 0.571 forward, 0.447 backward of peak "
                              "by head_dim and seq_len"),
                    HasSubstr("memory.cross_entropy_forward_efficiency = 0.26 of hbm_bytes_per_s")));
}

TEST(Profile, ProfileNamesAreTheFilesInTheDirectory) {
  absl::StatusOr<std::string> dir = ProfileDirectory();
  ASSERT_TRUE(dir.ok()) << dir.status();
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(*dir)) {
    if (e.path().extension() == ".json") files.insert(e.path().stem().string());
  }
  const std::vector<std::string> names = ProfileNames();
  EXPECT_EQ(files, std::set<std::string>(names.begin(), names.end()));
}

TEST(Profile, TheIssuesFiguresAreTheShippedOnes) {
  const HardwareProfile h100 = MustLoad("h100_dgx");
  EXPECT_EQ(h100.peak_flops_bf16, 989e12);
  EXPECT_EQ(h100.hbm_bytes_per_s, 3.35e12);
  EXPECT_EQ(h100.intra_node_bytes_per_s, 450e9);
  EXPECT_EQ(h100.inter_node_bytes_per_s, 8 * 400e9 / 8);  // 8 x 400 Gb/s
  EXPECT_EQ(h100.gpus_per_node, 8);
  const HardwareProfile a100 = MustLoad("a100_80g");
  EXPECT_EQ(a100.peak_flops_bf16, 312e12);
  EXPECT_EQ(a100.hbm_bytes_per_s, 2.039e12);
  EXPECT_EQ(a100.intra_node_bytes_per_s, 300e9);
  EXPECT_EQ(a100.inter_node_bytes_per_s, 8 * 200e9 / 8);
  const HardwareProfile h200 = MustLoad("h200");
  EXPECT_EQ(h200.peak_flops_bf16, h100.peak_flops_bf16);
  EXPECT_EQ(h200.hbm_bytes_per_s, 4.8e12);
  EXPECT_GT(h200.memory_bytes, int64_t{140} * 1000 * 1000 * 1000);
  const HardwareProfile cpu = MustLoad("cpu");
  EXPECT_FALSE(cpu.alloc_caching);
  EXPECT_THAT(cpu.description, HasSubstr("calibrate with sim calibration; these are defaults"));
}

// The per-op figures fit to this project's H100 record (the sources of
// sim/profiles/h100_dgx.json); the H200 takes the same fractions (same GH100
// silicon, same kernels); the A100 and this CPU have no measurement and keep
// the general figures.
TEST(Profile, PerOpFiguresAreTheH100RecordsOnGh100AndUnsetElsewhere) {
  const HardwareProfile h100 = MustLoad("h100_dgx");
  // D 64 at one length (flat in T); D 128 at T 2048 and 4096 (Note [Attention efficiency]).
  const std::vector<AttentionPoint> points = {
      {.head_dim = 64, .forward = 0.210, .backward = 0.210},
      {.head_dim = 128, .seq_len = 2048, .forward = 0.445, .backward = 0.326},
      {.head_dim = 128, .seq_len = 4096, .forward = 0.571, .backward = 0.447}};
  EXPECT_EQ(h100.attention_efficiency, points);
  EXPECT_EQ(h100.cross_entropy_forward_efficiency, 0.260);
  EXPECT_EQ(h100.cross_entropy_backward_efficiency, 0.454);
  EXPECT_EQ(h100.layernorm_forward_efficiency, 0.726);
  EXPECT_EQ(h100.layernorm_backward_efficiency, 0.342);
  EXPECT_EQ(h100.gelu_forward_efficiency, 0.464);
  EXPECT_EQ(h100.gelu_backward_efficiency, 0.464);
  EXPECT_EQ(h100.softmax_forward_efficiency, 0.322);
  EXPECT_FALSE(h100.softmax_backward_efficiency.has_value());  // no row in any record
  const HardwareProfile h200 = MustLoad("h200");
  EXPECT_EQ(h200.attention_efficiency, h100.attention_efficiency);
  EXPECT_EQ(h200.cross_entropy_forward_efficiency, h100.cross_entropy_forward_efficiency);
  EXPECT_EQ(h200.cross_entropy_backward_efficiency, h100.cross_entropy_backward_efficiency);
  EXPECT_EQ(h200.layernorm_forward_efficiency, h100.layernorm_forward_efficiency);
  EXPECT_EQ(h200.layernorm_backward_efficiency, h100.layernorm_backward_efficiency);
  EXPECT_EQ(h200.gelu_forward_efficiency, h100.gelu_forward_efficiency);
  EXPECT_EQ(h200.gelu_backward_efficiency, h100.gelu_backward_efficiency);
  EXPECT_EQ(h200.softmax_forward_efficiency, h100.softmax_forward_efficiency);
  EXPECT_EQ(h200.softmax_backward_efficiency, h100.softmax_backward_efficiency);
  EXPECT_THAT(h200.sources.at("memory.gelu_forward_efficiency"), HasSubstr("same GH100 silicon"));
  EXPECT_THAT(h200.sources.at("compute.attention_efficiency"), HasSubstr("taken from h100_dgx"));
  for (const char* name : {"a100_80g", "cpu"}) {
    SCOPED_TRACE(name);
    const HardwareProfile p = MustLoad(name);
    HardwareProfile cleared = p;
    ClearOpEfficiencies(cleared);
    EXPECT_EQ(ProfileToJson(p), ProfileToJson(cleared));  // nothing set
    EXPECT_TRUE(p.attention_efficiency.empty());
    EXPECT_FALSE(p.layernorm_forward_efficiency.has_value());
  }
}

TEST(Profile, LoadsAPathAndRejectsAnUnknownName) {
  absl::StatusOr<std::string> dir = ProfileDirectory();
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<HardwareProfile> by_path = LoadProfile(absl::StrCat(*dir, "/a100_80g.json"));
  ASSERT_TRUE(by_path.ok()) << by_path.status();
  EXPECT_EQ(by_path->name, "a100_80g");

  absl::StatusOr<HardwareProfile> unknown = LoadProfile("h100");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), AllOf(HasSubstr("'h100'"), HasSubstr("h100_dgx"), HasSubstr("h100.json")));

  absl::StatusOr<HardwareProfile> missing = LoadProfile("/nonexistent/x.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/x.json"));

  EXPECT_EQ(LoadProfile("../h100_dgx").status().code(), absl::StatusCode::kNotFound);  // a path: no such file
  EXPECT_EQ(LoadProfile("h100 dgx").status().code(), absl::StatusCode::kInvalidArgument);
}

// Note [Finding sim/profiles]: the runfiles of the binary itself, without the
// variables `bazel test` sets (as when bazel-bin/... is run by hand).
TEST(Profile, FindsTheRunfilesOfTheBinaryWithoutBazelsVariables) {
  ScopedEnv a("TEST_SRCDIR", nullptr), b("RUNFILES_DIR", nullptr), c("BUILD_WORKSPACE_DIRECTORY", nullptr);
  absl::StatusOr<std::string> dir = ProfileDirectory();
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(fs::exists(absl::StrCat(*dir, "/h100_dgx.json"))) << *dir;
}

TEST(Profile, TheEnvironmentVariableNamesTheDirectory) {
  const std::string dir = absl::StrCat(TempDir(), "/my_profiles");
  fs::create_directories(dir);
  Json j = Json::parse(ShippedText("cpu"));
  j["name"] = "my_box";
  std::ofstream(absl::StrCat(dir, "/my_box.json")) << j.dump(2);
  {
    ScopedEnv env("ZEROSHARD_SIM_PROFILES", dir.c_str());
    absl::StatusOr<HardwareProfile> p = LoadProfile("my_box");
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->name, "my_box");
  }
  {
    ScopedEnv env("ZEROSHARD_SIM_PROFILES", "/nonexistent/profiles");
    absl::StatusOr<HardwareProfile> p = LoadProfile("h100_dgx");
    EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(p.status().message(), HasSubstr("ZEROSHARD_SIM_PROFILES is '/nonexistent/profiles'"));
  }
}

// The shipped h100 file with `edit` applied, parsed as "bad.json".
absl::Status ParseEdited(const std::function<void(Json&)>& edit) {
  Json j = Json::parse(ShippedText("h100_dgx"));
  edit(j);
  return ParseProfile(j.dump(), "bad.json").status();
}

TEST(Profile, WrittenProfilesReadBackToTheSameFigures) {
  for (const std::string& name : ProfileNames()) {
    const HardwareProfile p = MustLoad(name);
    const std::string text = ProfileToJson(p);
    absl::StatusOr<HardwareProfile> back = ParseProfile(text, name + " (written)");
    ASSERT_TRUE(back.ok()) << back.status();
    // Every figure, the strings and the sources: the written file is the same profile.
    EXPECT_EQ(ProfileToJson(*back), text) << name;
    EXPECT_EQ(back->peak_flops_bf16, p.peak_flops_bf16) << name;
    EXPECT_EQ(back->gemm_latency_s, p.gemm_latency_s) << name;
    EXPECT_EQ(back->synchronous, p.synchronous) << name;
    EXPECT_EQ(back->sources, p.sources) << name;
    // The optional figures too: the same points and the same set and unset kinds.
    EXPECT_EQ(back->attention_efficiency, p.attention_efficiency) << name;
    EXPECT_EQ(back->cross_entropy_forward_efficiency, p.cross_entropy_forward_efficiency) << name;
    EXPECT_EQ(back->layernorm_backward_efficiency, p.layernorm_backward_efficiency) << name;
    EXPECT_EQ(back->gelu_backward_efficiency, p.gelu_backward_efficiency) << name;
    EXPECT_EQ(back->softmax_forward_efficiency, p.softmax_forward_efficiency) << name;
    EXPECT_EQ(back->softmax_backward_efficiency, p.softmax_backward_efficiency) << name;
    EXPECT_EQ(ProfileFigureKeys(*back), ProfileFigureKeys(p)) << name;
  }
  // Figures that are not short decimals, one optional kind set alone, five
  // attention points, some with a seq_len and some without: written and read
  // back to the same bits.
  HardwareProfile p = MustLoad("a100_80g");
  p.softmax_backward_efficiency = 1.0 / 3.0;
  p.attention_efficiency = {
      {.head_dim = 32, .forward = 0.1 / 3, .backward = std::nextafter(0.5, 1.0)},
      {.head_dim = 96, .seq_len = 1, .forward = 0.6, .backward = 0.45},
      {.head_dim = 96, .seq_len = 3000, .forward = 0.7, .backward = 1.0 / 7.0},
      {.head_dim = 96, .seq_len = int64_t{1} << 40, .forward = std::nextafter(0.7, 0.0), .backward = 0.5},
      {.head_dim = 256, .forward = 1.0, .backward = 2.0 / 3.0}};
  p.sources["memory.softmax_backward_efficiency"] = "a test";
  const std::string text = ProfileToJson(p);
  absl::StatusOr<HardwareProfile> back = ParseProfile(text, "written");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->softmax_backward_efficiency, 1.0 / 3.0);
  EXPECT_EQ(back->attention_efficiency, p.attention_efficiency);
  EXPECT_FALSE(back->softmax_forward_efficiency.has_value());
  EXPECT_EQ(ProfileToJson(*back), text);
  EXPECT_THAT(text, ::testing::Not(HasSubstr("softmax_forward_efficiency")));
  // seq_len is written only where a point has one: three of the five.
  const Json written = Json::parse(text);
  int with_seq_len = 0;
  for (const Json& point : written["compute"]["attention_efficiency"]) with_seq_len += point.contains("seq_len");
  EXPECT_EQ(with_seq_len, 3);
  // And through a file: LoadProfile reads the written text back to the same profile.
  const std::string path = absl::StrCat(TempDir(), "/written_attention.json");
  std::ofstream(path) << text;
  absl::StatusOr<HardwareProfile> loaded = LoadProfile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->attention_efficiency, p.attention_efficiency);
  EXPECT_EQ(ProfileToJson(*loaded), text);
}

// A file without the optional keys (every profile written before them) loads
// with them unset.
TEST(Profile, AFileWithoutTheOptionalKeysLoadsWithThemUnset) {
  absl::StatusOr<HardwareProfile> p = [] {
    Json j = Json::parse(ShippedText("h100_dgx"));
    j["compute"].erase("attention_efficiency");
    for (const char* key : {"cross_entropy_forward_efficiency", "cross_entropy_backward_efficiency",
                            "layernorm_forward_efficiency", "layernorm_backward_efficiency", "gelu_forward_efficiency",
                            "gelu_backward_efficiency", "softmax_forward_efficiency"}) {
      j["memory"].erase(key);
      j["sources"].erase(absl::StrCat("memory.", key));
    }
    j["sources"].erase("compute.attention_efficiency");
    return ParseProfile(j.dump(), "old.json");
  }();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->attention_efficiency.empty());
  for (const std::optional<double>* e :
       {&p->cross_entropy_forward_efficiency, &p->cross_entropy_backward_efficiency, &p->layernorm_forward_efficiency,
        &p->layernorm_backward_efficiency, &p->gelu_forward_efficiency, &p->gelu_backward_efficiency,
        &p->softmax_forward_efficiency, &p->softmax_backward_efficiency}) {
    EXPECT_FALSE(e->has_value());
  }
  HardwareProfile shipped = MustLoad("h100_dgx");
  ClearOpEfficiencies(shipped);
  EXPECT_EQ(shipped.attention_efficiency, p->attention_efficiency);
  EXPECT_FALSE(shipped.gelu_forward_efficiency.has_value());
}

TEST(Profile, AMissingKeyIsNamedWithTheFile) {
  absl::Status s = ParseEdited([](Json& j) { j["compute"].erase("peak_flops_bf16"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.peak_flops_bf16': expected a number > 0, found no such key");

  s = ParseEdited([](Json& j) { j.erase("network"); });
  EXPECT_EQ(s.message(), "profile bad.json: key 'network': expected an object, found no such key");

  s = ParseEdited([](Json& j) { j.erase("name"); });
  EXPECT_EQ(s.message(), "profile bad.json: key 'name': expected a non-empty string, found no such key");
}

TEST(Profile, AWrongTypeOrRangeIsNamedWithWhatWasFound) {
  absl::Status s = ParseEdited([](Json& j) { j["memory"]["memory_bytes"] = "lots"; });
  EXPECT_EQ(s.message(),
            "profile bad.json: key 'memory.memory_bytes': expected an integer >= 1, found \"lots\" (a string)");

  s = ParseEdited([](Json& j) { j["memory"]["memory_bytes"] = 8.5; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'memory.memory_bytes': expected an integer >= 1, found 8.5 (a number)");

  s = ParseEdited([](Json& j) { j["network"]["collective_efficiency"] = 1.5; });
  EXPECT_EQ(s.message(),
            "profile bad.json: key 'network.collective_efficiency': expected a number in (0, 1], found 1.5 (a number)");

  s = ParseEdited([](Json& j) { j["allocator"]["caching"] = 1; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'allocator.caching': expected true or false, found 1 (a number)");

  s = ParseEdited([](Json& j) { j["compute"] = Json::array(); });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute': expected an object, found [] (an array)");

  s = ParseEdited([](Json& j) { j["allocator"]["small_segment_bytes"] = 0; });
  EXPECT_EQ(s.message(),
            "profile bad.json: key 'allocator.small_segment_bytes': expected an integer >= 1 when "
            "allocator.caching is true, found 0 (a number)");
}

TEST(Profile, ABadPerOpEfficiencyIsNamedWithWhatWasFound) {
  absl::Status s = ParseEdited([](Json& j) { j["memory"]["gelu_forward_efficiency"] = 0; });
  EXPECT_EQ(s.message(),
            "profile bad.json: key 'memory.gelu_forward_efficiency': expected a number in (0, 1], found 0 (a number)");
  s = ParseEdited([](Json& j) { j["memory"]["layernorm_backward_efficiency"] = 1.5; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'memory.layernorm_backward_efficiency': expected a number in (0, 1], "
                         "found 1.5 (a number)");
  s = ParseEdited([](Json& j) { j["memory"]["softmax_backward_efficiency"] = "fast"; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'memory.softmax_backward_efficiency': expected a number in (0, 1], "
                         "found \"fast\" (a string)");
  s = ParseEdited([](Json& j) { j["memory"]["cross_entropy_forward_efficiency"] = nullptr; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'memory.cross_entropy_forward_efficiency': expected a number in "
                         "(0, 1], found null");
  s = ParseEdited([](Json& j) { j["memory"]["crossentropy_forward_efficiency"] = 0.3; });
  EXPECT_THAT(s.message(), AllOf(HasSubstr("key 'memory.crossentropy_forward_efficiency'"),
                                 HasSubstr("cross_entropy_forward_efficiency"), HasSubstr("found an unknown key")));
}

TEST(Profile, BadAttentionPointsAreNamedWithWhatWasFound) {
  // The shipped h100_dgx points: [0] D 64 (no seq_len), [1] D 128 T 2048, [2] D 128 T 4096.
  const std::string array =
      "a non-empty array of {\"head_dim\": integer >= 1, optional \"seq_len\": integer >= 1, \"forward\": number "
      "in (0, 1], \"backward\": number in (0, 1]} in increasing head_dim, then seq_len";
  absl::Status s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"] = 0.5; });
  EXPECT_EQ(s.message(), absl::StrCat("profile bad.json: key 'compute.attention_efficiency': expected ", array,
                                      ", found 0.5 (a number)"));
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"] = Json::array(); });
  EXPECT_EQ(s.message(), absl::StrCat("profile bad.json: key 'compute.attention_efficiency': expected ", array,
                                      ", found [] (an array)"));
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][1] = 128; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.attention_efficiency[1]': expected an object "
                         "{\"head_dim\", \"seq_len\" (optional), \"forward\", \"backward\"}, found 128 (a number)");
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][0]["head_dim"] = 0; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.attention_efficiency[0].head_dim': expected an integer >= 1, "
                         "found 0 (a number)");
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][0]["head_dim"] = 64.5; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.attention_efficiency[0].head_dim': expected an integer >= 1, "
                         "found 64.5 (a number)");
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][0].erase("backward"); });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.attention_efficiency[0].backward': expected a number in "
                         "(0, 1], found no such key");
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][1]["forward"] = 1.2; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.attention_efficiency[1].forward': expected a number in "
                         "(0, 1], found 1.2 (a number)");
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][0]["seq"] = 1024; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.attention_efficiency[0].seq': expected one of head_dim, "
                         "seq_len, forward, backward, found an unknown key");
}

// The order of the points (Note [Attention efficiency]): head_dim increasing,
// then seq_len increasing within one head_dim; no two points alike, and a
// point without seq_len alone at its head_dim. Each error names the key that
// breaks the order and what it held.
TEST(Profile, AttentionPointsOutOfOrderOrAlikeAreRejected) {
  const std::string at = "profile bad.json: key 'compute.attention_efficiency";
  // head_dim going down: after [1] (D 128, with a seq_len) a point may share D 128, not go below.
  absl::Status s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][2]["head_dim"] = 96; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat(at, "[2].head_dim': expected an integer >= 128 (points in increasing "
                                          "head_dim), found 96 (a number)"));
  // After [0] (D 64, no seq_len) the next point's head_dim must be above 64.
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][1]["head_dim"] = 32; });
  EXPECT_EQ(s.message(), absl::StrCat(at, "[1].head_dim': expected an integer > 64 (points in increasing head_dim), "
                                          "found 32 (a number)"));
  // A second point at D 64, whose point has no seq_len (it holds at every T).
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][1]["head_dim"] = 64; });
  EXPECT_EQ(s.message(), absl::StrCat(at, "[1].head_dim': expected an integer > 64 (points in increasing head_dim; "
                                          "point [0] has no seq_len, so it is head_dim 64's only point), found 64 "
                                          "(a number)"));
  // The same the other way round: [1] without seq_len, then [2] at its head_dim.
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][1].erase("seq_len"); });
  EXPECT_EQ(s.message(), absl::StrCat(at, "[2].head_dim': expected an integer > 128 (points in increasing head_dim; "
                                          "point [1] has no seq_len, so it is head_dim 128's only point), found 128 "
                                          "(a number)"));
  // A point without seq_len after one with it, at the same head_dim.
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][2].erase("seq_len"); });
  EXPECT_EQ(s.message(), absl::StrCat(at, "[2].seq_len': expected an integer > 2048 (points of head_dim 128 in "
                                          "increasing seq_len), found no such key"));
  // seq_len going down within D 128.
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][2]["seq_len"] = 1024; });
  EXPECT_EQ(s.message(), absl::StrCat(at, "[2].seq_len': expected an integer > 2048 (points of head_dim 128 in "
                                          "increasing seq_len), found 1024 (a number)"));
  // A duplicate: D 128, T 2048 twice.
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][2]["seq_len"] = 2048; });
  EXPECT_EQ(s.message(), absl::StrCat(at, "[2].seq_len': expected an integer > 2048 (points of head_dim 128 in "
                                          "increasing seq_len), found 2048 (a number), a second point at head_dim "
                                          "128, seq_len 2048 (point [1] is the first)"));
  // A whole point repeated, forward and backward too.
  s = ParseEdited([](Json& j) {
    Json& points = j["compute"]["attention_efficiency"];
    points.insert(points.begin() + 2, points[1]);
  });
  EXPECT_EQ(s.message(), absl::StrCat(at, "[2].seq_len': expected an integer > 2048 (points of head_dim 128 in "
                                          "increasing seq_len), found 2048 (a number), a second point at head_dim "
                                          "128, seq_len 2048 (point [1] is the first)"));
  // Not a whole number, within the group.
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][2]["seq_len"] = 4096.5; });
  EXPECT_EQ(s.message(), absl::StrCat(at, "[2].seq_len': expected an integer > 2048 (points of head_dim 128 in "
                                          "increasing seq_len), found 4096.5 (a number)"));
}

// seq_len's own values: an integer >= 1 (a head_dim's first point, whose
// only bound is that).
TEST(Profile, BadSeqLenValuesAreNamedWithWhatWasFound) {
  const std::string at = "profile bad.json: key 'compute.attention_efficiency[1].seq_len': expected an integer >= 1, ";
  const std::pair<Json, std::string> cases[] = {
      {Json(0), "found 0 (a number)"},
      {Json(-2048), "found -2048 (a number)"},
      {Json(2048.5), "found 2048.5 (a number)"},
      {Json("long"), "found \"long\" (a string)"},
      {Json(nullptr), "found null"},
      {Json(true), "found true (a boolean)"},
      {Json::array({2048}), "found [2048] (an array)"},
  };
  for (const auto& [value, found] : cases) {
    SCOPED_TRACE(value.dump());
    absl::Status s = ParseEdited([&value = value](Json& j) {
      j["compute"]["attention_efficiency"][1]["seq_len"] = value;
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), absl::StrCat(at, found));
  }
  // A point of its own head_dim may carry any seq_len >= 1; 2e3 is the integer 2000.
  for (const Json& ok : {Json(1), Json(2e3), Json(int64_t{1} << 40)}) {
    absl::StatusOr<HardwareProfile> p = [&] {
      Json j = Json::parse(ShippedText("h100_dgx"));
      j["compute"]["attention_efficiency"][0]["seq_len"] = ok;
      return ParseProfile(j.dump(), "ok.json");
    }();
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->attention_efficiency[0].seq_len, ok.get<double>()) << ok.dump();
  }
}

TEST(Profile, AnUnknownKeyIsAnError) {
  absl::Status s = ParseEdited([](Json& j) { j["compute"]["peak_flop_bf16"] = 1e15; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("key 'compute.peak_flop_bf16'"), HasSubstr("peak_flops_bf16"),
                                 HasSubstr("found an unknown key")));
  s = ParseEdited([](Json& j) { j["sources"]["compute.peak_flop_bf16"] = "x"; });
  EXPECT_THAT(s.message(), HasSubstr("key 'sources.compute.peak_flop_bf16'"));
  s = ParseEdited([](Json& j) { j["gpus"] = 8; });
  EXPECT_THAT(s.message(), HasSubstr("key 'gpus'"));
}

TEST(Profile, AWholeNumberInExponentFormIsAnInteger) {
  absl::Status s = ParseEdited([](Json& j) { j["memory"]["memory_bytes"] = 8e10; });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(Profile, ABadFileIsNamedByItsPath) {
  const std::string path = absl::StrCat(TempDir(), "/broken.json");
  std::ofstream(path) << "{\"name\": \"x\",";
  absl::StatusOr<HardwareProfile> p = LoadProfile(path);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), AllOf(HasSubstr(absl::StrCat("profile ", path, ": expected JSON"))));

  Json j = Json::parse(ShippedText("h100_dgx"));
  j["host"].erase("host_link_bytes_per_s");
  const std::string path2 = absl::StrCat(TempDir(), "/no_host_link.json");
  std::ofstream(path2) << j.dump();
  p = LoadProfile(path2);
  EXPECT_EQ(p.status().message(), absl::StrCat("profile ", path2,
                                               ": key 'host.host_link_bytes_per_s': expected a number > 0, "
                                               "found no such key"));
}

// ---------------------------------------------------------------------------
// GEMM and memory-bound ops
// ---------------------------------------------------------------------------

TEST(Gemm, MonotoneInEachDimension) {
  for (const std::string& name : ProfileNames()) {
    const HardwareProfile p = MustLoad(name);
    for (DType dtype : kFloatDTypes) {
      // From every base shape (square, skinny, batched), grow one dimension at a time
      // through compute-bound and memory-bound regimes.
      for (std::array<int64_t, 4> base : {std::array<int64_t, 4>{1, 1, 1, 1}, {1, 4096, 4096, 16},
                                          {8, 128, 2048, 64}, {1, 1, 8192, 8192}}) {
        for (int dim = 0; dim < 4; ++dim) {
          double previous = 0;
          for (int64_t v = 1; v <= (int64_t{1} << 17); v *= 2) {
            std::array<int64_t, 4> s = base;
            s[dim] = v;
            const double t = GemmSeconds(p, s[0], s[1], s[2], s[3], dtype);
            EXPECT_GE(t, previous) << name << " " << DTypeName(dtype) << " dim " << dim << " = " << v;
            previous = t;
          }
        }
      }
    }
  }
}

TEST(Gemm, NeverBeatsPeak) {
  // flops / t <= peak exactly: t >= gemm_latency_s + F / (peak * eff_max) and every
  // shipped eff_max <= 0.9, so the quotient sits >= 10% below peak, far beyond the
  // few roundings (~1e-16 relative) in between.
  for (const std::string& name : ProfileNames()) {
    const HardwareProfile p = MustLoad(name);
    for (DType dtype : kFloatDTypes) {
      for (int64_t m : {1, 7, 128, 4096, 65536}) {
        for (int64_t n : {1, 64, 3072, 50304}) {
          for (int64_t k : {1, 768, 16384}) {
            const double t = GemmSeconds(p, 1, m, n, k, dtype);
            EXPECT_LE(GemmFlops(1, m, n, k) / t, PeakFlops(p, dtype)) << name << " " << m << "x" << n << "x" << k;
          }
        }
      }
    }
  }
}

// An f32 GEMM with TF32 (SetMatMulAllowTf32) is costed at the TF32 peak: on a
// large compute-bound square the time is latency + F / (peak * eff_max) exactly,
// so against plain f32 it is the peaks' ratio once the latency is taken off.
TEST(Gemm, Tf32CostsAnF32GemmAtTheTf32Peak) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const int64_t n = 8192;
  const double f = 2.0 * n * n * n, bytes = 3.0 * 4 * n * n;
  const double f32 = GemmSeconds(p, 1, n, n, n, DType::kF32, bytes);
  const double tf32 = GemmSeconds(p, 1, n, n, n, DType::kF32, bytes, /*tf32=*/true);
  EXPECT_DOUBLE_EQ(tf32, p.gemm_latency_s + f / (p.peak_flops_tf32 * p.gemm_efficiency_max));
  EXPECT_NEAR((f32 - p.gemm_latency_s) / (tf32 - p.gemm_latency_s), p.peak_flops_tf32 / p.peak_flops_fp32, 1e-9);
  EXPECT_EQ(PeakFlops(p, DType::kF32, /*tf32=*/true), p.peak_flops_tf32);
  EXPECT_EQ(PeakFlops(p, DType::kBF16, /*tf32=*/true), p.peak_flops_bf16);  // only f32 changes
}

TEST(Gemm, LargeSquareBf16OnH100ReachesTheCurvesEfficiency) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const double f = 2.0 * 8192 * 8192 * 8192;
  const double f_half = p.gemm_latency_s * p.peak_flops_bf16 * p.gemm_efficiency_max;
  const double eff = p.gemm_efficiency_max * f / (f + f_half);  // Note [GEMM efficiency curve]
  const double t = GemmSeconds(p, 1, 8192, 8192, 8192, DType::kBF16);
  EXPECT_DOUBLE_EQ(f / t, eff * p.peak_flops_bf16);
  EXPECT_DOUBLE_EQ(GemmEfficiency(p, f, DType::kBF16), eff);
  // With the shipped figures (0.76, 3 us) that is 750 TFLOP/s, inside the 700-780
  // measured on H100/H200 for this shape (the profile's sources).
  EXPECT_GT(f / t, 700e12);
  EXPECT_LT(f / t, 780e12);
  // Compute-bound: its bytes alone would take under a tenth of it.
  EXPECT_LT(2.0 * 3 * 8192 * 8192 / (p.hbm_bytes_per_s * p.memory_efficiency), t / 10);
  // Half the plateau at F_half.
  EXPECT_DOUBLE_EQ(GemmEfficiency(p, f_half, DType::kBF16), p.gemm_efficiency_max / 2);
}

TEST(Gemm, SkinnyGemmIsMemoryBoundAndEmptyGemmIsFree) {
  const HardwareProfile p = MustLoad("h100_dgx");
  // [4096 x 16] x [16 x 4096] bf16: 0.5 GFLOP but 32 MiB of output.
  const double bytes = 2.0 * (4096.0 * 16 + 16.0 * 4096 + 4096.0 * 4096);
  EXPECT_EQ(GemmSeconds(p, 1, 4096, 4096, 16, DType::kBF16), bytes / (p.hbm_bytes_per_s * p.memory_efficiency));
  // f32 runs on the CUDA cores (no TF32): the fp32 peak.
  const double f = 2.0 * 4096 * 4096 * 4096;
  EXPECT_EQ(GemmSeconds(p, 1, 4096, 4096, 4096, DType::kF32),
            p.gemm_latency_s + f / (p.peak_flops_fp32 * p.gemm_efficiency_max));
  EXPECT_EQ(GemmSeconds(p, 0, 4096, 4096, 4096, DType::kBF16), 0);
  EXPECT_EQ(GemmSeconds(p, 3, 4096, 0, 4096, DType::kBF16), 0);
}

TEST(Gemm, WithTheKernelsOwnTrafficTheScoresStayOnChip) {
  const HardwareProfile p = MustLoad("h100_dgx");
  // Flash attention's QK^T for one head at T = 8192, D = 128: the same
  // products as a GEMM, but only q, k (and out, lse) cross HBM - 4 MiB here,
  // not the 128 MiB of scores: compute-bound, exactly the curve's time.
  const double f = 2.0 * 8192 * 8192 * 128;
  const double traffic = 2.0 * 2 * 8192 * 128;
  EXPECT_EQ(GemmSeconds(p, 1, 8192, 8192, 128, DType::kBF16, traffic),
            p.gemm_latency_s + f / (p.peak_flops_bf16 * p.gemm_efficiency_max));
  EXPECT_LT(GemmSeconds(p, 1, 8192, 8192, 128, DType::kBF16, traffic), GemmSeconds(p, 1, 8192, 8192, 128, DType::kBF16));
  // With traffic above the compute time the bytes decide.
  const double big = 1e12;
  EXPECT_EQ(GemmSeconds(p, 1, 64, 64, 64, DType::kBF16, big), big / (p.hbm_bytes_per_s * p.memory_efficiency));
}

TEST(MemoryBound, ClosedForm) {
  const HardwareProfile p = MustLoad("h100_dgx");
  // Bytes-bound: 1 GB at 3.35 TB/s x 0.88.
  EXPECT_EQ(MemoryBoundSeconds(p, 1e9, 1e6), 1e9 / (3.35e12 * 0.88));
  // FLOP-bound (a transcendental-heavy op): 1 TFLOP on the fp32 CUDA cores.
  EXPECT_EQ(MemoryBoundSeconds(p, 1e3, 1e12), 1e12 / p.peak_flops_fp32);
  EXPECT_EQ(MemoryBoundSeconds(p, 0, 0), 0);
}

// Note [Per-op memory efficiency]: the op entries' names map to their kinds.
TEST(MemoryBound, OpKindsAreTheOpEntriesNames) {
  EXPECT_EQ(OpKindOf("AttentionForward"), OpKind::kAttentionForward);
  EXPECT_EQ(OpKindOf("AttentionBackward"), OpKind::kAttentionBackward);
  EXPECT_EQ(OpKindOf("CrossEntropyForward"), OpKind::kCrossEntropyForward);
  EXPECT_EQ(OpKindOf("CrossEntropyBackward"), OpKind::kCrossEntropyBackward);
  EXPECT_EQ(OpKindOf("LayerNormForward"), OpKind::kLayerNormForward);
  EXPECT_EQ(OpKindOf("LayerNormBackward"), OpKind::kLayerNormBackward);
  EXPECT_EQ(OpKindOf("Gelu"), OpKind::kGeluForward);
  EXPECT_EQ(OpKindOf("GeluBackward"), OpKind::kGeluBackward);
  EXPECT_EQ(OpKindOf("Softmax"), OpKind::kSoftmaxForward);
  EXPECT_EQ(OpKindOf("LogSoftmax"), OpKind::kSoftmaxForward);
  EXPECT_EQ(OpKindOf("SoftmaxBackward"), OpKind::kSoftmaxBackward);
  EXPECT_EQ(OpKindOf("LogSoftmaxBackward"), OpKind::kSoftmaxBackward);
  for (const char* other : {"MatMul", "Add", "RmsNormForward", "Copy", "AdamWStep", "", "gelu", "LayerNorm"}) {
    EXPECT_EQ(OpKindOf(other), OpKind::kOther) << other;
  }
}

// A row op's time is bytes / (hbm_bytes_per_s * its own efficiency), exactly
// (the same two operations as the formula); the FLOP term still bounds it.
TEST(MemoryBound, ARowOpStreamsAtItsOwnEfficiency) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const double bytes = 1648459776;  // cross-entropy backward at [8192, 50304] bf16
  const std::pair<OpKind, double> kinds[] = {
      {OpKind::kCrossEntropyForward, 0.260}, {OpKind::kCrossEntropyBackward, 0.454},
      {OpKind::kLayerNormForward, 0.726},    {OpKind::kLayerNormBackward, 0.342},
      {OpKind::kGeluForward, 0.464},         {OpKind::kGeluBackward, 0.464},
      {OpKind::kSoftmaxForward, 0.322},
  };
  for (const auto& [kind, eff] : kinds) {
    EXPECT_EQ(MemoryEfficiency(p, kind), eff);
    EXPECT_EQ(MemoryBoundSeconds(p, bytes, 0, kind), bytes / (3.35e12 * eff));
    EXPECT_EQ(MemoryBoundSeconds(p, 1e3, 1e12, kind), 1e12 / p.peak_flops_fp32);  // FLOP-bound
    EXPECT_EQ(MemoryBoundSeconds(p, 0, 0, kind), 0);
  }
  // Unset (the softmax backward) and every other op: the copy-class figure.
  for (OpKind kind : {OpKind::kSoftmaxBackward, OpKind::kOther, OpKind::kAttentionForward}) {
    EXPECT_EQ(MemoryEfficiency(p, kind), p.memory_efficiency);
    EXPECT_EQ(MemoryBoundSeconds(p, bytes, 0, kind), bytes / (3.35e12 * 0.88));
  }
}

// Defaults are the old model: on a profile without the keys every kind costs
// what MemoryBoundSeconds(p, bytes, flops) always did, to the bit.
TEST(MemoryBound, WithoutTheKeysEveryKindIsTheCopyRate) {
  for (const std::string& name : ProfileNames()) {
    SCOPED_TRACE(name);
    HardwareProfile p = MustLoad(name);
    ClearOpEfficiencies(p);
    for (int k = 0; k <= static_cast<int>(OpKind::kSoftmaxBackward); ++k) {
      const OpKind kind = static_cast<OpKind>(k);
      EXPECT_EQ(MemoryEfficiency(p, kind), p.memory_efficiency);
      for (const auto& [bytes, flops] : {std::pair{1e9, 1e6}, std::pair{37818880.0, 62914560.0}, std::pair{1e3, 1e12}}) {
        EXPECT_EQ(MemoryBoundSeconds(p, bytes, flops, kind),
                  std::max(bytes / (p.hbm_bytes_per_s * p.memory_efficiency), flops / p.peak_flops_fp32));
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Fused attention (Note [Attention efficiency])
// ---------------------------------------------------------------------------

// At a point an attention pass of F FLOPs costs exactly gemm_latency_s + F /
// (peak * the point's figure) (the same operations in the same order as the
// formula); the traffic term is the roofline's other side. The shipped H100
// points: D 64 without seq_len (every T), D 128 at T 2048 and T 4096.
TEST(Attention, AtAPointItCostsItsFlopsAtThePointsEfficiency) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const double f = 12884901888;  // GPT-2's forward: 2 products x 2 x (8 x 12) x 512 x 1024 x 64
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int64_t t : {int64_t{1}, int64_t{1024}, int64_t{3000}, int64_t{1} << 20}) {  // D 64 is flat in T
      EXPECT_EQ(AttentionSeconds(p, f, 64, t, false, dtype, 0), p.gemm_latency_s + f / (989e12 * 0.210)) << t;
      EXPECT_EQ(AttentionSeconds(p, 2.5 * f, 64, t, true, dtype, 0), p.gemm_latency_s + 2.5 * f / (989e12 * 0.210))
          << t;
    }
    EXPECT_EQ(AttentionSeconds(p, f, 128, 2048, false, dtype, 0), p.gemm_latency_s + f / (989e12 * 0.445));
    EXPECT_EQ(AttentionSeconds(p, f, 128, 2048, true, dtype, 0), p.gemm_latency_s + f / (989e12 * 0.326));
    EXPECT_EQ(AttentionSeconds(p, f, 128, 4096, false, dtype, 0), p.gemm_latency_s + f / (989e12 * 0.571));
    EXPECT_EQ(AttentionSeconds(p, f, 128, 4096, true, dtype, 0), p.gemm_latency_s + f / (989e12 * 0.447));
  }
  // f32: the same fraction of the fp32 peak.
  EXPECT_EQ(AttentionSeconds(p, f, 64, 1024, false, DType::kF32, 0),
            p.gemm_latency_s + f / (p.peak_flops_fp32 * 0.210));
  // Traffic above the compute time decides; none at all is free.
  const double big = 1e12;
  EXPECT_EQ(AttentionSeconds(p, f, 64, 1024, false, DType::kBF16, big), big / (3.35e12 * 0.88));
  EXPECT_EQ(AttentionSeconds(p, 0, 64, 1024, false, DType::kBF16, 1e6), 0);
  // Below the GEMM curve: the same products as a GEMM took less.
  EXPECT_GT(AttentionSeconds(p, f, 64, 1024, false, DType::kBF16, 0), p.gemm_latency_s + f / (989e12 * 0.76));
}

// Within one head_dim linear in log2 T between two points, flat outside them;
// across head_dims linear in D between the two neighbouring groups (each at
// T), flat outside them. Figures of eighths, T powers of two and head_dims 32
// apart make every weight, product and sum below exact in binary, so these
// are EXPECT_EQ: the arithmetic is written by hand in each comment.
TEST(Attention, WithinAHeadDimItIsLinearInLog2SeqLenAndAcrossLinearInHeadDim) {
  HardwareProfile p = MustLoad("h100_dgx");
  p.attention_efficiency = {
      {.head_dim = 64, .seq_len = 1024, .forward = 0.125, .backward = 0.0625},
      {.head_dim = 64, .seq_len = 4096, .forward = 0.375, .backward = 0.3125},
      {.head_dim = 128, .seq_len = 1024, .forward = 0.25, .backward = 0.125},
      {.head_dim = 128, .seq_len = 2048, .forward = 0.5, .backward = 0.25},
      {.head_dim = 128, .seq_len = 8192, .forward = 0.75, .backward = 0.75},
      {.head_dim = 192, .forward = 0.875, .backward = 0.5}};  // no seq_len: every T
  // At points: their figures.
  EXPECT_EQ(AttentionEfficiency(p, 64, 1024, false), 0.125);
  EXPECT_EQ(AttentionEfficiency(p, 64, 4096, true), 0.3125);
  EXPECT_EQ(AttentionEfficiency(p, 128, 2048, false), 0.5);
  EXPECT_EQ(AttentionEfficiency(p, 192, 7, true), 0.5);
  // D 64 at T 2048: w = (11 - 10) / (12 - 10) = 1/2; forward 0.125 + (0.375 - 0.125) / 2 = 0.25,
  // backward 0.0625 + (0.3125 - 0.0625) / 2 = 0.1875.
  EXPECT_EQ(AttentionEfficiency(p, 64, 2048, false), 0.25);
  EXPECT_EQ(AttentionEfficiency(p, 64, 2048, true), 0.1875);
  // D 128 at T 4096, between 2048 and 8192: w = (12 - 11) / (13 - 11) = 1/2; forward
  // 0.5 + (0.75 - 0.5) / 2 = 0.625, backward 0.25 + (0.75 - 0.25) / 2 = 0.5.
  EXPECT_EQ(AttentionEfficiency(p, 128, 4096, false), 0.625);
  EXPECT_EQ(AttentionEfficiency(p, 128, 4096, true), 0.5);
  // D 128 at T 1448 (2^10.5 is 1448.15): not a power of two, so log2 rounds: w =
  // log2(1448 / 1024) = 0.49978..., the forward 0.25 + 0.25 w. Against the closed form
  // written with log2 of the quotient (1448 / 1024 = 1.4140625 exactly): the model's w is
  // log2(1448) - 10, off by at most an ulp of log2(1448) ~ 10.5 (2^-49; the subtraction is
  // exact), the closed form's by an ulp of 0.5 (2^-53); times 0.25 in the figure, plus two
  // roundings of sums below 0.5 (2^-55 each): all within 2^-49.
  const double log_tol = std::ldexp(1.0, -49);
  EXPECT_NEAR(AttentionEfficiency(p, 128, 1448, false), 0.25 + 0.25 * std::log2(1448.0 / 1024.0), log_tol);
  EXPECT_LT(AttentionEfficiency(p, 128, 1448, false), 0.375);  // just below the half-way 2^10.5
  // Flat outside a head_dim's points: below the shortest its figure, above the longest its figure.
  EXPECT_EQ(AttentionEfficiency(p, 64, 1, false), 0.125);
  EXPECT_EQ(AttentionEfficiency(p, 64, 512, true), 0.0625);
  EXPECT_EQ(AttentionEfficiency(p, 64, int64_t{1} << 40, false), 0.375);
  EXPECT_EQ(AttentionEfficiency(p, 128, 16384, true), 0.75);
  // Across head_dims at T 2048: D 96 is half-way from D 64 (0.25) to D 128 (0.5):
  // 0.25 + (32 / 64) (0.5 - 0.25) = 0.375; backward 0.1875 + (0.25 - 0.1875) / 2 = 0.21875.
  EXPECT_EQ(AttentionEfficiency(p, 96, 2048, false), 0.375);
  EXPECT_EQ(AttentionEfficiency(p, 96, 2048, true), 0.21875);
  // D 80 a quarter of the way: 0.25 + (16 / 64) (0.5 - 0.25) = 0.3125.
  EXPECT_EQ(AttentionEfficiency(p, 80, 2048, false), 0.3125);
  // D 96 at T 8192: D 64 flat above 4096 (0.375), D 128 at its point (0.75): 0.375 + (0.75 - 0.375) / 2 = 0.5625.
  EXPECT_EQ(AttentionEfficiency(p, 96, 8192, false), 0.5625);
  // D 160, between D 128 (with seq_len) and D 192 (without): at T 4096 D 128 gives 0.625
  // (above), D 192 0.875: 0.625 + (32 / 64) (0.875 - 0.625) = 0.75.
  EXPECT_EQ(AttentionEfficiency(p, 160, 4096, false), 0.75);
  // Below the first head_dim, D 64's figure at T; above the last, D 192's at every T.
  EXPECT_EQ(AttentionEfficiency(p, 32, 2048, false), 0.25);
  EXPECT_EQ(AttentionEfficiency(p, 1, 1, true), 0.0625);
  EXPECT_EQ(AttentionEfficiency(p, 512, 2048, false), 0.875);
  EXPECT_EQ(AttentionEfficiency(p, 512, 1, true), 0.5);
  // And the time: the pass's FLOPs at that fraction, exactly as the formula writes it.
  const double f = 1e12;
  EXPECT_EQ(AttentionSeconds(p, f, 96, 2048, false, DType::kBF16, 0), p.gemm_latency_s + f / (989e12 * 0.375));
  // Monotone in T between two rising points, and in D between two rising groups.
  for (int64_t t = 1024; t < 4096; ++t) {
    EXPECT_LE(AttentionEfficiency(p, 64, t, false), AttentionEfficiency(p, 64, t + 1, false)) << t;
  }
  for (int64_t d = 64; d < 128; ++d) {
    EXPECT_LE(AttentionEfficiency(p, d, 3000, true), AttentionEfficiency(p, d + 1, 3000, true)) << d;
  }
}

// The shipped H100 points: D 64 flat in T; D 128 from 0.445 / 0.326 at T 2048 to
// 0.571 / 0.447 at T 4096, linear in log2 T between, flat outside.
TEST(Attention, TheH100PointsAreFlatAtD64AndRiseWithTAtD128) {
  const HardwareProfile p = MustLoad("h100_dgx");
  for (int64_t t : {int64_t{1}, int64_t{1024}, int64_t{2048}, int64_t{3000}, int64_t{1} << 30}) {
    EXPECT_EQ(AttentionEfficiency(p, 64, t, false), 0.210) << t;
    EXPECT_EQ(AttentionEfficiency(p, 64, t, true), 0.210) << t;
    EXPECT_EQ(AttentionEfficiency(p, 32, t, true), 0.210) << t;  // below the first head_dim
  }
  EXPECT_EQ(AttentionEfficiency(p, 128, 2048, false), 0.445);
  EXPECT_EQ(AttentionEfficiency(p, 128, 2048, true), 0.326);
  EXPECT_EQ(AttentionEfficiency(p, 128, 4096, false), 0.571);
  EXPECT_EQ(AttentionEfficiency(p, 128, 4096, true), 0.447);
  EXPECT_EQ(AttentionEfficiency(p, 128, 1024, false), 0.445);  // below T 2048: its figure
  EXPECT_EQ(AttentionEfficiency(p, 128, 512, true), 0.326);
  EXPECT_EQ(AttentionEfficiency(p, 128, 8192, false), 0.571);  // above T 4096: its figure
  EXPECT_EQ(AttentionEfficiency(p, 256, 8192, true), 0.447);   // and above the last head_dim
  EXPECT_EQ(AttentionEfficiency(p, 256, 2048, true), 0.326);
  // T 3000: w = log2(3000) - 11 = 0.550747 (log2 3000 = 11.550746785...), forward
  // 0.445 + 0.126 w = 0.514394, backward 0.326 + 0.121 w = 0.392640. The expectation is
  // the formula with w written as log2(3000 / 2048) (the quotient exact): the model's
  // log2(3000) ~ 11.55 is within an ulp (2^-49) and the subtraction of 11 exact, the
  // closed form's within an ulp of 0.55 (2^-53); times 0.126 or less, plus the roundings
  // of a difference, a product and a sum below 1 (2^-53 each): within 2^-49.
  const double w = std::log2(3000.0 / 2048.0);
  const double log_tol = std::ldexp(1.0, -49);
  EXPECT_NEAR(AttentionEfficiency(p, 128, 3000, false), 0.445 + w * (0.571 - 0.445), log_tol);
  EXPECT_NEAR(AttentionEfficiency(p, 128, 3000, true), 0.326 + w * (0.447 - 0.326), log_tol);
  // The figures above, written to 6 places: within half a unit of the 6th.
  EXPECT_NEAR(AttentionEfficiency(p, 128, 3000, false), 0.514394, 5e-7);
  EXPECT_NEAR(AttentionEfficiency(p, 128, 3000, true), 0.392640, 5e-7);
  // Across head_dim at T 2048 and T 4096: D 96 half-way from D 64 (0.210, every T).
  // DOUBLE_EQ: the weight, product and sum round where the expectation is written in another order.
  EXPECT_DOUBLE_EQ(AttentionEfficiency(p, 96, 2048, false), (0.210 + 0.445) / 2);
  EXPECT_DOUBLE_EQ(AttentionEfficiency(p, 96, 2048, true), (0.210 + 0.326) / 2);
  EXPECT_DOUBLE_EQ(AttentionEfficiency(p, 96, 4096, false), (0.210 + 0.571) / 2);
  EXPECT_DOUBLE_EQ(AttentionEfficiency(p, 80, 4096, false), 0.210 + (0.571 - 0.210) / 4);
  // Monotone in T at D 128, and in D at T 2048.
  for (int64_t t = 2000; t < 4200; ++t) {
    EXPECT_LE(AttentionEfficiency(p, 128, t, false), AttentionEfficiency(p, 128, t + 1, false)) << t;
    EXPECT_LE(AttentionEfficiency(p, 128, t, true), AttentionEfficiency(p, 128, t + 1, true)) << t;
  }
  for (int64_t d = 64; d < 128; ++d) {
    EXPECT_LE(AttentionEfficiency(p, d, 2048, false), AttentionEfficiency(p, d + 1, 2048, false)) << d;
  }
}

// A profile whose points carry no seq_len (every profile before seq_len
// existed) costs the same bits as before: eff_attn is the curve in D alone,
// whatever T. OldEfficiency is the implementation that came before seq_len,
// verbatim; the profile is h100_dgx as it was shipped then (D 64 0.210 /
// 0.210, D 128 0.571 / 0.447) and the round-trip test's three points.
double OldEfficiency(const HardwareProfile& p, int64_t head_dim, bool backward) {
  const std::vector<AttentionPoint>& points = p.attention_efficiency;
  if (points.empty()) return p.gemm_efficiency_max;
  auto of = [backward](const AttentionPoint& a) { return backward ? a.backward : a.forward; };
  auto hi = std::lower_bound(points.begin(), points.end(), head_dim,
                             [](const AttentionPoint& a, int64_t d) { return a.head_dim < d; });
  if (hi == points.end()) return of(points.back());
  if (hi->head_dim == head_dim || hi == points.begin()) return of(*hi);
  const AttentionPoint& lo = *(hi - 1);
  const double w = static_cast<double>(head_dim - lo.head_dim) / static_cast<double>(hi->head_dim - lo.head_dim);
  return of(lo) + w * (of(*hi) - of(lo));
}

TEST(Attention, PointsWithoutSeqLenCostTheOldBitsAtEveryLength) {
  HardwareProfile old_h100 = MustLoad("h100_dgx");
  old_h100.attention_efficiency = {{.head_dim = 64, .forward = 0.210, .backward = 0.210},
                                   {.head_dim = 128, .forward = 0.571, .backward = 0.447}};
  HardwareProfile three = old_h100;
  three.attention_efficiency = {{.head_dim = 32, .forward = 0.1 / 3, .backward = std::nextafter(0.5, 1.0)},
                                {.head_dim = 96, .forward = 0.6, .backward = 0.45},
                                {.head_dim = 256, .forward = 1.0, .backward = 2.0 / 3.0}};
  for (const HardwareProfile* p : {&old_h100, &three}) {
    for (int64_t d = 1; d <= 300; ++d) {
      for (int64_t t : {int64_t{1}, int64_t{1000}, int64_t{2048}, int64_t{3000}, int64_t{4096}, int64_t{1} << 40}) {
        for (bool backward : {false, true}) {
          const double old = OldEfficiency(*p, d, backward);
          ASSERT_EQ(AttentionEfficiency(*p, d, t, backward), old) << d << " " << t << " " << backward;
          const double f = GemmFlops(5 * 2 * 32, 2048, 4096, d);
          ASSERT_EQ(AttentionSeconds(*p, f, d, t, backward, DType::kBF16, 1e6),
                    std::max(p->gemm_latency_s + f / (989e12 * old), 1e6 / (3.35e12 * 0.88)))
              << d << " " << t << " " << backward;
        }
      }
    }
  }
  // The file as it was: the shipped text with the old two points loads to old_h100's points.
  Json j = Json::parse(ShippedText("h100_dgx"));
  j["compute"]["attention_efficiency"] = Json::parse(R"([{"head_dim": 64, "forward": 0.210, "backward": 0.210},
                                                         {"head_dim": 128, "forward": 0.571, "backward": 0.447}])");
  absl::StatusOr<HardwareProfile> parsed = ParseProfile(j.dump(), "old.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->attention_efficiency, old_h100.attention_efficiency);
}

// Defaults are the old model: without points, attention is exactly GemmSeconds
// of its products with its traffic (what every attention op cost before the
// key), for every profile, dtype and shape, to the bit.
TEST(Attention, WithoutPointsItIsTheGemmCurveExactly) {
  for (const std::string& name : ProfileNames()) {
    SCOPED_TRACE(name);
    HardwareProfile p = MustLoad(name);
    ClearOpEfficiencies(p);
    for (DType dtype : kFloatDTypes) {
      // ChargeAttention's shapes: (products x B x H, causal rows, T, D), q/k/v/out/lse traffic.
      for (const std::array<int64_t, 4>& s : {std::array<int64_t, 4>{2 * 8 * 12, 512, 1024, 64},
                                              std::array<int64_t, 4>{5 * 2 * 32, 4096, 8192, 128},
                                              std::array<int64_t, 4>{2 * 1 * 4, 32, 64, 16},
                                              std::array<int64_t, 4>{5 * 3, 1, 1, 256}}) {
        for (double bytes : {0.0, 5e7, 1e12}) {
          for (bool backward : {false, true}) {
            EXPECT_EQ(AttentionSeconds(p, GemmFlops(s[0], s[1], s[2], s[3]), s[3], s[2], backward, dtype, bytes),
                      GemmSeconds(p, s[0], s[1], s[2], s[3], dtype, bytes))
                << s[0] << " " << s[1] << " " << s[2] << " " << s[3] << " " << bytes;
          }
        }
      }
      EXPECT_EQ(AttentionEfficiency(p, 64, 1024, true), p.gemm_efficiency_max);
    }
  }
}

// The fitted H100 figures give back the record rows they were fit to (Note
// [Attention efficiency], Note [Per-op memory efficiency]; times from
// docs/gpu_records/2026-11-27_h100_b/record.json, bytes as the op entries
// charge them). The only difference is the figures' rounding to three digits:
// a figure e stands for one within 0.0005 of it, so the time's proportional
// part (all of a row op's, attention's less its fixed 3 us) is within
// 0.0005 / e of the measured one, relatively.
TEST(Attention, TheH100FiguresGiveBackTheRecordRowsTheyAreFitTo) {
  const HardwareProfile p = MustLoad("h100_dgx");
  auto within_rounding = [](double predicted, double measured, double fixed, double eff) {
    return std::abs(predicted - measured) <= (measured - fixed) * 0.0005 / eff * (1 + 1e-9);
  };
  const double lat = p.gemm_latency_s;
  // D 64, the GPT-2 step (B 8, H 12, T 1024): forward the bench row, backward the
  // rest of the step's 223.46 us a layer.
  const double f64 = 2.0 * (2 * 8 * 12) * 512 * 1024 * 64;
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, f64, 64, 1024, false, DType::kBF16, 0), 65.0304e-6, lat, 0.210));
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, 2.5 * f64, 64, 1024, true, DType::kBF16, 0),
                              223.4587e-6 - 65.0304e-6, lat, 0.210));
  // D 128, T 2048 (B 4, H 16) and T 4096 (B 2, H 32): forward as measured, backward less
  // the 103.50 us allocation (223.4587 us the step's layer against 65.0304 + 261.9296 us).
  const double f2048 = 2.0 * (2 * 4 * 16) * 1024 * 2048 * 128;
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, f2048, 128, 2048, false, DType::kBF16, 0), 159.0368e-6, lat, 0.445));
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, 2.5 * f2048, 128, 2048, true, DType::kBF16, 0),
                              639.3888e-6 - 103.5013e-6, lat, 0.326));
  const double f128 = 2.0 * (2 * 2 * 32) * 2048 * 4096 * 128;
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, f128, 128, 4096, false, DType::kBF16, 0), 489.4560e-6, lat, 0.571));
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, 2.5 * f128, 128, 4096, true, DType::kBF16, 0),
                              1662.1697e-6 - 103.5013e-6, lat, 0.447));
  // Row ops: bytes as charged at [8192, 50304] and [8192, 768] (x 3072 for GELU).
  struct Row {
    OpKind kind;
    double bytes, measured_s, eff;
  };
  const Row rows[] = {
      {OpKind::kCrossEntropyForward, 824279040, 946.2368e-6, 0.260},
      {OpKind::kCrossEntropyBackward, 1648459776, 2030.464e-6 - 946.2368e-6, 0.454},
      {OpKind::kLayerNormForward, 25234432, 10.37952e-6, 0.726},
      {OpKind::kLayerNormBackward, 37818880, 32.97088e-6, 0.342},
      {OpKind::kSoftmaxForward, 1648361472, 1525.7728e-6, 0.322},
  };
  for (const Row& r : rows) {
    EXPECT_TRUE(within_rounding(MemoryBoundSeconds(p, r.bytes, 0, r.kind), r.measured_s, 0, r.eff))
        << static_cast<int>(r.kind) << ": " << MemoryBoundSeconds(p, r.bytes, 0, r.kind) << " s against "
        << r.measured_s;
  }
  // GELU: the step's 12 forward + 12 backward together.
  const double gelu = 12 * (MemoryBoundSeconds(p, 100663296, 0, OpKind::kGeluForward) +
                            MemoryBoundSeconds(p, 150994944, 0, OpKind::kGeluBackward));
  EXPECT_TRUE(within_rounding(gelu, 1941.248e-6, 0, 0.464)) << gelu;
}

// ---------------------------------------------------------------------------
// Collectives (Note [Collective model])
// ---------------------------------------------------------------------------

TEST(Collective, TwoRanksInANodeAllGather) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const int64_t s = 256 * kMiB;
  const double bw = p.intra_node_bytes_per_s * p.collective_efficiency;
  const CollectiveCost c = EstimateCollective(p, CollectiveKind::kAllGather, s, {.size = 2, .ranks_per_node = 8});
  EXPECT_EQ(c.latency_s, p.collective_base_s + p.intra_node_alpha_s);
  EXPECT_DOUBLE_EQ(c.bandwidth_s, s / 2.0 / bw);
  EXPECT_DOUBLE_EQ(c.seconds, p.collective_base_s + p.intra_node_alpha_s + s / 2.0 / bw);
  EXPECT_EQ(c.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.bus_bytes_per_s, bw);
  EXPECT_EQ(CollectiveSeconds(p, CollectiveKind::kReduceScatter, s, {2, 2}), c.seconds);
}

TEST(Collective, RingAllReduceAndBroadcastInANode) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const int64_t s = 1024 * kMiB;
  const double bw = p.intra_node_bytes_per_s * p.collective_efficiency;
  const CollectiveCost ar = EstimateCollective(p, CollectiveKind::kAllReduce, s, {8, 8});
  EXPECT_EQ(ar.algorithm, CollectiveAlgorithm::kRing);  // in one node the tree is a chain: never faster
  EXPECT_DOUBLE_EQ(ar.seconds, p.collective_base_s + 14 * p.intra_node_alpha_s + 2.0 * 7 / 8 * s / bw);
  const CollectiveCost bc = EstimateCollective(p, CollectiveKind::kBroadcast, s, {8, 8});
  EXPECT_DOUBLE_EQ(bc.seconds, p.collective_base_s + 7 * p.intra_node_alpha_s + s / bw);
  const CollectiveCost barrier = EstimateCollective(p, CollectiveKind::kBarrier, s, {8, 8});
  EXPECT_EQ(barrier.bandwidth_s, 0);
  EXPECT_DOUBLE_EQ(barrier.seconds, p.collective_base_s + 14 * p.intra_node_alpha_s);
}

TEST(Collective, AcrossNodesTheNicsAreTheBottleneck) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const int64_t s = 1024 * kMiB;
  // 64 ranks, 8 per node: all 8 rails, 400 GB/s x 0.9 = 360 GB/s < NVLink's 450 x 0.81.
  const CollectiveCost full = EstimateCollective(p, CollectiveKind::kAllGather, s, {64, 8});
  EXPECT_EQ(full.nodes, 8);
  EXPECT_DOUBLE_EQ(full.bus_bytes_per_s, 360e9);
  EXPECT_DOUBLE_EQ(full.seconds, p.collective_base_s + 56 * p.intra_node_alpha_s + 7 * p.inter_node_alpha_s +
                                     63.0 / 64 * s / 360e9);
  // A HYBRID_SHARD replica group: one rank per node, one rail of 50 GB/s x 0.9.
  const CollectiveCost replica = EstimateCollective(p, CollectiveKind::kAllReduce, s, {8, 1});
  EXPECT_DOUBLE_EQ(replica.bus_bytes_per_s, 45e9);
  EXPECT_EQ(replica.algorithm, CollectiveAlgorithm::kRing);  // 2 * 7/8 S beats the tree's 2 S at 1 GiB
  EXPECT_DOUBLE_EQ(replica.seconds, p.collective_base_s + 14 * p.inter_node_alpha_s + 2.0 * 7 / 8 * s / 45e9);
}

TEST(Collective, TheTreeWinsSmallAllReducesOnManyNodes) {
  const HardwareProfile p = MustLoad("h100_dgx");
  // 1024 ranks on 128 nodes, 1 KiB: ring 2 * (896 a_intra + 127 a_inter), tree 2 * (7 a_intra + 7 a_inter).
  const CollectiveCost c = EstimateCollective(p, CollectiveKind::kAllReduce, 1024, {1024, 8});
  EXPECT_EQ(c.algorithm, CollectiveAlgorithm::kTree);
  EXPECT_DOUBLE_EQ(c.latency_s, p.collective_base_s + 2 * (7 * p.intra_node_alpha_s + 7 * p.inter_node_alpha_s));
  EXPECT_DOUBLE_EQ(c.bandwidth_s, 2.0 * 1024 / c.bus_bytes_per_s);
  // At 1 GiB on 2 nodes the ring's bandwidth term wins.
  EXPECT_EQ(EstimateCollective(p, CollectiveKind::kAllReduce, 1024 * kMiB, {16, 8}).algorithm,
            CollectiveAlgorithm::kRing);
}

// Note [Collective model]: an alpha per message, the node-local and off-node
// parts of the (n-1)/n S a rank sends on their own links, the slower one counting.
TEST(Collective, AllToAllIsAPairwiseExchange) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const int64_t s = 1024 * kMiB;
  const double intra_bw = p.intra_node_bytes_per_s * p.collective_efficiency;  // 450 x 0.81 GB/s
  // In one node: 7 messages, and all-gather's bandwidth term (7/8 S over NVLink).
  const CollectiveCost node = EstimateCollective(p, CollectiveKind::kAllToAll, s, {8, 8});
  EXPECT_EQ(node.algorithm, CollectiveAlgorithm::kDirect);
  EXPECT_EQ(CollectiveAlgorithmName(node.algorithm), "direct");
  EXPECT_DOUBLE_EQ(node.latency_s, p.collective_base_s + 7 * p.intra_node_alpha_s);
  EXPECT_DOUBLE_EQ(node.bandwidth_s, EstimateCollective(p, CollectiveKind::kAllGather, s, {8, 8}).bandwidth_s);
  EXPECT_DOUBLE_EQ(node.bus_bytes_per_s, intra_bw);
  // 64 ranks, 8 per node: 7 messages on NVLink, 56 over the network, each rank
  // on its own 50 GB/s rail x 0.9 = 45 GB/s. 56/64 S / 45 GB/s is slower than
  // 7/64 S / 364.5 GB/s, so it is the time; B_a2a = 63 / (56 / 45e9).
  const CollectiveCost wide = EstimateCollective(p, CollectiveKind::kAllToAll, s, {64, 8});
  EXPECT_EQ(wide.nodes, 8);
  EXPECT_DOUBLE_EQ(wide.latency_s,
                   p.collective_base_s + 7 * p.intra_node_alpha_s + 56 * p.inter_node_alpha_s);
  EXPECT_DOUBLE_EQ(wide.bandwidth_s, 56.0 / 64 * s / 45e9);
  EXPECT_DOUBLE_EQ(wide.bus_bytes_per_s, 63 * 45e9 / 56);
  // The ring all-gather of the same buffer has the node's 8 rails (360 GB/s), a rank's all-to-all its one.
  EXPECT_LT(EstimateCollective(p, CollectiveKind::kAllGather, s, {64, 8}).seconds, wide.seconds);
  // One rank per node (HYBRID_SHARD's replica groups): every message crosses the network.
  const CollectiveCost replica = EstimateCollective(p, CollectiveKind::kAllToAll, s, {8, 1});
  EXPECT_DOUBLE_EQ(replica.seconds, p.collective_base_s + 7 * p.inter_node_alpha_s + 7.0 / 8 * s / 45e9);
  EXPECT_EQ(CollectiveKindName(CollectiveKind::kAllToAll), "all_to_all");
}

TEST(Collective, AGroupOfOneCostsNothing) {
  const HardwareProfile p = MustLoad("h100_dgx");
  for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter, CollectiveKind::kAllReduce,
                              CollectiveKind::kBroadcast, CollectiveKind::kBarrier, CollectiveKind::kAllToAll}) {
    EXPECT_EQ(CollectiveSeconds(p, kind, 1024 * kMiB, {1, 8}), 0) << CollectiveKindName(kind);
    EXPECT_EQ(CollectiveBytesSent(kind, 1024 * kMiB, 1), 0) << CollectiveKindName(kind);
  }
}

TEST(Collective, InterNodeIsSlowerThanIntraNodeForTheSameGroupSize) {
  for (const std::string& name : ProfileNames()) {
    const HardwareProfile p = MustLoad(name);
    for (int64_t s : {int64_t{1024}, 16 * kMiB, 1024 * kMiB}) {
      for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                  CollectiveKind::kAllReduce, CollectiveKind::kBroadcast,
                                  CollectiveKind::kAllToAll}) {
        const double intra = CollectiveSeconds(p, kind, s, {8, 8});
        const double inter = CollectiveSeconds(p, kind, s, {8, 1});
        const double half = CollectiveSeconds(p, kind, s, {8, 4});
        EXPECT_LT(intra, inter) << name << " " << CollectiveKindName(kind) << " " << s;
        EXPECT_LE(half, inter) << name << " " << CollectiveKindName(kind) << " " << s;
      }
    }
  }
}

TEST(Collective, BytesSentAreTheRingVolumesExactly) {
  // (n-1)/n and 2(n-1)/n of a power of two by 4 and 8: exact in binary.
  EXPECT_EQ(CollectiveBytesSent(CollectiveKind::kAllGather, 1 * kMiB, 4), 786432.0);
  EXPECT_EQ(CollectiveBytesSent(CollectiveKind::kReduceScatter, 1 * kMiB, 4), 786432.0);
  EXPECT_EQ(CollectiveBytesSent(CollectiveKind::kAllReduce, 1 * kMiB, 4), 1572864.0);
  EXPECT_EQ(CollectiveBytesSent(CollectiveKind::kBroadcast, 1 * kMiB, 8), 917504.0);
  EXPECT_EQ(CollectiveBytesSent(CollectiveKind::kBarrier, 1 * kMiB, 8), 0);
  EXPECT_EQ(CollectiveBytesSent(CollectiveKind::kAllToAll, 1 * kMiB, 4), 786432.0);  // 3 of 4 blocks leave
  // 3 ranks, 3 MiB: 2 MiB all-gathered, 4 MiB all-reduced per rank.
  EXPECT_EQ(CollectiveBytesSent(CollectiveKind::kAllGather, 3 * kMiB, 3), 2.0 * kMiB);
  EXPECT_EQ(CollectiveBytesSent(CollectiveKind::kAllReduce, 3 * kMiB, 3), 4.0 * kMiB);
  // The bandwidth term is these bytes over the bus bandwidth.
  const HardwareProfile p = MustLoad("a100_80g");
  const CollectiveCost c = EstimateCollective(p, CollectiveKind::kAllGather, 3 * kMiB, {3, 8});
  EXPECT_DOUBLE_EQ(c.bandwidth_s, CollectiveBytesSent(CollectiveKind::kAllGather, 3 * kMiB, 3) / c.bus_bytes_per_s);
}

// ---------------------------------------------------------------------------
// Host
// ---------------------------------------------------------------------------

TEST(Host, CopyAndOptimizerClosedForms) {
  const HardwareProfile p = MustLoad("h100_dgx");
  EXPECT_EQ(HostCopySeconds(p, 50'000'000'000), 1.0);  // 50 GB over 50 GB/s
  EXPECT_EQ(HostCopySeconds(p, 0), 0);
  EXPECT_EQ(HostAdamSeconds(p, 3e10), 1.0);
}

// ---------------------------------------------------------------------------
// Allocator: PyTorch's CUDACachingAllocator, worked by hand
// ---------------------------------------------------------------------------

TEST(Allocator, RoundsAsPyTorchsCachingAllocator) {
  const HardwareProfile p = MustLoad("h100_dgx");
  EXPECT_EQ(RoundAllocation(p, 0), 0);
  EXPECT_EQ(RoundAllocation(p, 1), 512);
  EXPECT_EQ(RoundAllocation(p, 512), 512);
  EXPECT_EQ(RoundAllocation(p, 513), 1024);
  EXPECT_EQ(RoundAllocation(p, kMiB), kMiB);
  EXPECT_EQ(RoundAllocation(p, kMiB + 1), kMiB + 512);

  // The pool boundary: <= 1 MiB after rounding is small.
  EXPECT_TRUE(IsSmallPoolAllocation(p, 1));
  EXPECT_TRUE(IsSmallPoolAllocation(p, kMiB - 1));
  EXPECT_TRUE(IsSmallPoolAllocation(p, kMiB));
  EXPECT_FALSE(IsSmallPoolAllocation(p, kMiB + 1));

  // Segments: 2 MiB for the small pool, 20 MiB below 10 MiB, else rounded to 2 MiB.
  EXPECT_EQ(SegmentBytes(p, 1), 2 * kMiB);
  EXPECT_EQ(SegmentBytes(p, kMiB), 2 * kMiB);
  EXPECT_EQ(SegmentBytes(p, kMiB + 1), 20 * kMiB);
  EXPECT_EQ(SegmentBytes(p, 10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(SegmentBytes(p, 10 * kMiB - 1), 10 * kMiB);  // rounds to 10 MiB first: its own segment
  EXPECT_EQ(SegmentBytes(p, 23 * kMiB / 2), 12 * kMiB);  // 11.5 MiB

  // Splitting: the small pool keeps any rest >= 512 B; the large pool only a rest > 1 MiB.
  EXPECT_TRUE(ShouldSplitBlock(p, 2 * kMiB, kMiB));
  EXPECT_FALSE(ShouldSplitBlock(p, 2 * kMiB, 2 * kMiB - 256));
  EXPECT_TRUE(ShouldSplitBlock(p, 20 * kMiB, 5 * kMiB));
  EXPECT_FALSE(ShouldSplitBlock(p, 12 * kMiB, 23 * kMiB / 2));  // 0.5 MiB left: the request holds 12 MiB
  EXPECT_FALSE(ShouldSplitBlock(p, 12 * kMiB, 11 * kMiB));      // exactly 1 MiB left: not more than kSmallSize
  EXPECT_TRUE(ShouldSplitBlock(p, 12 * kMiB, 11 * kMiB - 512));
}

// A backing of host memory whose events are always complete: enough to run the
// runtime's CachingAllocator bookkeeping for one request at a time.
class HostBacking final : public CachingBacking {
 public:
  absl::StatusOr<void*> Malloc(size_t bytes) override { return std::malloc(bytes); }
  absl::Status Free(void* ptr) override {
    std::free(ptr);
    return absl::OkStatus();
  }
  absl::StatusOr<void*> CreateEvent() override { return this; }
  absl::Status DestroyEvent(void*) override { return absl::OkStatus(); }
  absl::Status RecordEvent(void*, void*) override { return absl::OkStatus(); }
  absl::StatusOr<bool> QueryEvent(void*) override { return true; }
  absl::Status SynchronizeEvent(void*) override { return absl::OkStatus(); }
};

// The profile's rules against the runtime's own CachingAllocator (whose defaults
// are PyTorch's): one request in a fresh cache reserves SegmentBytes and holds
// RoundAllocation, or the whole segment when ShouldSplitBlock says no.
TEST(Allocator, MatchesTheRuntimesCachingAllocator) {
  const HardwareProfile p = MustLoad("h100_dgx");
  for (int64_t bytes : {int64_t{1}, int64_t{512}, int64_t{513}, kMiB - 1, kMiB, kMiB + 1, 5 * kMiB,
                        10 * kMiB - 512, 10 * kMiB - 1, 10 * kMiB, 11 * kMiB, 23 * kMiB / 2, 100 * kMiB + 3}) {
    HostBacking backing;
    CachingAllocator cache(&backing, {.device = Device::Cpu()});
    absl::StatusOr<void*> ptr = cache.Allocate(static_cast<size_t>(bytes), /*stream=*/nullptr);
    ASSERT_TRUE(ptr.ok()) << ptr.status();
    const int64_t segment = SegmentBytes(p, bytes);
    const int64_t held = ShouldSplitBlock(p, segment, bytes) ? RoundAllocation(p, bytes) : segment;
    EXPECT_EQ(cache.stats().reserved_bytes, segment) << bytes;
    EXPECT_EQ(cache.stats().allocated_bytes, held) << bytes;
    ASSERT_TRUE(cache.Free(*ptr).ok());
  }
}

TEST(Allocator, TheCpuAllocatorCountsTheRequest) {
  const HardwareProfile p = MustLoad("cpu");
  EXPECT_EQ(RoundAllocation(p, 1), 1);
  EXPECT_EQ(RoundAllocation(p, 1000), 1000);
  EXPECT_EQ(SegmentBytes(p, 1000), 1000);
  EXPECT_FALSE(IsSmallPoolAllocation(p, 1000));
  EXPECT_FALSE(ShouldSplitBlock(p, 4096, 1000));
}

}  // namespace
}  // namespace zeroshard::sim
