// Loading: CheckpointReader finds, for any parameter, the byte ranges that
// hold it in either format and whatever world size, strategy and wrap policy
// saved it (checkpoint.h: "Loading re-shards"); LoadCheckpoint reads this
// rank's new shards through it, and ConvertShardedToFull assembles a full
// checkpoint from a sharded one offline.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_internal.h"
#include "zeroshard/runtime/crc32c.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using checkpoint_internal::AddFile;
using checkpoint_internal::Agree;
using checkpoint_internal::CheckRegularFile;
using checkpoint_internal::DirNames;
using checkpoint_internal::Finalize;
using checkpoint_internal::kBuffersFile;
using checkpoint_internal::kManifest;
using checkpoint_internal::kModelFile;
using checkpoint_internal::kOptimizerFile;
using checkpoint_internal::OptimizerSlots;
using checkpoint_internal::PrepareTmpDir;
using checkpoint_internal::Quoted;
using checkpoint_internal::ReadWholeFile;
using checkpoint_internal::ShardFile;
using checkpoint_internal::StreamWriter;
using checkpoint_internal::WithUnit;
using nlohmann::json;

// ================================================================ loading

namespace {

std::string Revise(const std::string& name, const std::vector<std::pair<std::string, std::string>>& rules) {
  std::string out = name;
  for (const auto& [pattern, repl] : rules) out = std::regex_replace(out, std::regex(pattern), repl);
  return out;
}

// Where a parameter's elements are in a checkpoint.
struct SourceParam {
  std::string stored_name;  // the name of its values in the files
  std::string state_name;   // full: the name its optimizer state is under (the layout's first name)
  Shape shape;
  int unit = -1;            // sharded: unit index in the layout
  int64_t offset = 0;       // sharded: first element in the unit's flat buffer
  bool requires_grad = true;  // false: saved frozen, its optimizer state is zero
};

class CheckpointReader {
 public:
  static absl::StatusOr<CheckpointReader> Open(const std::string& dir, const LoadOptions& o) {
    CheckpointReader r;
    r.dir_ = dir;
    r.options_ = o;
    // Regular files only (Note [Checkpoint files are regular files]); no
    // manifest: not a (complete) checkpoint, NotFound.
    ZS_RETURN_IF_ERROR(CheckRegularFile(dir, kManifest, nullptr));
    ZS_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(dir + "/" + kManifest));
    ZS_ASSIGN_OR_RETURN(r.manifest_, ParseCheckpointManifest(text, dir + "/" + kManifest));
    r.type_ = r.manifest_.type;
    // Every file the manifest lists must be there, a regular file, with its size.
    for (const auto& [name, info] : r.manifest_.files) {
      uint64_t bytes = 0;
      if (absl::Status s = CheckRegularFile(dir, name, &bytes); !s.ok()) {
        return absl::IsNotFound(s) ? absl::DataLossError(s.message()) : s;
      }
      if (bytes != info.first) {
        return absl::DataLossError(absl::StrCat("checkpoint ", Quoted(dir), ": file ", Quoted(name), " has ", bytes,
                                                " bytes, expected ", info.first, " (truncated or replaced)"));
      }
    }
    // Names: stored name -> where (after revise_keys).
    for (size_t u = 0; u < r.manifest_.layout.size(); ++u) {
      for (const ManifestParam& p : r.manifest_.layout[u].params) {
        SourceParam sp;
        sp.stored_name = p.name;
        sp.state_name = p.name;
        sp.shape = p.shape;
        sp.unit = static_cast<int>(u);
        sp.offset = p.offset;
        sp.requires_grad = p.requires_grad;
        std::vector<std::string> names = {p.name};
        names.insert(names.end(), p.aliases.begin(), p.aliases.end());
        // A full model file may hold a tied parameter under each of its names
        // (the default), or once (SaveOptions::write_tied_once): each name
        // reads its own entry when there is one, else the first one present.
        std::vector<std::string> present;
        if (r.type_ == StateDictType::kFull && names.size() > 1) {
          ZS_ASSIGN_OR_RETURN(SafetensorsFile * model_file, r.File(kModelFile));
          for (const std::string& n : names) {
            if (model_file->Contains(n)) present.push_back(n);
          }
        }
        for (const std::string& n : names) {
          SourceParam named = sp;
          if (!present.empty()) {
            named.stored_name = std::find(present.begin(), present.end(), n) != present.end() ? n : present[0];
          }
          r.params_[Revise(n, o.revise_keys)] = named;
        }
      }
    }
    return r;
  }

  StateDictType type() const { return type_; }
  const CheckpointManifest& manifest() const { return manifest_; }
  const std::map<std::string, SourceParam>& params() const { return params_; }

