#include "zeroshard/train/config_custom.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace zeroshard::config_internal {
namespace {

// The module types of the GPT (autograd/nn/layers.h, gpt.h), for wrap policies.
const std::vector<std::string>& GptModuleTypes() {
  static const auto* types = new std::vector<std::string>{"Block", "CausalSelfAttention", "Mlp", "LayerNorm"};
  return *types;
}

// The module types of the ResNet (autograd/nn/resnet.h, vision layers).
const std::vector<std::string>& ResNetModuleTypes() {
  static const auto* types = new std::vector<std::string>{"BasicBlock", "Conv2d", "BatchNorm2d", "Linear"};
  return *types;
}

// The module types of the Llama (autograd/nn/llama.h).
const std::vector<std::string>& LlamaModuleTypes() {
  static const auto* types =
      new std::vector<std::string>{"LlamaDecoderLayer", "LlamaAttention", "LlamaMLP", "LlamaRMSNorm", "Linear"};
  return *types;
}

const std::vector<std::string>& ModuleTypes(const RunConfig& c) {
  if (c.model_type == "llama") return LlamaModuleTypes();
  return IsResNet(c) ? ResNetModuleTypes() : GptModuleTypes();
}

}  // namespace

// A non-empty array of integers >= 1; depths must have as many entries as widths.
bool ReadIntList(Section& s, const std::string& key, RunConfig* c) {
  nn::ResNetConfig& m = c->resnet.model;
  std::vector<int64_t>* out = key == "widths" ? &m.widths : &m.depths;
  const Json* v = s.Get(key);
  bool read = false;
  if (v != nullptr) {
    bool ok = v->is_array() && !v->empty();
    if (ok) {
      for (const Json& e : *v) ok = ok && (e.is_number_integer() || e.is_number_unsigned()) && e.get<int64_t>() >= 1;
    }
    if (!ok) {
      s.Add(key, absl::StrCat("expected a non-empty array of integers >= 1, found ", Found(*v)));
    } else {
      out->clear();
      for (const Json& e : *v) out->push_back(e.get<int64_t>());
      read = true;
    }
  }
  if (key == "depths" && (read || s.Has("widths")) && m.widths.size() != m.depths.size() &&
      s.ctx().Ok({s.PathOf("widths"), s.PathOf("depths")})) {
    s.Add("depths", absl::StrCat("expected as many entries as ", s.PathOf("widths"), " (", m.widths.size(),
                                 "), found ", m.depths.size()));
  }
  return true;
}

bool ReadBetas(Section& s, const std::string& key, RunConfig* c) {
  optim::OptimizerOptions& opt = OptimizerOf(*c);
  if (const Json* b = s.Get(key)) {
    const Range unit{.min = 0, .max = 1, .max_open = true};
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number()) {
      s.Add(key, absl::StrCat("expected [beta1, beta2], two numbers in [0, 1), found ", Found(*b)));
    } else if (!unit.Contains((*b)[0].get<double>()) || !unit.Contains((*b)[1].get<double>())) {
      s.Add(key, absl::StrCat("expected two numbers in [0, 1), found ", b->dump()));
    } else {
      opt.adamw.beta1 = (*b)[0].get<double>();
      opt.adamw.beta2 = (*b)[1].get<double>();
    }
  }
  return true;
}

// null or absent: the run's steps (resolved once every key is read).
bool ReadDecaySteps(Section& s, const std::string& key, RunConfig*) {
  if (s.Has(key) && s.Get(key, false)->is_null()) {
    s.Get(key);  // null: the default
  } else {
    s.Int(key, &s.ctx().decay_steps, 0);
  }
  return true;
}

