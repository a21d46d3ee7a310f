#include "sharding/sharded_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "runtime/status.h"

namespace zeroshard {

using autograd::Variable;

std::string MemoryPlan::ToString() const {
  return absl::StrCat("sharded params ", FormatBytes(sharded_params), ", sharded grads ",
                      FormatBytes(sharded_grads), ", optimizer state ", FormatBytes(optimizer_state),
                      ", gathered peak ", FormatBytes(gathered_peak),
                      replicated_grads > 0 ? absl::StrCat(", replicated grads ", FormatBytes(replicated_grads)) : "",
                      "; total ", FormatBytes(total()));
}

// ================================================================ construction

ShardedModel::ShardedModel(std::shared_ptr<nn::Module> root, Communicator& world,
                           ShardingOptions options, Allocator* allocator, Allocator* host_allocator)
    : root_(std::move(root)),
      world_(world),
      options_(std::move(options)),
      allocator_(allocator != nullptr ? allocator : DefaultCpuAllocator()),
      host_allocator_(host_allocator != nullptr ? host_allocator : DefaultCpuAllocator()) {}

ShardedModel::~ShardedModel() {
  for (auto& [module, handle] : module_hooks_) module->RemoveHook(handle);
  for (auto& [var, handle] : param_hooks_) var.RemoveHook(handle);
  // Leave the module usable: parameters point at nothing once the buffers go.
  for (auto& unit : units_) {
    for (const FlatParamSlot& p : unit->flat.params()) {
      (void)p.var.set_value(Tensor());
      p.var.reset_grad();
    }
  }
}

absl::StatusOr<std::unique_ptr<ShardedModel>> ShardedModel::Create(std::shared_ptr<nn::Module> root,
                                                                   Communicator& world,
                                                                   const ShardingOptions& options,
                                                                   Allocator* allocator,
                                                                   Allocator* host_allocator) {
  if (root == nullptr) return absl::InvalidArgumentError("ShardedModel::Create: null module");
  ZS_RETURN_IF_ERROR(options.Validate(world.size()));
  std::unique_ptr<ShardedModel> m(
      new ShardedModel(std::move(root), world, options, allocator, host_allocator));
  ZS_RETURN_IF_ERROR(m->Build());
  return m;
}

namespace {

// Decides which modules are units (post-order, so a unit's count excludes units below it).
struct WrapPlanner {
  const WrapPolicy& policy;
  const std::set<std::string>& ignored;
  // Types that get units of their own (Note [BatchNorm under mixed precision]).
  const std::set<std::string>& own_units;
  std::set<const nn::Module*> wrapped;

