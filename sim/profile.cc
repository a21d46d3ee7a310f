#include "zeroshard/sim/profile.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "zeroshard/runtime/status.h"

namespace zeroshard::sim {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// The figures, each declared once: its group and key in the file, its unit, the
// member it fills and the values it may take. ParseProfile, ToString and the
// "every figure has a source" test all read this table.
// ---------------------------------------------------------------------------

enum class Range {
  kPositive,         // number > 0
  kNonNegative,      // number >= 0
  kFraction,         // number in (0, 1]
  kAtLeastOne,       // integer >= 1
  kAtLeastZero,      // integer >= 0
  kBool,             // true or false
  kAttentionPoints,  // a non-empty array of {head_dim, seq_len?, forward, backward}: head_dim, then seq_len increasing
};

// An optional<double> or attention-points member is an optional key: absent
// from the file, it stays unset (empty), which is the old model's behaviour
// (Note [Attention efficiency], Note [Per-op memory efficiency] in cost_model.h).
using Member = std::variant<double HardwareProfile::*, int64_t HardwareProfile::*, int HardwareProfile::*,
                            bool HardwareProfile::*, std::optional<double> HardwareProfile::*,
                            std::vector<AttentionPoint> HardwareProfile::*>;

struct Field {
  const char* group;
  const char* key;
  const char* unit;
  Range range;
  Member member;
};

using P = HardwareProfile;
const Field kFields[] = {
    {"compute", "peak_flops_bf16", "FLOP/s", Range::kPositive, &P::peak_flops_bf16},
    {"compute", "peak_flops_fp16", "FLOP/s", Range::kPositive, &P::peak_flops_fp16},
    {"compute", "peak_flops_tf32", "FLOP/s", Range::kPositive, &P::peak_flops_tf32},
    {"compute", "peak_flops_fp32", "FLOP/s", Range::kPositive, &P::peak_flops_fp32},
    {"compute", "gemm_efficiency_max", "of peak", Range::kFraction, &P::gemm_efficiency_max},
    {"compute", "gemm_latency_s", "s", Range::kNonNegative, &P::gemm_latency_s},
    {"compute", "launch_overhead_s", "s", Range::kNonNegative, &P::launch_overhead_s},
    {"compute", "synchronous", "", Range::kBool, &P::synchronous},
    {"compute", "attention_efficiency", "of peak by head_dim and seq_len", Range::kAttentionPoints,
     &P::attention_efficiency},
    {"memory", "hbm_bytes_per_s", "B/s", Range::kPositive, &P::hbm_bytes_per_s},
    {"memory", "memory_efficiency", "of hbm_bytes_per_s", Range::kFraction, &P::memory_efficiency},
    {"memory", "memory_bytes", "B", Range::kAtLeastOne, &P::memory_bytes},
    {"memory", "cross_entropy_forward_efficiency", "of hbm_bytes_per_s", Range::kFraction,
     &P::cross_entropy_forward_efficiency},
    {"memory", "cross_entropy_backward_efficiency", "of hbm_bytes_per_s", Range::kFraction,
     &P::cross_entropy_backward_efficiency},
    {"memory", "layernorm_forward_efficiency", "of hbm_bytes_per_s", Range::kFraction, &P::layernorm_forward_efficiency},
    {"memory", "layernorm_backward_efficiency", "of hbm_bytes_per_s", Range::kFraction,
     &P::layernorm_backward_efficiency},
    {"memory", "gelu_forward_efficiency", "of hbm_bytes_per_s", Range::kFraction, &P::gelu_forward_efficiency},
    {"memory", "gelu_backward_efficiency", "of hbm_bytes_per_s", Range::kFraction, &P::gelu_backward_efficiency},
    {"memory", "softmax_forward_efficiency", "of hbm_bytes_per_s", Range::kFraction, &P::softmax_forward_efficiency},
    {"memory", "softmax_backward_efficiency", "of hbm_bytes_per_s", Range::kFraction, &P::softmax_backward_efficiency},
    {"allocator", "caching", "", Range::kBool, &P::alloc_caching},
    {"allocator", "round_bytes", "B", Range::kAtLeastOne, &P::alloc_round_bytes},
    {"allocator", "small_request_bytes", "B", Range::kAtLeastZero, &P::alloc_small_request_bytes},
    {"allocator", "small_segment_bytes", "B", Range::kAtLeastZero, &P::alloc_small_segment_bytes},
    {"allocator", "large_segment_bytes", "B", Range::kAtLeastZero, &P::alloc_large_segment_bytes},
    {"allocator", "min_large_bytes", "B", Range::kAtLeastZero, &P::alloc_min_large_bytes},
    {"allocator", "large_round_bytes", "B", Range::kAtLeastZero, &P::alloc_large_round_bytes},
    {"network", "gpus_per_node", "", Range::kAtLeastOne, &P::gpus_per_node},
    {"network", "intra_node_bytes_per_s", "B/s per GPU per direction", Range::kPositive, &P::intra_node_bytes_per_s},
    {"network", "intra_node_alpha_s", "s per step", Range::kNonNegative, &P::intra_node_alpha_s},
    {"network", "inter_node_bytes_per_s", "B/s per node per direction", Range::kPositive, &P::inter_node_bytes_per_s},
    {"network", "inter_node_alpha_s", "s per step", Range::kNonNegative, &P::inter_node_alpha_s},
    {"network", "collective_base_s", "s per call", Range::kNonNegative, &P::collective_base_s},
    {"network", "collective_efficiency", "of intra_node_bytes_per_s", Range::kFraction, &P::collective_efficiency},
    {"network", "inter_node_efficiency", "of inter_node_bytes_per_s", Range::kFraction, &P::inter_node_efficiency},
    {"host", "host_link_bytes_per_s", "B/s per GPU", Range::kPositive, &P::host_link_bytes_per_s},
    {"host", "host_adam_bytes_per_s", "B/s per GPU", Range::kPositive, &P::host_adam_bytes_per_s},
    {"host", "nvme_read_bytes_per_s", "B/s per GPU", Range::kPositive, &P::nvme_read_bytes_per_s},
    {"host", "nvme_write_bytes_per_s", "B/s per GPU", Range::kPositive, &P::nvme_write_bytes_per_s},
    {"host", "nvme_latency_s", "s per transfer", Range::kNonNegative, &P::nvme_latency_s},
};

const char* const kGroups[] = {"compute", "memory", "allocator", "network", "host"};

// The allocator figures that must be >= 1 when caching is on (the pool sizes).
const char* const kCachingKeys[] = {"small_request_bytes", "small_segment_bytes", "large_segment_bytes",
                                    "min_large_bytes", "large_round_bytes"};

const char* Expected(Range r) {
  switch (r) {
    case Range::kPositive: return "a number > 0";
    case Range::kNonNegative: return "a number >= 0";
    case Range::kFraction: return "a number in (0, 1]";
    case Range::kAtLeastOne: return "an integer >= 1";
    case Range::kAtLeastZero: return "an integer >= 0";
    case Range::kBool: return "true or false";
    case Range::kAttentionPoints:
      return "a non-empty array of {\"head_dim\": integer >= 1, optional \"seq_len\": integer >= 1, "
             "\"forward\": number in (0, 1], \"backward\": number in (0, 1]} in increasing head_dim, "
             "then seq_len";
  }
  return "?";
}

bool IsOptional(const Field& f) {
  return std::holds_alternative<std::optional<double> HardwareProfile::*>(f.member) ||
         std::holds_alternative<std::vector<AttentionPoint> HardwareProfile::*>(f.member);
}

// Whether `p` holds the figure: always for a required key; for an optional
// one, when it is set.
bool Holds(const Field& f, const HardwareProfile& p) {
  if (auto* m = std::get_if<std::optional<double> HardwareProfile::*>(&f.member)) return (p.**m).has_value();
  if (auto* m = std::get_if<std::vector<AttentionPoint> HardwareProfile::*>(&f.member)) return !(p.**m).empty();
  return true;
}

// `"fast" (a string)`, `-3 (a number)`, `null`: what a key held, for errors.
std::string Found(const Json& v) {
  if (v.is_null()) return "null";
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  const std::string type = v.type_name();
  const char* article = (type == "object" || type == "array") ? "an " : "a ";
  return absl::StrCat(text, " (", article, type, ")");
}

// Debian's Abseil has its own string_view, which StrCat takes; ours are std::string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status KeyError(std::string_view source, std::string_view path, std::string_view expected,
                      std::string_view found) {
  return absl::InvalidArgumentError(
      absl::StrCat("profile ", Sv(source), ": key '", Sv(path), "': expected ", Sv(expected), ", found ", Sv(found)));
}

