// DeepSpeed configs: a "deepspeed" block of DeepSpeed's keys (or a whole
// DeepSpeed config file, read as if under "deepspeed") sets the same
// RunConfig as the FSDP-style keys; Note [DeepSpeed mapping] in
// deepspeed_config.cc says what each key becomes.
//
//   {"deepspeed": {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3},
//                  "bf16": {"enabled": true},
//                  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 20,
//                                "total_num_steps": 200, "warmup_type": "linear"}}}}
//
// Internal to train/ (train/config.cc and the field table call it).
#ifndef ZEROSHARD_TRAIN_DEEPSPEED_CONFIG_H_
#define ZEROSHARD_TRAIN_DEEPSPEED_CONFIG_H_

#include "zeroshard/train/config.h"
#include "zeroshard/train/config_reader.h"

namespace zeroshard {

// Reads the block `ds` ("deepspeed") into `c`; the FSDP-style keys were read
// before it (a setting given both ways is a problem unless one side comes from
// the command line). ds.ctx().root must be the whole config.
void ReadDeepSpeed(config_internal::Section ds, RunConfig* c);

// True for a DeepSpeed config file at the top level: it holds
// zero_optimization, train_micro_batch_size_per_gpu or train_batch_size and no
// key of this config's own top level (DeepSpeed's "optimizer" aside).
bool IsDeepSpeedConfig(const config_internal::Json& root);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_DEEPSPEED_CONFIG_H_
