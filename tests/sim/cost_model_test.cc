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
              AllOf(HasSubstr("compute.attention_efficiency = D 64: 0.21 forward, 0.21 backward; D 128: 0.571 "
                              "forward, 0.447 backward of peak by head_dim"),
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
  const std::vector<AttentionPoint> points = {{.head_dim = 64, .forward = 0.210, .backward = 0.210},
                                              {.head_dim = 128, .forward = 0.571, .backward = 0.447}};
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
  // Figures that are not short decimals, one optional kind set alone, three
  // attention points: written and read back to the same bits.
  HardwareProfile p = MustLoad("a100_80g");
  p.softmax_backward_efficiency = 1.0 / 3.0;
  p.attention_efficiency = {{.head_dim = 32, .forward = 0.1 / 3, .backward = std::nextafter(0.5, 1.0)},
                            {.head_dim = 96, .forward = 0.6, .backward = 0.45},
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
  const std::string array =
      "a non-empty array of {\"head_dim\": integer >= 1, \"forward\": number in (0, 1], \"backward\": "
      "number in (0, 1]} in increasing head_dim";
  absl::Status s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"] = 0.5; });
  EXPECT_EQ(s.message(), absl::StrCat("profile bad.json: key 'compute.attention_efficiency': expected ", array,
                                      ", found 0.5 (a number)"));
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"] = Json::array(); });
  EXPECT_EQ(s.message(), absl::StrCat("profile bad.json: key 'compute.attention_efficiency': expected ", array,
                                      ", found [] (an array)"));
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][1] = 128; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.attention_efficiency[1]': expected an object "
                         "{\"head_dim\", \"forward\", \"backward\"}, found 128 (a number)");
  s = ParseEdited([](Json& j) { j["compute"]["attention_efficiency"][1]["head_dim"] = 64; });
  EXPECT_EQ(s.message(), "profile bad.json: key 'compute.attention_efficiency[1].head_dim': expected an integer > 64 "
                         "(points in increasing head_dim), found 64 (a number)");
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
                         "forward, backward, found an unknown key");
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

// At a point's head dimension an attention pass of F FLOPs costs exactly
// gemm_latency_s + F / (peak * the point's figure) (the same operations in the
// same order as the formula); the traffic term is the roofline's other side.
TEST(Attention, AtAPointItCostsItsFlopsAtThePointsEfficiency) {
  const HardwareProfile p = MustLoad("h100_dgx");
  const double f = 12884901888;  // GPT-2's forward: 2 products x 2 x (8 x 12) x 512 x 1024 x 64
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    EXPECT_EQ(AttentionSeconds(p, f, 64, false, dtype, 0), p.gemm_latency_s + f / (989e12 * 0.210));
    EXPECT_EQ(AttentionSeconds(p, 2.5 * f, 64, true, dtype, 0), p.gemm_latency_s + 2.5 * f / (989e12 * 0.210));
    EXPECT_EQ(AttentionSeconds(p, f, 128, false, dtype, 0), p.gemm_latency_s + f / (989e12 * 0.571));
    EXPECT_EQ(AttentionSeconds(p, f, 128, true, dtype, 0), p.gemm_latency_s + f / (989e12 * 0.447));
  }
  // f32: the same fraction of the fp32 peak.
  EXPECT_EQ(AttentionSeconds(p, f, 64, false, DType::kF32, 0), p.gemm_latency_s + f / (p.peak_flops_fp32 * 0.210));
  // Traffic above the compute time decides; none at all is free.
  const double big = 1e12;
  EXPECT_EQ(AttentionSeconds(p, f, 64, false, DType::kBF16, big), big / (3.35e12 * 0.88));
  EXPECT_EQ(AttentionSeconds(p, 0, 64, false, DType::kBF16, 1e6), 0);
  // Below the GEMM curve: the same products as a GEMM took less.
  EXPECT_GT(AttentionSeconds(p, f, 64, false, DType::kBF16, 0), p.gemm_latency_s + f / (989e12 * 0.76));
}

// Between points linear in head_dim; beyond them flat (no extrapolation).
// EXPECT_DOUBLE_EQ: the interpolation's weight, product and sum round three
// times (each <= 0.5 ulp) where the expectation is written in another order.
TEST(Attention, BetweenPointsItIsLinearInTheHeadDimension) {
  const HardwareProfile p = MustLoad("h100_dgx");
  EXPECT_DOUBLE_EQ(AttentionEfficiency(p, 96, false), (0.210 + 0.571) / 2);
  EXPECT_DOUBLE_EQ(AttentionEfficiency(p, 96, true), (0.210 + 0.447) / 2);
  EXPECT_DOUBLE_EQ(AttentionEfficiency(p, 80, false), 0.210 + (0.571 - 0.210) / 4);
  EXPECT_EQ(AttentionEfficiency(p, 64, true), 0.210);
  EXPECT_EQ(AttentionEfficiency(p, 128, true), 0.447);
  EXPECT_EQ(AttentionEfficiency(p, 1, false), 0.210);   // below the first point: its figure
  EXPECT_EQ(AttentionEfficiency(p, 32, true), 0.210);
  EXPECT_EQ(AttentionEfficiency(p, 256, false), 0.571);  // above the last: its figure
  EXPECT_EQ(AttentionEfficiency(p, 256, true), 0.447);
  // Monotone between two rising points.
  for (int64_t d = 64; d < 128; ++d) {
    EXPECT_LE(AttentionEfficiency(p, d, false), AttentionEfficiency(p, d + 1, false)) << d;
  }
  // A profile of one point: that figure at every head dimension.
  HardwareProfile one = p;
  one.attention_efficiency = {{.head_dim = 128, .forward = 0.5, .backward = 0.4}};
  EXPECT_EQ(AttentionEfficiency(one, 16, false), 0.5);
  EXPECT_EQ(AttentionEfficiency(one, 512, true), 0.4);
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
            EXPECT_EQ(AttentionSeconds(p, GemmFlops(s[0], s[1], s[2], s[3]), s[3], backward, dtype, bytes),
                      GemmSeconds(p, s[0], s[1], s[2], s[3], dtype, bytes))
                << s[0] << " " << s[1] << " " << s[2] << " " << s[3] << " " << bytes;
          }
        }
      }
      EXPECT_EQ(AttentionEfficiency(p, 64, true), p.gemm_efficiency_max);
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
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, f64, 64, false, DType::kBF16, 0), 65.0304e-6, lat, 0.210));
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, 2.5 * f64, 64, true, DType::kBF16, 0), 223.4587e-6 - 65.0304e-6,
                              lat, 0.210));
  // D 128, T 4096 (B 2, H 32): forward as measured, backward less the 103.50 us allocation.
  const double f128 = 2.0 * (2 * 2 * 32) * 2048 * 4096 * 128;
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, f128, 128, false, DType::kBF16, 0), 489.4560e-6, lat, 0.571));
  EXPECT_TRUE(within_rounding(AttentionSeconds(p, 2.5 * f128, 128, true, DType::kBF16, 0), 1662.1697e-6 - 103.5013e-6,
                              lat, 0.447));
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