  // Elements [offset, offset + count) of parameter `src` (slot "param" or an
  // optimizer slot) into `out` (f32, count elements).
  absl::Status ReadRange(const SourceParam& src, const std::string& slot, int64_t offset, int64_t count,
                         const Tensor& out) {
    // A frozen parameter's optimizer state is zero and not stored (Note
    // [Frozen parameters] in sharding/sharded_model.h); older
    // checkpoints stored the zeros. Loading it into a trainable parameter
    // starts its moments at zero.
    if (slot != "param" && !src.requires_grad) return out.Fill(0.0);
    if (type_ == StateDictType::kFull) {
      const bool model_file = slot == "param";
      ZS_ASSIGN_OR_RETURN(SafetensorsFile * f, File(model_file ? kModelFile : kOptimizerFile));
      return f->ReadRange(model_file ? src.stored_name : src.state_name + "." + slot, offset, count, out);
    }
    const ManifestUnit& unit = manifest_.layout[src.unit];
    const int64_t shard_numel = unit.shard_numel;
    const std::string entry = unit.name + "." + slot;
    int64_t e = src.offset + offset;
    int64_t done = 0;
    while (done < count) {
      const int rank = static_cast<int>(e / shard_numel);
      const int64_t local = e - rank * shard_numel;
      const int64_t take = std::min(count - done, shard_numel - local);
      ZS_ASSIGN_OR_RETURN(SafetensorsFile * f, File(ShardFile(rank)));
      ZS_ASSIGN_OR_RETURN(Tensor dst, out.Narrow(0, done, take));
      ZS_RETURN_IF_ERROR(f->ReadRange(entry, local, take, dst));
      done += take;
      e += take;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<SafetensorsFile*> File(const std::string& name) {
    auto it = files_.find(name);
    if (it != files_.end()) return it->second.get();
    auto listed = manifest_.files.find(name);
    if (listed == manifest_.files.end()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", Quoted(dir_), ": the manifest lists no file ", Quoted(name),
                                              name == kOptimizerFile ? " (saved without optimizer state?)" : ""));
    }
    const std::string path = dir_ + "/" + name;
    if (options_.verify_checksums) {
      ZS_ASSIGN_OR_RETURN(uint32_t crc, Crc32cOfFile(path));
      const uint32_t want = listed->second.second;
      if (crc != want) {
        return absl::DataLossError(absl::StrFormat("checkpoint '%s': file '%s' has CRC-32C %08x, expected %08x (corrupted)",
                                                   dir_, name, crc, want));
      }
    }
    ZS_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
    auto owned = std::make_unique<SafetensorsFile>(std::move(f));
    SafetensorsFile* raw = owned.get();
    files_[name] = std::move(owned);
    return raw;
  }

 private:
  std::string dir_;
  LoadOptions options_;
  CheckpointManifest manifest_;
  StateDictType type_ = StateDictType::kSharded;
  std::map<std::string, SourceParam> params_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
};

}  // namespace

