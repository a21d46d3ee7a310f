#include "zeroshard/checkpoint/manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/runtime/crc32c.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using nlohmann::json;

namespace {

std::string Quoted(absl::string_view s) { return absl::StrCat("'", s, "'"); }

TrainingState StateFromJson(const json& j) {
  TrainingState s;  // its step is read with the manifest's other integers
  if (j.contains("lr_scheduler")) s.lr_scheduler = j["lr_scheduler"].get<std::map<std::string, std::string>>();
  if (j.contains("loss_scaler")) s.loss_scaler = j["loss_scaler"].get<std::map<std::string, std::string>>();
  if (j.contains("rng_offsets")) s.rng_offsets = j["rng_offsets"].get<std::vector<uint64_t>>();
  s.config = j.value("config", std::string());
  if (j.contains("extra")) s.extra = j["extra"].get<std::map<std::string, std::string>>();
  return s;
}

// Where SealCheckpointManifest puts the checksum: the first member, as dump(2) indents it.
constexpr absl::string_view kChecksumPrefix = "{\n  \"manifest_crc32c\": \"";
constexpr absl::string_view kZeroChecksum = "00000000";

uint32_t ManifestCrc(std::string text, size_t digits_at) {
  text.replace(digits_at, kZeroChecksum.size(), kZeroChecksum.data(), kZeroChecksum.size());
  return Crc32c(text.data(), text.size());
}

}  // namespace

std::string SealCheckpointManifest(absl::string_view json_text) {
  absl::string_view rest = json_text;
  if (absl::StartsWith(rest, "{")) rest.remove_prefix(1);
  const bool empty = absl::StartsWith(absl::StripLeadingAsciiWhitespace(rest), "}");
  std::string text = absl::StrCat(kChecksumPrefix, kZeroChecksum, "\"", empty ? "" : ",", rest);
  const uint32_t crc = ManifestCrc(text, kChecksumPrefix.size());
  text.replace(kChecksumPrefix.size(), kZeroChecksum.size(), absl::StrFormat("%08x", crc));
  return text;
}

absl::string_view StateDictTypeName(StateDictType t) {
  return t == StateDictType::kFull ? "full" : "sharded";
}

absl::StatusOr<StateDictType> ParseStateDictType(absl::string_view name) {
  if (name == "full") return StateDictType::kFull;
  if (name == "sharded") return StateDictType::kSharded;
  return absl::InvalidArgumentError(absl::StrCat("unknown state_dict_type \"", name,
                                                 "\": expected full or sharded"));
}


absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(absl::string_view text, absl::string_view source) {
  auto fail = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", Quoted(source), ": ", what));
  };
  // Duplicate keys are caught while parsing (nlohmann keeps the last of two).
  std::vector<absl::flat_hash_set<std::string>> keys_per_object;
  std::string duplicate;
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_per_object.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys_per_object.empty()) keys_per_object.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys_per_object.empty() && parsed.is_string() &&
            !keys_per_object.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  json m;
  try {
    m = json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    return fail(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) {
    return fail(absl::StrCat("the key ", Quoted(duplicate),
                             " appears twice in one object (duplicate keys are not allowed)"));
  }
  // Note [Manifest checksum]: before any value is believed.
  const bool sealed = m.is_object() && m.contains(kManifestChecksumKey);
  if (sealed) {
    const json& stored = m[kManifestChecksumKey];
    uint32_t want = 0;
    // Exactly as SealCheckpointManifest writes it: lower-case digits only (an
    // 'A' for an 'a' is one flipped bit that a number parser would forgive).
    const absl::string_view digits = text.substr(std::min(text.size(), kChecksumPrefix.size()), 8);
    const bool lower_hex = digits.size() == 8 && std::all_of(digits.begin(), digits.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    });
    if (!absl::StartsWith(text, kChecksumPrefix) || !lower_hex || !stored.is_string() ||
        stored.get<std::string>() != digits || !absl::SimpleHexAtoi(digits, &want)) {
      return fail(absl::StrCat("\"", kManifestChecksumKey, "\" should be the first member, 8 hex digits, found ",
                               stored.dump(), " (was the file edited?)"));
    }
    const uint32_t got = ManifestCrc(std::string(text), kChecksumPrefix.size());
    if (got != want) {
      return fail(absl::StrFormat("CRC-32C %08x, expected %08x as written (corrupted)", got, want));
    }
  }
  // Every integer is read through this: a JSON integer within [lo, hi], named
  // by its path. nlohmann's get<int>() converts whatever it finds (2^32 + 2
  // became 2; a float of 1e300 was cast to int, which is undefined), so a
  // manifest could pass validation with numbers it never held.
  auto integer_value = [&](const json& v, const std::string& path, int64_t lo,
                           int64_t hi) -> absl::StatusOr<int64_t> {
    bool fits = false;
    if (v.is_number_unsigned()) {
      fits = v.get<uint64_t>() <= static_cast<uint64_t>(hi) && static_cast<int64_t>(v.get<uint64_t>()) >= lo;
    } else if (v.is_number_integer()) {
      fits = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    }
    if (!fits) return fail(absl::StrCat(path, ": expected an integer in [", lo, ", ", hi, "], found ", v.dump()));
    return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
  };
  auto integer = [&](const json& parent, const std::string& key, const std::string& path, int64_t lo,
                     int64_t hi) -> absl::StatusOr<int64_t> { return integer_value(parent.at(key), path, lo, hi); };
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  CheckpointManifest out;
  try {
    if (!m.is_object() || m.value("format", "") != "zeroshard-checkpoint") {
      return fail("not a zeroshard checkpoint manifest (\"format\" is not \"zeroshard-checkpoint\")");
    }
    const int version = m.value("version", 0);
    if (version < 1 || version > kCheckpointFormatVersion) {
      return absl::UnimplementedError(absl::StrCat("checkpoint manifest ", Quoted(source), ": format version ",
                                                   version, ", expected 1 to ", kCheckpointFormatVersion));
    }
    if (version >= 2 && !sealed) {
      return fail(absl::StrCat("format version ", version, " but no \"", kManifestChecksumKey,
                               "\" (its own checksum): the file was altered"));
    }
    absl::StatusOr<StateDictType> type = ParseStateDictType(m.at("type").get<std::string>());
    if (!type.ok()) return fail(std::string(type.status().message()));
    out.type = *type;
    ZS_ASSIGN_OR_RETURN(const int64_t world_size, integer(m, "world_size", "world_size", 1, kIntMax));
    out.world_size = static_cast<int>(world_size);
    out.strategy = m.at("strategy").get<std::string>();
    ZS_ASSIGN_OR_RETURN(const int64_t group, integer(m, "shard_group_size", "shard_group_size", 1, kIntMax));
    out.shard_group_size = static_cast<int>(group);
    out.optimizer = m.value("optimizer", std::string());
    if (m.contains("optimizer_step")) {
      ZS_ASSIGN_OR_RETURN(out.optimizer_step, integer(m, "optimizer_step", "optimizer_step", 0, kInt64Max));
    }
    const json& state = m.at("state");
    out.state = StateFromJson(state);
    if (state.contains("step")) {
      // The data position: a negative one would index the token windows backwards.
      ZS_ASSIGN_OR_RETURN(out.state.step, integer(state, "step", "state.step", 0, kInt64Max));
    }
    for (auto& [name, info] : m.at("files").items()) {
      if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
        return fail(absl::StrCat("file name ", Quoted(name), " is not a plain file name"));
      }
      const std::string where = absl::StrCat("files.", name);
      ZS_ASSIGN_OR_RETURN(const int64_t bytes, integer(info, "bytes", where + ".bytes", 0, kInt64Max));
      ZS_ASSIGN_OR_RETURN(const int64_t crc, integer(info, "crc32c", where + ".crc32c", 0, 0xffffffff));
      out.files[name] = {static_cast<uint64_t>(bytes), static_cast<uint32_t>(crc)};
    }
    size_t u_index = 0;
    for (const json& u : m.at("layout")) {
      const std::string where = absl::StrCat("layout[", u_index++, "]");
      ManifestUnit unit;
      unit.name = u.at("name").get<std::string>();
      ZS_ASSIGN_OR_RETURN(unit.numel, integer(u, "numel", where + ".numel", 0, kInt64Max));
      ZS_ASSIGN_OR_RETURN(unit.padded_numel, integer(u, "padded_numel", where + ".padded_numel", 0, kInt64Max));
      ZS_ASSIGN_OR_RETURN(unit.shard_numel, integer(u, "shard_numel", where + ".shard_numel", 1, kInt64Max));
      ZS_ASSIGN_OR_RETURN(const int64_t unit_group,
                          integer(u, "shard_group_size", where + ".shard_group_size", 1, kIntMax));
      unit.shard_group_size = static_cast<int>(unit_group);
      // shard_numel * shard_group_size in int64 could wrap to padded_numel
      // ((2^62 + 1) * 4 is 4 modulo 2^64): the product is checked first.
      int64_t tiled = 0;
      if (__builtin_mul_overflow(unit.shard_numel, int64_t{unit.shard_group_size}, &tiled)) {
        return fail(absl::StrCat(where, ".shard_numel: unit ", Quoted(unit.name), " has ", unit.shard_group_size,
                                 " shards of ", unit.shard_numel, " elements, a product that overflows int64"));
      }
      if (unit.padded_numel != tiled || unit.numel > unit.padded_numel) {
        return fail(absl::StrCat(where, ": unit ", Quoted(unit.name), ": sizes do not tile (numel ", unit.numel,
                                 ", padded ", unit.padded_numel, ", ", unit.shard_group_size, " shards of ",
                                 unit.shard_numel, ")"));
      }
      size_t p_index = 0;
      for (const json& p : u.at("params")) {
        const std::string pwhere = absl::StrCat(where, ".params[", p_index++, "]");
        ManifestParam param;
        param.name = p.at("name").get<std::string>();
        param.aliases = p.at("aliases").get<std::vector<std::string>>();
        const json& shape = p.at("shape");
        if (!shape.is_array()) return fail(absl::StrCat(pwhere, ".shape: expected an array, found ", shape.dump()));
        // Elements of the shape, capped at 2^50 (no tensor is larger; the cap
        // also keeps the product far from overflow).
        constexpr int64_t kMaxElements = int64_t{1} << 50;
        int64_t n = 1;
        for (size_t d = 0; d < shape.size(); ++d) {
          ZS_ASSIGN_OR_RETURN(const int64_t size,
                              integer_value(shape[d], absl::StrCat(pwhere, ".shape[", d, "]"), 0, kInt64Max));
          param.shape.push_back(size);
          if (size > 0 && n > kMaxElements / size) {
            return fail(absl::StrCat(pwhere, ".shape: parameter ", Quoted(param.name), " of shape ", shape.dump(),
                                     " has more than 2^50 elements"));
          }
          n *= size;
        }
        ZS_ASSIGN_OR_RETURN(param.offset, integer(p, "offset", pwhere + ".offset", 0, kInt64Max));
        ZS_ASSIGN_OR_RETURN(param.numel, integer(p, "numel", pwhere + ".numel", 0, kInt64Max));
        param.requires_grad = p.value("requires_grad", true);
        if (n != param.numel) {
          return fail(absl::StrCat(pwhere, ".numel: parameter ", Quoted(param.name), " of shape ",
                                   ShapeToString(param.shape), " has ", n, " elements, the manifest says ", param.numel));
        }
        // offset + numel near 2^63 wraps negative and would "fit" any unit.
        int64_t end = 0;
        if (__builtin_add_overflow(param.offset, param.numel, &end)) {
          return fail(absl::StrCat(pwhere, ".offset: parameter ", Quoted(param.name), " at offset ", param.offset,
                                   " with ", param.numel, " elements: the end overflows int64"));
        }
        if (end > unit.numel) {
          return fail(absl::StrCat(pwhere, ": parameter ", Quoted(param.name), " of shape ",
                                   ShapeToString(param.shape), " at offset ", param.offset, " does not fit unit ",
                                   Quoted(unit.name), " of ", unit.numel, " elements"));
        }
        unit.params.push_back(std::move(param));
      }
      out.layout.push_back(std::move(unit));
    }
  } catch (const json::exception& e) {
    return fail(absl::StrCat("unexpected structure: ", e.what()));
  }
  return out;
}

}  // namespace zeroshard