// zero_stage 1|2|3 (null: unset) names the strategy by its ZeRO stage. With
// sharding_strategy too, they must agree unless exactly one of them comes
// from the command line (which then wins).
bool ReadZeroStage(Section& s, const std::string& key, RunConfig* c) {
  ShardingOptions& sh = c->train.sharding;
  const std::string name_path = s.PathOf("sharding_strategy");
  const bool named = s.Has("sharding_strategy") && s.ctx().Ok({name_path});
  const std::string strategy(ShardingStrategyName(sh.strategy));
  int64_t stage = 0;
  const bool stage_null = s.Has(key) && s.Get(key, false)->is_null();
  if (stage_null || !s.Int(key, &stage, 1, 3)) return true;
  const ShardingStrategy by_stage = StrategyOfZeroStage(stage);
  const bool stage_cli = s.ctx().Overridden(s.PathOf(key));
  const bool name_cli = s.ctx().Overridden(name_path);
  if (!s.Has("sharding_strategy")) {
    sh.strategy = by_stage;
  } else if (named && sh.strategy != by_stage) {
    const std::string both = absl::StrCat(s.PathOf(key), " ", stage, " is ", ShardingStrategyName(by_stage), " but ",
                                          name_path, " is ", strategy);
    if (stage_cli && !name_cli) {
      sh.strategy = by_stage;
      c->notes.push_back(absl::StrCat(both, ": the command line's ", s.PathOf(key), " wins"));
    } else if (name_cli && !stage_cli) {
      c->notes.push_back(absl::StrCat(both, ": the command line's ", name_path, " wins"));
    } else {
      s.Add(key, absl::StrCat("ZeRO stage ", stage, " is ", ShardingStrategyName(by_stage), ", but ", name_path,
                              " is ", strategy, ": keep one of them (or make them agree; a _base_ file's key counts too)"));
    }
  }
  return true;
}

// auto_wrap_policy: ["Block", ...] (module types: FSDP's ModuleWrapPolicy /
// transformer_auto_wrap_policy, Lightning's set of classes), a string (one
// type, or "none"), {"min_num_params": n} (size_based_auto_wrap_policy) or null.
bool ReadAutoWrapPolicy(Section& s, const std::string& key, RunConfig* c) {
  ShardingOptions& sh = c->train.sharding;
  const Json* w = s.Get(key);
  if (w == nullptr) return true;
  std::vector<std::string> types;
  if (w->is_null() || (w->is_string() && absl::EqualsIgnoreCase(w->get<std::string>(), "none"))) {
    sh.wrap = WrapPolicy::None();
  } else if (w->is_object()) {
    const auto it = w->find("min_num_params");
    bool ok = w->size() == 1 && it != w->end();
    if (!ok) {
      std::vector<std::string> keys;
      for (auto k = w->begin(); k != w->end(); ++k) keys.push_back(k.key());
      s.Add(key, absl::StrCat("expected {\"min_num_params\": n} (size-based wrapping), found an object with ",
                              keys.empty() ? "no keys" : absl::StrCat("keys ", Quoted(keys))));
    } else {
      const Json& n = *it;
      const bool integral = n.is_number_integer() || n.is_number_unsigned() ||
                            (n.is_number_float() && std::nearbyint(n.get<double>()) == n.get<double>());
      if (!integral || n.get<double>() < 1) {
        s.Add(key + ".min_num_params", absl::StrCat("expected an integer >= 1, found ", Found(n)));
      } else {
        sh.wrap = WrapPolicy::BySize(static_cast<int64_t>(n.get<double>()));
      }
    }
  } else if (w->is_string() || w->is_array()) {
    Json list = w->is_string() ? Json::array({*w}) : *w;
    if (s.StringsOf(key, list, &types)) {
      bool ok = true;
      for (std::string& t : types) {
        std::string canonical;
        if (!s.ChoiceOf(key, Json(t), &canonical, ModuleTypes(*c))) ok = false;
        t = canonical;
      }
      if (ok) sh.wrap = types.empty() ? WrapPolicy::None() : WrapPolicy::ByType({types.begin(), types.end()});
    }
  } else {
    s.Add(key, absl::StrCat("expected an array of module types (e.g. [\"Block\"]), {\"min_num_params\": n} "
                            "or null, found ", Found(*w)));
  }
  return true;
}

