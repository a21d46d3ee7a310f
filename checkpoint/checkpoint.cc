#include "checkpoint/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "runtime/crc32c.h"
#include "checkpoint/safetensors.h"
#include "runtime/status.h"

namespace zeroshard {

using nlohmann::json;

std::string CheckpointDir(const std::string& work_dir, int64_t step) {
  return absl::StrFormat("%s/step-%06d", work_dir, step);
}

namespace {

constexpr char kManifest[] = "checkpoint.json";
constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";
constexpr char kBuffersFile[] = "buffers.safetensors";

std::string Quoted(absl::string_view s) { return absl::StrCat("'", s, "'"); }
std::string ShardFile(int shard_rank) { return absl::StrCat("rank_", shard_rank, ".safetensors"); }

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::Status MakeDirs(const std::string& path) {
  std::string cur;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty()) {
      if (cur.empty()) cur = "/";
      continue;
    }
    cur = cur.empty() || cur == "/" ? absl::StrCat(cur, part) : absl::StrCat(cur, "/", part);
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("creating directory ", Quoted(cur)));
    }
  }
  return absl::OkStatus();
}

// rm -rf for the checkpoint's own directories (files and one level of subdirectories).
void RemoveTree(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    ::unlink(path.c_str());
    return;
  }
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string child = path + "/" + name;
    struct stat st;
    if (::lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      RemoveTree(child);
    } else {
      ::unlink(child.c_str());
    }
  }
  ::closedir(d);
  ::rmdir(path.c_str());
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", Quoted(path)));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ================================================================ streaming safetensors

// Writes a safetensors file whose header is known before its data: the
// tensors are appended in header order, one at a time.
class StreamWriter {
 public:
  using Entry = std::tuple<std::string, DType, Shape>;

  static absl::StatusOr<std::unique_ptr<StreamWriter>> Open(const std::string& path,
                                                            const std::vector<Entry>& entries,
                                                            const std::map<std::string, std::string>& metadata,
                                                            const AtomicFileOptions& options) {
    SafetensorsTensors placeholders;
    for (const auto& [name, dtype, shape] : entries) {
      placeholders.emplace_back(name, Tensor::Wrap(nullptr, shape, dtype));
    }
    ZS_ASSIGN_OR_RETURN(std::string header, BuildSafetensorsHeader(placeholders, metadata));
    ZS_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::Open(path, options));
    auto w = std::unique_ptr<StreamWriter>(new StreamWriter(std::move(file), entries));
    ZS_RETURN_IF_ERROR(w->file_.Write(header.data(), header.size()));
    return w;
  }

  absl::Status Append(const std::string& name, const Tensor& t) {
    if (next_ >= entries_.size() || std::get<0>(entries_[next_]) != name) {
      return absl::InternalError(absl::StrCat("checkpoint writer: ", Quoted(name), " out of order"));
    }
    const auto& [n, dtype, shape] = entries_[next_++];
    Tensor data = t;
    if (data.dtype() != dtype || !data.is_contiguous() || !data.device().is_cpu()) {
      ZS_ASSIGN_OR_RETURN(data, Tensor::Empty(shape, dtype, DefaultCpuAllocator()));
      ZS_RETURN_IF_ERROR(data.CopyFrom(t));
    }
    if (data.shape() != shape) {
      ZS_ASSIGN_OR_RETURN(data, data.Reshape(shape));
    }
    return file_.Write(data.raw_data(), data.nbytes());
  }

  // Returns {bytes, crc32c}.
  absl::StatusOr<std::pair<uint64_t, uint32_t>> Commit() {
    if (next_ != entries_.size()) {
      return absl::InternalError(absl::StrCat("checkpoint writer: ", entries_.size() - next_,
                                              " entries were not written"));
    }
    const uint64_t bytes = file_.bytes_written();
    const uint32_t crc = file_.crc32c();
    ZS_RETURN_IF_ERROR(file_.Commit());
    return std::make_pair(bytes, crc);
  }

 private:
  StreamWriter(AtomicFileWriter file, std::vector<Entry> entries)
      : file_(std::move(file)), entries_(std::move(entries)) {}
  AtomicFileWriter file_;
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

// ================================================================ tied parameters in files

}  // namespace

