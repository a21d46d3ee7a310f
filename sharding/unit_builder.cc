// Part of ShardedModel (sharded_model.h): how a module tree and a wrap policy
// become units. Build() picks the wrapped modules (WrapPlanner), places tied
// parameters (Note [Tied parameters]), splits off frozen parts (Note [Frozen
// parameters]), makes each unit's FlatParameter, and InitShards fills this
// rank's master shard (deferred init, sync_module_states, NVMe).
#include "zeroshard/sharding/sharded_model.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

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
  ZS_ASSIGN_OR_RETURN(comm_hook_, CommHookRegistry::Global().Create(options_.comm_hook));
  ZS_RETURN_IF_ERROR(comm_hook_->Setup(*shard_group_, allocator_));

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

absl::Status ShardedModel::InitShards(ShardedUnit& unit) {
  const FlatParameter& flat = unit.flat;
  Allocator* shard_home = options_.offload.params_on_host() ? host_allocator_ : allocator_;
  Allocator* grad_home = options_.offload.grads_on_host() ? host_allocator_ : allocator_;
  if (!unit.frozen()) ZS_RETURN_IF_ERROR(InitGradShard(unit, grad_home));
  // A shard on NVMe is filled in a swap buffer, written, and never held whole in memory.
  char* swap_bytes = nullptr;
  if (unit.swap_region >= 0) {
    ZS_ASSIGN_OR_RETURN(swap_bytes, param_swap_->Acquire(unit.swap_region, /*overwrite=*/true));
    unit.shard = Tensor::Wrap(swap_bytes, {flat.shard_numel()}, DType::kF32, param_swap_->device());
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

}  // namespace zeroshard