bool ReadBackwardPrefetch(Section& s, const std::string& key, RunConfig* c) {
  if (const Json* p = s.Get(key)) {
    std::string name;
    if (p->is_null()) {
      c->train.sharding.backward_prefetch = BackwardPrefetch::kNone;
    } else if (s.ChoiceOf(key, *p, &name, {"BACKWARD_PRE", "BACKWARD_POST", "NONE", "PRE", "POST"})) {
      c->train.sharding.backward_prefetch = *ParseBackwardPrefetch(name);
    }
  }
  return true;
}

// limit_all_gathers: FSDP's boolean (true: our default of 2 units in flight) or the count (0: no limit).
bool ReadLimitAllGathers(Section& s, const std::string& key, RunConfig* c) {
  if (const Json* l = s.Get(key)) {
    if (l->is_boolean()) {
      c->train.sharding.limit_all_gathers = l->get<bool>() ? 2 : 0;
    } else {
      s.Int(key, &c->train.sharding.limit_all_gathers, 0, 1 << 20);
    }
  }
  return true;
}

// cpu_offload: true is FSDP's CPUOffload(offload_params=True): parameters,
// gradients and the optimizer step on the host. An object picks: params,
// grads, optimizer (OffloadPolicy), or FSDP's offload_params.
bool ReadCpuOffload(Section& s, const std::string& key, RunConfig* c) {
  const Json* off = s.Get(key);
  if (off == nullptr) return true;
  ShardingOptions& sh = c->train.sharding;
  if (off->is_boolean()) {
    const bool on = off->get<bool>();
    sh.offload = OffloadPolicy{.params = on, .grads = on, .optimizer = on};
  } else if (off->is_object()) {
    OffloadPolicy policy;
    bool ok = true;
    for (auto it = off->begin(); it != off->end(); ++it) {
      const std::string k = it.key();
      const std::string path = absl::StrCat(key, ".", k);
      if (!it->is_boolean()) {
        s.Add(path, absl::StrCat("expected true or false, found ", Found(*it)));
        ok = false;
      } else if (k == "params") {
        policy.params = it->get<bool>();
      } else if (k == "grads") {
        policy.grads = it->get<bool>();
      } else if (k == "optimizer") {
        policy.optimizer = it->get<bool>();
      } else if (k == "offload_params") {
        if (it->get<bool>()) policy = OffloadPolicy{.params = true, .grads = true, .optimizer = true};
      } else {
        const std::string near = Closest(k, {"params", "grads", "optimizer", "offload_params"});
        s.Add(path, absl::StrCat("unknown key", near.empty() ? "; expected one of \"params\", \"grads\", "
                                                               "\"optimizer\", \"offload_params\""
                                                             : absl::StrCat(" (did you mean \"", near, "\"?)")));
        ok = false;
      }
    }
    if (ok) sh.offload = policy;
  } else {
    s.Add(key, absl::StrCat("expected true, false or {\"params\", \"grads\", \"optimizer\"}, found ", Found(*off)));
  }
  return true;
}

// nvme_offload: null or false turns it off; an object is read by its rows.
bool OpenNvmeOffload(Section& s, const std::string& key, RunConfig* c) {
  if (!s.Has(key)) return true;
  const Json* n = s.Get(key, false);
  if (!n->is_null() && !n->is_boolean()) return true;
  if (n->is_boolean() && n->get<bool>()) {
    s.Add(key, "expected an object ({\"nvme_path\": ..., \"optimizer\": {\"enabled\": true}, ...}), "
               "null or false, found true");
  }
  c->train.sharding.offload.nvme_optimizer = c->train.sharding.offload.nvme_params = false;
  return false;
}

