// The small job the simulator tests run: a GPT of 4 blocks of width 64 (vocab
// 512, T 64), micro-batch 2, one unit per Block, bf16 parameters with f32
// reduction, no clipping (so only the sharding's collectives move bytes), on
// the h100_dgx profile.
#ifndef ZEROSHARD_TESTS_SIM_SMALL_GPT_H_
#define ZEROSHARD_TESTS_SIM_SMALL_GPT_H_

#include <gtest/gtest.h>

#include "zeroshard/sim/profile.h"
#include "zeroshard/sim/simulator.h"

namespace zeroshard::sim::testing {

inline SimulateOptions SmallGpt(ShardingStrategy strategy, int world) {
  SimulateOptions o;
  o.job.model = nn::GptConfig{.vocab_size = 512, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 64};
  o.job.batch_size = 2;
  o.job.grad_clip = 0;  // no norm all-reduce: only the sharding's collectives move bytes
  o.job.sharding.strategy = strategy;
  o.job.sharding.wrap = WrapPolicy::ByType({"Block"});
  o.job.sharding.mixed_precision.param_dtype = DType::kBF16;
  o.job.sharding.mixed_precision.reduce_dtype = DType::kF32;
  absl::StatusOr<HardwareProfile> p = LoadProfile("h100_dgx");
  EXPECT_TRUE(p.ok()) << p.status();
  o.profile = *p;
  o.world = world;
  return o;
}

}  // namespace zeroshard::sim::testing

#endif  // ZEROSHARD_TESTS_SIM_SMALL_GPT_H_