// A JSON number that is a whole int64; 2e6 is accepted (nlohmann reads
// exponents as floats) when it is whole.
std::optional<int64_t> AsInteger(const Json& v) {
  if (!v.is_number()) return std::nullopt;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  const double d = v.get<double>();
  if (!(std::abs(d) < 9.2e18) || d != std::floor(d)) return std::nullopt;
  return static_cast<int64_t>(d);
}

bool IsFraction(const Json& v) {
  if (!v.is_number()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && d > 0 && d <= 1;
}

// compute.attention_efficiency: each point an object of head_dim (an integer
// >= 1), optionally seq_len (an integer >= 1), forward and backward
// (fractions), and nothing else. The points are grouped by head_dim, in
// increasing head_dim, and within one head_dim in increasing seq_len; a point
// without seq_len holds at every sequence length, so it is its head_dim's only
// point. So no two points are alike (Note [Attention efficiency] in
// cost_model.h). Errors name the point's key: "compute.attention_efficiency[1].head_dim",
// "compute.attention_efficiency[2].seq_len".
absl::Status SetAttentionPoints(const Field& f, const Json& v, std::string_view source,
                                std::vector<AttentionPoint>& out) {
  const std::string path = absl::StrCat(f.group, ".", f.key);
  if (!v.is_array() || v.empty()) return KeyError(source, path, Expected(f.range), Found(v));
  std::vector<AttentionPoint> points;
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    const std::string at = absl::StrCat(path, "[", i, "]");
    if (!e.is_object()) {
      return KeyError(source, at, "an object {\"head_dim\", \"seq_len\" (optional), \"forward\", \"backward\"}",
                      Found(e));
    }
    for (auto it = e.begin(); it != e.end(); ++it) {
      if (it.key() != "head_dim" && it.key() != "seq_len" && it.key() != "forward" && it.key() != "backward") {
        return KeyError(source, absl::StrCat(at, ".", it.key()), "one of head_dim, seq_len, forward, backward",
                        "an unknown key");
      }
    }
    AttentionPoint point;
    const AttentionPoint* prev = points.empty() ? nullptr : &points.back();
    // head_dim: above the previous point's, or equal to it when both carry a seq_len.
    std::string want_dim = "an integer >= 1";
    if (prev != nullptr) {
      want_dim = absl::StrCat("an integer ", prev->seq_len.has_value() ? ">= " : "> ", prev->head_dim,
                              " (points in increasing head_dim)");
    }
    auto dim = e.find("head_dim");
    if (dim == e.end()) return KeyError(source, at + ".head_dim", want_dim, "no such key");
    const std::optional<int64_t> d = AsInteger(*dim);
    if (!d.has_value() || *d < 1) return KeyError(source, at + ".head_dim", want_dim, Found(*dim));
    if (prev != nullptr && *d < prev->head_dim) return KeyError(source, at + ".head_dim", want_dim, Found(*dim));
    if (prev != nullptr && *d == prev->head_dim && !prev->seq_len.has_value()) {
      return KeyError(source, at + ".head_dim",
                      absl::StrCat("an integer > ", prev->head_dim, " (points in increasing head_dim; point [", i - 1,
                                   "] has no seq_len, so it is head_dim ", prev->head_dim, "'s only point)"),
                      Found(*dim));
    }
    point.head_dim = *d;
    // seq_len: optional for a head_dim's first point; then required, above the previous one's.
    const bool same_head_dim = prev != nullptr && *d == prev->head_dim;  // prev has a seq_len (checked above)
    const std::string seq_path = at + ".seq_len";
    auto seq = e.find("seq_len");
    if (same_head_dim) {
      const int64_t after = *prev->seq_len;
      const std::string want_seq =
          absl::StrCat("an integer > ", after, " (points of head_dim ", *d, " in increasing seq_len)");
      if (seq == e.end()) return KeyError(source, seq_path, want_seq, "no such key");
      const std::optional<int64_t> t = AsInteger(*seq);
      if (t.has_value() && *t == after) {
        return KeyError(source, seq_path, want_seq,
                        absl::StrCat(Found(*seq), ", a second point at head_dim ", *d, ", seq_len ", after,
                                     " (point [", i - 1, "] is the first)"));
      }
      if (!t.has_value() || *t < after) return KeyError(source, seq_path, want_seq, Found(*seq));
      point.seq_len = *t;
    } else if (seq != e.end()) {
      const std::optional<int64_t> t = AsInteger(*seq);
      if (!t.has_value() || *t < 1) return KeyError(source, seq_path, "an integer >= 1", Found(*seq));
      point.seq_len = *t;
    }
    for (auto [key, member] : {std::pair{"forward", &AttentionPoint::forward},
                               std::pair{"backward", &AttentionPoint::backward}}) {
      auto it = e.find(key);
      const std::string key_path = absl::StrCat(at, ".", key);
      if (it == e.end()) return KeyError(source, key_path, Expected(Range::kFraction), "no such key");
      if (!IsFraction(*it)) return KeyError(source, key_path, Expected(Range::kFraction), Found(*it));
      point.*member = it->get<double>();
    }
    points.push_back(point);
  }
  out = std::move(points);
  return absl::OkStatus();
}

