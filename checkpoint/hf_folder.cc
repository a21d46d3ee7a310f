// Hugging Face model folders (hf_folder.h): reading a folder (HfWeights,
// ReadHfStateDict), loading it into a ShardedModel (LoadHfWeights) and saving
// one (SaveHfWeights). The directory protocol, Agree, WithUnit and the
// streaming safetensors writer are the checkpoints' (checkpoint_internal.h).
#include "checkpoint/hf_folder.h"

#include <algorithm>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_internal.h"
#include "runtime/status.h"

namespace zeroshard {

using checkpoint_internal::Agree;
using checkpoint_internal::Exists;
using checkpoint_internal::Quoted;
using checkpoint_internal::ReadWholeFile;
using checkpoint_internal::WithUnit;
using nlohmann::json;

std::string HfShardFileName(int i, int n) { return absl::StrFormat("model-%05d-of-%05d.safetensors", i, n); }

// ================================================================ reading a folder

namespace {

constexpr int kMaxIndexDepth = 64;

absl::Status Corrupt(const std::string& dir, const std::string& what) {
  return absl::DataLossError(absl::StrCat("Hugging Face folder ", Quoted(dir), ": ", what));
}

std::string Describe(const json& j) {
  std::string text = j.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return absl::StrCat(j.type_name(), " ", text);
}

// A file name the index may use: a plain name inside the folder.
bool PlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// tensor name -> file, from model.safetensors.index.json (Note [Hugging Face folder validation]).
absl::StatusOr<std::map<std::string, std::string>> ParseIndex(const std::string& dir, const std::string& text) {
  const std::string where = absl::StrCat(kHfIndexFile, " ");
  int deepest = 0;
  std::vector<std::set<std::string>> keys;  // per open object (arrays get an unused set)
  std::string duplicate;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    deepest = std::max(deepest, depth);
    if (depth > kMaxIndexDepth) return false;
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text, check);
  } catch (const json::exception& e) {
    return Corrupt(dir, absl::StrCat(where, "is not valid JSON: ", e.what()));
  }
  if (deepest > kMaxIndexDepth) {
    return Corrupt(dir, absl::StrCat(where, "nests JSON ", deepest, " levels deep, expected at most ", kMaxIndexDepth));
  }
  if (!duplicate.empty()) {
    return Corrupt(dir, absl::StrCat(where, "has the key ", Quoted(duplicate),
                                     " twice in one object (a tensor in two files?)"));
  }
  if (!root.is_object()) return Corrupt(dir, absl::StrCat(where, "should be a JSON object, found ", Describe(root)));
  if (root.contains("metadata") && !root["metadata"].is_object()) {
    return Corrupt(dir, absl::StrCat(where, "\"metadata\" should be an object, found ", Describe(root["metadata"])));
  }
  if (!root.contains("weight_map")) return Corrupt(dir, absl::StrCat(where, "has no \"weight_map\""));
  const json& map = root["weight_map"];
  if (!map.is_object()) {
    return Corrupt(dir, absl::StrCat(where, "\"weight_map\" should be an object of strings, found ", Describe(map)));
  }
  std::map<std::string, std::string> out;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it.value().is_string()) {
      return Corrupt(dir, absl::StrCat(where, "\"weight_map\" value of ", Quoted(it.key()),
                                       " should be a file name (a string), found ", Describe(it.value())));
    }
    const std::string file = it.value().get<std::string>();
    if (!PlainFileName(file)) {
      return Corrupt(dir, absl::StrCat(where, "puts ", Quoted(it.key()), " in ", Quoted(file),
                                       ", expected a file name inside the folder (no '/', '.' or '..')"));
    }
    out[it.key()] = file;
  }
  return out;
}

}  // namespace