  // Returns the number of parameter elements of `m`'s subtree not yet in a unit.
  int64_t Visit(nn::Module& m, const std::string& name, bool is_root) {
    int64_t unwrapped = 0;
    for (auto& [child_name, child] : m.NamedChildren()) {
      const std::string full = nn::JoinName(name, child_name);
      if (ignored.count(full)) continue;
      unwrapped += Visit(*child, full, false);
    }
    for (const nn::ParameterSlot& p : m.parameter_slots()) unwrapped += NumElements(p.shape);
    if (is_root) return unwrapped;
    if (own_units.count(m.type_name()) && !m.parameter_slots().empty()) {
      wrapped.insert(&m);
      return 0;
    }
    bool wrap = false;
    switch (policy.kind) {
      case WrapPolicy::Kind::kNone: break;
      case WrapPolicy::Kind::kByType: wrap = policy.types.count(m.type_name()) > 0; break;
      // Containers have no forward of their own, so no hooks would ever gather
      // them (PyTorch's size policy excludes ModuleList and ModuleDict alike).
      case WrapPolicy::Kind::kBySize:
        wrap = unwrapped >= policy.min_num_params && m.type_name() != "ModuleList" && m.type_name() != "ModuleDict";
        break;
      case WrapPolicy::Kind::kCustom: wrap = policy.custom(m, name, unwrapped); break;
    }
    if (wrap) {
      wrapped.insert(&m);
      return 0;
    }
    return unwrapped;
  }
};

// Note [Tied parameters]: one Variable under several names, held by modules
// the wrap policy may put in different units.
struct TieDraft {
  const autograd::VariableImpl* impl = nullptr;
  TiedPlacement placement;
  size_t unit = 0;  // index into the unit list: where it lives
};

// "a.b" and "a.c.d" -> "a"; "" is the root.
std::string CommonAncestor(const std::string& a, const std::string& b) {
  const std::vector<std::string> pa = absl::StrSplit(a, '.', absl::SkipEmpty());
  const std::vector<std::string> pb = absl::StrSplit(b, '.', absl::SkipEmpty());
  std::vector<std::string> common;
  for (size_t i = 0; i < pa.size() && i < pb.size() && pa[i] == pb[i]; ++i) common.push_back(pa[i]);
  return absl::StrJoin(common, ".");
}

// Every parameter with more than one name, and the unit it lives in: the unit
// of its modules when they share one, else the unit of their lowest common
// ancestor (the unit whose forward encloses all of their forwards, so it is
// gathered whenever any of them runs, forward and backward). Also lists the
// wrapped modules that would be left with no parameter at all.
std::vector<TieDraft> PlaceTies(nn::Module& root, const std::vector<std::pair<std::string, nn::Module*>>& unit_modules,
                                const std::map<const nn::Module*, size_t>& unit_of_module, size_t root_marker) {
  const size_t root_index = unit_modules.size() - 1;
  auto unit_of = [&](const nn::Module* m) {
    const size_t u = unit_of_module.at(m);
    return u == root_marker ? root_index : u;
  };
  std::map<std::string, nn::Module*> by_name;
  std::vector<TieDraft> drafts;
  std::unordered_map<const autograd::VariableImpl*, size_t> draft_of;
  std::unordered_map<const autograd::VariableImpl*, int> uses;
  // Parameters (by identity) the modules of each unit hold.
  std::vector<std::set<const autograd::VariableImpl*>> held(unit_modules.size());
  for (auto& [mname, m] : root.NamedModules()) {
    if (!unit_of_module.count(m)) continue;  // inside an ignored module
    by_name[mname] = m;
    for (nn::ParameterSlot& p : m->parameter_slots()) {
      const autograd::VariableImpl* impl = p.var.impl().get();
      held[unit_of(m)].insert(impl);
      ++uses[impl];
    }
  }
  for (auto& [mname, m] : root.NamedModules()) {
    if (!unit_of_module.count(m)) continue;
    for (nn::ParameterSlot& p : m->parameter_slots()) {
      const autograd::VariableImpl* impl = p.var.impl().get();
      if (uses[impl] < 2) continue;
      auto [it, fresh] = draft_of.emplace(impl, drafts.size());
      if (fresh) {
        drafts.emplace_back();
        drafts.back().impl = impl;
        drafts.back().placement.ancestor = mname;
      }
      TiedPlacement& t = drafts[it->second].placement;
      t.names.push_back(nn::JoinName(mname, p.name));
      t.modules.push_back(mname);
      const std::string& unit_name = unit_modules[unit_of(m)].first;
      if (std::find(t.units.begin(), t.units.end(), unit_name) == t.units.end()) t.units.push_back(unit_name);
      t.ancestor = CommonAncestor(t.ancestor, mname);
    }
  }
  for (TieDraft& d : drafts) {
    TiedPlacement& t = d.placement;
    d.unit = unit_of(by_name.at(t.modules[0]));
    if (t.units.size() > 1) d.unit = unit_of(by_name.at(t.ancestor));
    t.holder = unit_modules[d.unit].first;
  }
  // A unit whose every parameter went to another unit's tie would be empty.
  for (size_t u = 0; u + 1 < unit_modules.size(); ++u) {
    if (held[u].empty()) continue;
    bool all_moved = true;
    for (const autograd::VariableImpl* impl : held[u]) {
      auto it = draft_of.find(impl);
      all_moved = all_moved && it != draft_of.end() && drafts[it->second].unit != u;
    }
    if (!all_moved) continue;
    for (const autograd::VariableImpl* impl : held[u]) drafts[draft_of.at(impl)].placement.emptied.push_back(unit_modules[u].first);
  }
  return drafts;
}

}  // namespace

absl::Status ShardedModel::Build() {
  if (!world_.device().is_cpu() && allocator_->device() != world_.device()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ShardedModel: the ", world_.backend(), " communicator works on ", world_.device().ToString(),
        " but the allocator '", allocator_->name(), "' is on ", allocator_->device().ToString(),
        "; expected the model's buffers on the communicator's device"));
  }
  ZS_ASSIGN_OR_RETURN(schedule_, DeviceSchedule::Create(allocator_->device(), options_.limit_all_gathers));
  const int world_size = world_.size();
  const int s = options_.ShardGroupSize(world_size);
  ZS_ASSIGN_OR_RETURN(shard_group_, world_.Split(world_.rank() / s, world_.rank()));
  ZS_ASSIGN_OR_RETURN(replica_group_, world_.Split(world_.rank() % s, world_.rank()));

  const std::set<std::string> ignored(options_.ignored_modules.begin(), options_.ignored_modules.end());
  for (const std::string& name : ignored) {
    bool found = false;
    for (auto& [n, m] : root_->NamedModules()) found = found || n == name;
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat("ShardedModel: ignored module \"", name,
                                                     "\" is not in the model"));
    }
  }
  const MixedPrecision& mp = options_.mixed_precision;
  const std::set<std::string> fp32_types = mp.active() ? mp.fp32_module_types : std::set<std::string>{};
  WrapPlanner planner{options_.wrap, ignored, fp32_types, {}};
  planner.Visit(*root_, "", true);

  // Owner unit of every module: the deepest wrapped ancestor, or the root.
  std::vector<std::pair<std::string, nn::Module*>> unit_modules;  // pre-order, root last
  std::map<const nn::Module*, size_t> unit_of_module;
  const size_t kRootMarker = static_cast<size_t>(-1);
  auto assign_units = [&]() {
    unit_modules.clear();
    unit_of_module.clear();
    std::function<void(nn::Module&, const std::string&, size_t)> assign =
        [&](nn::Module& m, const std::string& name, size_t owner) {
          size_t mine = owner;
          if (planner.wrapped.count(&m)) {
            mine = unit_modules.size();
            unit_modules.emplace_back(name, &m);
          }
          unit_of_module[&m] = mine;
          for (auto& [child_name, child] : m.NamedChildren()) {
            const std::string full = nn::JoinName(name, child_name);
            if (ignored.count(full)) continue;
            assign(*child, full, mine);
          }
        };
    assign(*root_, "", kRootMarker);
    unit_modules.emplace_back("<root>", root_.get());
  };
  assign_units();

  // Note [Tied parameters]: a parameter used by modules of different units
  // lives in the unit of their lowest common ancestor. A wrapped module whose
  // only parameters were so moved is no unit at all (it would be empty).
  std::vector<TieDraft> ties = PlaceTies(*root_, unit_modules, unit_of_module, kRootMarker);
  bool dropped = false;
  for (const TieDraft& tie : ties) {
    for (const std::string& name : tie.placement.emptied) {
      for (auto& [n, m] : unit_modules) {
        if (n == name && planner.wrapped.erase(m) > 0) dropped = true;
      }
    }
  }
  if (dropped) {  // the same placements, with unit indices of the units that remain
    assign_units();
    std::vector<TieDraft> again = PlaceTies(*root_, unit_modules, unit_of_module, kRootMarker);
    for (size_t t = 0; t < again.size(); ++t) {
      again[t].placement.units = ties[t].placement.units;
      again[t].placement.emptied = ties[t].placement.emptied;
    }
    ties = std::move(again);
  }
  const size_t root_index = unit_modules.size() - 1;

  // Parameters of each unit, deduplicated by identity (tied ones once, in the
  // unit PlaceTies chose).
  std::unordered_map<const autograd::VariableImpl*, size_t> tied_unit;  // -> unit (index into unit_modules)
  for (const TieDraft& tie : ties) tied_unit[tie.impl] = tie.unit;
  std::vector<std::vector<FlatParamSlot>> slots(unit_modules.size());
  std::unordered_map<const autograd::VariableImpl*, std::pair<size_t, size_t>> seen;  // -> (unit, slot)
  for (auto& [mname, m] : root_->NamedModules()) {
    auto it = unit_of_module.find(m);
    if (it == unit_of_module.end()) continue;  // inside an ignored module
    const size_t module_unit = it->second == kRootMarker ? root_index : it->second;
    for (nn::ParameterSlot& p : m->parameter_slots()) {
      const std::string name = nn::JoinName(mname, p.name);
      const autograd::VariableImpl* impl = p.var.impl().get();
      auto s_it = seen.find(impl);
      if (s_it != seen.end()) {
        slots[s_it->second.first][s_it->second.second].aliases.push_back(name);
        continue;
      }
      auto t_it = tied_unit.find(impl);
      const size_t unit = t_it != tied_unit.end() ? t_it->second : module_unit;
      seen[impl] = {unit, slots[unit].size()};
      FlatParamSlot slot;
      slot.name = name;
      slot.var = p.var;
      slot.shape = p.shape;
      slot.requires_grad = p.var.requires_grad();
      slot.init = p.init;
      slots[unit].push_back(std::move(slot));
    }
  }

  for (size_t i = 0; i < unit_modules.size(); ++i) {
    auto make_unit = [&](std::string name, std::vector<FlatParamSlot> params) {
      auto unit = std::make_unique<ShardedUnit>();
      unit->index = static_cast<int>(units_.size());
      unit->name = std::move(name);
      unit->module = unit_modules[i].second;
      unit->is_root = i == root_index;
      const bool fp32 = fp32_types.count(unit->module->type_name()) > 0 && !unit->is_root;
      unit->param_dtype = fp32 ? DType::kF32 : mp.param_dtype;
      unit->reduce_dtype = fp32 ? DType::kF32 : mp.reduce_dtype;
      unit->flat = FlatParameter(std::move(params), s, shard_group_->rank());
      for (const FlatParamSlot& p : unit->flat.params()) unit->num_grad_params += p.requires_grad ? 1 : 0;
      units_.push_back(std::move(unit));
      return units_.back().get();
    };
    // Note [Frozen parameters]: mixed requires_grad splits off a frozen part.
    const auto grad = [](const FlatParamSlot& p) { return p.requires_grad; };
    if (std::all_of(slots[i].begin(), slots[i].end(), grad) || std::none_of(slots[i].begin(), slots[i].end(), grad)) {
      make_unit(unit_modules[i].first, std::move(slots[i]));
      continue;
    }
    std::vector<FlatParamSlot> trainable, frozen;  // each in registration order
    for (FlatParamSlot& p : slots[i]) (p.requires_grad ? trainable : frozen).push_back(std::move(p));
    ShardedUnit* frozen_part = make_unit(unit_modules[i].first + "[frozen]", std::move(frozen));
    ShardedUnit* owner = make_unit(unit_modules[i].first, std::move(trainable));
    owner->frozen_part = frozen_part;
    frozen_part->owner = owner;
  }
  root_unit_ = units_.back().get();
  // Where each tie went (printed by ToString), and which units use a tied
  // parameter another unit holds (checked gathered when they run).
  for (TieDraft& tie : ties) {
    ShardedUnit* holder = nullptr;
    for (auto& u : units_) {
      for (const FlatParamSlot& p : u->flat.params()) {
        if (p.var.impl().get() == tie.impl) holder = u.get();
      }
    }
    ZS_CHECK(holder != nullptr, "a tied parameter is in no unit");
    tie.placement.holder = holder->name;
    const ShardedUnit* holder_owner = holder->owner != nullptr ? holder->owner : holder;
    for (size_t k = 0; k < tie.placement.modules.size(); ++k) {
      const nn::Module* m = nullptr;
      for (auto& [n, mod] : root_->NamedModules()) {
        if (n == tie.placement.modules[k]) m = mod;
      }
      const size_t mu = unit_of_module.at(m);
      const std::string& user_name = unit_modules[mu == kRootMarker ? root_index : mu].first;
      for (auto& u : units_) {
        if (u->owner != nullptr || u->name != user_name || u.get() == holder_owner) continue;
        u->tied_holders.emplace_back(tie.placement.names[k], holder);
      }
    }
    ties_.push_back(std::move(tie.placement));
  }
  ZS_RETURN_IF_ERROR(CreateParamSwap());
  for (auto& unit : units_) {
    ZS_RETURN_IF_ERROR(InitShards(*unit));
  }
  // Buffers live where the rank computes: moved to its allocator (device) when
  // they were made elsewhere (modules read them through Module::FindBuffer).
  for (auto& [name, buffer] : root_->NamedBufferSlots()) {
    if (buffer->defined() && buffer->allocator() != allocator_) {
      ZS_ASSIGN_OR_RETURN(*buffer, buffer->To(allocator_));
    }
  }
  if (options_.sync_module_states) {  // buffers too: rank 0's running statistics everywhere
    for (auto& [name, buffer] : root_->NamedBuffers()) {
      ZS_ASSIGN_OR_RETURN(Tensor c, buffer.Contiguous());
      ZS_RETURN_IF_ERROR(world_.Broadcast(c, 0));
      if (!IsSameView(c, buffer)) ZS_RETURN_IF_ERROR(buffer.CopyFrom(c));
    }
  }
  for (auto& unit : units_) {
    ZS_RETURN_IF_ERROR(InstallHooks(*unit));
  }
  return absl::OkStatus();
}

