// Hugging Face model folders (hf_folder.h): reading a folder (HfWeights,
// ReadHfStateDict), loading it into a ShardedModel (LoadHfWeights) and saving
// one (SaveHfWeights). The directory protocol, Agree, WithUnit and the
// streaming safetensors writer are the checkpoints' (checkpoint_internal.h).
#include "zeroshard/checkpoint/hf_folder.h"

#include <algorithm>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "zeroshard/checkpoint/checkpoint_internal.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using checkpoint_internal::Agree;
using checkpoint_internal::DirNames;
using checkpoint_internal::Exists;
using checkpoint_internal::PrepareTmpDir;
using checkpoint_internal::Quoted;
using checkpoint_internal::ReadWholeFile;
using checkpoint_internal::RemoveTree;
using checkpoint_internal::StreamWriter;
using checkpoint_internal::SwapIntoPlace;
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
  Communicator& world = o.host != nullptr ? *o.host : model.world();  // host tensors
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

// ================================================================ saving a ShardedModel

namespace {

// One tensor of the folder: a parameter under one of its names.
struct SaveItem {
  std::string name;
  size_t unit = 0;
  const FlatParamSlot* param = nullptr;
  int64_t bytes = 0;  // in the stored dtype
  int file = 0;       // index into the plan's files
};

struct SavePlan {
  std::vector<SaveItem> items;  // the model's parameter order
  std::vector<std::string> files;
  std::vector<std::vector<StreamWriter::Entry>> entries;  // per file, in item order
  int64_t total_size = 0;
};

// Note [Hugging Face folder shards]. Parameters of ignored modules are in no
// unit and not written (as in full checkpoints).
SavePlan PlanSave(ShardedModel& model, const HfSaveOptions& o) {
  std::map<std::string, std::pair<size_t, const FlatParamSlot*>> where;  // every name -> (unit, slot)
  std::vector<ShardedUnit*> units = model.units();
  for (size_t i = 0; i < units.size(); ++i) {
    for (const FlatParamSlot& p : units[i]->flat.params()) {
      for (const std::string& n : AllNames(p)) where[n] = {i, &p};
    }
  }
  SavePlan plan;
  std::set<std::string> seen;  // NamedParameterSlots lists a tied slot under each name once
  for (auto& [name, slot] : model.module().NamedParameterSlots()) {
    auto it = where.find(name);
    if (it == where.end() || !seen.insert(name).second) continue;
    const FlatParamSlot* p = it->second.second;
    if (o.write_tied_once && name != p->name) continue;
    plan.items.push_back({name, it->second.first, p, p->numel * static_cast<int64_t>(DTypeSize(o.dtype)), 0});
  }
  // Greedy: a new file when the next tensor would take a non-empty file above the limit.
  int file = 0;
  int64_t in_file = 0;
  bool empty = true;
  for (SaveItem& item : plan.items) {
    if (!empty && in_file + item.bytes > o.max_shard_bytes) {
      ++file;
      in_file = 0;
      empty = true;
    }
    item.file = file;
    in_file += item.bytes;
    empty = false;
    plan.total_size += item.bytes;
  }
  const int n = file + 1;
  plan.entries.resize(n);
  for (int i = 0; i < n; ++i) plan.files.push_back(n == 1 ? kHfSingleFile : HfShardFileName(i + 1, n));
  for (const SaveItem& item : plan.items) plan.entries[item.file].emplace_back(item.name, o.dtype, item.param->shape);
  return plan;
}

// Elements [lo, hi) of unit i's flat parameter (f32 masters), gathered over the
// shard group: rank r contributes the part of [lo, hi) its shard holds, padded
// to the longest such part L, so the all-gather moves S * L elements (no more
// than the unit's padded size). Collective over the shard group; the result
// (a CPU tensor of hi - lo elements) is assembled on `lead` only.
absl::StatusOr<Tensor> GatherRange(ShardedModel& model, size_t i, int64_t lo, int64_t hi, bool lead) {
  const FlatParameter& flat = model.units()[i]->flat;
  Communicator& group = model.shard_group();
  const int64_t shard_numel = flat.shard_numel();
  auto part = [&](int r) {  // [begin, end) of [lo, hi) in rank r's shard
    const int64_t begin = std::max(lo, r * shard_numel);
    const int64_t end = std::min(hi, (r + 1) * shard_numel);
    return std::make_pair(begin, std::max(begin, end));
  };
  int64_t longest = 0;
  for (int r = 0; r < group.size(); ++r) longest = std::max(longest, part(r).second - part(r).first);
  ZS_ASSIGN_OR_RETURN(Tensor result, Tensor::Empty({lead ? hi - lo : 0}, DType::kF32, DefaultCpuAllocator()));
  if (longest == 0) return result;
  Allocator* comm_alloc = group.device().is_cpu() ? DefaultCpuAllocator() : model.allocator();
  ZS_ASSIGN_OR_RETURN(Tensor mine, Tensor::Zeros({longest}, DType::kF32, comm_alloc));
  ZS_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({group.size() * longest}, DType::kF32, comm_alloc));
  ZS_RETURN_IF_ERROR(WithUnit(model, nullptr, i, {}, /*write=*/false,
                              [&](const Tensor& shard, const std::vector<Tensor>&) -> absl::Status {
                                const auto [begin, end] = part(group.rank());
                                if (end == begin) return absl::OkStatus();
                                ZS_ASSIGN_OR_RETURN(Tensor src, shard.Narrow(0, begin - group.rank() * shard_numel,
                                                                             end - begin));
                                ZS_ASSIGN_OR_RETURN(Tensor dst, mine.Narrow(0, 0, end - begin));
                                return dst.CopyFrom(src);
                              }));
  ZS_RETURN_IF_ERROR(group.AllGather(mine, all));
  if (!lead) return result;
  for (int r = 0; r < group.size(); ++r) {
    const auto [begin, end] = part(r);
    if (end == begin) continue;
    ZS_ASSIGN_OR_RETURN(Tensor dst, result.Narrow(0, begin - lo, end - begin));
    ZS_ASSIGN_OR_RETURN(Tensor src, all.Narrow(0, r * longest, end - begin));
    ZS_RETURN_IF_ERROR(dst.CopyFrom(src));
  }
  return result;
}