// Stores `v` into the member of `f`, or says why it cannot.
absl::Status SetField(const Field& f, const Json& v, std::string_view source, HardwareProfile& p) {
  const std::string path = absl::StrCat(f.group, ".", f.key);
  auto bad = [&] { return KeyError(source, path, Expected(f.range), Found(v)); };
  if (f.range == Range::kAttentionPoints) {
    return SetAttentionPoints(f, v, source, p.*std::get<std::vector<AttentionPoint> HardwareProfile::*>(f.member));
  }
  if (f.range == Range::kBool) {
    if (!v.is_boolean()) return bad();
    p.*std::get<bool HardwareProfile::*>(f.member) = v.get<bool>();
    return absl::OkStatus();
  }
  if (!v.is_number()) return bad();
  if (f.range == Range::kAtLeastOne || f.range == Range::kAtLeastZero) {
    const std::optional<int64_t> whole = AsInteger(v);
    if (!whole.has_value()) return bad();
    const int64_t i = *whole;
    if (i < (f.range == Range::kAtLeastOne ? 1 : 0)) return bad();
    if (auto* m = std::get_if<int64_t HardwareProfile::*>(&f.member)) {
      p.**m = i;
    } else {
      if (i > std::numeric_limits<int>::max()) return bad();
      p.*std::get<int HardwareProfile::*>(f.member) = static_cast<int>(i);
    }
    return absl::OkStatus();
  }
  const double d = v.get<double>();
  const bool ok = std::isfinite(d) && (f.range == Range::kPositive      ? d > 0
                                       : f.range == Range::kNonNegative ? d >= 0
                                                                        : d > 0 && d <= 1);
  if (!ok) return bad();
  if (auto* m = std::get_if<std::optional<double> HardwareProfile::*>(&f.member)) {
    p.**m = d;
  } else {
    p.*std::get<double HardwareProfile::*>(f.member) = d;
  }
  return absl::OkStatus();
}

