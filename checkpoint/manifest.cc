#include "checkpoint/manifest.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace zeroshard {

using nlohmann::json;

namespace {

std::string Quoted(absl::string_view s) { return absl::StrCat("'", s, "'"); }

TrainingState StateFromJson(const json& j) {
  TrainingState s;
  s.step = j.value("step", int64_t{0});
  if (j.contains("lr_scheduler")) s.lr_scheduler = j["lr_scheduler"].get<std::map<std::string, std::string>>();
  if (j.contains("loss_scaler")) s.loss_scaler = j["loss_scaler"].get<std::map<std::string, std::string>>();
  if (j.contains("rng_offsets")) s.rng_offsets = j["rng_offsets"].get<std::vector<uint64_t>>();
  s.config = j.value("config", std::string());
  if (j.contains("extra")) s.extra = j["extra"].get<std::map<std::string, std::string>>();
  return s;
}

}  // namespace

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
  json m;
  try {
    m = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return fail(absl::StrCat("not valid JSON: ", e.what()));
  }
  CheckpointManifest out;
  try {
    if (!m.is_object() || m.value("format", "") != "zeroshard-checkpoint") {
      return fail("not a zeroshard checkpoint manifest (\"format\" is not \"zeroshard-checkpoint\")");
    }
    if (m.value("version", 0) != kCheckpointFormatVersion) {
      return absl::UnimplementedError(absl::StrCat("checkpoint manifest ", Quoted(source), ": format version ",
                                                   m.value("version", 0), ", expected ", kCheckpointFormatVersion));
    }
    absl::StatusOr<StateDictType> type = ParseStateDictType(m.at("type").get<std::string>());
    if (!type.ok()) return fail(std::string(type.status().message()));
    out.type = *type;
    out.world_size = m.at("world_size").get<int>();
    out.strategy = m.at("strategy").get<std::string>();
    out.shard_group_size = m.at("shard_group_size").get<int>();
    out.optimizer = m.value("optimizer", std::string());
    out.optimizer_step = m.value("optimizer_step", int64_t{0});
    if (out.world_size < 1 || out.shard_group_size < 1 || out.optimizer_step < 0) {
      return fail("world_size, shard_group_size and optimizer_step must be positive");
    }
    out.state = StateFromJson(m.at("state"));
    for (auto& [name, info] : m.at("files").items()) {
      if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
        return fail(absl::StrCat("file name ", Quoted(name), " is not a plain file name"));
      }
      out.files[name] = {info.at("bytes").get<uint64_t>(), info.at("crc32c").get<uint32_t>()};
    }
    for (const json& u : m.at("layout")) {
      ManifestUnit unit;
      unit.name = u.at("name").get<std::string>();
      unit.numel = u.at("numel").get<int64_t>();
      unit.padded_numel = u.at("padded_numel").get<int64_t>();
      unit.shard_numel = u.at("shard_numel").get<int64_t>();
      unit.shard_group_size = u.at("shard_group_size").get<int>();
      if (unit.numel < 0 || unit.shard_numel < 1 || unit.shard_group_size < 1 ||
          unit.padded_numel != unit.shard_numel * unit.shard_group_size || unit.numel > unit.padded_numel) {
        return fail(absl::StrCat("unit ", Quoted(unit.name), ": sizes do not tile (numel ", unit.numel, ", padded ",
                                 unit.padded_numel, ", ", unit.shard_group_size, " shards of ", unit.shard_numel, ")"));
      }
      for (const json& p : u.at("params")) {
        ManifestParam param;
        param.name = p.at("name").get<std::string>();
        param.aliases = p.at("aliases").get<std::vector<std::string>>();
        const std::vector<int64_t> shape = p.at("shape").get<std::vector<int64_t>>();
        param.shape = Shape(shape.begin(), shape.end());
        param.offset = p.at("offset").get<int64_t>();
        param.numel = p.at("numel").get<int64_t>();
        param.requires_grad = p.value("requires_grad", true);
        int64_t n = 1;
        for (int64_t d : shape) {
          if (d < 0 || (d > 0 && n > (int64_t{1} << 50) / d)) return fail(absl::StrCat(param.name, ": bad shape"));
          n *= d;
        }
        if (n != param.numel || param.offset < 0 || param.offset + param.numel > unit.numel) {
          return fail(absl::StrCat("parameter ", Quoted(param.name), " of shape ", ShapeToString(param.shape),
                                   " at offset ", param.offset, " does not fit unit ", Quoted(unit.name), " of ",
                                   unit.numel, " elements"));
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