absl::StatusOr<LoadResult> LoadCheckpoint(const std::string& dir, ShardedModel& model,
                                          optim::ShardedOptimizer* optimizer, const LoadOptions& o) {
  Communicator& world = o.host != nullptr ? *o.host : model.world();  // host tensors
  absl::StatusOr<CheckpointReader> opened = CheckpointReader::Open(dir, o);
  ZS_RETURN_IF_ERROR(Agree(world, opened.status()));
  CheckpointReader& reader = *opened;
  LoadResult result;
  result.type = reader.type();
  result.saved_world_size = reader.manifest().world_size;
  result.saved_strategy = reader.manifest().strategy;
  result.state = reader.manifest().state;
  // Which names match.
  std::set<std::string> model_names;
  std::vector<ShardedUnit*> units = model.units();
  for (ShardedUnit* u : units) {
    for (const FlatParamSlot& p : u->flat.params()) {
      model_names.insert(p.name);
      const bool found = reader.params().count(p.name) > 0 ||
                         std::any_of(p.aliases.begin(), p.aliases.end(),
                                     [&](const std::string& a) { return reader.params().count(a) > 0; });
      if (!found) result.missing_keys.push_back(p.name);
      for (const std::string& a : p.aliases) model_names.insert(a);
    }
  }
  std::set<std::string> unexpected;
  for (const auto& [name, sp] : reader.params()) {
    if (!model_names.count(name)) unexpected.insert(name);
  }
  result.unexpected_keys.assign(unexpected.begin(), unexpected.end());
  if (o.strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadCheckpoint(", Quoted(dir), ", strict): missing keys [", absl::StrJoin(result.missing_keys, ", "),
        "], unexpected keys [", absl::StrJoin(result.unexpected_keys, ", "), "]"));
  }
  const std::string saved_opt = reader.manifest().optimizer;
  const bool load_opt = o.load_optimizer && optimizer != nullptr;
  if (load_opt && saved_opt != optimizer->name()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadCheckpoint(", Quoted(dir), "): the checkpoint holds optimizer state of \"", saved_opt,
        "\" but the optimizer is ", optimizer->name(), " (load with load_optimizer = false to take the model only)"));
  }
  const std::vector<std::string> slots = load_opt ? OptimizerSlots(optimizer) : std::vector<std::string>{};
  const std::optional<std::vector<std::string>>& saved_slots = reader.manifest().optimizer_slots;
  if (load_opt && saved_slots.has_value() && *saved_slots != slots) {
    // Same name, other state (SGD with and without momentum, a rule that changed).
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadCheckpoint(", Quoted(dir), "): the checkpoint holds optimizer state slots [",
        absl::StrJoin(*saved_slots, ", "), "] of \"", saved_opt, "\" but the optimizer keeps [",
        absl::StrJoin(slots, ", "), "] (load with load_optimizer = false to take the model only)"));
  }
  absl::Status mine;
  for (size_t i = 0; i < units.size() && mine.ok(); ++i) {
    ShardedUnit* u = units[i];
    // Unit by unit: an NVMe-resident shard and state are read, filled and written back.
    mine = WithUnit(model, optimizer, i, slots, /*write=*/true,
                    [&](const Tensor& shard, const std::vector<Tensor>& states) -> absl::Status {
      for (const FlatParameter::Piece& piece : u->flat.PiecesOfShard(u->flat.shard_rank())) {
        const FlatParamSlot& p = u->flat.params()[piece.param];
        // A tied parameter is found under any of its names (Note [Tied
        // parameters]); where they are stored apart, they must agree.
        std::vector<std::pair<std::string, const SourceParam*>> sources;
        std::vector<std::string> names = {p.name};
        names.insert(names.end(), p.aliases.begin(), p.aliases.end());
        for (const std::string& n : names) {
          auto it = reader.params().find(n);
          if (it == reader.params().end()) continue;
          const SourceParam& sp = it->second;
          const bool seen = std::any_of(sources.begin(), sources.end(), [&](const auto& s) {
            return s.second->stored_name == sp.stored_name && s.second->unit == sp.unit && s.second->offset == sp.offset;
          });
          if (seen) continue;
          if (sp.shape != p.shape) {
            return absl::InvalidArgumentError(absl::StrCat("LoadCheckpoint(", Quoted(dir), "): ", n, " has shape ",
                                                           ShapeToString(sp.shape), " in the checkpoint, expected ",
                                                           ShapeToString(p.shape)));
          }
          sources.emplace_back(n, &sp);
        }
        if (sources.empty()) continue;  // missing (not strict): keeps its init
        const SourceParam& src = *sources[0].second;
        std::vector<std::pair<std::string, Tensor>> targets = {{"param", shard}};
        for (size_t k = 0; k < states.size(); ++k) targets.emplace_back(slots[k], states[k]);
        for (auto& [slot, buffer] : targets) {
          ZS_ASSIGN_OR_RETURN(Tensor dst, buffer.Narrow(0, piece.shard_offset, piece.count));
          ZS_RETURN_IF_ERROR(reader.ReadRange(src, slot, piece.param_offset, piece.count, dst));
        }
        for (size_t k = 1; k < sources.size(); ++k) {
          ZS_ASSIGN_OR_RETURN(Tensor other, Tensor::Empty({piece.count}, DType::kF32));
          ZS_RETURN_IF_ERROR(reader.ReadRange(*sources[k].second, "param", piece.param_offset, piece.count, other));
          ZS_ASSIGN_OR_RETURN(Tensor mine, shard.Narrow(0, piece.shard_offset, piece.count));
          ZS_RETURN_IF_ERROR(nn::CheckTiedValuesEqual(
              absl::StrCat("LoadCheckpoint(", Quoted(dir), "), elements counted from ", piece.param_offset),
              sources[0].first, mine, sources[k].first, other));
        }
      }
      return absl::OkStatus();
    });
  }
  if (mine.ok() && load_opt) {
    const int64_t step = reader.manifest().optimizer_step;
    ZS_RETURN_IF_ERROR(optimizer->set_step_count(step));
  }
  // Buffers (replicated).
  if (mine.ok()) {
    for (auto& [name, t] : model.module().NamedBuffers()) {
      const std::string file = reader.type() == StateDictType::kFull ? kModelFile : kBuffersFile;
      absl::StatusOr<SafetensorsFile*> f = reader.File(file);
      if (!f.ok()) {
        mine = f.status();
        break;
      }
      mine = (*f)->ReadInto(name, t);
      if (!mine.ok()) break;
    }
  }
  ZS_RETURN_IF_ERROR(Agree(world, mine));
  return result;
}

