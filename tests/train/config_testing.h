// What the config tests share: parsing a config that must be valid (or must
// fail), a field of a RunConfig by its member path, and tables of expected
// fields and expected problems.
//
//   const RunConfig c = MustParse(R"({"model": {"n_layer": 2}})", {"train.steps=5"});
//   ExpectFields(c, {{"train.model.n_layer", 2}, {"train.sharding.strategy", ShardingStrategy::kFullShard}});
//   ExpectProblems({{R"({"model": {"n_layer": 0}})", "model.n_layer: expected an integer >= 1, found 0"}});
#ifndef ZEROSHARD_TESTS_TRAIN_CONFIG_TESTING_H_
#define ZEROSHARD_TESTS_TRAIN_CONFIG_TESTING_H_

#include <cstdint>
#include <source_location>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "zeroshard/train/config.h"

namespace zeroshard::testing {

// `text` (source "test.json") with `overrides`; a failure is a test failure.
RunConfig MustParse(const std::string& text, const std::vector<std::string>& overrides = {});

// The message of a config that must fail.
std::string Problems(const std::string& text, const std::vector<std::string>& overrides = {});

// The test's temporary directory.
std::string TempDir();

std::string ReadFile(const std::string& path);

// Every leaf key path of a JSON object (arrays are leaves).
void Leaves(const nlohmann::ordered_json& j, const std::string& prefix, std::vector<std::string>* out);

// A value as the field tests compare it: integers in decimal, floating point
// as the shortest text that reads back to the same value (so comparing texts
// compares exactly), bools true/false, enums by their names (FULL_SHARD,
// BACKWARD_PRE, bf16, adamw, cosine, by_size, imagenet), sets and lists of
// names comma-separated, lists of integers [8,16].
std::string FieldText(bool v);
std::string FieldText(int v);
std::string FieldText(int64_t v);
std::string FieldText(uint64_t v);
std::string FieldText(double v);
std::string FieldText(float v);
std::string FieldText(const char* v);
std::string FieldText(const std::string& v);
std::string FieldText(const std::set<std::string>& v);
std::string FieldText(const std::vector<std::string>& v);
std::string FieldText(const std::vector<int64_t>& v);
std::string FieldText(ShardingStrategy v);
std::string FieldText(BackwardPrefetch v);
std::string FieldText(WrapPolicy::Kind v);
std::string FieldText(DType v);
std::string FieldText(optim::OptimizerKind v);
std::string FieldText(optim::LrScheduleKind v);
std::string FieldText(nn::ResNetStem v);

// A field of `c` by its member path ("train.model.n_layer",
// "resnet.sharding.strategy", "experiment_name"), as FieldText shows it. A
// path not in the test's table is a test failure.
std::string Field(const RunConfig& c, const std::string& path);

// A field's member path and the value it should hold.
struct FieldIs {
  template <typename T>
  FieldIs(std::string path, const T& value) : path(std::move(path)), text(FieldText(value)) {}
  std::string path;
  std::string text;
};

// Every field of `want` holds its value in `c`. Failures name `where` (the caller).
void ExpectFields(const RunConfig& c, const std::vector<FieldIs>& want,
                  std::source_location where = std::source_location::current());

// A config that must fail, and a part of its message.
struct ProblemCase {
  std::string text;
  std::string want;
  std::vector<std::string> overrides = {};
};

// Every case fails with a message holding its `want`.
void ExpectProblems(const std::vector<ProblemCase>& cases,
                    std::source_location where = std::source_location::current());

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_TRAIN_CONFIG_TESTING_H_