absl::StatusOr<HfWeights> HfWeights::Open(const std::string& dir) {
  HfWeights w;
  w.dir_ = dir;
  const std::string single = dir + "/" + kHfSingleFile;
  const std::string index = dir + "/" + kHfIndexFile;
  std::map<std::string, std::string> weight_map;  // empty for a single file
  if (Exists(single)) {
    w.file_names_ = {kHfSingleFile};
  } else if (Exists(index)) {
    ZS_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(index));
    ZS_ASSIGN_OR_RETURN(weight_map, ParseIndex(dir, text));
    std::set<std::string> names;
    for (const auto& [tensor, file] : weight_map) names.insert(file);
    w.file_names_.assign(names.begin(), names.end());
  } else {
    return absl::NotFoundError(absl::StrCat("Hugging Face folder ", Quoted(dir), ": expected ", kHfSingleFile, " or ",
                                            kHfIndexFile, ", found neither"));
  }
  for (size_t i = 0; i < w.file_names_.size(); ++i) {
    const std::string& name = w.file_names_[i];
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(dir + "/" + name);
    if (!f.ok()) {
      const absl::Status& s = f.status();
      const std::string listed = weight_map.empty() ? "" : absl::StrCat(" (named by ", kHfIndexFile, ")");
      return absl::Status(s.code(), absl::StrCat("Hugging Face folder ", Quoted(dir), ": file ", Quoted(name), listed,
                                                 ": ", s.message()));
    }
    w.files_.push_back(std::make_unique<SafetensorsFile>(*std::move(f)));
    for (const SafetensorsEntry& e : w.files_.back()->entries()) {
      if (!weight_map.empty()) {
        auto listed = weight_map.find(e.name);
        if (listed == weight_map.end()) {
          return Corrupt(dir, absl::StrCat("file ", Quoted(name), " holds ", Quoted(e.name), ", which ", kHfIndexFile,
                                           " does not list"));
        }
        if (listed->second != name) {
          return Corrupt(dir, absl::StrCat("file ", Quoted(name), " holds ", Quoted(e.name), ", which ", kHfIndexFile,
                                           " puts in ", Quoted(listed->second), " (a tensor in two files)"));
        }
      }
      w.index_[e.name] = Located{i, &e};
    }
  }
  for (const auto& [tensor, file] : weight_map) {
    if (!w.index_.count(tensor)) {
      return Corrupt(dir, absl::StrCat(kHfIndexFile, " puts ", Quoted(tensor), " in ", Quoted(file),
                                       ", which does not hold it"));
    }
  }
  return w;
}

std::vector<std::string> HfWeights::files() const { return file_names_; }

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, located] : index_) out.push_back(name);
  return out;
}

absl::StatusOr<const HfWeights::Located*> HfWeights::Find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat("Hugging Face folder ", Quoted(dir_), " has no tensor ", Quoted(name)));
  }
  return &it->second;
}

absl::StatusOr<const SafetensorsEntry*> HfWeights::Entry(const std::string& name) const {
  ZS_ASSIGN_OR_RETURN(const Located* at, Find(name));
  return at->entry;
}

absl::StatusOr<std::string> HfWeights::FileOf(const std::string& name) const {
  ZS_ASSIGN_OR_RETURN(const Located* at, Find(name));
  return file_names_[at->file];
}

absl::Status HfWeights::ReadRange(const std::string& name, int64_t offset, int64_t count, const Tensor& out) {
  ZS_ASSIGN_OR_RETURN(const Located* at, Find(name));
  const SafetensorsEntry& e = *at->entry;
  if (!IsFloatingPoint(e.dtype) || !IsFloatingPoint(out.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Hugging Face folder ", Quoted(dir_), ": ", name, " is ", SafetensorsDTypeName(e.dtype), ", read into ",
        DTypeName(out.dtype()), "; expected floating dtypes (F32, BF16 or F16) on both sides"));
  }
  ZS_RETURN_IF_ERROR(files_[at->file]->ReadRange(name, offset, count, out));
  bytes_read_ += count * static_cast<int64_t>(DTypeSize(e.dtype));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> HfWeights::Read(const std::string& name) {
  ZS_ASSIGN_OR_RETURN(const SafetensorsEntry* e, Entry(name));
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(e->shape, DType::kF32, DefaultCpuAllocator()));
  ZS_RETURN_IF_ERROR(ReadRange(name, 0, e->numel(), t));
  return t;
}

absl::StatusOr<nn::NamedTensors> ReadHfStateDict(const std::string& dir) {
  ZS_ASSIGN_OR_RETURN(HfWeights w, HfWeights::Open(dir));
  nn::NamedTensors out;
  for (const std::string& name : w.names()) {
    ZS_ASSIGN_OR_RETURN(Tensor t, w.Read(name));
    out.emplace_back(name, std::move(t));
  }
  return out;
}

// ================================================================ loading into a ShardedModel

