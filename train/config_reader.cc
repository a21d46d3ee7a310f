#include "zeroshard/train/config_reader.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "zeroshard/train/config.h"

namespace zeroshard::config_internal {

absl::StatusOr<Json> ParseConfigJson(const std::string& text, const std::string& source) {
  // Keys seen in each open object; `path` names the open containers.
  std::vector<std::vector<std::string>> keys;
  std::vector<std::string> path;
  std::string pending;  // the key whose value comes next
  std::vector<std::string> duplicates;
  int deepest = 0;
  auto dotted = [&](const std::string& last) {
    std::vector<std::string> parts;
    for (const std::string& p : path) {
      if (!p.empty()) parts.push_back(p);
    }
    parts.push_back(last);
    return absl::StrJoin(parts, ".");
  };
  const Json::parser_callback_t check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    deepest = std::max(deepest, depth);
    if (depth > kMaxJsonDepth) return false;  // not kept: the error below names the depth
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        path.push_back(event == Json::parse_event_t::array_start ? pending + "[]" : pending);
        keys.emplace_back();
        pending.clear();
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!path.empty()) path.pop_back();
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key: {
        pending = parsed.is_string() ? parsed.get<std::string>() : parsed.dump();
        std::vector<std::string>& seen = keys.back();
        if (std::find(seen.begin(), seen.end(), pending) != seen.end()) {
          duplicates.push_back(dotted(pending));
        } else {
          seen.push_back(pending);
        }
        break;
      }
      case Json::parse_event_t::value:
        pending.clear();
        break;
    }
    return true;
  };
  Json root;
  try {
    root = Json::parse(text, check, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    if (size_t p = what.find("parse error"); p != std::string::npos) what = what.substr(p);
    return absl::InvalidArgumentError(absl::StrCat("config ", source, ": expected JSON, found a ", what));
  } catch (const Json::out_of_range& e) {
    // 1e400: nlohmann throws out_of_range.406, not a parse error.
    std::string what = e.what();
    if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return absl::InvalidArgumentError(
        absl::StrCat("config ", source, ": expected numbers within the range of a double, found ", what));
  }
  if (deepest > kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat("config ", source, ": expected JSON nested at most ",
                                                   kMaxJsonDepth, " levels deep, found ", deepest, " levels"));
  }
  if (!duplicates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config ", source, ": expected each key once in its object, found ", absl::StrJoin(duplicates, ", "),
        " more than once (JSON would keep only the last value)"));
  }
  return root;
}

