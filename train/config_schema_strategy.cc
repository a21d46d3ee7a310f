// The config's strategy rows: PyTorch FSDP's (and Lightning's
// FSDPStrategy's) names, in the table's order (train/config_schema.h).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/train/config_custom.h"
#include "zeroshard/train/config_schema_builder.h"
#include "zeroshard/train/deepspeed_config.h"

namespace zeroshard::config_schema_internal {

// strategy: PyTorch FSDP's (and Lightning's FSDPStrategy's) names.
void AppendStrategyFields(std::vector<ConfigField>* t) {
  using config_internal::ReadNvmePath;
  std::vector<ConfigField> rows = {
      Sec("strategy", "how the model is sharded: PyTorch FSDP's names (DeepSpeed's: the deepspeed block)"),
      std::move(Choice("strategy.sharding_strategy",
                       {"FULL_SHARD", "SHARD_GRAD_OP", "SHARD_OPTIMIZER", "NO_SHARD", "HYBRID_SHARD"})
          .Get([](const RunConfig& c) { return OJson(std::string(ShardingStrategyName(c.train.sharding.strategy))); })
          .Set([](RunConfig& c, const Json& v) { c.train.sharding.strategy = *ParseShardingStrategy(v.get<std::string>()); })
          .Peer("FSDP sharding_strategy; DeepSpeed zero_optimization.stage")
          .Flag("sharding_strategy", "FULL_SHARD, SHARD_GRAD_OP, SHARD_OPTIMIZER, NO_SHARD or HYBRID_SHARD")
          .Help("ZeRO-3, ZeRO-2, ZeRO-1 (DeepSpeed's stages 3, 2, 1), DDP, or ZeRO-3 within shard groups")),
      std::move(Custom("strategy.zero_stage", "int or null", "1 | 2 | 3", config_internal::ReadZeroStage)
          .Get([](const RunConfig&) { return OJson(nullptr); })  // sharding_strategy says it
          .Peer("DeepSpeed zero_optimization.stage")
          .Flag("zero_stage", "ZeRO stage: 1 (SHARD_OPTIMIZER), 2 (SHARD_GRAD_OP) or 3 (FULL_SHARD); an error beside "
                              "a different --sharding_strategy")
          .Help("1|2|3: SHARD_OPTIMIZER|SHARD_GRAD_OP|FULL_SHARD; beside sharding_strategy (a _base_ file's "
                "included) they must agree unless only one comes from the command line, which wins")
          .Example("1")),
      std::move(Int("strategy.hybrid_shard_size", 0).Ref([](auto& c) -> auto& { return c.train.sharding.hybrid_shard_size; })
          .Flag("hybrid_shard_size", "ranks per shard group for HYBRID_SHARD; 0: the ranks of each node")
          .Help("HYBRID_SHARD: ranks per shard group (divides the world); 0: a group per node (shard inside a "
                "node, replicate across nodes)")),
      std::move(Custom("strategy.auto_wrap_policy", "list, object or null",
                       "module types; {\"min_num_params\": n}; null: none", config_internal::ReadAutoWrapPolicy)
          .Get([](const RunConfig& c) {
            const WrapPolicy& w = c.train.sharding.wrap;
            switch (w.kind) {
              case WrapPolicy::Kind::kByType: return OJson(std::vector<std::string>(w.types.begin(), w.types.end()));
              case WrapPolicy::Kind::kBySize: return OJson{{"min_num_params", w.min_num_params}};
              default: return OJson(nullptr);
            }
          })
          .Peer("FSDP auto_wrap_policy (ModuleWrapPolicy, size_based_auto_wrap_policy)")
          .Flag(Mapped("auto_wrap", "block, size:<min_num_params> or none", false, "block", "size:1000",
                       [](const std::string& v) -> Overrides {
                         int64_t min_params = 0;
                         if (v == "block") return One("strategy.auto_wrap_policy=[\"Block\"]");
                         if (v == "none") return One("strategy.auto_wrap_policy=null");
                         if (absl::StartsWith(v, "size:") && absl::SimpleAtoi(v.substr(5), &min_params)) {
                           return One(absl::StrCat("strategy.auto_wrap_policy={\"min_num_params\": ", min_params, "}"));
                         }
                         return absl::InvalidArgumentError(
                             absl::StrCat("--auto_wrap=", v, ": expected block, size:<n> or none"));
                       }))
          .Help("the units: module types (GPT: Block, CausalSelfAttention, Mlp, LayerNorm; ResNet: BasicBlock, "
                "Conv2d, BatchNorm2d, Linear), or by size")
          .Example("{\"min_num_params\": 1000}")),
      std::move(Custom("strategy.backward_prefetch", "enum or null", "\"BACKWARD_PRE\" | \"BACKWARD_POST\" | null",
                       config_internal::ReadBackwardPrefetch)
          .Get([](const RunConfig& c) {
            const BackwardPrefetch p = c.train.sharding.backward_prefetch;
            return p == BackwardPrefetch::kNone ? OJson(nullptr) : OJson(std::string(BackwardPrefetchName(p)));
          })
          .Peer("FSDP backward_prefetch; DeepSpeed zero_optimization.overlap_comm")
          .Flag("backward_prefetch", "pre, post or none")
          .Help("gather the next unit before (PRE) or after (POST) this unit's gradient computation")
          .Example("\"BACKWARD_POST\"")),
      std::move(Bool("strategy.forward_prefetch").Ref([](auto& c) -> auto& { return c.train.sharding.forward_prefetch; })
          .Peer("FSDP forward_prefetch; DeepSpeed zero_optimization.overlap_comm")
          .Flag("forward_prefetch", "prefetch the next unit's all-gather in forward")
          .Help("prefetch the next unit's all-gather in forward")),
      std::move(Custom("strategy.limit_all_gathers", "int or bool", "[0, 1048576]; true: 2, false: 0 (unlimited)",
                       config_internal::ReadLimitAllGathers)
          .Ref([](auto& c) -> auto& { return c.train.sharding.limit_all_gathers; })
          .Peer("FSDP limit_all_gathers").Flag("limit_all_gathers", "gathered units in flight (0: unlimited)")
          .Help("units gathered at once (0: unlimited)").Example("3")),
      std::move(Custom("strategy.cpu_offload", "bool or object", "{\"params\", \"grads\", \"optimizer\"} booleans",
                       config_internal::ReadCpuOffload)
          .Get([](const RunConfig& c) {
            const OffloadPolicy& off = c.train.sharding.offload;
            if (!off.params && !off.grads && !off.optimizer) return OJson(false);
            if (off.params && off.grads && off.optimizer) return OJson(true);
            return OJson{{"params", off.params}, {"grads", off.grads}, {"optimizer", off.optimizer}};
          })
          .Peer("FSDP cpu_offload; DeepSpeed offload_optimizer / offload_param device \"cpu\"")
          .Flag(Mapped("offload", "none; host offload: optimizer (state, master weights, gradients) or "
                                  "params_and_optimizer; NVMe offload (ZeRO-Infinity, files under --nvme_path): "
                                  "nvme_optimizer (optimizer state) or nvme_params_and_optimizer (and the master "
                                  "weight shards)",
                       false, "none", "params_and_optimizer", [](const std::string& v) -> Overrides {
                         // Host offload (FSDP's CPUOffload) or NVMe offload (ZeRO-Infinity), never both.
                         std::vector<std::string> out;
                         bool nvme_optimizer = false, nvme_params = false;
                         if (v == "none") {
                           out.push_back("strategy.cpu_offload=false");
                         } else if (v == "optimizer") {
                           out.push_back("strategy.cpu_offload={\"params\": false, \"grads\": true, \"optimizer\": true}");
                         } else if (v == "params_and_optimizer") {
                           out.push_back("strategy.cpu_offload=true");
                         } else if (v == "nvme_optimizer" || v == "nvme_params_and_optimizer") {
                           out.push_back("strategy.cpu_offload=false");
                           nvme_optimizer = true;
                           nvme_params = v == "nvme_params_and_optimizer";
                         } else {
                           return absl::InvalidArgumentError(
                               absl::StrCat("--offload=", v, ": expected none, optimizer, params_and_optimizer, "
                                                             "nvme_optimizer or nvme_params_and_optimizer"));
                         }
                         out.push_back(absl::StrCat("strategy.nvme_offload.optimizer.enabled=", nvme_optimizer));
                         out.push_back(absl::StrCat("strategy.nvme_offload.params.enabled=", nvme_params));
                         return out;
                       }))
          .Help("true: parameters, gradients and the optimizer step on the host (FSDP's CPUOffload); or which "
                "of them")
          .Example("true")),
      std::move(F("strategy.nvme_offload", FieldKind::kSection).Read(config_internal::OpenNvmeOffload)
          .Help("ZeRO-Infinity: state in swap files on a local NVMe drive (null/false: off)")),
      std::move(Custom("strategy.nvme_offload.nvme_path", "string", "an existing directory", ReadNvmePath)
          .Get([](const RunConfig& c) {
            const OffloadPolicy& off = c.train.sharding.offload;
            return OJson(!off.optimizer_nvme.path.empty() ? off.optimizer_nvme.path : off.param_nvme.path);
          })
          .Peer("DeepSpeed offload_optimizer.nvme_path, offload_param.nvme_path")
          .Flag("nvme_path", "directory for the NVMe swap files (a local NVMe mount) of --offload=nvme_*")
          .Help("the directory of both kinds' swap files").Example("\"/tmp\"")),
  };
  // optimizer {...} and params {...}: one NvmeOffload each.
  for (const bool params : {false, true}) {
    const std::string kind = params ? "params" : "optimizer";
    const std::string p = "strategy.nvme_offload." + kind;
    const std::string ds = absl::StrCat("DeepSpeed offload_", params ? "param" : "optimizer", ".");
    auto n = [params](auto& c) -> auto& {
      return params ? c.train.sharding.offload.param_nvme : c.train.sharding.offload.optimizer_nvme;
    };
    rows.push_back(Sec(p, params ? "the master weight shards on NVMe" : "the optimizer state on NVMe"));
    rows.push_back(std::move(Bool(p + ".enabled").Ref([params](auto& c) -> auto& {
      return params ? c.train.sharding.offload.nvme_params : c.train.sharding.offload.nvme_optimizer;
    }).Peer(ds + "device \"nvme\"").Help("swap this kind to NVMe")));
    rows.push_back(std::move(Custom(p + ".nvme_path", "string or null", "null: nvme_offload.nvme_path", ReadNvmePath)
        .Get([n](const RunConfig& c) {
          const OffloadPolicy& off = c.train.sharding.offload;
          const std::string common = !off.optimizer_nvme.path.empty() ? off.optimizer_nvme.path : off.param_nvme.path;
          return n(c).path == common ? OJson(nullptr) : OJson(n(c).path);
        })
        .Peer(ds + "nvme_path").Help("this kind's own directory").Example("\"/tmp/" + kind + "\"")));
    rows.push_back(std::move(Int(p + ".buffer_count", 1, 1 << 16).Ref([n](auto& c) -> auto& { return n(c).buffer_count; })
        .Peer(ds + "buffer_count").Help("swap buffers of the largest unit's region")));
    rows.push_back(std::move(Bool(p + ".pin_memory").Ref([n](auto& c) -> auto& { return n(c).pin_memory; })
        .Peer(ds + "pin_memory").Help("page-lock the buffers")));
    if (params) {
      rows.push_back(std::move(Int(p + ".max_in_cpu", 0).Ref([n](auto& c) -> auto& { return n(c).max_in_cpu; })
          .Peer(ds + "max_in_cpu").Help("elements of master shards kept in host memory")));
    }
    rows.push_back(std::move(Bool(p + ".read_ahead").Ref([n](auto& c) -> auto& { return n(c).read_ahead; })
        .Peer(params ? "" : ds + "pipeline_read").Help("read the next units ahead")));
    rows.push_back(std::move(Bool(p + ".write_behind").Ref([n](auto& c) -> auto& { return n(c).write_behind; })
        .Peer(params ? "" : ds + "pipeline_write").Help("write back in the background")));
  }
  auto aio = [](auto& c) -> auto& { return c.train.sharding.offload.aio; };
  std::vector<ConfigField> more = {
      std::move(Bool("strategy.nvme_offload.verify_checksums").Ref([](auto& c) -> auto& {
        return c.train.sharding.offload.nvme_verify; }).Help("CRC-32C of every region, checked after each read")),
      Sec("strategy.nvme_offload.aio", "the swap files' I/O (DeepSpeed's aio block, runtime/nvme/aio_options.h)"),
      std::move(Int("strategy.nvme_offload.aio.block_size", kDirectIoAlignment, int64_t{1} << 30)
          .Ref([aio](auto& c) -> auto& { return aio(c).block_size; })
          .Check([](Section& s, const std::string& key, RunConfig* c) {
            const int64_t b = c->train.sharding.offload.aio.block_size;
            if (s.Has(key) && s.ctx().Ok({s.PathOf(key)}) && b % kDirectIoAlignment != 0) {
              s.Add(key, absl::StrCat("expected a multiple of ", kDirectIoAlignment,
                                      " bytes (the O_DIRECT alignment), found ", b));
            }
          })
          .Peer("DeepSpeed aio.block_size").Help("bytes per request (a multiple of 4096)").Example("2097152")),
      std::move(Int("strategy.nvme_offload.aio.queue_depth", 1, 4096).Ref([aio](auto& c) -> auto& {
        return aio(c).queue_depth; }).Peer("DeepSpeed aio.queue_depth").Help("requests in flight per I/O thread")),
      std::move(Int("strategy.nvme_offload.aio.thread_count", 1, 64).Ref([aio](auto& c) -> auto& {
        return aio(c).thread_count; }).Peer("DeepSpeed aio.thread_count").Help("I/O threads")),
      std::move(Bool("strategy.nvme_offload.aio.single_submit").Ref([aio](auto& c) -> auto& {
        return aio(c).single_submit; }).Peer("DeepSpeed aio.single_submit").Help("submit requests one at a time")),
      std::move(Bool("strategy.nvme_offload.aio.overlap_events").Ref([aio](auto& c) -> auto& {
        return aio(c).overlap_events; }).Peer("DeepSpeed aio.overlap_events").Help("overlap submission and completion")),
      std::move(F("strategy.mixed_precision", FieldKind::kSection).Read(config_internal::OpenMixedPrecision)
          .Help("FSDP's MixedPrecision (null: all f32)")),
      std::move(DTypeF("strategy.mixed_precision.param_dtype")
          .Get([](const RunConfig& c) { return OJson(std::string(DTypeName(c.train.sharding.mixed_precision.param_dtype))); })
          .Set([](RunConfig& c, const Json& v) { c.train.sharding.mixed_precision.param_dtype = *ParseDType(v.get<std::string>()); })
          .Peer("FSDP MixedPrecision.param_dtype; DeepSpeed bf16.enabled / fp16.enabled")
          .Flag("param_dtype", "dtype of gathered parameters and compute: f32, bf16 or f16")
          .Help("gathered parameters and compute")),
      std::move(DTypeF("strategy.mixed_precision.reduce_dtype")
          .Get([](const RunConfig& c) { return OJson(std::string(DTypeName(c.train.sharding.mixed_precision.reduce_dtype))); })
          .Set([](RunConfig& c, const Json& v) { c.train.sharding.mixed_precision.reduce_dtype = *ParseDType(v.get<std::string>()); })
          .Peer("FSDP MixedPrecision.reduce_dtype; DeepSpeed communication_data_type")
          .Flag("reduce_dtype", "dtype of gradient reduction: f32, bf16 or f16").Help("gradient reduction")),
      std::move(DTypeF("strategy.mixed_precision.buffer_dtype")
          .Get([](const RunConfig& c) { return OJson(std::string(DTypeName(c.train.sharding.mixed_precision.buffer_dtype))); })
          .Set([](RunConfig& c, const Json& v) { c.train.sharding.mixed_precision.buffer_dtype = *ParseDType(v.get<std::string>()); })
          .Peer("FSDP MixedPrecision.buffer_dtype").Help("buffers (BatchNorm statistics)")),
      std::move(Custom("strategy.mixed_precision.fp32_module_types", "list of strings", "module types",
                       config_internal::ReadFp32ModuleTypes)
          .Get([](const RunConfig& c) {
            const std::set<std::string>& m = c.train.sharding.mixed_precision.fp32_module_types;
            return OJson(std::vector<std::string>(m.begin(), m.end()));
          })
          .Peer("FSDP MixedPrecision._module_classes_to_ignore")
          .Flag(Mapped("keep_layernorm_fp32", "under mixed precision keep every LayerNorm in fp32 (units of their own, "
                                              "gathered and reduced in f32)",
                       true, "false", "true", [](const std::string& v) {
                         // The default list (BatchNorm2d) with or without the GPT's LayerNorm.
                         return One(absl::StrCat("strategy.mixed_precision.fp32_module_types=",
                                                 FlagOn(v) ? "[\"BatchNorm2d\", \"LayerNorm\"]" : "[\"BatchNorm2d\"]"));
                       }))
          .Help("module types kept fp32, in units of their own, when a dtype is not f32 (add \"LayerNorm\" for "
                "the GPT's LayerNorms)")
          .Example("[\"BatchNorm2d\", \"LayerNorm\"]")),
      std::move(Bool("strategy.mixed_precision.keep_low_precision_grads")
          .Ref([](auto& c) -> auto& { return c.train.sharding.mixed_precision.keep_low_precision_grads; })
          .Peer("FSDP MixedPrecision.keep_low_precision_grads")
          .Flag("keep_low_precision_grads", "keep gradient shards in --reduce_dtype (half the bytes) instead of "
                                            "upcasting them to f32")
          .Help("gradient shards kept in reduce_dtype, not f32")),
      std::move(Custom("strategy.activation_checkpointing", "list of strings", "[] | [\"Block\"]",
                       config_internal::ReadActivationCheckpointing).Gpt()
          .Get([](const RunConfig& c) {
            const std::string layer = c.model_type == "llama" ? "LlamaDecoderLayer" : "Block";
            return OJson(c.train.model.activation_checkpointing ? std::vector<std::string>{layer}
                                                               : std::vector<std::string>{});
          })
          .Peer("Lightning activation_checkpointing_policy")
          .Flag(Mapped("activation_checkpointing", "recompute each block in backward", true, "false", "true",
                       [](const std::string& v) {
                         return One(absl::StrCat("strategy.activation_checkpointing=", FlagOn(v) ? "[\"Block\"]" : "[]"));
                       }))
          .Help("module types recomputed in backward").Example("[\"Block\"]")),
      std::move(Custom("strategy.state_dict_type", "enum", "\"SHARDED_STATE_DICT\" | \"FULL_STATE_DICT\" (also "
                                                           "\"sharded\" | \"full\")",
                       config_internal::ReadStateDictType).Gpt()
          .Get([](const RunConfig& c) {
            return OJson(c.train.state_dict_type == "full" ? "FULL_STATE_DICT" : "SHARDED_STATE_DICT");
          })
          .Peer("FSDP state_dict_type")
          .Flag("state_dict_type", "checkpoint format: sharded (each rank its own file) or full (PyTorch-loadable)")
          .Help("checkpoints: each rank's shard, or one PyTorch-loadable file").Example("\"FULL_STATE_DICT\"")),
      std::move(Bool("strategy.sync_module_states").Ref([](auto& c) -> auto& {
        return c.train.sharding.sync_module_states; }).Peer("FSDP sync_module_states")
          .Help("broadcast rank 0's initial values")),
      std::move(Bool("strategy.skip_init_weights").Gpt().Ref([](auto& c) -> auto& { return c.skip_init_weights; })
          .Peer("MMEngine skip_init_weights")
          .Help("the weights come from checkpoint.init_from or checkpoint.resume (validated only)")),
      std::move(Str("strategy.comm_hook").Ref([](auto& c) -> auto& { return c.train.sharding.comm_hook.name; })
          .Peer("FSDP register_comm_hook; DeepSpeed zero_quantized_weights, zero_quantized_gradients, "
                "zero_hpz_partition_size (ZeRO++)")
          .Flag("comm_hook", "none, qwz (int8 parameter gathers), qgz (quantized gradient all-to-all), hpz "
                             "(backward gathers inside the node), zeropp (all three) or a registered hook")
          .Help("what the all-gathers and reduce-scatters go through (sharding/comm_hook.h)").Example("\"qwz\"")),
      Sec("strategy.comm_hook_options", "the communication hook's knobs"),
      std::move(Int("strategy.comm_hook_options.block_size", 1, int64_t{1} << 30)
          .Ref([](auto& c) -> auto& { return c.train.sharding.comm_hook.block_size; })
          .Peer("DeepSpeed zero_quantized_* group size")
          .Flag("comm_hook_block_size", "qwz/qgz: elements per quantization block (one f32 scale each)")
          .Help("qwz, qgz: elements per quantization block (one f32 scale each; even for 4 bits)")),
      std::move(Int("strategy.comm_hook_options.param_bits", 4, 8)
          .Ref([](auto& c) -> auto& { return c.train.sharding.comm_hook.param_bits; })
          .Help("qwz: bits per parameter value on the wire, 8 or 4")),
      std::move(Int("strategy.comm_hook_options.grad_bits", 4, 8)
          .Ref([](auto& c) -> auto& { return c.train.sharding.comm_hook.grad_bits; })
          .Flag("comm_hook_grad_bits", "qgz: bits per gradient value on the wire, 8 or 4")
          .Help("qgz: bits per gradient value on the wire, 8 or 4")),
      std::move(Int("strategy.comm_hook_options.group_size", 0)
          .Ref([](auto& c) -> auto& { return c.train.sharding.comm_hook.group_size; })
          .Peer("DeepSpeed zero_hpz_partition_size; FSDP2 reshard_after_forward=<int>")
          .Flag("comm_hook_group_size", "hpz: ranks of the secondary partition; qgz: ranks of the first all-to-all "
                                        "step (0: the ranks on a host)")
          .Help("hpz: ranks of the secondary partition; qgz: ranks of the first all-to-all step; 0: the ranks "
                "on a host")),
      std::move(Strs("strategy.ignored_modules").Ref([](auto& c) -> auto& { return c.train.sharding.ignored_modules; })
          .Peer("FSDP ignored_modules").Help("modules left out of sharding (replicated)")),
  };
  for (ConfigField& f : rows) t->push_back(std::move(f));
  for (ConfigField& f : more) t->push_back(std::move(f));
}

}  // namespace zeroshard::config_schema_internal
