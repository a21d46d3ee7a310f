#include "zeroshard/sharding/sharding_options.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/sharding/comm_hook.h"

namespace zeroshard {

absl::string_view ShardingStrategyName(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFullShard: return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard: return "NO_SHARD";
    case ShardingStrategy::kHybridShard: return "HYBRID_SHARD";
    case ShardingStrategy::kShardOptimizer: return "SHARD_OPTIMIZER";
  }
  return "?";
}

absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name) {
  const std::string n = absl::AsciiStrToUpper(name);
  if (n == "FULL_SHARD") return ShardingStrategy::kFullShard;
  if (n == "SHARD_GRAD_OP") return ShardingStrategy::kShardGradOp;
  if (n == "NO_SHARD") return ShardingStrategy::kNoShard;
  if (n == "HYBRID_SHARD") return ShardingStrategy::kHybridShard;
  if (n == "SHARD_OPTIMIZER") return ShardingStrategy::kShardOptimizer;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown sharding strategy \"", name,
      "\": expected FULL_SHARD, SHARD_GRAD_OP, SHARD_OPTIMIZER, NO_SHARD or HYBRID_SHARD"));
}

absl::string_view BackwardPrefetchName(BackwardPrefetch p) {
  switch (p) {
    case BackwardPrefetch::kNone: return "NONE";
    case BackwardPrefetch::kBackwardPre: return "BACKWARD_PRE";
    case BackwardPrefetch::kBackwardPost: return "BACKWARD_POST";
  }
  return "?";
}

absl::StatusOr<BackwardPrefetch> ParseBackwardPrefetch(absl::string_view name) {
  const std::string n = absl::AsciiStrToUpper(name);
  if (n == "BACKWARD_PRE" || n == "PRE") return BackwardPrefetch::kBackwardPre;
  if (n == "BACKWARD_POST" || n == "POST") return BackwardPrefetch::kBackwardPost;
  if (n == "NONE") return BackwardPrefetch::kNone;
  return absl::InvalidArgumentError(absl::StrCat("unknown backward prefetch \"", name,
                                                 "\": expected BACKWARD_PRE, BACKWARD_POST or NONE"));
}

WrapPolicy WrapPolicy::ByType(std::set<std::string> types) {
  WrapPolicy p;
  p.kind = Kind::kByType;
  p.types = std::move(types);
  return p;
}

WrapPolicy WrapPolicy::BySize(int64_t min_num_params) {
  WrapPolicy p;
  p.kind = Kind::kBySize;
  p.min_num_params = min_num_params;
  return p;
}

std::string WrapPolicy::ToString() const {
  switch (kind) {
    case Kind::kNone: return "none (one unit: the root)";
    case Kind::kByType: return absl::StrCat("by type {", absl::StrJoin(types, ", "), "}");
    case Kind::kBySize: return absl::StrCat("by size (min_num_params ", min_num_params, ")");
    case Kind::kCustom: return "custom";
  }
  return "?";
}

std::string MixedPrecision::ToString() const {
  return absl::StrCat("param ", DTypeName(param_dtype), ", reduce ", DTypeName(reduce_dtype),
                      ", buffer ", DTypeName(buffer_dtype),
                      active() && !fp32_module_types.empty()
                          ? absl::StrCat(", fp32 units {", absl::StrJoin(fp32_module_types, ", "), "}")
                          : "",
                      keep_low_precision_grads ? ", low-precision grads kept" : "");
}

std::string NvmeOffload::ToString() const {
  return absl::StrCat("nvme_path '", path, "', buffer_count ", buffer_count, pin_memory ? ", pinned" : "",
                      read_ahead ? "" : ", no read-ahead", write_behind ? "" : ", no write-behind");
}

SwapSpaceOptions OffloadPolicy::SwapOptions(bool params, int rank) const {
  const NvmeOffload& n = params ? param_nvme : optimizer_nvme;
  return SwapSpaceOptions{.name = params ? "parameter shards" : "optimizer state",
                          .file = {.dir = n.path, .tag = params ? "params" : "optimizer", .rank = rank,
                                   .verify_checksums = nvme_verify, .faults = nvme_faults},
                          .aio = aio,
                          .buffer_count = n.buffer_count,
                          .pin_memory = n.pin_memory,
                          .read_ahead = n.read_ahead,
                          .write_behind = n.write_behind};
}

std::string OffloadPolicy::ToString() const {
  if (!any()) return "none";
  std::vector<std::string> parts;
  if (params_on_host()) parts.push_back("params");
  if (grads_on_host()) parts.push_back("grads");
  if (optimizer_on_host()) parts.push_back("optimizer");
  std::string out = absl::StrJoin(parts, "+");
  if (nvme_optimizer) absl::StrAppend(&out, "; optimizer state on NVMe (", optimizer_nvme.ToString(), ")");
  if (nvme_params) {
    absl::StrAppend(&out, "; parameter shards on NVMe (", param_nvme.ToString(), ", max_in_cpu ",
                    param_nvme.max_in_cpu, ")");
  }
  if (nvme()) absl::StrAppend(&out, "; ", aio.ToString(), nvme_verify ? ", checksums verified" : "");
  return out;
}

int ShardingOptions::ShardGroupSize(int world_size) const {
  switch (strategy) {
    case ShardingStrategy::kFullShard:
    case ShardingStrategy::kShardGradOp:
    case ShardingStrategy::kShardOptimizer: return world_size;
    case ShardingStrategy::kNoShard: return 1;
    case ShardingStrategy::kHybridShard: return hybrid_shard_size;
  }
  return world_size;
}