std::map<std::string, std::string> TiedAliases(nn::Module& module) {
  std::map<std::string, std::string> out;
  std::map<const autograd::VariableImpl*, std::string> first;
  for (auto& [name, slot] : module.NamedParameterSlots()) {
    auto [it, fresh] = first.emplace(slot->var.impl().get(), name);
    if (!fresh) out[name] = it->second;
  }
  return out;
}

std::map<std::string, std::string> ModelFileMetadata(const std::map<std::string, std::string>& tied) {
  std::map<std::string, std::string> m = {{"format", "pt"}};
  if (!tied.empty()) m[std::string(kTiedParametersKey)] = json(tied).dump();
  return m;
}

SafetensorsTensors ModelFileTensors(const nn::NamedTensors& state, const std::map<std::string, std::string>& tied,
                                    bool write_tied_once) {
  SafetensorsTensors out;
  for (const auto& [name, t] : state) {
    if (write_tied_once && tied.count(name)) continue;
    out.emplace_back(name, t);
  }
  return out;
}

namespace {

// ================================================================ what a checkpoint holds

// Names of the optimizer state tensors for `opt` ("exp_avg", ...).
std::vector<std::string> OptimizerSlots(const optim::ShardedOptimizer* opt) {
  return opt == nullptr ? std::vector<std::string>{} : opt->state_slots();
}

// Runs fn with unit i's master shard and (when `slots` is not empty) its
// optimizer state tensors, in `slots` order, resident: one unit at a time,
// so state offloaded to NVMe streams through its swap buffers and is never
// all in memory (Note [NVMe offload]). `write`: fn's changes are kept. A
// frozen unit has no optimizer state (Note [Frozen parameters]): fn gets none.
absl::Status WithUnit(ShardedModel& model, optim::ShardedOptimizer* opt, size_t i,
                      const std::vector<std::string>& slots, bool write,
                      const std::function<absl::Status(const Tensor& shard, const std::vector<Tensor>& states)>& fn) {
  ShardedUnit* u = model.units()[i];
  return model.WithShard(*u, write, [&](const Tensor& shard) -> absl::Status {
    if (slots.empty() || u->frozen()) return fn(shard, {});
    return opt->WithUnitState(i, write, [&](const std::vector<Tensor>& states) { return fn(shard, states); });
  });
}

int64_t OptimizerStep(const optim::ShardedOptimizer* opt) { return opt ? opt->step_count() : 0; }

bool Included(const FlatParamSlot& p, const SaveOptions& o) {
  return p.requires_grad || !o.exclude_frozen_parameters;
}

json StateToJson(const TrainingState& s, const SaveOptions& o) {
  json j;
  j["step"] = s.step;
  if (o.save_param_scheduler) {
    j["lr_scheduler"] = s.lr_scheduler;
    j["loss_scaler"] = s.loss_scaler;
  }
  j["rng_offsets"] = s.rng_offsets;
  j["config"] = s.config;
  j["extra"] = s.extra;
  return j;
}

json LayoutJson(ShardedModel& model, const SaveOptions& o) {
  json units = json::array();
  for (ShardedUnit* u : model.units()) {
    json params = json::array();
    for (const FlatParamSlot& p : u->flat.params()) {
      if (!Included(p, o)) continue;
      params.push_back({{"name", p.name},
                        {"aliases", p.aliases},
                        {"shape", std::vector<int64_t>(p.shape.begin(), p.shape.end())},
                        {"offset", p.offset},
                        {"numel", p.numel},
                        {"requires_grad", p.requires_grad}});
    }
    units.push_back({{"name", u->name},
                     {"numel", u->flat.numel()},
                     {"padded_numel", u->flat.padded_numel()},
                     {"shard_numel", u->flat.shard_numel()},
                     {"shard_group_size", u->flat.shard_group_size()},
                     {"params", params}});
  }
  return units;
}

json BaseManifest(StateDictType type, ShardedModel& model, optim::ShardedOptimizer* opt,
                  const TrainingState& state, const SaveOptions& o) {
  json m;
  m["format"] = "zeroshard-checkpoint";
  m["version"] = kCheckpointFormatVersion;
  m["type"] = std::string(StateDictTypeName(type));
  m["world_size"] = model.world().size();
  m["strategy"] = std::string(ShardingStrategyName(model.options().strategy));
  m["shard_group_size"] = model.shard_group().size();
  m["optimizer"] = opt != nullptr && o.save_optimizer ? std::string(optim::OptimizerKindName(opt->options().kind)) : "";
  m["optimizer_step"] = OptimizerStep(opt);
  m["state"] = StateToJson(state, o);
  m["layout"] = LayoutJson(model, o);
  m["files"] = json::object();
  return m;
}

// ================================================================ the directory protocol

// Files go to <dir>.tmp; the lead renames it to <dir> once everything is in.
struct DirNames {
  std::string final_dir, tmp_dir;
  explicit DirNames(const std::string& dir) : final_dir(dir), tmp_dir(dir + ".tmp") {}
};

absl::Status PrepareTmpDir(const DirNames& d) {
  RemoveTree(d.tmp_dir);  // a stale, incomplete save
  ZS_RETURN_IF_ERROR(MakeDirs(DirectoryOf(d.final_dir)));
  return MakeDirs(d.tmp_dir);
}

// Writes the manifest last, then swaps the directory into place.
absl::Status Finalize(const DirNames& d, const json& manifest, const AtomicFileOptions& file) {
  ZS_RETURN_IF_ERROR(WriteFileAtomically(d.tmp_dir + "/" + kManifest, manifest.dump(2), file));
  if (file.fsync) {
    ZS_RETURN_IF_ERROR(FsyncDirectory(d.tmp_dir));
  }
  std::string old;
  if (Exists(d.final_dir)) {
    old = absl::StrCat(d.final_dir, ".old.", ::getpid());
    RemoveTree(old);
    if (::rename(d.final_dir.c_str(), old.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("moving the previous checkpoint ", Quoted(d.final_dir), " aside"));
    }
  }
  if (::rename(d.tmp_dir.c_str(), d.final_dir.c_str()) != 0) {
    const absl::Status s = ErrnoStatus(errno, absl::StrCat("renaming ", Quoted(d.tmp_dir), " to ", Quoted(d.final_dir)));
    if (!old.empty()) ::rename(old.c_str(), d.final_dir.c_str());
    return s;
  }
  if (file.fsync) {
    ZS_RETURN_IF_ERROR(FsyncDirectory(DirectoryOf(d.final_dir)));
  }
  if (!old.empty()) RemoveTree(old);
  return absl::OkStatus();
}

// A status every rank agrees on: the first non-OK (in rank order) or OK.
absl::Status Agree(Communicator& comm, const absl::Status& mine) {
  absl::StatusOr<Tensor> flag = Tensor::Full({1}, mine.ok() ? 0.0 : static_cast<double>(comm.rank() + 1),
                                             DType::kF32, DefaultCpuAllocator());
  if (!flag.ok()) return flag.status();
  // Smallest failing rank + 1, via max of (size - rank) encodings.
  ZS_RETURN_IF_ERROR(flag->Fill(mine.ok() ? 0.0 : static_cast<double>(comm.size() - comm.rank())));
  ZS_RETURN_IF_ERROR(comm.AllReduce(*flag, ReduceOp::kMax));
  ZS_ASSIGN_OR_RETURN(double v, flag->Item());
  if (v == 0) return absl::OkStatus();
  if (!mine.ok()) return mine;
  const int failed = comm.size() - static_cast<int>(v);
  return absl::AbortedError(absl::StrCat("checkpoint: rank ", failed, " failed (see its error)"));
}

// ================================================================ sharded save

struct ShardFilePlan {
  bool writes = false;  // this rank writes a shard file (replica rank 0)
  std::string name;
  std::vector<std::string> slots;  // optimizer state saved per unit
  std::vector<StreamWriter::Entry> entries;
  std::vector<Tensor> snapshot;  // host copies in entry order (async saves); empty: read at write time
};

// Every tensor of this rank's shard file in entry order, unit by unit.
absl::Status ForEachShardTensor(ShardedModel& model, optim::ShardedOptimizer* opt, const std::vector<std::string>& slots,
                                const std::function<absl::Status(const std::string&, const Tensor&)>& fn) {
  std::vector<ShardedUnit*> units = model.units();
  for (size_t i = 0; i < units.size(); ++i) {
    ZS_RETURN_IF_ERROR(WithUnit(model, opt, i, slots, /*write=*/false,
                                [&](const Tensor& shard, const std::vector<Tensor>& states) -> absl::Status {
                                  ZS_RETURN_IF_ERROR(fn(units[i]->name + ".param", shard));
                                  for (size_t k = 0; k < states.size(); ++k) {
                                    ZS_RETURN_IF_ERROR(fn(units[i]->name + "." + slots[k], states[k]));
                                  }
                                  return absl::OkStatus();
                                }));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardFilePlan> PlanShardFile(ShardedModel& model, optim::ShardedOptimizer* opt,
                                            const SaveOptions& o, bool snapshot) {
  ShardFilePlan plan;
  plan.writes = model.replica_group().rank() == 0;
  if (!plan.writes) return plan;
  plan.name = ShardFile(model.shard_group().rank());
  plan.slots = o.save_optimizer ? OptimizerSlots(opt) : std::vector<std::string>{};
  for (ShardedUnit* u : model.units()) {
    plan.entries.emplace_back(u->name + ".param", DType::kF32, Shape{u->flat.shard_numel()});
    if (u->frozen()) continue;  // no optimizer state
    for (const std::string& slot : plan.slots) {
      plan.entries.emplace_back(u->name + "." + slot, DType::kF32, Shape{u->flat.shard_numel()});
    }
  }
  if (snapshot) {
    ZS_RETURN_IF_ERROR(ForEachShardTensor(model, opt, plan.slots, [&](const std::string&, const Tensor& t) -> absl::Status {
      ZS_ASSIGN_OR_RETURN(Tensor c, t.Clone(DefaultCpuAllocator()));
      plan.snapshot.push_back(c);
      return absl::OkStatus();
    }));
  }
  return plan;
}

// Writes the planned shard file from the snapshot or, without one, from the
// model and optimizer (then unit by unit: model and opt are needed).
absl::StatusOr<std::pair<uint64_t, uint32_t>> WriteShardFile(const DirNames& d, const ShardFilePlan& p,
                                                             const AtomicFileOptions& file,
                                                             ShardedModel* model = nullptr,
                                                             optim::ShardedOptimizer* opt = nullptr) {
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<StreamWriter> w,
                      StreamWriter::Open(d.tmp_dir + "/" + p.name, p.entries, {}, file));
  if (model == nullptr) {
    for (size_t i = 0; i < p.entries.size(); ++i) {
      ZS_RETURN_IF_ERROR(w->Append(std::get<0>(p.entries[i]), p.snapshot[i]));
    }
  } else {
    ZS_RETURN_IF_ERROR(ForEachShardTensor(*model, opt, p.slots, [&](const std::string& name, const Tensor& t) {
      return w->Append(name, t);
    }));
  }
  return w->Commit();
}

// Buffers are replicated: rank 0 writes them (sharded format) or puts them in the model file (full).
SafetensorsTensors Buffers(ShardedModel& model) {
  SafetensorsTensors out;
  for (auto& [name, t] : model.module().NamedBuffers()) out.emplace_back(name, t);
  return out;
}

// ================================================================ full save

// Every rank runs this (the gathers are collective); `sink` runs on the lead
// with each named tensor, in the order of Entries().
struct FullPlan {
  std::vector<StreamWriter::Entry> model_entries, optimizer_entries;
  std::map<std::string, std::string> tied;  // alias -> name (Note [Tied parameters in files])
  std::map<std::string, std::string> ModelMetadata() const { return ModelFileMetadata(tied); }
};

FullPlan PlanFull(ShardedModel& model, optim::ShardedOptimizer* opt, const SaveOptions& o) {
  FullPlan plan;
  const std::vector<std::string> slots = o.save_optimizer ? OptimizerSlots(opt) : std::vector<std::string>{};
  for (ShardedUnit* u : model.units()) {
    for (const FlatParamSlot& p : u->flat.params()) {
      if (!Included(p, o)) continue;
      plan.model_entries.emplace_back(p.name, DType::kF32, p.shape);
      for (const std::string& alias : p.aliases) {
        if (!o.write_tied_once) plan.model_entries.emplace_back(alias, DType::kF32, p.shape);
        plan.tied[alias] = p.name;
      }
      if (!p.requires_grad) continue;  // no optimizer state (Note [Frozen parameters])
      for (const std::string& slot : slots) plan.optimizer_entries.emplace_back(p.name + "." + slot, DType::kF32, p.shape);
    }
  }
  for (auto& [name, t] : Buffers(model)) plan.model_entries.emplace_back(name, t.dtype(), t.shape());
  return plan;
}

// Gathers unit by unit (f32 masters and optimizer shards: one unit's full
// buffers exist at a time) and hands the lead every tensor of the plan in order.
absl::Status GatherFull(ShardedModel& model, optim::ShardedOptimizer* opt, const SaveOptions& o,
                        const std::function<absl::Status(bool model_file, const std::string&, const Tensor&)>& sink) {
  const bool lead = model.world().rank() == 0;
  const std::vector<std::string> slots = o.save_optimizer ? OptimizerSlots(opt) : std::vector<std::string>{};
  std::vector<ShardedUnit*> units = model.units();
  for (size_t i = 0; i < units.size(); ++i) {
    ShardedUnit* u = units[i];
    auto gather = [&](const Tensor& shard) -> absl::StatusOr<Tensor> {
      ZS_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty({u->flat.padded_numel()}, DType::kF32, DefaultCpuAllocator()));
      ZS_ASSIGN_OR_RETURN(Tensor src, shard.device().is_cpu() ? absl::StatusOr<Tensor>(shard) : shard.To(DefaultCpuAllocator()));
      ZS_RETURN_IF_ERROR(model.shard_group().AllGather(src, full));
      return full;
    };
    Tensor params;
    std::vector<Tensor> states;
    ZS_RETURN_IF_ERROR(WithUnit(model, opt, i, slots, /*write=*/false,
                                [&](const Tensor& shard, const std::vector<Tensor>& shard_states) -> absl::Status {
                                  ZS_ASSIGN_OR_RETURN(params, gather(shard));
                                  for (const Tensor& st : shard_states) {
                                    ZS_ASSIGN_OR_RETURN(Tensor g, gather(st));
                                    states.push_back(g);
                                  }
                                  return absl::OkStatus();
                                }));
    if (!lead) continue;
    for (const FlatParamSlot& p : u->flat.params()) {
      if (!Included(p, o)) continue;
      ZS_ASSIGN_OR_RETURN(Tensor flat, params.Narrow(0, p.offset, p.numel));
      ZS_ASSIGN_OR_RETURN(Tensor value, flat.View(p.shape));
      ZS_RETURN_IF_ERROR(sink(true, p.name, value));
      for (const std::string& alias : p.aliases) {
        if (!o.write_tied_once) ZS_RETURN_IF_ERROR(sink(true, alias, value));
      }
      if (!p.requires_grad) continue;  // as PlanFull
      for (size_t k = 0; k < slots.size(); ++k) {
        ZS_ASSIGN_OR_RETURN(Tensor sflat, states[k].Narrow(0, p.offset, p.numel));
        ZS_ASSIGN_OR_RETURN(Tensor svalue, sflat.View(p.shape));
        ZS_RETURN_IF_ERROR(sink(false, p.name + "." + slots[k], svalue));
      }
    }
  }
  if (lead) {
    for (auto& [name, t] : Buffers(model)) {
      ZS_RETURN_IF_ERROR(sink(true, name, t));
    }
  }
  return absl::OkStatus();
}

void AddFile(json& manifest, const std::string& name, std::pair<uint64_t, uint32_t> info) {
  manifest["files"][name] = {{"bytes", info.first}, {"crc32c", info.second}};
}

}  // namespace