// ================================================================ offline conversion

absl::Status ConvertShardedToFull(const std::string& sharded_dir, const std::string& full_dir,
                                  const AtomicFileOptions& file) {
  ZS_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(sharded_dir, LoadOptions{.revise_keys = {}}));
  const CheckpointManifest& m = reader.manifest();
  if (m.type != StateDictType::kSharded) {
    return absl::InvalidArgumentError(absl::StrCat("ConvertShardedToFull: ", Quoted(sharded_dir), " is already a full checkpoint"));
  }
  std::vector<std::string> slots;
  if (m.optimizer_slots.has_value()) {
    slots = *m.optimizer_slots;
  } else if (m.optimizer == "adamw" || m.optimizer == "adam") {  // written before optimizer_slots
    slots = {"exp_avg", "exp_avg_sq"};
  } else if (m.optimizer == "sgd" && !m.layout.empty()) {
    // SGD with momentum stores a momentum_buffer per unit (but a frozen one).
    absl::StatusOr<SafetensorsFile*> f = reader.File(ShardFile(0));
    for (const ManifestUnit& unit : m.layout) {
      if (f.ok() && (*f)->Contains(unit.name + ".momentum_buffer")) slots = {"momentum_buffer"};
    }
  }
  std::vector<StreamWriter::Entry> model_entries, opt_entries;
  std::vector<std::pair<std::string, SourceParam>> order;
  std::map<std::string, std::string> tied;  // alias -> name
  for (const ManifestUnit& unit : m.layout) {
    for (const ManifestParam& p : unit.params) {
      const SourceParam& sp = reader.params().at(p.name);
      model_entries.emplace_back(p.name, DType::kF32, sp.shape);
      order.emplace_back(p.name, sp);
      for (const std::string& alias : p.aliases) {
        model_entries.emplace_back(alias, DType::kF32, sp.shape);
        order.emplace_back(alias, sp);
        tied[alias] = p.name;
      }
      if (!p.requires_grad) continue;  // no optimizer state
      for (const std::string& slot : slots) opt_entries.emplace_back(p.name + "." + slot, DType::kF32, sp.shape);
    }
  }
  // The new manifest: the old one with another type and file list.
  ZS_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(sharded_dir + "/" + kManifest));
  json manifest = json::parse(text);  // already validated by the reader
  // Sealed again by Finalize, in this version's format (Note [Manifest checksum]).
  manifest.erase(kManifestChecksumKey);
  manifest["version"] = kCheckpointFormatVersion;
  manifest["type"] = "full";
  manifest["files"] = json::object();
  const DirNames d(full_dir);
  ZS_RETURN_IF_ERROR(PrepareTmpDir(d));
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<StreamWriter> mw,
                      StreamWriter::Open(d.tmp_dir + "/" + kModelFile, model_entries, ModelFileMetadata(tied), file));
  for (const auto& [name, sp] : order) {  // one parameter in memory at a time
    ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({NumElements(sp.shape)}, DType::kF32));
    ZS_RETURN_IF_ERROR(reader.ReadRange(sp, "param", 0, t.numel(), t));
    ZS_RETURN_IF_ERROR(mw->Append(name, t));
  }
  ZS_ASSIGN_OR_RETURN(auto minfo, mw->Commit());
  AddFile(manifest, kModelFile, minfo);
  if (!opt_entries.empty()) {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<StreamWriter> ow,
                        StreamWriter::Open(d.tmp_dir + "/" + kOptimizerFile, opt_entries, {}, file));
    for (const ManifestUnit& unit : m.layout) {
      for (const ManifestParam& p : unit.params) {
        const SourceParam& sp = reader.params().at(p.name);
        if (!p.requires_grad) continue;
        for (const std::string& slot : slots) {
          ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({NumElements(sp.shape)}, DType::kF32));
          ZS_RETURN_IF_ERROR(reader.ReadRange(sp, slot, 0, t.numel(), t));
          ZS_RETURN_IF_ERROR(ow->Append(p.name + "." + slot, t));
        }
      }
    }
    ZS_ASSIGN_OR_RETURN(auto oinfo, ow->Commit());
    AddFile(manifest, kOptimizerFile, oinfo);
  }
  return Finalize(d, manifest, file);
}

}  // namespace zeroshard