std::string FieldValue(const Field& f, const HardwareProfile& p) {
  return std::visit(
      [&](auto member) -> std::string {
        using T = std::remove_cvref_t<decltype(p.*member)>;
        if constexpr (std::is_same_v<T, bool>) {
          return (p.*member) ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return absl::StrFormat("%.4g", p.*member);
        } else if constexpr (std::is_same_v<T, std::optional<double>>) {
          return (p.*member).has_value() ? absl::StrFormat("%.4g", *(p.*member)) : std::string("unset");
        } else if constexpr (std::is_same_v<T, std::vector<AttentionPoint>>) {
          // "D 64: 0.21 forward, 0.21 backward; D 128 T 2048: ..."
          std::vector<std::string> parts;
          for (const AttentionPoint& a : p.*member) {
            const std::string at = a.seq_len.has_value() ? absl::StrFormat("D %d T %d", a.head_dim, *a.seq_len)
                                                         : absl::StrFormat("D %d", a.head_dim);
            parts.push_back(absl::StrFormat("%s: %.4g forward, %.4g backward", at, a.forward, a.backward));
          }
          return absl::StrJoin(parts, "; ");
        } else {
          return absl::StrCat(p.*member);
        }
      },
      f.member);
}

// ---------------------------------------------------------------------------
// Finding the shipped files.
// ---------------------------------------------------------------------------