// True when the gathered buffer can be the shard itself (nothing to gather or cast).
static bool Aliased(const ShardedUnit& u, const ShardingOptions& o) {
  return u.flat.shard_group_size() == 1 && u.param_dtype == DType::kF32 &&
         !o.offload.params_on_host();
}

absl::Status ShardedModel::CreateParamSwap() {
  const OffloadPolicy& off = options_.offload;
  if (!off.nvme_params) return absl::OkStatus();
  // max_in_cpu: whole units, in unit order, while they fit.
  int64_t in_cpu = 0;
  std::vector<int64_t> bytes;
  std::vector<std::string> names;
  for (auto& u : units_) {
    const int64_t n = u->flat.shard_numel();
    if (in_cpu + n <= off.param_nvme.max_in_cpu) {
      in_cpu += n;
      continue;
    }
    u->swap_region = static_cast<int>(bytes.size());
    bytes.push_back(n * 4);
    names.push_back(absl::StrCat("unit ", u->index, " '", u->name, "' master shard"));
  }
  if (bytes.empty()) return absl::OkStatus();  // everything fits in host memory
  const SwapSpaceOptions so = off.SwapOptions(/*params=*/true, world_.rank());
  ZS_ASSIGN_OR_RETURN(param_swap_, SwapSpace::Create(so, bytes, std::move(names), host_allocator_));
  return absl::OkStatus();
}

absl::Status ShardedModel::WithShard(ShardedUnit& unit, bool write,
                                     const std::function<absl::Status(const Tensor& shard)>& fn) {
  if (unit.swap_region < 0) return fn(unit.shard);
  ZS_ASSIGN_OR_RETURN(char* bytes, param_swap_->Acquire(unit.swap_region));
  const absl::Status s = fn(Tensor::Wrap(bytes, {unit.flat.shard_numel()}, DType::kF32));
  // A failed fn may have changed part of the bytes: write back only a success.
  const absl::Status released = param_swap_->Release(unit.swap_region, write && s.ok());
  return s.ok() ? released : s;
}

void ShardedModel::PrefetchShard(const ShardedUnit* unit) {
  if (unit == nullptr) return;
  if (unit->swap_region >= 0) param_swap_->Prefetch(unit->swap_region);
  PrefetchShard(unit->frozen_part);
}

