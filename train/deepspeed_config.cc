#include "zeroshard/train/deepspeed_config.h"

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/train/config_schema.h"

namespace zeroshard {

using config_internal::AtLeast;
using config_internal::Above;
using config_internal::Context;
using config_internal::Found;
using config_internal::Json;
using config_internal::PathOrNull;
using config_internal::Range;
using config_internal::ReadAio;
using config_internal::Section;
using config_internal::StrategyOfZeroStage;

// Note [DeepSpeed mapping]
// A "deepspeed" block holds DeepSpeed config keys; they set the same
// TrainOptions as the FSDP-style keys. A setting given both ways is a
// contradiction (even with equal values: one place to read).
//   zero_optimization.stage 3 -> FULL_SHARD; 2 -> SHARD_GRAD_OP; 1 ->
//     SHARD_OPTIMIZER (ZeRO-1: optimizer state and master weights sharded, the
//     whole gradient all-reduced and kept on every rank, Note [Replicated
//     gradients] in sharding/sharded_model.h); 0 (DeepSpeed's default)
//     -> NO_SHARD (DDP). Also strategy.zero_stage, which must then agree.
//   offload_optimizer.device "cpu" -> cpu_offload {grads, optimizer} (ZeRO-Offload:
//     the step runs on the host); offload_param.device "cpu" -> params too
//     (ZeRO-Infinity; DeepSpeed allows it with stage 3 only, and so do we).
//   device "nvme" -> nvme_offload {optimizer | params: enabled, nvme_path,
//     buffer_count, pin_memory, max_in_cpu}; offload_optimizer's pipeline_read /
//     pipeline_write -> read_ahead / write_behind (on when absent: DeepSpeed's
//     default is off); the top-level aio block -> nvme_offload.aio.
//     max_in_cpu keeps DeepSpeed's default (1e9 elements) here, 0 in nvme_offload.
//   bf16.enabled -> mixed_precision {bf16, bf16, bf16}; fp16.enabled -> f16 and
//     dynamic loss scaling with the fp16 block's keys (loss_scale 0 = dynamic; a
//     static scale is not supported). The reduction dtype is the model's
//     (DeepSpeed's default) unless communication_data_type says otherwise.
//   overlap_comm -> forward and backward prefetch (on: forward_prefetch, BACKWARD_PRE;
//     off: neither): what overlaps communication with compute here.
//   optimizer {type, params}: "Adam" is AdamW unless params.adam_w_mode is false
//     (DeepSpeed's FusedAdam default), "AdamW", "SGD".
//   scheduler {type, params} (DeepSpeed's WarmupLR, WarmupDecayLR,
//     WarmupCosineLR) -> lr_schedule: type constant | linear | cosine,
//     warmup_num_steps (default 1000) -> warmup_steps, total_num_steps ->
//     decay_steps (WarmupDecayLR, WarmupCosineLR need it); WarmupLR and
//     WarmupDecayLR: warmup_max_lr -> optimizer.lr (absent: the optimizer's lr),
//     WarmupDecayLR: warmup_min_lr -> min_lr (where decay ends, as DeepSpeed's
//     gamma reaches 0 at total_num_steps); WarmupCosineLR: cos_min_ratio
//     (default 1e-4) -> min_lr = lr * cos_min_ratio. The warmup is
//     lr_schedule's (lr * (it + 1) / (warmup_steps + 1), optim/lr_schedule.h):
//     warmup_type must be "linear" (DeepSpeed's default "log" has no
//     counterpart and is an error), and DeepSpeed's warmup start
//     (warmup_min_lr, warmup_min_ratio) is not reproduced (a note says so when
//     it is not 0). last_batch_iteration is read without effect (resume
//     restores the schedule's position).
//   A DeepSpeed config file at the top level (IsDeepSpeedConfig) is read as
//   the "deepspeed" block of an otherwise default config.
//   zero_quantized_weights -> strategy.comm_hook qwz; zero_quantized_gradients
//     -> qgz; zero_hpz_partition_size n > 1 -> hpz with group_size n; all
//     three -> zeropp (ZeRO++; two of the three is an error: no single hook).
//   Bucket sizes and the other tuning keys of zero_optimization are read
//   (type-checked) without effect: the unit of communication is the wrap unit.
namespace {

// The signature of ReadDeepSpeed's use_ds: whether the DeepSpeed value (at
// `ds_paths`) is used for the FSDP-style key `path`.
using UseDs = std::function<bool(const std::vector<std::string>& ds_paths, const std::string& path)>;

// scheduler {type, params}: Note [DeepSpeed mapping].
void ReadScheduler(Section s, RunConfig* c, const UseDs& use_ds, std::vector<std::string>* without_effect) {
  Context& ctx = s.ctx();
  optim::LrSchedule& lr = c->train.lr;
  std::string type;
  const bool typed = s.Choice("type", &type, {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"});
  if (!s.Has("type")) s.Add("type", "expected one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\", found none");
  Section p = s.Child("params");
  const bool cosine = type == "WarmupCosineLR", decay = type == "WarmupDecayLR";
  // DeepSpeed's defaults.
  double min_lr = 0, max_lr = 0, warmup_min_ratio = 0, cos_min_ratio = 1e-4;
  int64_t warmup = 1000, total = 0, unused = 0;
  std::string warmup_type = "log";
  const bool has_warmup = p.Int("warmup_num_steps", &warmup, 0);
  p.Choice("warmup_type", &warmup_type, {"log", "linear"});
  if (p.Int("last_batch_iteration", &unused, -1)) without_effect->push_back(p.PathOf("last_batch_iteration"));
  bool has_min = false, has_max = false, has_total = false;
  if (typed && !cosine) {
    has_min = p.Number("warmup_min_lr", &min_lr, AtLeast(0));
    has_max = p.Number("warmup_max_lr", &max_lr, AtLeast(0));
  }
  if (typed && cosine) {
    p.Number("warmup_min_ratio", &warmup_min_ratio, Range{.min = 0, .max = 1});
    p.Number("cos_min_ratio", &cos_min_ratio, Range{.min = 0, .max = 1});
  }
  if (typed && (cosine || decay)) {
    has_total = p.Int("total_num_steps", &total, 1);
    if (!p.Has("total_num_steps")) {
      p.Add("total_num_steps", absl::StrCat("expected an integer >= 1 (", type, " decays until then), found none"));
    }
  }
  if (warmup_type != "linear" && ctx.Ok({p.PathOf("warmup_type")})) {
    p.Add("warmup_type", absl::StrCat("expected \"linear\" (the warmup here is linear: lr * (it + 1) / "
                                      "(warmup_steps + 1)), found ",
                                      p.Has("warmup_type") ? "\"log\"" : "none (DeepSpeed's default is \"log\")",
                                      ": a logarithmic warmup is not supported"));
  }
  p.Finish();
  s.Finish();
  if (!typed) return;
  const std::string type_path = s.PathOf("type");
  if (use_ds({type_path}, "lr_schedule.type")) {
    lr.kind = cosine ? optim::LrScheduleKind::kCosine
                     : decay ? optim::LrScheduleKind::kLinear : optim::LrScheduleKind::kConstant;
  }
  if ((has_warmup || !ctx.Given("lr_schedule.warmup_steps")) &&
      use_ds({p.PathOf("warmup_num_steps")}, "lr_schedule.warmup_steps")) {
    lr.warmup_steps = warmup;
  }
  if (has_total && use_ds({p.PathOf("total_num_steps")}, "lr_schedule.decay_steps")) ctx.decay_steps = total;
  if (has_max && use_ds({p.PathOf("warmup_max_lr")}, "optimizer.lr")) c->train.optimizer.lr = max_lr;
  if (decay && has_min && use_ds({p.PathOf("warmup_min_lr")}, "lr_schedule.min_lr")) lr.min_lr = min_lr;
  if (cosine && (p.Has("cos_min_ratio") || !ctx.Given("lr_schedule.min_lr")) &&
      use_ds({p.PathOf("cos_min_ratio")}, "lr_schedule.min_lr")) {
    lr.min_lr = c->train.optimizer.lr * cos_min_ratio;
  }
  std::string note = absl::StrCat(s.path(), " ", type, " runs as lr_schedule ", optim::LrScheduleKindName(lr.kind),
                                  " with its linear warmup (lr * (it + 1) / (warmup_steps + 1))");
  if ((!cosine && min_lr != 0) || warmup_min_ratio != 0) {
    absl::StrAppend(&note, ", not from ", cosine ? "warmup_min_ratio" : "warmup_min_lr");
  }
  c->notes.push_back(note);
}

}  // namespace

void ReadDeepSpeed(Section ds, RunConfig* c) {
  Context* ctx = &ds.ctx();
  const Json& root = *ctx->root;
  TrainOptions& o = c->train;
  ShardingOptions& sh = o.sharding;
  // Whether the config (after overrides) holds the dotted `path`.
  auto given = [&](const std::string& path) { return ctx->Given(path); };
  // A setting given both as an FSDP-style key (`path`) and in the DeepSpeed
  // block (`ds_paths`): the one set on the command line wins; both in the
  // file (or both on the command line) is a contradiction. True when the
  // DeepSpeed value is to be used.
  const UseDs use_ds = [&](const std::vector<std::string>& ds_paths, const std::string& path) {
    if (!given(path)) return true;
    bool ds_cli = false;
    for (const std::string& p : ds_paths) ds_cli = ds_cli || ctx->Overridden(p);
    const bool cli = ctx->Overridden(path);
    if (cli && !ds_cli) {
      c->notes.push_back(absl::StrCat(path, " from the command line wins over ", absl::StrJoin(ds_paths, ", ")));
      return false;
    }
    if (ds_cli && !cli) return true;
    ctx->Add(path, absl::StrCat("also set by ", absl::StrJoin(ds_paths, ", "), ": keep one of them"));
    return false;
  };
  std::vector<std::string> without_effect;

  // ---- batch, accumulation, clipping, printing
  int64_t micro = 0;
  if (ds.Int("train_micro_batch_size_per_gpu", &micro, 1) &&
      use_ds({ds.PathOf("train_micro_batch_size_per_gpu")}, "train.batch_size")) {
    o.batch_size = micro;
  }
  int64_t accum = 0;
  if (ds.Int("gradient_accumulation_steps", &accum, 1) &&
      use_ds({ds.PathOf("gradient_accumulation_steps")}, "train.grad_accum_steps")) {
    o.grad_accum_steps = accum;
  }
  ds.Int("train_batch_size", &c->train_batch_size, 1);
  double clip = 0;
  if (ds.Number("gradient_clipping", &clip, AtLeast(0)) && use_ds({ds.PathOf("gradient_clipping")}, "train.grad_clip")) {
    o.grad_clip = clip;
  }
  int64_t print = 0;
  if (ds.Int("steps_per_print", &print, 1) && use_ds({ds.PathOf("steps_per_print")}, "train.log_every")) {
    o.log_every = print;
  }
  for (const char* k : {"wall_clock_breakdown", "zero_allow_untested_optimizer"}) {
    bool unused = false;
    if (ds.Bool(k, &unused)) without_effect.push_back(ds.PathOf(k));
  }

  // ---- zero_optimization
  Section zero = ds.Child("zero_optimization");
  int64_t stage = 0;
  zero.Int("stage", &stage, 0, 3);
  // strategy.zero_stage: null there means unset.
  const bool zero_stage_given = given("strategy.zero_stage") && !root.at("strategy").at("zero_stage").is_null();
  if (use_ds({zero.PathOf("stage")}, "strategy.sharding_strategy") &&
      (!zero_stage_given || use_ds({zero.PathOf("stage")}, "strategy.zero_stage"))) {
    sh.strategy = StrategyOfZeroStage(stage);
    if (stage == 0) {
      c->notes.push_back("deepspeed.zero_optimization.stage 0 runs as NO_SHARD (DDP: gradients all-reduced)");
    }
  }
  // offload_optimizer / offload_param {device "none"|"cpu"|"nvme", pin_memory,
  // nvme_path, buffer_count; offload_param: max_in_cpu (DeepSpeed's default 1e9)}.
  struct DsOffload {
    std::string device = "none";
    NvmeOffload nvme;
  };
  auto read_device = [&](const char* key, bool params) {
    Section dev = zero.Child(key);
    DsOffload out;
    out.nvme.buffer_count = params ? 5 : 4;
    out.nvme.max_in_cpu = params ? 1000000000 : 0;
    if (const Json* d = dev.Get("device")) dev.ChoiceOf("device", *d, &out.device, {"none", "cpu", "nvme"});
    const bool nvme = out.device == "nvme";
    if (dev.Bool("pin_memory", &out.nvme.pin_memory) && !nvme) without_effect.push_back(dev.PathOf("pin_memory"));
    if (PathOrNull(dev, "nvme_path", &out.nvme.path) && !nvme) without_effect.push_back(dev.PathOf("nvme_path"));
    if (dev.Int("buffer_count", &out.nvme.buffer_count, 1, 1 << 16) && !nvme) {
      without_effect.push_back(dev.PathOf("buffer_count"));
    }
    if (params && dev.Int("max_in_cpu", &out.nvme.max_in_cpu, 0) && !nvme) {
      without_effect.push_back(dev.PathOf("max_in_cpu"));
    }
    // Buffers are sized to the largest unit here.
    if (dev.Get("buffer_size") != nullptr) without_effect.push_back(dev.PathOf("buffer_size"));
    if (!params) {
      // Overlap of the optimizer's swaps with its step; on unless turned off
      // (DeepSpeed's default is off).
      if (dev.Bool("pipeline_read", &out.nvme.read_ahead) && !nvme) without_effect.push_back(dev.PathOf("pipeline_read"));
      if (dev.Bool("pipeline_write", &out.nvme.write_behind) && !nvme) {
        without_effect.push_back(dev.PathOf("pipeline_write"));
      }
      bool unused = false;
      if (dev.Bool("fast_init", &unused)) without_effect.push_back(dev.PathOf("fast_init"));
    }
    if (nvme && out.nvme.path.empty()) {
      dev.Add("nvme_path", "expected the directory for the NVMe swap files with device \"nvme\", found none");
    }
    dev.Finish();
    return out;
  };
  const DsOffload offload_optimizer = read_device("offload_optimizer", false);
  const DsOffload offload_param = read_device("offload_param", true);
  if (offload_param.device != "none" && stage != 3 && ctx->Ok({zero.PathOf("stage")})) {
    ctx->Add(zero.PathOf("offload_param.device"),
             absl::StrCat("parameter offload needs zero_optimization.stage 3 (as in DeepSpeed), found stage ", stage));
  }
  const bool opt_cpu = offload_optimizer.device == "cpu", param_cpu = offload_param.device == "cpu";
  if (use_ds({zero.PathOf("offload_optimizer"), zero.PathOf("offload_param")}, "strategy.cpu_offload")) {
    sh.offload.params = param_cpu;
    sh.offload.grads = sh.offload.optimizer = opt_cpu;
  }
  // ZeRO-Infinity: device "nvme" and the aio block -> strategy.nvme_offload.
  Section aio = ds.Child("aio");
  if (use_ds({zero.PathOf("offload_optimizer"), zero.PathOf("offload_param"), aio.path()}, "strategy.nvme_offload")) {
    OffloadPolicy& off = sh.offload;
    off.nvme_optimizer = offload_optimizer.device == "nvme";
    off.nvme_params = offload_param.device == "nvme";
    off.optimizer_nvme = offload_optimizer.nvme;
    off.param_nvme = offload_param.nvme;
    ReadAio(aio, &off.aio);
  } else {
    AioOptions unused;
    ReadAio(aio, &unused);
  }
  bool overlap = false;
  if (zero.Bool("overlap_comm", &overlap)) {
    if (use_ds({zero.PathOf("overlap_comm")}, "strategy.forward_prefetch")) sh.forward_prefetch = overlap;
    if (use_ds({zero.PathOf("overlap_comm")}, "strategy.backward_prefetch")) {
      sh.backward_prefetch = overlap ? BackwardPrefetch::kBackwardPre : BackwardPrefetch::kNone;
    }
  }
  // ZeRO++: zero_quantized_weights (qwZ), zero_quantized_gradients (qgZ),
  // zero_hpz_partition_size > 1 (hpZ) -> strategy.comm_hook.
  bool qw = false, qg = false;
  int64_t hpz = 1;
  const bool has_qw = zero.Bool("zero_quantized_weights", &qw);
  const bool has_qg = zero.Bool("zero_quantized_gradients", &qg);
  const bool has_hpz = zero.Int("zero_hpz_partition_size", &hpz, 1, 1 << 20);
  if ((has_qw || has_qg || has_hpz) &&
      use_ds({zero.PathOf("zero_quantized_weights"), zero.PathOf("zero_quantized_gradients"),
              zero.PathOf("zero_hpz_partition_size")},
             "strategy.comm_hook")) {
    const bool hp = hpz > 1;
    const int on = int{qw} + int{qg} + int{hp};
    if (on == 2) {
      zero.Add("zero_quantized_weights",
               absl::StrCat("ZeRO++ with two of qwZ (", qw, "), qgZ (", qg, ") and hpZ (partition size ", hpz,
                            "): expected one of them alone or all three (comm hook zeropp)"));
    } else if (on > 0) {
      sh.comm_hook.name = on == 3 ? "zeropp" : qw ? "qwz" : qg ? "qgz" : "hpz";
      if (hp) sh.comm_hook.group_size = static_cast<int>(hpz);
    }
  }
  for (const char* k : {"contiguous_gradients", "reduce_scatter", "allgather_partitions", "round_robin_gradients",
                        "stage3_gather_16bit_weights_on_model_save"}) {
    bool unused = false;
    if (zero.Bool(k, &unused)) without_effect.push_back(zero.PathOf(k));
  }
  for (const char* k : {"reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size",
                        "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                        "stage3_max_reuse_distance", "sub_group_size"}) {
    const Json* v = zero.Get(k);
    if (v == nullptr) continue;
    if (v->is_number() || (v->is_string() && v->get<std::string>() == "auto")) {
      without_effect.push_back(zero.PathOf(k));
    } else {
      zero.Add(k, absl::StrCat("expected a number or \"auto\", found ", Found(*v)));
    }
  }
  zero.Finish();

  // ---- precision and loss scaling
  Section bf16 = ds.Child("bf16");
  bool bf16_on = false;
  bf16.Bool("enabled", &bf16_on);
  bf16.Finish();
  Section fp16 = ds.Child("fp16");
  bool fp16_on = false;
  fp16.Bool("enabled", &fp16_on);
  if (fp16_on && bf16_on) {
    ctx->Add(fp16.PathOf("enabled"), "fp16 and bf16 both on (deepspeed.bf16.enabled is true too): expected at most one");
  }
  const std::vector<std::string> precision = {bf16.PathOf("enabled"), fp16.PathOf("enabled")};
  const DType model_dtype = fp16_on ? DType::kF16 : bf16_on ? DType::kBF16 : DType::kF32;
  MixedPrecision& mp = sh.mixed_precision;
  if (use_ds(precision, "strategy.mixed_precision.param_dtype")) mp.param_dtype = model_dtype;
  if (use_ds(precision, "strategy.mixed_precision.buffer_dtype")) mp.buffer_dtype = model_dtype;
  DType comm_dtype = model_dtype;  // DeepSpeed's default: the model's dtype
  ds.FloatDType("communication_data_type", &comm_dtype);
  if (use_ds({ds.PathOf("communication_data_type"), bf16.PathOf("enabled"), fp16.PathOf("enabled")},
             "strategy.mixed_precision.reduce_dtype")) {
    mp.reduce_dtype = comm_dtype;
  }
  if (fp16_on && use_ds({fp16.PathOf("enabled")}, "loss_scaler.mode")) c->loss_scale_mode = "dynamic";
  double static_scale = 0;
  if (fp16.Number("loss_scale", &static_scale, AtLeast(0)) && static_scale != 0) {
    fp16.Add("loss_scale", absl::StrCat("expected 0 (dynamic loss scaling; a static loss scale is not supported), "
                                        "found ", static_scale));
  }
  optim::LossScalerOptions scaler = o.loss_scaler;
  if (fp16.Int("initial_scale_power", &scaler.initial_scale_power, 0, 126) &&
      use_ds({fp16.PathOf("initial_scale_power")}, "loss_scaler.initial_scale_power")) {
    o.loss_scaler.initial_scale_power = scaler.initial_scale_power;
  }
  if (fp16.Int("loss_scale_window", &scaler.scale_window, 1) &&
      use_ds({fp16.PathOf("loss_scale_window")}, "loss_scaler.loss_scale_window")) {
    o.loss_scaler.scale_window = scaler.scale_window;
  }
  if (fp16.Int("hysteresis", &scaler.hysteresis, 1) && use_ds({fp16.PathOf("hysteresis")}, "loss_scaler.hysteresis")) {
    o.loss_scaler.hysteresis = scaler.hysteresis;
  }
  if (fp16.Bool("consecutive_hysteresis", &scaler.consecutive_hysteresis) &&
      use_ds({fp16.PathOf("consecutive_hysteresis")}, "loss_scaler.consecutive_hysteresis")) {
    o.loss_scaler.consecutive_hysteresis = scaler.consecutive_hysteresis;
  }
  if (fp16.Number("min_loss_scale", &scaler.min_scale, Above(0)) &&
      use_ds({fp16.PathOf("min_loss_scale")}, "loss_scaler.min_loss_scale")) {
    o.loss_scaler.min_scale = scaler.min_scale;
  }
  fp16.Finish();

  // ---- optimizer {type, params}
  Section opt = ds.Child("optimizer");
  std::string type;
  if (opt.Choice("type", &type, {"Adam", "AdamW", "SGD"}) && use_ds({opt.PathOf("type")}, "optimizer.type")) {
    o.optimizer.kind = type == "SGD" ? optim::OptimizerKind::kSgd : optim::OptimizerKind::kAdamW;
  }
  Section params = opt.Child("params");
  double x = 0;
  if (params.Number("lr", &x, AtLeast(0)) && use_ds({params.PathOf("lr")}, "optimizer.lr")) o.optimizer.lr = x;
  if (params.Number("weight_decay", &x, AtLeast(0)) && use_ds({params.PathOf("weight_decay")}, "optimizer.weight_decay")) {
    o.optimizer.weight_decay = x;
  }
  if (const Json* b = params.Get("betas")) {
    const Range unit{.min = 0, .max = 1, .max_open = true};
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number() ||
        !unit.Contains((*b)[0].get<double>()) || !unit.Contains((*b)[1].get<double>())) {
      params.Add("betas", absl::StrCat("expected [beta1, beta2], two numbers in [0, 1), found ", Found(*b)));
    } else if (use_ds({params.PathOf("betas")}, "optimizer.betas")) {
      o.optimizer.adamw.beta1 = (*b)[0].get<double>();
      o.optimizer.adamw.beta2 = (*b)[1].get<double>();
    }
  }
  if (params.Number("eps", &x, AtLeast(0)) && use_ds({params.PathOf("eps")}, "optimizer.eps")) o.optimizer.adamw.eps = x;
  bool adam_w_mode = true;
  if (params.Bool("adam_w_mode", &adam_w_mode) && type == "Adam" && !adam_w_mode &&
      use_ds({opt.PathOf("type"), params.PathOf("adam_w_mode")}, "optimizer.type")) {
    o.optimizer.kind = optim::OptimizerKind::kAdam;
  }
  if (params.Number("momentum", &x, AtLeast(0)) && use_ds({params.PathOf("momentum")}, "optimizer.momentum")) {
    o.optimizer.sgd.momentum = x;
  }
  if (params.Number("dampening", &x, AtLeast(0)) && use_ds({params.PathOf("dampening")}, "optimizer.dampening")) {
    o.optimizer.sgd.dampening = x;
  }
  bool nesterov = false;
  if (params.Bool("nesterov", &nesterov) && use_ds({params.PathOf("nesterov")}, "optimizer.nesterov")) {
    o.optimizer.sgd.nesterov = nesterov;
  }
  params.Finish();
  opt.Finish();
  Section scheduler = ds.Child("scheduler");
  if (scheduler.present()) ReadScheduler(scheduler, c, use_ds, &without_effect);
  ds.Finish();
  if (!without_effect.empty()) {
    c->notes.push_back(absl::StrCat("read without effect (communication runs per wrap unit): ",
                                    absl::StrJoin(without_effect, ", ")));
  }
}

bool IsDeepSpeedConfig(const Json& root) {
  if (!root.is_object()) return false;
  if (!root.contains("zero_optimization") && !root.contains("train_micro_batch_size_per_gpu") &&
      !root.contains("train_batch_size")) {
    return false;
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() != "optimizer" && (it.key() == "_base_" || FindConfigField(it.key()) != nullptr)) return false;
  }
  return true;
}

}  // namespace zeroshard
