#include "zeroshard/bench/bench_results.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/bench/robust_stats.h"

namespace zeroshard::bench {
namespace {

using Json = nlohmann::json;

absl::Status Malformed(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// j[key] when it is a string, else "" (the optional descriptive fields).
std::string OptionalString(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}

}  // namespace

absl::StatusOr<double> JsonNumber(const std::string& path, const std::string& where, const Json& j,
                                  const char* key) {
  if (!j.contains(key)) return Malformed(path, absl::StrCat(where, ": expected a number \"", key, "\", found none"));
  const Json& v = j.at(key);
  if (!v.is_number()) {
    return Malformed(path, absl::StrCat(where, ": expected \"", key, "\" to be a number, found ", v.dump()));
  }
  const double d = v.get<double>();
  if (!std::isfinite(d)) return Malformed(path, absl::StrCat(where, ": \"", key, "\" is not finite"));
  return d;
}

absl::StatusOr<Json> ParseJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Malformed(path, "not valid JSON");
  if (!j.is_object()) return Malformed(path, absl::StrCat("expected a JSON object, found ", j.type_name()));
  return j;
}

// {"schema": "zeroshard-bench/1", "machine": {...}, "build": {...}, "date": ...,
//  "results": [{name, value, unit, higher_is_better, baseline?, repeats?, spread?}]}.
absl::StatusOr<ResultFile> ReadResultJson(const std::string& path, const Json& j) {
  const std::string schema =
      !j.contains("schema") ? "" : j.at("schema").is_string() ? j.at("schema").get<std::string>() : j.at("schema").dump();
  if (schema != "zeroshard-bench/1") {
    return Malformed(path, absl::StrCat("expected \"schema\": \"zeroshard-bench/1\", found \"", schema, "\""));
  }
  if (!j.contains("results") || !j.at("results").is_array()) {
    return Malformed(path, "expected a \"results\" array");
  }
  ResultFile out;
  out.path = path;
  out.bench = OptionalString(j, "bench");
  if (j.contains("machine")) {
    const Json& m = j.at("machine");
    out.cpu = OptionalString(m, "cpu");
    out.hostname = OptionalString(m, "hostname");
    out.isa = OptionalString(m, "isa");
    if (m.is_object() && m.contains("cores") && m.at("cores").is_number_integer()) out.cores = m.at("cores").get<int>();
  }
  if (j.contains("build")) {
    out.compiler = OptionalString(j.at("build"), "compiler");
    out.mode = OptionalString(j.at("build"), "mode");
    out.commit = OptionalString(j.at("build"), "commit");
  }
  out.date = OptionalString(j, "date");
  std::set<std::string> seen;
  int index = 0;
  for (const Json& r : j.at("results")) {
    const std::string where = absl::StrCat("results[", index++, "]");
    if (!r.is_object()) return Malformed(path, absl::StrCat(where, ": expected an object, found ", r.dump()));
    ResultFigure f;
    if (!r.contains("name") || !r.at("name").is_string() || r.at("name").get<std::string>().empty()) {
      return Malformed(path, absl::StrCat(where, ": expected a non-empty string \"name\""));
    }
    f.name = r.at("name").get<std::string>();
    if (!seen.insert(f.name).second) return Malformed(path, absl::StrCat(where, ": name \"", f.name, "\" repeated"));
    const std::string what = absl::StrCat(where, " (", f.name, ")");
    if (!r.contains("unit") || !r.at("unit").is_string()) {
      return Malformed(path, absl::StrCat(what, ": expected a string \"unit\""));
    }
    f.unit = r.at("unit").get<std::string>();
    if (!r.contains("higher_is_better") || !r.at("higher_is_better").is_boolean()) {
      return Malformed(path, absl::StrCat(what, ": expected a boolean \"higher_is_better\""));
    }
    f.higher_is_better = r.at("higher_is_better").get<bool>();
    absl::StatusOr<double> value = JsonNumber(path, what, r, "value");
    if (!value.ok()) return value.status();
    std::vector<double> repeats;
    if (r.contains("repeats")) {
      if (!r.at("repeats").is_array()) return Malformed(path, absl::StrCat(where, ": \"repeats\" is not an array"));
      for (const Json& x : r.at("repeats")) {
        if (!x.is_number() || !std::isfinite(x.get<double>())) {
          return Malformed(path, absl::StrCat(what, ": expected numbers in \"repeats\", found ", x.dump()));
        }
        repeats.push_back(x.get<double>());
      }
    }
    if (!repeats.empty()) {
      f.median = Median(repeats);
      f.spread = RelativeMad(repeats);
      f.repeats = static_cast<int>(repeats.size());
    } else {
      f.median = *value;
      f.repeats = 1;
      if (r.contains("spread")) {
        absl::StatusOr<double> s = JsonNumber(path, where, r, "spread");
        if (!s.ok()) return s.status();
        f.spread = *s;
      }
    }
    if (r.contains("baseline")) {
      const Json& b = r.at("baseline");
      if (!b.is_object() || !b.contains("name") || !b.at("name").is_string()) {
        return Malformed(path, absl::StrCat(what, ": expected \"baseline\" to be {\"name\", \"value\", \"unit\"}, "
                                                  "found ", b.dump()));
      }
      f.baseline = b.at("name").get<std::string>();
      absl::StatusOr<double> bv = JsonNumber(path, absl::StrCat(what, " baseline"), b, "value");
      if (!bv.ok()) return bv.status();
      f.baseline_value = *bv;
      f.baseline_unit = OptionalString(b, "unit");
    }
    out.figures.push_back(std::move(f));
  }
  return out;
}

absl::StatusOr<ResultFile> ReadResultFile(const std::string& path) {
  absl::StatusOr<Json> j = ParseJsonFile(path);
  if (!j.ok()) return j.status();
  return ReadResultJson(path, *j);
}

}  // namespace zeroshard::bench