size_t FirstInvalidUtf8(const std::string& text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = b[i];
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (b[i + 1] < lo || b[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (b[i + k] < 0x80 || b[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string::npos;
}

std::string Found(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case Json::value_t::string: return absl::StrCat("string ", v.dump());
    case Json::value_t::array: {
      std::string s = v.dump();
      return absl::StrCat("array ", s.size() > 60 ? s.substr(0, 57) + "..." : s);
    }
    case Json::value_t::object: return "an object";
    default: return absl::StrCat("number ", v.dump());
  }
}

std::string Quoted(const std::vector<std::string>& names) {
  std::vector<std::string> q;
  for (const std::string& n : names) q.push_back(absl::StrCat("\"", n, "\""));
  return absl::StrJoin(q, ", ");
}

std::string Closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const std::string& c : candidates) {
    const int d = EditDistance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  const int allowed = std::max<int>(2, static_cast<int>(word.size()) / 3);
  return best_d <= allowed ? best : "";
}

std::string JoinPath(const std::string& section, const std::string& key) {
  return section.empty() ? key : absl::StrCat(section, ".", key);
}

// ============================================================ Context

void Context::Add(const std::string& path, const std::string& what) {
  problems.push_back(absl::StrCat(path, ": ", what));
  failed.insert(path);
}

bool Context::Overridden(const std::string& path) const {
  for (const std::string& o : overridden) {
    if (o == path || absl::StartsWith(o, path + ".") || absl::StartsWith(path, o + ".")) return true;
  }
  return false;
}

bool Context::Ok(std::initializer_list<std::string> paths) const {
  for (const std::string& p : paths) {
    if (failed.count(p)) return false;
  }
  return true;
}

bool Context::Given(const std::string& path) const {
  if (root == nullptr) return false;
  const Json* node = root;
  for (const std::string& k : std::vector<std::string>(absl::StrSplit(path, '.'))) {
    if (!node->is_object() || !node->contains(k)) return false;
    node = &(*node)[k];
  }
  return true;
}

std::string Range::Describe(const char* what) const {
  const bool has_min = std::isfinite(min), has_max = std::isfinite(max);
  if (has_min && has_max) {
    return absl::StrCat(what, " in ", min_open ? "(" : "[", min, ", ", max, max_open ? ")" : "]");
  }
  if (has_min) return absl::StrCat(what, min_open ? " > " : " >= ", min);
  if (has_max) return absl::StrCat(what, max_open ? " < " : " <= ", max);
  return what;
}

std::string DescribeInt(int64_t min, int64_t max) {
  return max == kNoMax ? absl::StrCat("an integer >= ", min) : absl::StrCat("an integer in [", min, ", ", max, "]");
}

// ============================================================ Section

const Json* Section::Get(const std::string& key, bool leaf) {
  known_.push_back(key);
  if (leaf) ctx_->known_leaves.push_back(PathOf(key));
  if (obj_ == nullptr) return nullptr;
  auto it = obj_->find(key);
  return it == obj_->end() ? nullptr : &*it;
}

bool Section::Bool(const std::string& key, bool* out) {
  const Json* v = Get(key);
  if (v == nullptr) return false;
  if (!v->is_boolean()) {
    Add(key, absl::StrCat("expected true or false, found ", Found(*v)));
    return false;
  }
  *out = v->get<bool>();
  return true;
}

bool Section::Int(const std::string& key, int64_t* out, int64_t min, int64_t max) {
  const Json* v = Get(key);
  if (v == nullptr) return false;
  const std::string want = DescribeInt(min, max);
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Add(key, absl::StrCat("expected ", want, ", found ", Found(*v)));
      return false;
    }
    x = static_cast<int64_t>(v->get<uint64_t>());
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9.007199254740992e15) {
    x = static_cast<int64_t>(v->get<double>());  // 1e6
  } else {
    Add(key, absl::StrCat("expected ", want, ", found ", Found(*v)));
    return false;
  }
  if (x < min || x > max) {
    Add(key, absl::StrCat("expected ", want, ", found ", x));
    return false;
  }
  *out = x;
  return true;
}

bool Section::Number(const std::string& key, double* out, Range range) {
  const Json* v = Get(key);
  if (v == nullptr) return false;
  if (!v->is_number()) {
    Add(key, absl::StrCat("expected ", range.Describe("a number"), ", found ", Found(*v)));
    return false;
  }
  const double x = v->get<double>();
  if (!range.Contains(x)) {
    Add(key, absl::StrCat("expected ", range.Describe("a number"), ", found ", v->dump()));
    return false;
  }
  *out = x;
  return true;
}

bool Section::String(const std::string& key, std::string* out) {
  const Json* v = Get(key);
  if (v == nullptr) return false;
  if (!v->is_string()) {
    Add(key, absl::StrCat("expected a string, found ", Found(*v)));
    return false;
  }
  *out = v->get<std::string>();
  return true;
}

bool Section::Choice(const std::string& key, std::string* out, const std::vector<std::string>& choices) {
  const Json* v = Get(key);
  if (v == nullptr) return false;
  return ChoiceOf(key, *v, out, choices);
}