// Note [Finding sim/profiles]
// The shipped profiles are data of //sim:profile (BUILD `data`), so every
// binary and test that links it has them in its runfiles as
// "zeroshard/sim/profiles/<name>.json". ProfileDirectory() takes the first of
// these that is a directory:
//   1. $ZEROSHARD_SIM_PROFILES, when set (and then only it: a user who names a
//      directory means it, and a wrong one is an error, not a silent fallback);
//   2. $RUNFILES_DIR/zeroshard/sim/profiles (`bazel run`, launcher scripts);
//   3. $TEST_SRCDIR/zeroshard/sim/profiles (`bazel test`);
//   4. <the binary, symlinks resolved>.runfiles/zeroshard/sim/profiles: a
//      `bazel-bin/sim/zs_simulate` run by hand from any directory (Linux
//      /proc/self/exe);
//   5. $BUILD_WORKSPACE_DIRECTORY/sim/profiles (`bazel run` sets it);
//   6. sim/profiles under the current directory (a binary copied out of
//      bazel-bin and run from the workspace root).
// The runfiles tree is used directly (Linux builds it by default); a
// manifest-only runfiles setup (--noenable_runfiles, Windows) is not read.
constexpr char kRunfilesSubdir[] = "zeroshard/sim/profiles";

std::string ExecutablePath() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return exe.string();
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("profile ", path, ": cannot open it (", std::strerror(errno), ")"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("profile ", path, ": read failed"));
  return text.str();
}

bool LooksLikePath(std::string_view s) {
  return s.find('/') != std::string_view::npos ||
         (s.size() >= 5 && s.substr(s.size() - 5) == ".json");
}

}  // namespace

std::string HardwareProfile::ToString() const {
  std::string out = absl::StrCat("profile ", name, ": ", description, "\n");
  for (const Field& f : kFields) {
    if (!Holds(f, *this)) continue;  // an optional key the profile does not set
    absl::StrAppend(&out, "  ", f.group, ".", f.key, " = ", FieldValue(f, *this),
                    f.unit[0] != '\0' ? " " : "", f.unit, "\n");
  }
  return out;
}

