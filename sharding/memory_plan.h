// MemoryPlan: the bytes a rank of a ShardedModel holds, by kind, planned from
// the units' layout and the options (ShardedModel::Plan(), memory_plan.cc).
//
//   const MemoryPlan plan = sharded->Plan();
//   std::cout << plan.ToString();  // "sharded params 96.00 KiB, sharded grads 96.00 KiB,
//                                  //  optimizer state 192.00 KiB, gathered peak 48.00 KiB; total 432.00 KiB"
#ifndef ZEROSHARD_SHARDING_MEMORY_PLAN_H_
#define ZEROSHARD_SHARDING_MEMORY_PLAN_H_

#include <cstdint>
#include <string>

namespace zeroshard {

// Bytes a rank holds, planned from the layout and measured from its allocator.
struct MemoryPlan {
  int64_t sharded_params = 0;   // f32 master shards (device bytes: none when offloaded)
  int64_t sharded_grads = 0;    // gradient shards (f32, or reduce_dtype with keep_low_precision_grads)
  int64_t optimizer_state = 0;  // what the optimizer will add (AdamW: 2 x f32 shard)
  int64_t gathered_peak = 0;    // gathered parameters + flat gradients at the worst moment
  // SHARD_OPTIMIZER: the whole gradient every rank keeps (grad shards are
  // views of it, so sharded_grads is 0); Note [Replicated gradients] in sharded_model.h.
  int64_t replicated_grads = 0;
  int64_t total() const {
    return sharded_params + sharded_grads + optimizer_state + gathered_peak + replicated_grads;
  }
  std::string ToString() const;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SHARDING_MEMORY_PLAN_H_
