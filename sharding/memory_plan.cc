// The memory plan of a ShardedModel: the bytes a rank holds, from the units'
// layout and the options (memory_plan.h).
#include "zeroshard/sharding/memory_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/sharding/sharded_model.h"

namespace zeroshard {

std::string MemoryPlan::ToString() const {
  return absl::StrCat("sharded params ", FormatBytes(sharded_params), ", sharded grads ",
                      FormatBytes(sharded_grads), ", optimizer state ", FormatBytes(optimizer_state),
                      ", gathered peak ", FormatBytes(gathered_peak),
                      replicated_grads > 0 ? absl::StrCat(", replicated grads ", FormatBytes(replicated_grads)) : "",
                      "; total ", FormatBytes(total()));
}

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

}  // namespace zeroshard