namespace {

// Every name of a parameter: its first, then its aliases (Note [Tied parameters]).
std::vector<std::string> AllNames(const FlatParamSlot& p) {
  std::vector<std::string> names = {p.name};
  names.insert(names.end(), p.aliases.begin(), p.aliases.end());
  return names;
}

// What the folder holds against what the model expects: missing and unexpected
// names into `result`, shape and dtype faults returned (every one, "; "-joined).
absl::Status MatchFolder(const HfWeights& w, ShardedModel& model, HfLoadResult& result) {
  std::vector<std::string> faults;
  std::set<std::string> model_names;
  for (ShardedUnit* u : model.units()) {
    for (const FlatParamSlot& p : u->flat.params()) {
      bool found = false;
      for (const std::string& n : AllNames(p)) {
        model_names.insert(n);
        if (!w.Contains(n)) continue;
        found = true;
        const SafetensorsEntry* e = *w.Entry(n);
        if (!IsFloatingPoint(e->dtype)) {
          faults.push_back(absl::StrCat(n, ": the folder has ", SafetensorsDTypeName(e->dtype), " ",
                                        ShapeToString(e->shape), ", the model expects a floating dtype (F32, BF16 or "
                                        "F16) ", ShapeToString(p.shape)));
        } else if (e->shape != p.shape) {
          faults.push_back(absl::StrCat(n, ": the folder has ", ShapeToString(e->shape), ", the model expects ",
                                        ShapeToString(p.shape)));
        }
      }
      if (!found) result.missing_keys.push_back(p.name);
    }
  }
  for (const std::string& n : w.names()) {
    if (!model_names.count(n)) result.unexpected_keys.push_back(n);
  }
  if (faults.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(faults, "; "));
}

}  // namespace

absl::StatusOr<HfLoadResult> LoadHfWeights(const std::string& dir, ShardedModel& model, const HfLoadOptions& o) {
  Communicator& world = model.world();
  const std::string where = absl::StrCat("LoadHfWeights(", Quoted(dir), ")");
  absl::StatusOr<HfWeights> opened = HfWeights::Open(dir);
  ZS_RETURN_IF_ERROR(Agree(world, opened.status()));
  HfWeights& w = *opened;
  HfLoadResult result;
  // Every rank checks every parameter (headers only), so all reach the same verdict.
  absl::Status matched = MatchFolder(w, model, result);
  if (!matched.ok()) {
    matched = absl::InvalidArgumentError(absl::StrCat(where, ": ", matched.message()));
  } else if (o.strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    matched = absl::InvalidArgumentError(absl::StrCat(where, ", strict: missing tensors [",
                                                      absl::StrJoin(result.missing_keys, ", "),
                                                      "], unexpected tensors [",
                                                      absl::StrJoin(result.unexpected_keys, ", "), "]"));
  }
  ZS_RETURN_IF_ERROR(Agree(world, matched));
  // Each rank reads the pieces of its own shards, unit by unit (NVMe-resident
  // shards are read, filled and written back).
  std::vector<ShardedUnit*> units = model.units();
  absl::Status mine;
  for (size_t i = 0; i < units.size() && mine.ok(); ++i) {
    const FlatParameter& flat = units[i]->flat;
    mine = WithUnit(model, nullptr, i, {}, /*write=*/true,
                    [&](const Tensor& shard, const std::vector<Tensor>&) -> absl::Status {
      for (const FlatParameter::Piece& piece : flat.PiecesOfShard(flat.shard_rank())) {
        const FlatParamSlot& p = flat.params()[piece.param];
        std::vector<std::string> present;
        for (const std::string& n : AllNames(p)) {
          if (w.Contains(n)) present.push_back(n);
        }
        if (present.empty()) continue;  // missing (not strict): keeps its init
        ZS_ASSIGN_OR_RETURN(Tensor dst, shard.Narrow(0, piece.shard_offset, piece.count));
        ZS_RETURN_IF_ERROR(w.ReadRange(present[0], piece.param_offset, piece.count, dst));
        // A tie stored under several names: they must agree (as LoadCheckpoint).
        for (size_t k = 1; k < present.size(); ++k) {
          ZS_ASSIGN_OR_RETURN(Tensor other, Tensor::Empty({piece.count}, DType::kF32, DefaultCpuAllocator()));
          ZS_RETURN_IF_ERROR(w.ReadRange(present[k], piece.param_offset, piece.count, other));
          ZS_RETURN_IF_ERROR(nn::CheckTiedValuesEqual(
              absl::StrCat(where, ", elements counted from ", piece.param_offset), present[0], dst, present[k], other));
        }
      }
      return absl::OkStatus();
    });
  }
  ZS_RETURN_IF_ERROR(Agree(world, mine));
  result.bytes_read = w.bytes_read();
  return result;
}

}  // namespace zeroshard