absl::Status CheckSaveOptions(const HfSaveOptions& o) {
  if (!IsFloatingPoint(o.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("SaveHfWeights: dtype should be f32, bf16 or f16, found ",
                                                   DTypeName(o.dtype)));
  }
  if (o.max_shard_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("SaveHfWeights: max_shard_bytes should be at least 1, found ",
                                                   o.max_shard_bytes));
  }
  if (!o.config_json.empty()) {
    const json config = json::parse(o.config_json, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SaveHfWeights: config_json should be a JSON object (config.json), found ",
          config.is_discarded() ? std::string("text that is not JSON") : Describe(config)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveHfWeights(const std::string& dir, ShardedModel& model, const HfSaveOptions& o) {
  // Same options on every rank, same verdict: no collective needed yet.
  ZS_RETURN_IF_ERROR(CheckSaveOptions(o));
  Communicator& world = o.host != nullptr ? *o.host : model.world();  // host tensors
  const bool lead = world.rank() == 0;
  const DirNames d(dir);
  ZS_RETURN_IF_ERROR(Agree(world, lead ? PrepareTmpDir(d) : absl::OkStatus()));
  const SavePlan plan = PlanSave(model, o);
  // The lead's writing status; the gathers go on after it fails (they are collective).
  absl::Status mine;
  std::unique_ptr<StreamWriter> writer;
  int open_file = -1;
  auto write = [&](const SaveItem& item, const Tensor& value) -> absl::Status {
    if (item.file != open_file) {
      open_file = item.file;
      ZS_ASSIGN_OR_RETURN(writer, StreamWriter::Open(d.tmp_dir + "/" + plan.files[item.file],
                                                     plan.entries[item.file], {{"format", "pt"}}, o.file));
    }
    ZS_RETURN_IF_ERROR(writer->Append(item.name, value));
    const bool last_of_file = &item == &plan.items.back() || (&item + 1)->file != item.file;
    if (last_of_file) {
      ZS_RETURN_IF_ERROR(writer->Commit().status());
      writer.reset();
    }
    return absl::OkStatus();
  };
  // Runs of consecutive parameters held by one unit: one gather each.
  absl::Status gathered;
  for (size_t begin = 0; begin < plan.items.size() && gathered.ok();) {
    size_t end = begin;
    int64_t lo = plan.items[begin].param->offset, hi = lo;
    while (end < plan.items.size() && plan.items[end].unit == plan.items[begin].unit) {
      lo = std::min(lo, plan.items[end].param->offset);
      hi = std::max(hi, plan.items[end].param->offset + plan.items[end].param->numel);
      ++end;
    }
    absl::StatusOr<Tensor> values = GatherRange(model, plan.items[begin].unit, lo, hi, lead);
    gathered = values.status();
    for (size_t k = begin; k < end && lead && gathered.ok() && mine.ok(); ++k) {
      const SaveItem& item = plan.items[k];
      absl::StatusOr<Tensor> flat = values->Narrow(0, item.param->offset - lo, item.param->numel);
      absl::StatusOr<Tensor> value = flat.ok() ? flat->View(item.param->shape) : flat;
      mine = value.ok() ? write(item, *value) : value.status();
    }
    begin = end;
  }
  if (mine.ok()) mine = gathered;
  if (lead && mine.ok() && plan.items.empty()) {  // a model with no parameters: one empty file
    auto empty = StreamWriter::Open(d.tmp_dir + "/" + kHfSingleFile, {}, {{"format", "pt"}}, o.file);
    mine = empty.ok() ? (*empty)->Commit().status() : empty.status();
  }
  if (lead && mine.ok() && plan.files.size() > 1) {
    json index = {{"metadata", {{"total_size", plan.total_size}}}, {"weight_map", json::object()}};
    for (const SaveItem& item : plan.items) index["weight_map"][item.name] = plan.files[item.file];
    mine = WriteFileAtomically(d.tmp_dir + "/" + kHfIndexFile, index.dump(2) + "\n", o.file);
  }
  if (lead && mine.ok() && !o.config_json.empty()) {
    mine = WriteFileAtomically(d.tmp_dir + "/" + kHfConfigFile, o.config_json, o.file);
  }
  if (lead && mine.ok()) mine = SwapIntoPlace(d, o.file);
  writer.reset();  // an unfinished file's temporary goes before its directory
  if (lead && !mine.ok()) RemoveTree(d.tmp_dir);
  return Agree(world, mine);
}

}  // namespace zeroshard