// ================================================================ SaveCheckpoint

absl::Status SaveCheckpoint(const std::string& dir, ShardedModel& model, optim::ShardedOptimizer* optimizer,
                            const TrainingState& state, const SaveOptions& o) {
  Communicator& world = model.world();
  const bool lead = world.rank() == 0;
  const DirNames d(dir);
  ZS_RETURN_IF_ERROR(Agree(world, lead ? PrepareTmpDir(d) : absl::OkStatus()));
  json manifest = BaseManifest(o.type, model, optimizer, state, o);
  absl::Status mine;
  if (o.type == StateDictType::kSharded) {
    absl::StatusOr<ShardFilePlan> plan = PlanShardFile(model, optimizer, o, /*snapshot=*/false);
    std::pair<uint64_t, uint32_t> info{0, 0};
    mine = plan.status();
    if (mine.ok() && plan->writes) {
      auto r = WriteShardFile(d, *plan, o.file, &model, optimizer);
      mine = r.status();
      if (r.ok()) info = *r;
    }
    if (mine.ok() && lead && !Buffers(model).empty()) {
      SafetensorsWriteOptions wo{.fsync = o.file.fsync, .fail_after_bytes = o.file.fail_after_bytes};
      mine = WriteSafetensors(d.tmp_dir + "/" + kBuffersFile, Buffers(model), {}, wo);
      if (mine.ok()) {
        ZS_ASSIGN_OR_RETURN(uint32_t crc, Crc32cOfFile(d.tmp_dir + "/" + kBuffersFile));
        struct stat st;
        ::stat((d.tmp_dir + "/" + kBuffersFile).c_str(), &st);
        AddFile(manifest, kBuffersFile, {static_cast<uint64_t>(st.st_size), crc});
      }
    }
    if (absl::Status agreed = Agree(world, mine); !agreed.ok()) {
      if (lead) RemoveTree(d.tmp_dir);
      return agreed;
    }
    // Every writer's (bytes, crc) to the lead: [writes, bytes, crc] per rank.
    ZS_ASSIGN_OR_RETURN(Tensor mine_info, Tensor::FromVector(std::vector<int64_t>{
        plan->writes ? 1 : 0, static_cast<int64_t>(info.first), static_cast<int64_t>(info.second),
        model.shard_group().rank()}, {4}));
    ZS_ASSIGN_OR_RETURN(Tensor all_info, Tensor::Empty({4 * world.size()}, DType::kI64));
    ZS_RETURN_IF_ERROR(world.AllGather(mine_info, all_info));
    if (lead) {
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> v, all_info.ToVector<int64_t>());
      for (int r = 0; r < world.size(); ++r) {
        if (v[4 * r] == 0) continue;
        AddFile(manifest, ShardFile(static_cast<int>(v[4 * r + 3])),
                {static_cast<uint64_t>(v[4 * r + 1]), static_cast<uint32_t>(v[4 * r + 2])});
      }
    }
  } else {
    const FullPlan plan = PlanFull(model, optimizer, o);
    std::unique_ptr<StreamWriter> model_w, opt_w;
    if (lead) {
      auto mw = StreamWriter::Open(d.tmp_dir + "/" + kModelFile, plan.model_entries, plan.ModelMetadata(), o.file);
      mine = mw.status();
      if (mine.ok()) model_w = *std::move(mw);
      if (mine.ok() && !plan.optimizer_entries.empty()) {
        auto ow = StreamWriter::Open(d.tmp_dir + "/" + kOptimizerFile, plan.optimizer_entries, {}, o.file);
        mine = ow.status();
        if (mine.ok()) opt_w = *std::move(ow);
      }
    }
    // The gathers are collective: every rank takes part even if the lead failed to open.
    absl::Status gathered = GatherFull(model, optimizer, o, [&](bool model_file, const std::string& name,
                                                                 const Tensor& t) -> absl::Status {
      if (!mine.ok()) return absl::OkStatus();
      mine = (model_file ? model_w : opt_w)->Append(name, t);
      return absl::OkStatus();
    });
    if (mine.ok()) mine = gathered;
    if (lead && mine.ok()) {
      auto r = model_w->Commit();
      mine = r.status();
      if (r.ok()) AddFile(manifest, kModelFile, *r);
      if (mine.ok() && opt_w) {
        auto r2 = opt_w->Commit();
        mine = r2.status();
        if (r2.ok()) AddFile(manifest, kOptimizerFile, *r2);
      }
    }
    if (absl::Status agreed = Agree(world, mine); !agreed.ok()) {
      if (lead) RemoveTree(d.tmp_dir);
      return agreed;
    }
  }
  absl::Status fin = lead ? Finalize(d, manifest, o.file) : absl::OkStatus();
  if (lead && !fin.ok()) RemoveTree(d.tmp_dir);
  return Agree(world, fin);
}

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
    ZS_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(dir + "/" + kManifest));
    ZS_ASSIGN_OR_RETURN(r.manifest_, ParseCheckpointManifest(text, dir + "/" + kManifest));
    r.type_ = r.manifest_.type;
    // Every file the manifest lists must be there with its size.
    for (const auto& [name, info] : r.manifest_.files) {
      struct stat st;
      const std::string path = dir + "/" + name;
      if (::stat(path.c_str(), &st) != 0) {
        return absl::DataLossError(absl::StrCat("checkpoint ", Quoted(dir), ": file ", Quoted(name), " is missing"));
      }
      if (static_cast<uint64_t>(st.st_size) != info.first) {
        return absl::DataLossError(absl::StrCat("checkpoint ", Quoted(dir), ": file ", Quoted(name), " has ", st.st_size,
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
  Communicator& world = model.world();
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
  if (load_opt && saved_opt != optim::OptimizerKindName(optimizer->options().kind)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadCheckpoint(", Quoted(dir), "): the checkpoint holds optimizer state of \"", saved_opt,
        "\" but the optimizer is ", optim::OptimizerKindName(optimizer->options().kind),
        " (load with load_optimizer = false to take the model only)"));
  }
  const std::vector<std::string> slots = load_opt ? OptimizerSlots(optimizer) : std::vector<std::string>{};
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

// ================================================================ async

AsyncCheckpointer::~AsyncCheckpointer() { (void)Wait(); }

absl::Status AsyncCheckpointer::Wait() {
  if (thread_.joinable()) thread_.join();
  return status_;
}

absl::Status AsyncCheckpointer::Start(const std::string& dir, ShardedModel& model,
                                      optim::ShardedOptimizer* optimizer, const TrainingState& state,
                                      const SaveOptions& o, double* blocked_seconds) {
  const auto start = std::chrono::steady_clock::now();
  ZS_RETURN_IF_ERROR(Wait());  // one save at a time
  Communicator& world = model.world();
  const bool lead = world.rank() == 0;
  const DirNames d(dir);
  ZS_RETURN_IF_ERROR(Agree(world, lead ? PrepareTmpDir(d) : absl::OkStatus()));
  json manifest = BaseManifest(o.type, model, optimizer, state, o);
  const int writers = model.shard_group().size();
  // The snapshot: host copies of everything this rank writes.
  auto plan = std::make_shared<ShardFilePlan>();
  auto full = std::make_shared<std::vector<std::pair<bool, std::pair<std::string, Tensor>>>>();
  FullPlan full_plan;
  SafetensorsTensors buffers;
  if (o.type == StateDictType::kSharded) {
    ZS_ASSIGN_OR_RETURN(*plan, PlanShardFile(model, optimizer, o, /*snapshot=*/true));
    if (lead) {
      for (auto& [n, t] : Buffers(model)) {
        ZS_ASSIGN_OR_RETURN(Tensor c, t.Clone(DefaultCpuAllocator()));
        buffers.emplace_back(n, c);
      }
    }
  } else {
    full_plan = PlanFull(model, optimizer, o);
    ZS_RETURN_IF_ERROR(GatherFull(model, optimizer, o, [&](bool model_file, const std::string& name,
                                                           const Tensor& t) -> absl::Status {
      ZS_ASSIGN_OR_RETURN(Tensor c, t.Clone(DefaultCpuAllocator()));
      full->push_back({model_file, {name, c}});
      return absl::OkStatus();
    }));
  }
  if (blocked_seconds != nullptr) {
    *blocked_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const AtomicFileOptions file = o.file;
  const StateDictType type = o.type;
  status_ = absl::OkStatus();
  thread_ = std::thread([this, d, manifest, plan, full, full_plan, buffers, file, type, lead, writers]() mutable {
    auto marker = [&](const std::string& name, const std::string& text) {
      return WriteFileAtomically(d.tmp_dir + "/" + name, text, {.fsync = false});
    };
    absl::Status s;
    if (type == StateDictType::kSharded) {
      if (plan->writes) {
        auto r = WriteShardFile(d, *plan, file);
        s = r.status();
        const std::string done = plan->name + (s.ok() ? ".done" : ".failed");
        json info = {{"bytes", r.ok() ? r->first : 0}, {"crc32c", r.ok() ? r->second : 0}, {"error", s.ToString()}};
        (void)marker(done, info.dump());
      }
      if (lead && s.ok() && !buffers.empty()) {
        s = WriteSafetensors(d.tmp_dir + "/" + kBuffersFile, buffers, {},
                             {.fsync = file.fsync, .fail_after_bytes = file.fail_after_bytes});
        if (s.ok()) {
          absl::StatusOr<uint32_t> crc = Crc32cOfFile(d.tmp_dir + "/" + kBuffersFile);
          struct stat st;
          ::stat((d.tmp_dir + "/" + kBuffersFile).c_str(), &st);
          if (crc.ok()) AddFile(manifest, kBuffersFile, {static_cast<uint64_t>(st.st_size), *crc});
        }
      }
      if (lead) {
        // Wait for every shard file's marker (the other ranks write in parallel).
        for (int r = 0; r < writers && s.ok(); ++r) {
          const std::string base = d.tmp_dir + "/" + ShardFile(r);
          for (int tries = 0;; ++tries) {
            if (Exists(base + ".failed")) {
              s = absl::AbortedError(absl::StrCat("async checkpoint: writing ", ShardFile(r), " failed"));
              break;
            }
            if (Exists(base + ".done")) {
              absl::StatusOr<std::string> text = ReadWholeFile(base + ".done");
              if (text.ok()) {
                const json info = json::parse(*text);
                AddFile(manifest, ShardFile(r), {info["bytes"].get<uint64_t>(), info["crc32c"].get<uint32_t>()});
                ::unlink((base + ".done").c_str());
                break;
              }
            }
            if (tries > 600000) {
              s = absl::DeadlineExceededError(absl::StrCat("async checkpoint: no ", ShardFile(r), " after 10 minutes"));
              break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }
      }
    } else if (lead) {
      auto mw = StreamWriter::Open(d.tmp_dir + "/" + kModelFile, full_plan.model_entries, full_plan.ModelMetadata(), file);
      s = mw.status();
      std::unique_ptr<StreamWriter> ow;
      if (s.ok() && !full_plan.optimizer_entries.empty()) {
        auto o2 = StreamWriter::Open(d.tmp_dir + "/" + kOptimizerFile, full_plan.optimizer_entries, {}, file);
        s = o2.status();
        if (s.ok()) ow = *std::move(o2);
      }
      for (size_t i = 0; s.ok() && i < full->size(); ++i) {
        const auto& [model_file, nt] = (*full)[i];
        s = (model_file ? *mw : ow)->Append(nt.first, nt.second);
      }
      if (s.ok()) {
        auto r = (*mw)->Commit();
        s = r.status();
        if (r.ok()) AddFile(manifest, kModelFile, *r);
      }
      if (s.ok() && ow) {
        auto r = ow->Commit();
        s = r.status();
        if (r.ok()) AddFile(manifest, kOptimizerFile, *r);
      }
    }
    if (lead) {
      if (s.ok()) s = Finalize(d, manifest, file);
      if (!s.ok()) RemoveTree(d.tmp_dir);
    }
    status_ = s;
  });
  return absl::OkStatus();
}

// ================================================================ work dir

namespace {
// (step, dir) of complete checkpoints, oldest first.
std::vector<std::pair<int64_t, std::string>> CompleteCheckpoints(const std::string& work_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = ::opendir(work_dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    int64_t step = 0;
    if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    const std::string path = work_dir + "/" + name;
    if (Exists(path + "/" + kManifest)) out.emplace_back(step, path);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

absl::StatusOr<std::string> LatestCheckpoint(const std::string& work_dir) {
  auto all = CompleteCheckpoints(work_dir);
  if (all.empty()) return absl::NotFoundError(absl::StrCat("no complete checkpoint under ", Quoted(work_dir)));
  return all.back().second;
}

absl::Status KeepLastCheckpoints(const std::string& work_dir, int keep) {
  if (keep <= 0) return absl::OkStatus();
  auto all = CompleteCheckpoints(work_dir);
  for (size_t i = 0; i + keep < all.size(); ++i) RemoveTree(all[i].second);
  return absl::OkStatus();
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
  if (m.optimizer == "adamw" || m.optimizer == "adam") slots = {"exp_avg", "exp_avg_sq"};
  if (m.optimizer == "sgd" && !m.layout.empty()) {
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