void ShardedModel::PrefetchForward() {
  if (param_swap_ == nullptr) return;
  const std::vector<int>& order = !forward_order_.empty() ? forward_order_ : recorded_order_;
  for (int index : order) {
    const ShardedUnit* u = units_[index].get();
    if (u->frozen_part != nullptr && u->frozen_part->swap_region >= 0 &&
        !param_swap_->Prefetch(u->frozen_part->swap_region)) {
      break;
    }
    if (u->swap_region >= 0 && !param_swap_->Prefetch(u->swap_region)) break;
  }
}

absl::Status ShardedModel::InitShards(ShardedUnit& unit) {
  const FlatParameter& flat = unit.flat;
  Allocator* shard_home = options_.offload.params_on_host() ? host_allocator_ : allocator_;
  Allocator* grad_home = options_.offload.grads_on_host() ? host_allocator_ : allocator_;
  if (!unit.frozen()) ZS_RETURN_IF_ERROR(InitGradShard(unit, grad_home));
  // A shard on NVMe is filled in a swap buffer, written, and never held whole in memory.
  char* swap_bytes = nullptr;
  if (unit.swap_region >= 0) {
    ZS_ASSIGN_OR_RETURN(swap_bytes, param_swap_->Acquire(unit.swap_region, /*overwrite=*/true));
    unit.shard = Tensor::Wrap(swap_bytes, {flat.shard_numel()}, DType::kF32);
  } else {
    ZS_ASSIGN_OR_RETURN(unit.shard, Tensor::Zeros({flat.shard_numel()}, DType::kF32, shard_home));
  }
  for (const FlatParamSlot& p : flat.params()) {
    if (p.var.defined() && options_.sync_module_states) {
      ZS_ASSIGN_OR_RETURN(Tensor c, p.var.value().Contiguous());
      if (c.device() != world_.device()) {  // e.g. a module on the host, NCCL on a GPU
        ZS_ASSIGN_OR_RETURN(c, c.To(allocator_));
      }
      ZS_RETURN_IF_ERROR(world_.Broadcast(c, 0));
      if (!IsSameView(c, p.var.value())) {
        ZS_RETURN_IF_ERROR(p.var.value().CopyFrom(c));
      }
    }
  }
  for (const FlatParameter::Piece& piece : flat.PiecesOfShard(flat.shard_rank())) {
    const FlatParamSlot& p = flat.params()[piece.param];
    ZS_ASSIGN_OR_RETURN(Tensor dst, unit.shard.Narrow(0, piece.shard_offset, piece.count));
    if (p.var.defined()) {
      ZS_ASSIGN_OR_RETURN(Tensor whole, p.var.value().Reshape({-1}));
      ZS_ASSIGN_OR_RETURN(Tensor src, whole.Narrow(0, piece.param_offset, piece.count));
      ZS_RETURN_IF_ERROR(dst.CopyFrom(src));
    } else {
      // Deferred init: this rank's slice only, as in the unsharded init.
      ZS_RETURN_IF_ERROR(nn::FillInit(p.init, options_.init_seed, p.name, piece.param_offset, dst));
    }
  }
  // The module's own copies go; its parameters will view the gathered buffer.
  for (const FlatParamSlot& p : flat.params()) {
    ZS_RETURN_IF_ERROR(p.var.set_value(Tensor()));
  }
  if (swap_bytes != nullptr) {
    unit.shard = Tensor();
    ZS_RETURN_IF_ERROR(param_swap_->Release(unit.swap_region, /*dirty=*/true));
  }
  if (Aliased(unit, options_)) {
    unit.full = unit.shard;
  } else {
    ZS_ASSIGN_OR_RETURN(unit.full, Tensor::Empty({flat.padded_numel()}, unit.param_dtype, allocator_));
    ZS_RETURN_IF_ERROR(unit.full.storage()->Release());
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::InitGradShard(ShardedUnit& unit, Allocator* grad_home) {
  const FlatParameter& flat = unit.flat;
  unit.grad_dtype = options_.mixed_precision.keep_low_precision_grads ? unit.reduce_dtype : DType::kF32;
  if (!options_.ReplicatesGradients()) {
    ZS_ASSIGN_OR_RETURN(unit.grad_shard, Tensor::Zeros({flat.shard_numel()}, unit.grad_dtype, grad_home));
    return absl::OkStatus();
  }
  // Note [Replicated gradients]: the whole gradient, the shard a view of it.
  ZS_ASSIGN_OR_RETURN(unit.replicated_grad, Tensor::Zeros({flat.padded_numel()}, unit.grad_dtype, grad_home));
  ZS_ASSIGN_OR_RETURN(unit.grad_shard, unit.replicated_grad.Narrow(0, flat.shard_offset(), flat.shard_numel()));
  return absl::OkStatus();
}

const Tensor& ShardedModel::GradStorage(const ShardedUnit& unit) {
  return unit.replicated_grad.defined() ? unit.replicated_grad : unit.grad_shard;
}

absl::Status ShardedModel::InstallHooks(ShardedUnit& unit) {
  // A frozen part is gathered and freed by its owner's hooks (Note [Frozen parameters]).
  if (unit.owner != nullptr) return absl::OkStatus();
  ShardedUnit* u = &unit;
  module_hooks_.emplace_back(unit.module,
                             unit.module->AddPreForwardHook([this, u](nn::Module&) { return OnPreForward(*u); }));
  module_hooks_.emplace_back(
      unit.module, unit.module->AddPostForwardHook([this, u](nn::Module&, std::vector<Variable>& outs) {
        return OnPostForward(*u, outs);
      }));
  for (const FlatParamSlot& p : unit.flat.params()) {
    if (!p.requires_grad) continue;
    param_hooks_.emplace_back(p.var, p.var.AddPostAccumulateGradHook(
                                         [this, u](const Variable&) { return OnGradLanded(*u); }));
  }
  return absl::OkStatus();
}

void ShardedModel::set_trace(TraceRecorder* trace) {
  trace_ = trace;
  if (trace_ != nullptr) {
    trace_->NameThread(2 * world_.rank(), absl::StrCat("rank ", world_.rank(), " compute"));
    trace_->NameThread(2 * world_.rank() + 1, absl::StrCat("rank ", world_.rank(), " comm"));
  }
}

std::vector<ShardedUnit*> ShardedModel::units() {
  std::vector<ShardedUnit*> out;
  for (auto& u : units_) out.push_back(u.get());
  return out;
}

// ================================================================ gathering

absl::Status ShardedModel::StartGather(ShardedUnit& unit) {
  ZS_RETURN_IF_ERROR(StartGatherOne(unit));
  // The frozen part's all-gather is issued right after its owner's.
  if (unit.frozen_part != nullptr) ZS_RETURN_IF_ERROR(StartGatherOne(*unit.frozen_part));
  return absl::OkStatus();
}

absl::Status ShardedModel::StartGatherOne(ShardedUnit& unit) {
  if (unit.state != ShardedUnit::State::kSharded) return absl::OkStatus();
  if (Aliased(unit, options_)) {
    unit.state = ShardedUnit::State::kGathered;
    return absl::OkStatus();
  }
  ZS_RETURN_IF_ERROR(schedule_->BeforeGather());
  ZS_RETURN_IF_ERROR(unit.full.storage()->Reallocate());
  // In place: this rank's shard goes into its own slice of the gathered
  // buffer (cast to param_dtype on the way), and the all-gather fills the rest.
  ZS_ASSIGN_OR_RETURN(Tensor mine, unit.full.Narrow(0, unit.flat.shard_offset(), unit.flat.shard_numel()));
  ZS_RETURN_IF_ERROR(
      WithShard(unit, /*write=*/false, [&](const Tensor& shard) { return schedule_->Copy(mine, shard); }));
  ZS_ASSIGN_OR_RETURN(unit.gather_work,
                      shard_group_->AllGatherAsync(mine, unit.full, schedule_->Collective()));
  if (trace_ != nullptr) unit.gather_issue_us = trace_->NowUs();
  unit.state = ShardedUnit::State::kGathering;
  ++unit.gathers;
  return absl::OkStatus();
}

absl::Status ShardedModel::Gather(ShardedUnit& unit) {
  ZS_RETURN_IF_ERROR(StartGather(unit));
  ZS_RETURN_IF_ERROR(AwaitGather(unit));
  if (unit.frozen_part != nullptr) ZS_RETURN_IF_ERROR(AwaitGather(*unit.frozen_part));
  return absl::OkStatus();
}

absl::Status ShardedModel::AwaitGather(ShardedUnit& unit) {
  if (unit.state == ShardedUnit::State::kGathering) {
    const double wait_start = trace_ ? trace_->NowUs() : 0;
    ZS_RETURN_IF_ERROR(schedule_->Await(*unit.gather_work));
    unit.gather_work.reset();
    unit.state = ShardedUnit::State::kGathered;
    if (trace_ != nullptr) {
      const double now = trace_->NowUs();
      trace_->AddSpan("wait all-gather " + unit.name, "wait", 2 * world_.rank(), wait_start, now);
      trace_->AddSpan("all-gather " + unit.name, "comm", 2 * world_.rank() + 1, unit.gather_issue_us, now);
    }
  }
  for (const FlatParamSlot& p : unit.flat.params()) {
    if (p.var.defined()) continue;
    ZS_ASSIGN_OR_RETURN(Tensor flat_view, unit.full.Narrow(0, p.offset, p.numel));
    ZS_ASSIGN_OR_RETURN(Tensor view, flat_view.View(p.shape));
    ZS_RETURN_IF_ERROR(p.var.set_value(view));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::Reshard(ShardedUnit& unit) {
  ZS_RETURN_IF_ERROR(ReshardOne(unit));
  if (unit.frozen_part != nullptr) ZS_RETURN_IF_ERROR(ReshardOne(*unit.frozen_part));
  return absl::OkStatus();
}

absl::Status ShardedModel::ReshardOne(ShardedUnit& unit) {
  if (Aliased(unit, options_) || unit.state == ShardedUnit::State::kSharded) return absl::OkStatus();
  if (unit.state == ShardedUnit::State::kGathering) {
    // Never free bytes a collective is writing: compute (which orders the free) waits first.
    ZS_RETURN_IF_ERROR(schedule_->Await(*unit.gather_work));
    unit.gather_work.reset();
  }
  for (const FlatParamSlot& p : unit.flat.params()) {
    ZS_RETURN_IF_ERROR(p.var.set_value(Tensor()));
  }
  ZS_RETURN_IF_ERROR(unit.full.storage()->Release());
  ZS_RETURN_IF_ERROR(schedule_->AfterFree());
  unit.state = ShardedUnit::State::kSharded;
  return absl::OkStatus();
}

int ShardedModel::GatheredCount() const {
  int n = 0;
  for (const auto& u : units_) {
    // A frozen part rides with its owner (Note [Frozen parameters]).
    if (!u->is_root && u->owner == nullptr && u->state != ShardedUnit::State::kSharded) ++n;
  }
  return n;
}

absl::Status ShardedModel::Prefetch(ShardedUnit* unit) {
  if (unit == nullptr || unit->is_root || unit->state != ShardedUnit::State::kSharded) {
    return absl::OkStatus();
  }
  if (options_.limit_all_gathers > 0 && GatheredCount() >= options_.limit_all_gathers) {
    return absl::OkStatus();  // rate limited: it will be gathered when it runs
  }
  return StartGather(*unit);
}

ShardedUnit* ShardedModel::NextInForwardOrder(const ShardedUnit& unit) {
  for (size_t i = 0; i + 1 < recorded_order_.size(); ++i) {
    if (recorded_order_[i] == unit.index) return units_[recorded_order_[i + 1]].get();
  }
  return nullptr;
}

ShardedUnit* ShardedModel::NextInBackwardOrder(const ShardedUnit& unit) {
  for (size_t i = forward_order_.size(); i-- > 1;) {
    if (forward_order_[i] == unit.index) return units_[forward_order_[i - 1]].get();
  }
  return nullptr;
}

// ================================================================ hooks

absl::Status ShardedModel::OnPreForward(ShardedUnit& unit) {
  if (autograd::InBackward()) {
    // A checkpointed unit recomputing inside backward: this is its backward
    // gather. Its frozen bytes wait for the end (Note [Frozen parameters]).
    unit.recomputed = true;
    return OnPreBackward(unit);
  }
  if (unit.is_root) {
    if (!forward_order_.empty()) recorded_order_ = forward_order_;
    forward_order_.clear();
    in_forward_ = true;
  }
  if (std::find(forward_order_.begin(), forward_order_.end(), unit.index) == forward_order_.end()) {
    forward_order_.push_back(unit.index);
  }
  if (trace_ != nullptr) unit.forward_start_us = trace_->NowUs();
  ZS_RETURN_IF_ERROR(Gather(unit));
  ZS_RETURN_IF_ERROR(CheckTiedHolders(unit, "forward"));
  PrefetchShard(NextInForwardOrder(unit));  // NVMe: the next unit's shard is read meanwhile
  if (options_.forward_prefetch && !unit.is_root) {
    ZS_RETURN_IF_ERROR(Prefetch(NextInForwardOrder(unit)));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::CheckTiedHolders(const ShardedUnit& unit, const char* when) const {
  for (const auto& [name, holder] : unit.tied_holders) {
    if (holder->state == ShardedUnit::State::kGathered) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "ShardedModel: unit \"", unit.name, "\" runs its ", when, " with tied parameter \"", name,
        "\", which lives in unit \"", holder->name, "\" (Note [Tied parameters]); expected that unit gathered, found it ",
        holder->state == ShardedUnit::State::kSharded ? "sharded" : "still gathering",
        ": the module of unit \"", holder->name, "\" must run the module of unit \"", unit.name,
        "\" inside its own forward"));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::OnPostForward(ShardedUnit& unit, std::vector<Variable>& outputs) {
  if (autograd::InBackward()) return absl::OkStatus();  // recompute: keep it for its backward
  const bool backward_follows = autograd::GradMode::IsEnabled();
  if (backward_follows) {
    ShardedUnit* u = &unit;
    for (Variable& out : outputs) {
      if (!out.defined() || !out.requires_grad()) continue;
      out.AddGradHook([this, u](const Tensor& g) -> absl::StatusOr<Tensor> {
        ZS_RETURN_IF_ERROR(OnPreBackward(*u));
        return g;
      });
    }
    if (!unit.is_root && (unit.frozen_part != nullptr || unit.frozen())) WatchInputs(unit);
  }
  if (unit.is_root) in_forward_ = false;
  if (trace_ != nullptr) {
    trace_->AddSpan("forward " + unit.name, "compute", 2 * world_.rank(), unit.forward_start_us, trace_->NowUs());
  }
  // Without a backward to come (evaluation), nothing needs the gathered bytes.
  if (!backward_follows || (!unit.is_root && options_.ReshardAfterForward())) {
    ZS_RETURN_IF_ERROR(Reshard(unit));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::OnPreBackward(ShardedUnit& unit) {
  if (unit.backward_started) return absl::OkStatus();
  unit.backward_started = true;
  unit.landed = 0;
  if (trace_ != nullptr) unit.backward_start_us = trace_->NowUs();
  if (!callback_queued_) {
    callback_queued_ = true;
    ZS_RETURN_IF_ERROR(autograd::QueueCallback([this] { return FinishBackward(); }));
  }
  ZS_RETURN_IF_ERROR(Gather(unit));
  // Note [Tied parameters]: the holder's backward starts first. Its hook may
  // not have fired yet: a unit's output can be its last child's output, whose
  // gradient hooks run the child's first.
  for (const auto& [name, holder] : unit.tied_holders) {
    ShardedUnit& h = holder->owner != nullptr ? *holder->owner : *holder;
    if (!h.backward_started) ZS_RETURN_IF_ERROR(OnPreBackward(h));
  }
  ZS_RETURN_IF_ERROR(CheckTiedHolders(unit, "backward"));
  PrefetchShard(NextInBackwardOrder(unit));
  if (options_.backward_prefetch == BackwardPrefetch::kBackwardPre) {
    ZS_RETURN_IF_ERROR(Prefetch(NextInBackwardOrder(unit)));
  }
  if (!unit.frozen() && !unit.full_grad.defined()) {  // kept across backwards inside NoSync()
    ZS_ASSIGN_OR_RETURN(unit.full_grad, Tensor::Zeros({unit.flat.padded_numel()}, unit.reduce_dtype, allocator_));
  }
  for (const FlatParamSlot& p : unit.flat.params()) {
    if (!p.requires_grad) continue;
    ZS_ASSIGN_OR_RETURN(Tensor flat_view, unit.full_grad.Narrow(0, p.offset, p.numel));
    ZS_ASSIGN_OR_RETURN(Tensor view, flat_view.View(p.shape));
    ZS_RETURN_IF_ERROR(p.var.set_grad(view));
  }
  return absl::OkStatus();
}

absl::Status ShardedModel::OnGradLanded(ShardedUnit& unit) {
  if (!unit.backward_started) {
    return absl::InternalError(absl::StrCat("ShardedModel: a gradient of unit \"", unit.name,
                                            "\" landed before the unit's backward started"));
  }
  if (++unit.landed == unit.num_grad_params) return ReduceUnit(unit);
  return absl::OkStatus();
}

absl::Status ShardedModel::ReduceUnit(ShardedUnit& unit) {
  if (unit.reduced) return absl::OkStatus();
  unit.reduced = true;
  if (trace_ != nullptr) {
    unit.reduce_issue_us = trace_->NowUs();
    trace_->AddSpan("backward " + unit.name, "compute", 2 * world_.rank(), unit.backward_start_us,
                    unit.reduce_issue_us);
  }
  if (sync_gradients_ && !unit.frozen() && options_.ReplicatesGradients()) {
    // Note [Replicated gradients]: every rank gets the whole averaged gradient.
    unit.reduce_scatter_numel += unit.full_grad.numel();
    ZS_ASSIGN_OR_RETURN(unit.reduce_work, shard_group_->AllReduceAsync(unit.full_grad, unit.full_grad, ReduceOp::kAvg,
                                                                       schedule_->Collective()));
    reduce_order_.push_back(&unit);
  } else if (sync_gradients_ && !unit.frozen()) {
    unit.reduce_scatter_numel += unit.full_grad.numel();
    ZS_ASSIGN_OR_RETURN(Tensor mine, unit.full_grad.Narrow(0, unit.flat.shard_offset(),
                                                           unit.flat.shard_numel()));
    ZS_ASSIGN_OR_RETURN(unit.reduce_work,
                        shard_group_->ReduceScatterAsync(unit.full_grad, mine, ReduceOp::kAvg,
                                                         schedule_->Collective()));
    reduce_order_.push_back(&unit);
  }
  if (options_.backward_prefetch == BackwardPrefetch::kBackwardPost) {
    ZS_RETURN_IF_ERROR(Prefetch(NextInBackwardOrder(unit)));
  }
  // Every parameter gradient has landed, so nothing in this backward reads the
  // unit's (trainable) parameters again. Frozen ones may still be read: a frozen
  // part and a unit with nothing to train wait for the end (Note [Frozen parameters]).
  if (!unit.is_root && !unit.frozen()) {
    ZS_RETURN_IF_ERROR(ReshardOne(unit));
  }
  return MaybeFreeFrozen(unit);
}

namespace {

// One watched input gradient of a unit (Note [Frozen parameters]): counted
// while it lives and has not run, so a graph dropped without backward leaves
// no count behind.
class PendingInput {
 public:
  explicit PendingInput(std::shared_ptr<int> count) : count_(std::move(count)) { ++*count_; }
  ~PendingInput() {
    if (!done_) --*count_;
  }
  PendingInput(const PendingInput&) = delete;
  PendingInput& operator=(const PendingInput&) = delete;
  // True the first time: the gradient has been computed.
  bool Done() {
    if (done_) return false;
    done_ = true;
    --*count_;
    return true;
  }

 private:
  std::shared_ptr<int> count_;
  bool done_ = false;
};

}  // namespace

void ShardedModel::WatchInputs(ShardedUnit& unit) {
  const std::vector<Variable>* inputs = unit.module->forward_inputs();
  if (inputs == nullptr) {
    unit.inputs_untracked = true;
    return;
  }
  for (const Variable& in : *inputs) {
    if (!in.defined() || !in.requires_grad()) continue;  // no gradient will flow there
    if (in.is_leaf()) {  // a leaf's hooks live as long as it does, beyond this graph
      unit.inputs_untracked = true;
      continue;
    }
    ShardedUnit* u = &unit;
    auto pending = std::make_shared<PendingInput>(unit.inputs_pending);
    in.AddGradHook([this, u, pending](const Tensor& g) -> absl::StatusOr<Tensor> {
      if (pending->Done()) ZS_RETURN_IF_ERROR(MaybeFreeFrozen(*u));
      return g;
    });
  }
}

absl::Status ShardedModel::MaybeFreeFrozen(ShardedUnit& unit) {
  if (unit.is_root || !unit.backward_started || unit.recomputed || unit.inputs_untracked ||
      *unit.inputs_pending > 0) {
    return absl::OkStatus();
  }
  if (unit.frozen_part != nullptr) {
    // Trainable gradients still to land may yet read the frozen values.
    return unit.reduced ? ReshardOne(*unit.frozen_part) : absl::OkStatus();
  }
  return unit.frozen() ? ReshardOne(unit) : absl::OkStatus();
}

absl::Status ShardedModel::FinishBackward() {
  callback_queued_ = false;
  for (auto& u : units_) {
    if (u->backward_started && !u->reduced) ZS_RETURN_IF_ERROR(ReduceUnit(*u));  // unused parameters
  }
  for (ShardedUnit* u : reduce_order_) {
    const double wait_start = trace_ ? trace_->NowUs() : 0;
    ZS_RETURN_IF_ERROR(schedule_->Await(*u->reduce_work));
    u->reduce_work.reset();
    if (trace_ != nullptr) {
      const double now = trace_->NowUs();
      const std::string what = options_.ReplicatesGradients() ? "all-reduce " : "reduce-scatter ";
      trace_->AddSpan("wait " + what + u->name, "wait", 2 * world_.rank(), wait_start, now);
      trace_->AddSpan(what + u->name, "comm", 2 * world_.rank() + 1, u->reduce_issue_us, now);
    }
    // SHARD_OPTIMIZER: the whole reduced gradient into replicated_grad
    // (Note [Replicated gradients]); else this rank's slice into grad_shard.
    Tensor mine = u->full_grad;
    const Tensor& dst = GradStorage(*u);
    if (!options_.ReplicatesGradients()) {
      ZS_ASSIGN_OR_RETURN(mine, u->full_grad.Narrow(0, u->flat.shard_offset(), u->flat.shard_numel()));
    }
    if (replica_group_->size() > 1) {
      ZS_RETURN_IF_ERROR(replica_group_->AllReduce(mine, ReduceOp::kAvg, schedule_->Collective()));
    }
    if (dst.device() != mine.device()) {  // gradients offloaded to the host
      ZS_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty({mine.numel()}, mine.dtype(), dst.allocator()));
      ZS_RETURN_IF_ERROR(schedule_->Copy(host, mine));
      mine = host;
    }
    ZS_RETURN_IF_ERROR(Add(dst, mine, dst));
  }
  reduce_order_.clear();
  for (auto& u : units_) {
    if (!u->backward_started) continue;
    if (sync_gradients_) {
      u->full_grad = Tensor();
      for (const FlatParamSlot& p : u->flat.params()) p.var.reset_grad();
    }
    ZS_RETURN_IF_ERROR(Reshard(*u));
    u->backward_started = false;
    u->reduced = false;
    u->recomputed = false;
    u->landed = 0;
  }
  return absl::OkStatus();
}

// ================================================================ steps

absl::Status ShardedModel::ZeroGrad() {
  for (auto& u : units_) {
    if (u->frozen()) continue;
    ZS_RETURN_IF_ERROR(GradStorage(*u).Fill(0.0));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ShardedModel::GradientsOverflowed() {
  double bad = 0;
  for (auto& u : units_) {
    if (u->frozen()) continue;
    // An Inf or NaN anywhere makes the (double) sum non-finite.
    ZS_ASSIGN_OR_RETURN(double sum, SumAll(u->grad_shard));
    if (!std::isfinite(sum)) bad = 1;
  }
  ZS_ASSIGN_OR_RETURN(Tensor flag, Tensor::Full({1}, bad, DType::kF32, CommAllocator()));
  ZS_RETURN_IF_ERROR(world_.AllReduce(flag, ReduceOp::kMax));
  ZS_ASSIGN_OR_RETURN(double any, flag.Item());
  return any > 0;
}

absl::Status ShardedModel::ScaleGradients(double factor) {
  for (auto& u : units_) {
    if (!u->frozen()) ZS_RETURN_IF_ERROR(Affine(GradStorage(*u), factor, 0.0, GradStorage(*u)));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> ShardedModel::ClipGradNorm(double max_norm, double norm_type) {
  const bool inf = std::isinf(norm_type);
  if (!inf && norm_type != 2.0) {
    return absl::InvalidArgumentError(absl::StrCat("ClipGradNorm: norm_type ", norm_type,
                                                   ", expected 2 or infinity"));
  }
  double local = 0;
  for (auto& u : units_) {
    if (u->frozen()) continue;
    if (inf) {
      ZS_ASSIGN_OR_RETURN(Tensor a, Unary(UnaryOp::kAbs, u->grad_shard));
      ZS_ASSIGN_OR_RETURN(Tensor m, Max(a, 0));
      local = std::max(local, m.Item().value());
    } else {
      ZS_ASSIGN_OR_RETURN(double ss, SumOfSquares(u->grad_shard));
      local += ss;
    }
  }
  // The shard group holds the whole gradient between its ranks (replicas hold copies).
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({1}, local, DType::kF32, CommAllocator()));
  ZS_RETURN_IF_ERROR(shard_group_->AllReduce(t, inf ? ReduceOp::kMax : ReduceOp::kSum));
  ZS_ASSIGN_OR_RETURN(double total, t.Item());
  const double norm = inf ? total : std::sqrt(total);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (auto& u : units_) {
      if (!u->frozen()) ZS_RETURN_IF_ERROR(Affine(GradStorage(*u), coef, 0.0, GradStorage(*u)));
    }
  }
  return norm;
}

absl::Status ShardedModel::SummonFullParams(const std::function<absl::Status()>& fn, bool writeback,
                                            bool rank0_only) {
  for (auto& u : units_) {
    ZS_RETURN_IF_ERROR(Gather(*u));
  }
  const bool hide = rank0_only && world_.rank() != 0;
  if (hide) {
    for (auto& u : units_) {
      for (const FlatParamSlot& p : u->flat.params()) {
        ZS_RETURN_IF_ERROR(p.var.set_value(Tensor()));
      }
    }
  }
  absl::Status status = fn();
  if (status.ok() && writeback && !hide) {
    for (auto& u : units_) {
      if (Aliased(*u, options_)) continue;  // the parameters are the shard
      ZS_ASSIGN_OR_RETURN(Tensor mine, u->full.Narrow(0, u->flat.shard_offset(), u->flat.shard_numel()));
      ZS_RETURN_IF_ERROR(
          WithShard(*u, /*write=*/true, [&](const Tensor& shard) { return schedule_->Copy(shard, mine); }));
    }
  }
  for (auto& u : units_) {
    if (hide) u->state = ShardedUnit::State::kGathered;  // views were dropped above
    ZS_RETURN_IF_ERROR(Reshard(*u));
  }
  return status;
}

absl::Status ShardedModel::AverageBuffers() {
  for (auto& [name, buffer] : root_->NamedBuffers()) {
    if (!IsFloatingPoint(buffer.dtype())) continue;
    ZS_ASSIGN_OR_RETURN(Tensor c, buffer.Contiguous());
    ZS_RETURN_IF_ERROR(world_.AllReduce(c, ReduceOp::kAvg));
    if (!IsSameView(c, buffer)) ZS_RETURN_IF_ERROR(buffer.CopyFrom(c));
  }
  return absl::OkStatus();
}

// ================================================================ reporting

MemoryPlan ShardedModel::Plan() const {
  MemoryPlan plan;
  // Gathered bytes of one unit while it is gathered for backward: its
  // parameters (unless aliased to the shard) and its flat gradient (none when frozen).
  auto gathered = [&](const ShardedUnit& u) -> int64_t {
    const int64_t pitem = static_cast<int64_t>(DTypeSize(u.param_dtype));
    const int64_t gitem = static_cast<int64_t>(DTypeSize(u.reduce_dtype));
    return (Aliased(u, options_) ? 0 : u.flat.padded_numel() * pitem) +
           (u.frozen() ? 0 : u.flat.padded_numel() * gitem);
  };
  int64_t max_unit = 0, root = 0, sum_units = 0;
  for (const auto& u : units_) {
    // Device bytes only: offloaded buffers live in host memory.
    if (!options_.offload.params_on_host()) plan.sharded_params += u->flat.shard_numel() * 4;
    if (u->frozen()) continue;  // no gradient shard, no optimizer state (Note [Frozen parameters])
    if (!options_.offload.grads_on_host()) {
      (options_.ReplicatesGradients() ? plan.replicated_grads : plan.sharded_grads) +=
          (options_.ReplicatesGradients() ? u->flat.padded_numel() : u->flat.shard_numel()) *
          static_cast<int64_t>(DTypeSize(u->grad_dtype));
    }
    if (!options_.offload.optimizer_on_host()) plan.optimizer_state += u->flat.shard_numel() * 8;
  }
  for (const auto& u : units_) {
    if (u->owner != nullptr) continue;  // counted with its owner, gathered with it
    const int64_t bytes = gathered(*u) + (u->frozen_part != nullptr ? gathered(*u->frozen_part) : 0);
    if (u->is_root) {
      root = bytes;
    } else {
      max_unit = std::max(max_unit, bytes);
      sum_units += bytes;
    }
  }
  int64_t owners = 0;
  for (const auto& u : units_) owners += u->owner == nullptr ? 1 : 0;
  const int64_t in_flight = options_.limit_all_gathers > 0 ? options_.limit_all_gathers : owners - 1;
  // SHARD_GRAD_OP, SHARD_OPTIMIZER and NO_SHARD keep every unit gathered from forward to backward.
  plan.gathered_peak = root + (options_.ReshardAfterForward() ? std::min(sum_units, in_flight * max_unit) : sum_units);
  return plan;
}

std::string TiedPlacement::ToString() const {
  const auto module_name = [](const std::string& m) { return m.empty() ? std::string("<root>") : m; };
  std::vector<std::string> where;
  for (const std::string& m : modules) where.push_back(module_name(m));
  std::string out = absl::StrCat("tied ", absl::StrJoin(names, " = "), " (modules ", absl::StrJoin(where, ", "), "): ");
  if (units.size() == 1) {
    absl::StrAppend(&out, "in unit \"", holder, "\", with every module that uses it");
  } else {
    absl::StrAppend(&out, "the policy put its modules in units ", absl::StrJoin(units, ", "), "; it lives in unit \"",
                    holder, "\", of their lowest common ancestor ", module_name(ancestor));
  }
  if (!emptied.empty()) {
    absl::StrAppend(&out, "; ", absl::StrJoin(emptied, ", "), " (left without parameters) not wrapped");
  }
  return out;
}

std::string ShardedModel::ToString() const {
  std::string out = absl::StrFormat(
      "ShardedModel: %s, world %d, shard group %d (rank %d), replica group %d, %d units, "
      "device %s, allocator '%s'\n",
      options_.ToString(), world_.size(), shard_group_->size(), shard_group_->rank(),
      replica_group_->size(), units_.size(), allocator_->device().ToString(), allocator_->name());
  for (const auto& u : units_) {
    // Note [Frozen parameters]: which units hold no gradient or optimizer state.
    std::string role;
    if (u->owner != nullptr) {
      role = absl::StrFormat(", frozen part of unit %d (gathered and freed with it; no gradient, no optimizer state)",
                             u->owner->index);
    } else if (u->frozen()) {
      role = ", frozen (no gradient, no optimizer state)";
    } else if (u->frozen_part != nullptr) {
      role = absl::StrFormat(", frozen parameters in unit %d", u->frozen_part->index);
    }
    absl::StrAppend(&out, absl::StrFormat("  unit %d \"%s\" (%s)%s, gathered as %s: %s", u->index, u->name,
                                          u->module->type_name(), role, DTypeName(u->param_dtype),
                                          u->flat.ToString()));
  }
  for (const TiedPlacement& t : ties_) absl::StrAppend(&out, "  ", t.ToString(), "\n");
  absl::StrAppend(&out, "  memory plan per rank: ", Plan().ToString(), "\n");
  if (param_swap_ != nullptr) {
    absl::StrAppend(&out, "  NVMe ", param_swap_->ToString(), "\n");
    if (!param_swap_->note().empty()) absl::StrAppend(&out, "  note: ", param_swap_->note(), "\n");
  }
  return out;
}

}  // namespace zeroshard
