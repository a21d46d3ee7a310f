// Part of ShardedModel (sharded_model.h): where master shards rest under
// offload (Note [NVMe offload] in sharded_model.h). CreateParamSwap picks the
// units whose shards live on NVMe (beyond max_in_cpu); WithShard is the one way
// to reach a master shard outside the hooks; PrefetchShard and PrefetchForward
// read shards ahead of the schedule.
#include "zeroshard/sharding/sharded_model.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

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
  const absl::Status s = fn(Tensor::Wrap(bytes, {unit.flat.shard_numel()}, DType::kF32, param_swap_->device()));
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

}  // namespace zeroshard
