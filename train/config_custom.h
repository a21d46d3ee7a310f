// The readers of the config's structured keys, which a generic kind of
// train/config_schema.h cannot read: each reads `key` of `s` into `c`, with
// the messages of train/config_reader.h. Their rows are in the table
// (train/config_schema.cc). Internal to train/.
#ifndef ZEROSHARD_TRAIN_CONFIG_CUSTOM_H_
#define ZEROSHARD_TRAIN_CONFIG_CUSTOM_H_

#include <string>

#include "zeroshard/train/config.h"
#include "zeroshard/train/config_reader.h"

namespace zeroshard::config_internal {

// The options a key reads: the GPT's or, with model.type "resnet", the vision job's.
inline bool IsResNet(const RunConfig& c) { return c.model_type == "resnet"; }
template <typename C>
auto& OptimizerOf(C& c) {
  return IsResNet(c) ? c.resnet.optimizer : c.train.optimizer;
}
template <typename C>
auto& ScheduleOf(C& c) {
  return IsResNet(c) ? c.resnet.lr : c.train.lr;
}

// Every reader returns true (a kSection's opener: false when it handled the
// value itself and the rows below are skipped).
bool ReadIntList(Section& s, const std::string& key, RunConfig* c);            // model.widths / depths
bool ReadBetas(Section& s, const std::string& key, RunConfig* c);              // optimizer.betas
bool ReadDecaySteps(Section& s, const std::string& key, RunConfig* c);         // lr_schedule.decay_steps
bool ReadZeroStage(Section& s, const std::string& key, RunConfig* c);          // strategy.zero_stage
bool ReadAutoWrapPolicy(Section& s, const std::string& key, RunConfig* c);     // strategy.auto_wrap_policy
bool ReadBackwardPrefetch(Section& s, const std::string& key, RunConfig* c);   // strategy.backward_prefetch
bool ReadLimitAllGathers(Section& s, const std::string& key, RunConfig* c);    // strategy.limit_all_gathers
bool ReadCpuOffload(Section& s, const std::string& key, RunConfig* c);         // strategy.cpu_offload
bool OpenNvmeOffload(Section& s, const std::string& key, RunConfig* c);        // strategy.nvme_offload
bool ReadNvmePath(Section& s, const std::string& key, RunConfig* c);           // nvme_offload.{,optimizer.,params.}nvme_path
bool OpenMixedPrecision(Section& s, const std::string& key, RunConfig* c);     // strategy.mixed_precision
bool ReadFp32ModuleTypes(Section& s, const std::string& key, RunConfig* c);    // mixed_precision.fp32_module_types
bool ReadActivationCheckpointing(Section& s, const std::string& key, RunConfig* c);
bool ReadStateDictType(Section& s, const std::string& key, RunConfig* c);

}  // namespace zeroshard::config_internal

#endif  // ZEROSHARD_TRAIN_CONFIG_CUSTOM_H_