// nvme_offload.nvme_path: both kinds' directory; optimizer.nvme_path /
// params.nvme_path: that kind's own (null: the one above). An enabled kind
// needs one of them.
bool ReadNvmePath(Section& s, const std::string& key, RunConfig* c) {
  OffloadPolicy& off = c->train.sharding.offload;
  if (!absl::EndsWith(s.path(), ".optimizer") && !absl::EndsWith(s.path(), ".params")) {
    std::string common;
    s.String(key, &common);
    off.optimizer_nvme.path = off.param_nvme.path = common;
    return true;
  }
  const bool params = absl::EndsWith(s.path(), ".params");
  NvmeOffload& n = params ? off.param_nvme : off.optimizer_nvme;
  std::string own;
  if (PathOrNull(s, key, &own)) n.path = own;
  if ((params ? off.nvme_params : off.nvme_optimizer) && n.path.empty()) {
    s.Add(key, absl::StrCat("expected the directory for the ", params ? "params" : "optimizer",
                            " swap files (a local NVMe mount) here or in nvme_offload.nvme_path, found none"));
  }
  return true;
}

// mixed_precision: null is FSDP's mixed_precision=None (the defaults).
bool OpenMixedPrecision(Section& s, const std::string& key, RunConfig* c) {
  if (s.Has(key) && s.Get(key, false)->is_null()) {
    c->train.sharding.mixed_precision = MixedPrecision{};
    return false;
  }
  return true;
}

// fp32_module_types (FSDP's _module_classes_to_ignore): module types that
// stay fp32 units of their own under mixed precision, Note [BatchNorm under
// mixed precision]; ["BatchNorm2d", "LayerNorm"] keeps the GPT's LayerNorms fp32.
bool ReadFp32ModuleTypes(Section& s, const std::string& key, RunConfig* c) {
  std::vector<std::string> fp32_types;
  if (s.Strings(key, &fp32_types)) {
    std::vector<std::string> known = ModuleTypes(*c);
    if (!IsResNet(*c)) known.push_back("BatchNorm2d");
    bool ok = true;
    for (std::string& t : fp32_types) {
      std::string canonical;
      if (!s.ChoiceOf(key, Json(t), &canonical, known)) ok = false;
      t = canonical;
    }
    if (ok) c->train.sharding.mixed_precision.fp32_module_types = {fp32_types.begin(), fp32_types.end()};
  }
  return true;
}

// activation_checkpointing: the module types recomputed in backward
// (Lightning's activation_checkpointing_policy); the GPT recomputes whole blocks.
bool ReadActivationCheckpointing(Section& s, const std::string& key, RunConfig* c) {
  std::vector<std::string> ac;
  if (s.Strings(key, &ac)) {
    bool ok = true;
    for (const std::string& t : ac) {
      // The GPT recomputes whole blocks, the Llama whole decoder layers.
      const std::string layer = c->model_type == "llama" ? "LlamaDecoderLayer" : "Block";
      // (--activation_checkpointing writes ["Block"], which a Llama reads as its layers.)
      if (t != layer && t != "Block") {
        s.Add(key, absl::StrCat("expected [] or [\"", layer, "\"] (the ", c->model_type == "llama" ? "Llama" : "GPT",
                                " recomputes whole layers), found \"", t, "\"",
                                absl::EqualsIgnoreCase(t, layer) ? absl::StrCat(" (did you mean \"", layer, "\"?)") : ""));
        ok = false;
      }
    }
    if (ok) c->train.model.activation_checkpointing = !ac.empty();
  }
  return true;
}

// state_dict_type: FSDP's names or Lightning's. FSDP's LOCAL_STATE_DICT (each
// rank's flat shard as is) has no format of its own here: SHARDED is that plus names.
bool ReadStateDictType(Section& s, const std::string& key, RunConfig* c) {
  if (const Json* t = s.Get(key)) {
    std::string name;
    if (t->is_string() && absl::EqualsIgnoreCase(t->get<std::string>(), "LOCAL_STATE_DICT")) {
      s.Add(key, "expected \"SHARDED_STATE_DICT\" or \"FULL_STATE_DICT\", found \"LOCAL_STATE_DICT\" "
                 "(not supported: SHARDED_STATE_DICT holds each rank's shard with names)");
    } else if (s.ChoiceOf(key, *t, &name, {"SHARDED_STATE_DICT", "FULL_STATE_DICT", "sharded", "full"})) {
      c->train.state_dict_type = absl::StartsWithIgnoreCase(name, "full") ? "full" : "sharded";
    }
  }
  return true;
}

}  // namespace zeroshard::config_internal