absl::StatusOr<HardwareProfile> ParseProfile(std::string_view json_text, std::string_view source_view) {
  const std::string source_name(source_view);
  Json root;
  try {
    root = Json::parse(json_text.begin(), json_text.end(), /*cb=*/nullptr, /*allow_exceptions=*/true,
                       /*ignore_comments=*/true);
  } catch (const Json::exception& e) {
    std::string what = e.what();
    if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    return absl::InvalidArgumentError(absl::StrCat("profile ", source_name, ": expected JSON, found ", what));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile ", source_name, ": expected a JSON object, found ", Found(root)));
  }

  HardwareProfile p;
  // Top level: the two strings, the five groups, "sources"; nothing else.
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& key = it.key();
    const bool known = key == "name" || key == "description" || key == "sources" ||
                       std::find(std::begin(kGroups), std::end(kGroups), key) != std::end(kGroups);
    if (!known) {
      return KeyError(source_name, key, "one of name, description, compute, memory, allocator, network, host, sources",
                      "an unknown key");
    }
  }
  for (const char* key : {"name", "description"}) {
    auto it = root.find(key);
    if (it == root.end()) return KeyError(source_name, key, "a non-empty string", "no such key");
    if (!it->is_string() || it->get<std::string>().empty()) {
      return KeyError(source_name, key, "a non-empty string", Found(*it));
    }
  }
  p.name = root["name"].get<std::string>();
  p.description = root["description"].get<std::string>();

  for (const char* group : kGroups) {
    auto g = root.find(group);
    if (g == root.end()) return KeyError(source_name, group, "an object", "no such key");
    if (!g->is_object()) return KeyError(source_name, group, "an object", Found(*g));
    for (auto it = g->begin(); it != g->end(); ++it) {
      const bool known = std::any_of(std::begin(kFields), std::end(kFields), [&](const Field& f) {
        return f.group == std::string_view(group) && f.key == it.key();
      });
      if (!known) {
        std::vector<std::string> keys;
        for (const Field& f : kFields) {
          if (f.group == std::string_view(group)) keys.push_back(f.key);
        }
        return KeyError(source_name, absl::StrCat(group, ".", it.key()),
                        absl::StrCat("one of ", absl::StrJoin(keys, ", ")), "an unknown key");
      }
    }
  }
  for (const Field& f : kFields) {
    const Json& g = root[f.group];
    auto it = g.find(f.key);
    if (it == g.end()) {
      if (IsOptional(f)) continue;  // unset: the old model (Note [Per-op memory efficiency])
      return KeyError(source_name, absl::StrCat(f.group, ".", f.key), Expected(f.range), "no such key");
    }
    ZS_RETURN_IF_ERROR(SetField(f, *it, source_name, p));
  }
  if (p.alloc_caching && p.alloc_large_segment_bytes >= 1 &&
      p.alloc_min_large_bytes != p.alloc_large_segment_bytes / 2) {
    // The runtime's CachingAllocator (which the simulator runs) gives a request
    // a segment of its own from large_segment_bytes / 2 on; the field records it.
    return KeyError(source_name, "allocator.min_large_bytes",
                    absl::StrCat("large_segment_bytes / 2 = ", p.alloc_large_segment_bytes / 2,
                                 " (the runtime CachingAllocator's rule)"),
                    Found(root["allocator"]["min_large_bytes"]));
  }
  if (p.alloc_caching) {
    for (const char* key : kCachingKeys) {
      const Field& f = *std::find_if(std::begin(kFields), std::end(kFields), [&](const Field& f) {
        return f.group == std::string_view("allocator") && f.key == std::string_view(key);
      });
      if (p.*std::get<int64_t HardwareProfile::*>(f.member) < 1) {
        return KeyError(source_name, absl::StrCat("allocator.", key),
                        "an integer >= 1 when allocator.caching is true", Found(root["allocator"][key]));
      }
    }
  }

  if (auto s = root.find("sources"); s != root.end()) {
    if (!s->is_object()) return KeyError(source_name, "sources", "an object of strings", Found(*s));
    for (auto it = s->begin(); it != s->end(); ++it) {
      const bool known = std::any_of(std::begin(kFields), std::end(kFields), [&](const Field& f) {
        return absl::StrCat(f.group, ".", f.key) == it.key();
      });
      const std::string path = absl::StrCat("sources.", it.key());
      if (!known) return KeyError(source_name, path, "the \"group.key\" of a figure", "an unknown key");
      if (!it->is_string()) return KeyError(source_name, path, "a string", Found(*it));
      p.sources[it.key()] = it->get<std::string>();
    }
  }
  return p;
}

std::vector<std::string> ProfileFigureKeys() {
  std::vector<std::string> keys;
  for (const Field& f : kFields) keys.push_back(absl::StrCat(f.group, ".", f.key));
  return keys;
}

std::vector<std::string> ProfileFigureKeys(const HardwareProfile& p) {
  std::vector<std::string> keys;
  for (const Field& f : kFields) {
    if (Holds(f, p)) keys.push_back(absl::StrCat(f.group, ".", f.key));
  }
  return keys;
}

void ClearOpEfficiencies(HardwareProfile& p) {
  for (const Field& f : kFields) {
    if (auto* m = std::get_if<std::optional<double> HardwareProfile::*>(&f.member)) (p.**m).reset();
    if (auto* m = std::get_if<std::vector<AttentionPoint> HardwareProfile::*>(&f.member)) (p.**m).clear();
  }
}

