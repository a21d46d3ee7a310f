// What a checkpoint holds (Note [Checkpoint layout] in checkpoint.h): the
// manifest (state, layout), the sharded state dict (this rank's shard file:
// every unit's shard and optimizer state), the full one (gathered unit by
// unit, written by the lead), tied parameters in model files (Note [Tied
// parameters in files]), and the writer that streams them into safetensors.
// Declarations in checkpoint_internal.h, except the public tied-parameter
// helpers (checkpoint.h).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_internal.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using nlohmann::json;

// ================================================================ tied parameters in files

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

namespace checkpoint_internal {

// ================================================================ streaming safetensors

absl::StatusOr<std::unique_ptr<StreamWriter>> StreamWriter::Open(const std::string& path,
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

absl::Status StreamWriter::Append(const std::string& name, const Tensor& t) {
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

absl::StatusOr<std::pair<uint64_t, uint32_t>> StreamWriter::Commit() {
  if (next_ != entries_.size()) {
    return absl::InternalError(absl::StrCat("checkpoint writer: ", entries_.size() - next_,
                                            " entries were not written"));
  }
  const uint64_t bytes = file_.bytes_written();
  const uint32_t crc = file_.crc32c();
  ZS_RETURN_IF_ERROR(file_.Commit());
  return std::make_pair(bytes, crc);
}

// ================================================================ what a checkpoint holds

std::vector<std::string> OptimizerSlots(const optim::ShardedOptimizer* opt) {
  return opt == nullptr ? std::vector<std::string>{} : opt->state_slots();
}

absl::Status WithUnit(ShardedModel& model, optim::ShardedOptimizer* opt, size_t i,
                      const std::vector<std::string>& slots, bool write,
                      const std::function<absl::Status(const Tensor& shard, const std::vector<Tensor>& states)>& fn) {
  ShardedUnit* u = model.units()[i];
  return model.WithShard(*u, write, [&](const Tensor& shard) -> absl::Status {
    if (slots.empty() || u->frozen()) return fn(shard, {});
    return opt->WithUnitState(i, write, [&](const std::vector<Tensor>& states) { return fn(shard, states); });
  });
}

namespace {

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

}  // namespace

json BaseManifest(StateDictType type, ShardedModel& model, optim::ShardedOptimizer* opt,
                  const TrainingState& state, const SaveOptions& o) {
  json m;
  m["format"] = "zeroshard-checkpoint";
  m["version"] = kCheckpointFormatVersion;
  m["type"] = std::string(StateDictTypeName(type));
  m["world_size"] = model.world().size();
  m["strategy"] = std::string(ShardingStrategyName(model.options().strategy));
  m["shard_group_size"] = model.shard_group().size();
  const bool with_optimizer = opt != nullptr && o.save_optimizer;
  m["optimizer"] = with_optimizer ? opt->name() : "";
  m["optimizer_slots"] = with_optimizer ? OptimizerSlots(opt) : std::vector<std::string>{};
  m["optimizer_step"] = OptimizerStep(opt);
  m["state"] = StateToJson(state, o);
  m["layout"] = LayoutJson(model, o);
  m["files"] = json::object();
  return m;
}

// ================================================================ sharded state dict

namespace {

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

}  // namespace

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

absl::StatusOr<std::pair<uint64_t, uint32_t>> WriteShardFile(const DirNames& d, const ShardFilePlan& p,
                                                             const AtomicFileOptions& file, ShardedModel* model,
                                                             optim::ShardedOptimizer* opt) {
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

SafetensorsTensors Buffers(ShardedModel& model) {
  SafetensorsTensors out;
  for (auto& [name, t] : model.module().NamedBuffers()) out.emplace_back(name, t);
  return out;
}

// ================================================================ full state dict

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

absl::Status GatherFull(ShardedModel& model, optim::ShardedOptimizer* opt, const SaveOptions& o,
                        const std::function<absl::Status(bool model_file, const std::string&, const Tensor&)>& sink) {
  const bool lead = model.world().rank() == 0;
  const std::vector<std::string> slots = o.save_optimizer ? OptimizerSlots(opt) : std::vector<std::string>{};
  std::vector<ShardedUnit*> units = model.units();
  for (size_t i = 0; i < units.size(); ++i) {
    ShardedUnit* u = units[i];
    auto gather = [&](const Tensor& shard) -> absl::StatusOr<Tensor> {
      Communicator& group = model.shard_group();
      if (group.device().is_cuda()) {
        // On GPUs the group gathers device tensors: gather on the device (a
        // shard offloaded to the host or NVMe is copied there first), then
        // bring the whole to the host.
        Tensor src = shard;
        if (shard.device() != group.device()) {
          ZS_ASSIGN_OR_RETURN(src, shard.To(model.allocator()));
        }
        ZS_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty({u->flat.padded_numel()}, DType::kF32, model.allocator()));
        ZS_RETURN_IF_ERROR(group.AllGather(src, full));
        return full.To(DefaultCpuAllocator());
      }
      ZS_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty({u->flat.padded_numel()}, DType::kF32, DefaultCpuAllocator()));
      ZS_ASSIGN_OR_RETURN(Tensor src, shard.device().is_cpu() ? absl::StatusOr<Tensor>(shard) : shard.To(DefaultCpuAllocator()));
      ZS_RETURN_IF_ERROR(group.AllGather(src, full));
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

}  // namespace checkpoint_internal
}  // namespace zeroshard