bool Section::ChoiceOf(const std::string& key, const Json& v, std::string* out,
                       const std::vector<std::string>& choices) {
  const std::string want = absl::StrCat("expected one of ", Quoted(choices));
  if (!v.is_string()) {
    Add(key, absl::StrCat(want, ", found ", Found(v)));
    return false;
  }
  const std::string s = v.get<std::string>();
  for (const std::string& c : choices) {
    if (absl::EqualsIgnoreCase(s, c)) {
      *out = c;
      return true;
    }
  }
  const std::string near = Closest(s, choices);
  Add(key, absl::StrCat(want, ", found ", Found(v), near.empty() ? "" : absl::StrCat(" (did you mean \"", near, "\"?)")));
  return false;
}

bool Section::FloatDType(const std::string& key, DType* out) {
  const Json* v = Get(key);
  if (v == nullptr) return false;
  absl::StatusOr<DType> d = v->is_string() ? ParseDType(v->get<std::string>())
                                           : absl::StatusOr<DType>(absl::InvalidArgumentError(""));
  if (!d.ok() || !IsFloatingPoint(*d)) {
    Add(key, absl::StrCat("expected a float dtype (\"f32\", \"bf16\" or \"f16\"; also \"float32\", "
                          "\"bfloat16\", \"float16\", \"fp32\", \"fp16\"), found ", Found(*v)));
    return false;
  }
  *out = *d;
  return true;
}

bool Section::Strings(const std::string& key, std::vector<std::string>* out) {
  const Json* v = Get(key);
  if (v == nullptr) return false;
  return StringsOf(key, *v, out);
}

bool Section::StringsOf(const std::string& key, const Json& v, std::vector<std::string>* out) {
  bool ok = v.is_array();
  if (ok) {
    for (const Json& e : v) ok = ok && e.is_string();
  }
  if (!ok) {
    Add(key, absl::StrCat("expected an array of strings, found ", Found(v)));
    return false;
  }
  out->clear();
  for (const Json& e : v) out->push_back(e.get<std::string>());
  return true;
}

Section Section::Child(const std::string& key) {
  const Json* v = Get(key, /*leaf=*/false);
  if (v != nullptr && !v->is_object()) {
    Add(key, absl::StrCat("expected an object, found ", Found(*v)));
    v = nullptr;
  }
  return Section(ctx_, PathOf(key), v);
}

void Section::Finish() {
  if (obj_ == nullptr) return;
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    if (std::find(known_.begin(), known_.end(), it.key()) == known_.end()) {
      ctx_->unknowns.push_back({path_, it.key(), known_});
    }
  }
}

// ============================================================ shared readers

void RejectKey(Section& s, const std::string& key, const std::string& model_type) {
  if (!s.Has(key)) return;
  const std::string other = model_type == "resnet" ? "gpt" : "resnet";
  const Json* v = s.Get(key, /*leaf=*/false);
  s.Add(key, absl::StrCat("a key of model.type \"", other, "\" only: expected it unset with model.type \"",
                          model_type, "\", found ", Found(*v)));
}

bool PathOrNull(Section& s, const std::string& key, std::string* out) {
  const Json* v = s.Get(key);
  if (v == nullptr || v->is_null()) return false;
  return s.String(key, out);
}

void ReadAio(Section a, AioOptions* aio) {
  if (a.Int("block_size", &aio->block_size, kDirectIoAlignment, int64_t{1} << 30) &&
      aio->block_size % kDirectIoAlignment != 0) {
    a.Add("block_size", absl::StrCat("expected a multiple of ", kDirectIoAlignment,
                                     " bytes (the O_DIRECT alignment), found ", aio->block_size));
  }
  a.Int("queue_depth", &aio->queue_depth, 1, 4096);
  a.Int("thread_count", &aio->thread_count, 1, 64);
  a.Bool("single_submit", &aio->single_submit);
  a.Bool("overlap_events", &aio->overlap_events);
  a.Finish();
}

ShardingStrategy StrategyOfZeroStage(int64_t stage) {
  switch (stage) {
    case 0: return ShardingStrategy::kNoShard;
    case 1: return ShardingStrategy::kShardOptimizer;
    case 2: return ShardingStrategy::kShardGradOp;
    default: return ShardingStrategy::kFullShard;
  }
}

}  // namespace zeroshard::config_internal