std::vector<std::string> ProfileNames() { return {"a100_80g", "cpu", "h100_dgx", "h200"}; }

absl::StatusOr<std::string> ProfileDirectory() {
  if (const char* env = std::getenv("ZEROSHARD_SIM_PROFILES"); env != nullptr && env[0] != '\0') {
    if (IsDirectory(env)) return std::string(env);
    return absl::NotFoundError(
        absl::StrCat("ZEROSHARD_SIM_PROFILES is '", env, "': expected a directory of profile files, found none"));
  }
  std::vector<std::string> tried;
  auto consider = [&](const std::string& dir) {
    tried.push_back(dir);
    return IsDirectory(dir);
  };
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* root = std::getenv(var); root != nullptr && root[0] != '\0') {
      if (std::string d = absl::StrCat(root, "/", kRunfilesSubdir); consider(d)) return d;
    }
  }
  if (std::string exe = ExecutablePath(); !exe.empty()) {
    if (std::string d = absl::StrCat(exe, ".runfiles/", kRunfilesSubdir); consider(d)) return d;
  }
  if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY"); ws != nullptr && ws[0] != '\0') {
    if (std::string d = absl::StrCat(ws, "/sim/profiles"); consider(d)) return d;
  }
  if (consider("sim/profiles")) return std::string("sim/profiles");
  return absl::NotFoundError(absl::StrCat(
      "the shipped hardware profiles: expected a directory sim/profiles, found none of ", absl::StrJoin(tried, ", "),
      " (run from the workspace root, or set ZEROSHARD_SIM_PROFILES)"));
}

absl::StatusOr<HardwareProfile> LoadProfile(std::string_view name_or_path) {
  std::string path;
  const std::string name(name_or_path);
  if (LooksLikePath(name_or_path)) {
    path = std::string(name_or_path);
  } else {
    const bool plain = !name_or_path.empty() && std::all_of(name_or_path.begin(), name_or_path.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    if (!plain) {
      return absl::InvalidArgumentError(absl::StrCat("profile '", name,
                                                     "': expected a profile name (letters, digits, '_', '-') or a "
                                                     "path to a .json file"));
    }
    ZS_ASSIGN_OR_RETURN(std::string dir, ProfileDirectory());
    path = absl::StrCat(dir, "/", name, ".json");
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      return absl::NotFoundError(absl::StrCat("profile '", name, "': expected one of ",
                                              absl::StrJoin(ProfileNames(), ", "), " (files in ", dir,
                                              ") or a path to a .json file, found no ", path));
    }
  }
  ZS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseProfile(text, path);
}

std::string ProfileToJson(const HardwareProfile& p) {
  nlohmann::ordered_json j;
  j["name"] = p.name;
  j["description"] = p.description;
  for (const char* group : kGroups) {
    nlohmann::ordered_json g = nlohmann::ordered_json::object();
    for (const Field& f : kFields) {
      if (std::string_view(f.group) != group || !Holds(f, p)) continue;
      std::visit(
          [&](auto member) {
            using T = std::remove_cvref_t<decltype(p.*member)>;
            if constexpr (std::is_same_v<T, std::optional<double>>) {
              g[f.key] = *(p.*member);
            } else if constexpr (std::is_same_v<T, std::vector<AttentionPoint>>) {
              nlohmann::ordered_json points = nlohmann::ordered_json::array();
              for (const AttentionPoint& a : p.*member) {
                nlohmann::ordered_json point;
                point["head_dim"] = a.head_dim;
                if (a.seq_len.has_value()) point["seq_len"] = *a.seq_len;
                point["forward"] = a.forward;
                point["backward"] = a.backward;
                points.push_back(point);
              }
              g[f.key] = points;
            } else {
              g[f.key] = p.*member;
            }
          },
          f.member);
    }
    j[group] = g;
  }
  nlohmann::ordered_json sources = nlohmann::ordered_json::object();
  for (const auto& [key, note] : p.sources) sources[key] = note;
  j["sources"] = sources;
  return j.dump(2) + "\n";
}

}  // namespace zeroshard::sim