absl::Status ShardingOptions::Validate(int world_size) const {
  std::vector<std::string> errors;
  if (world_size < 1) errors.push_back(absl::StrCat("world size ", world_size, " < 1"));
  if (strategy == ShardingStrategy::kHybridShard) {
    if (hybrid_shard_size < 0 || (hybrid_shard_size > 0 && world_size % hybrid_shard_size != 0)) {
      errors.push_back(absl::StrCat("hybrid_shard_size ", hybrid_shard_size,
                                    " must be 0 (the ranks of a node) or divide the world size ", world_size));
    }
  }
  if (limit_all_gathers < 0) {
    errors.push_back(absl::StrCat("limit_all_gathers ", limit_all_gathers, " < 0"));
  }
  if (wrap.kind == WrapPolicy::Kind::kBySize && wrap.min_num_params < 1) {
    errors.push_back(absl::StrCat("wrap min_num_params ", wrap.min_num_params, " < 1"));
  }
  if (wrap.kind == WrapPolicy::Kind::kCustom && !wrap.custom) {
    errors.push_back("custom wrap policy without a function");
  }
  for (DType d : {mixed_precision.param_dtype, mixed_precision.reduce_dtype,
                  mixed_precision.buffer_dtype}) {
    if (!IsFloatingPoint(d)) errors.push_back(absl::StrCat("mixed precision dtype ", DTypeName(d), " is not a float type"));
  }
  auto check_nvme = [&](const char* what, bool on, const NvmeOffload& n) {
    if (!on) return;
    if (n.path.empty()) errors.push_back(absl::StrCat(what, " on NVMe needs an nvme_path (a directory), found none"));
    if (n.buffer_count < 1) {
      errors.push_back(absl::StrCat(what, " nvme buffer_count ", n.buffer_count, " must be >= 1"));
    }
    if (n.max_in_cpu < 0) errors.push_back(absl::StrCat(what, " nvme max_in_cpu ", n.max_in_cpu, " < 0"));
  };
  check_nvme("optimizer state", offload.nvme_optimizer, offload.optimizer_nvme);
  check_nvme("parameter shards", offload.nvme_params, offload.param_nvme);
  if (offload.nvme()) {
    if (absl::Status a = offload.aio.Validate(); !a.ok()) errors.push_back(std::string(a.message()));
  }
  const CommHookOptions& hook = comm_hook;
  if (!CommHookRegistry::Global().Has(hook.name)) {
    errors.push_back(absl::StrCat("comm_hook \"", hook.name, "\": expected a registered hook (",
                                  CommHookRegistry::Global().NamesText(), ")"));
  }
  for (const auto& [what, bits] : {std::pair<const char*, int>{"param_bits", hook.param_bits}, {"grad_bits", hook.grad_bits}}) {
    if (bits != 8 && bits != 4) errors.push_back(absl::StrCat("comm_hook ", what, " ", bits, ": expected 8 or 4"));
    if (bits == 4 && hook.block_size % 2 != 0) {
      errors.push_back(absl::StrCat("comm_hook block_size ", hook.block_size, " with ", what,
                                    " 4: expected an even block (two values per byte)"));
    }
  }
  if (hook.block_size < 1) errors.push_back(absl::StrCat("comm_hook block_size ", hook.block_size, " < 1"));
  // An unresolved hybrid group (0: a node's ranks) is checked once resolved.
  const int s = std::max(1, ShardGroupSize(std::max(1, world_size)));
  const bool unresolved = strategy == ShardingStrategy::kHybridShard && hybrid_shard_size == 0;
  if (hook.group_size < 0 || (hook.group_size > 0 && !unresolved && s % hook.group_size != 0)) {
    errors.push_back(absl::StrCat("comm_hook group_size ", hook.group_size,
                                  " must be 0 (the ranks on a host) or divide the shard group size ", s));
  }
  if ((hook.name == "qgz" || hook.name == "zeropp") && ReplicatesGradients()) {
    errors.push_back(absl::StrCat("comm_hook ", hook.name, " compresses the gradients' reduce-scatter, which ",
                                  ShardingStrategyName(strategy), " does not do (it all-reduces them)"));
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("ShardingOptions: ", absl::StrJoin(errors, "; ")));
}

std::string ShardingOptions::ToString() const {
  return absl::StrCat(ShardingStrategyName(strategy),
                      strategy == ShardingStrategy::kHybridShard
                          ? (hybrid_shard_size == 0 ? std::string(" (a group per node)")
                                                    : absl::StrCat(" (groups of ", hybrid_shard_size, ")"))
                          : "",
                      ", wrap ", wrap.ToString(), ", forward_prefetch ", forward_prefetch ? "on" : "off",
                      ", backward_prefetch ", BackwardPrefetchName(backward_prefetch),
                      ", limit_all_gathers ", limit_all_gathers,
                      ", mixed precision (", mixed_precision.ToString(), "), offload ", offload.ToString(),
                      comm_hook.name == "none" ? "" : absl::StrCat(", comm hook ", comm_hook.ToString()));
}

std::string CommHookOptions::ToString() const {
  return absl::StrCat(name, " block_size=", block_size, " param_bits=", param_bits, " grad_bits=", grad_bits,
                      " group_size=", group_size);
}

}  // namespace zeroshard
