#include "zeroshard/autograd/nn/llama.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/autograd/checkpoint.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/runtime/check.h"

namespace zeroshard::nn {

// ================================================================ config

absl::Status LlamaConfig::Validate() const {
  auto positive = [](const char* field, int64_t v) -> absl::Status {
    if (v >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("LlamaConfig.", field, ": expected >= 1, found ", v));
  };
  ZS_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  ZS_RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  ZS_RETURN_IF_ERROR(positive("intermediate_size", intermediate_size));
  ZS_RETURN_IF_ERROR(positive("num_hidden_layers", num_hidden_layers));
  ZS_RETURN_IF_ERROR(positive("num_attention_heads", num_attention_heads));
  ZS_RETURN_IF_ERROR(positive("num_key_value_heads", num_key_value_heads));
  ZS_RETURN_IF_ERROR(positive("max_position_embeddings", max_position_embeddings));
  if (num_attention_heads % num_key_value_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LlamaConfig.num_key_value_heads: expected a divisor of num_attention_heads (", num_attention_heads,
        "), found ", num_key_value_heads));
  }
  if (head_dim < 0) {
    return absl::InvalidArgumentError(absl::StrCat("LlamaConfig.head_dim: expected >= 0 (0: hidden_size / "
                                                   "num_attention_heads), found ", head_dim));
  }
  if (head_dim == 0 && hidden_size % num_attention_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LlamaConfig.hidden_size: expected a multiple of num_attention_heads (", num_attention_heads,
        ") when head_dim is not given, found ", hidden_size));
  }
  if (head_size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("LlamaConfig: rotary embeddings need an even head dimension, found ", head_size()));
  }
  if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps)) {
    return absl::InvalidArgumentError(absl::StrCat("LlamaConfig.rms_norm_eps: expected > 0, found ", rms_norm_eps));
  }
  if (!(rope_theta > 1) || !std::isfinite(rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat("LlamaConfig.rope_theta: expected > 1, found ", rope_theta));
  }
  if (rope_scaling) {
    const Llama3RopeScaling& r = *rope_scaling;
    if (!(r.factor >= 1) || !(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor) ||
        r.original_max_position_embeddings < 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "LlamaConfig.rope_scaling: expected factor >= 1, 0 < low_freq_factor < high_freq_factor and "
          "original_max_position_embeddings >= 1, found factor %g, low_freq_factor %g, high_freq_factor %g, "
          "original_max_position_embeddings %d",
          r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings));
    }
  }
  if (!(initializer_range >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LlamaConfig.initializer_range: expected >= 0, found ", initializer_range));
  }
  return absl::OkStatus();
}

namespace {

using Json = nlohmann::json;

absl::Status JsonError(absl::string_view key, absl::string_view expected, const Json& found) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json \"", key, "\": expected ", expected, ", found ", found.dump()));
}

// Reads an optional field into `out` (absent or null: unchanged).
absl::Status ReadInt(const Json& j, const char* key, int64_t* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number_integer()) return JsonError(key, "an integer", j[key]);
  *out = j[key].get<int64_t>();
  return absl::OkStatus();
}
absl::Status ReadNum(const Json& j, const char* key, double* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number()) return JsonError(key, "a number", j[key]);
  *out = j[key].get<double>();
  return absl::OkStatus();
}
absl::Status ReadBool(const Json& j, const char* key, bool* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_boolean()) return JsonError(key, "true or false", j[key]);
  *out = j[key].get<bool>();
  return absl::OkStatus();
}
// bos/eos ids: an integer, or a list (Llama 3 instruct lists several eos ids): the first.
absl::Status ReadTokenId(const Json& j, const char* key, int64_t* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  const Json& v = j[key];
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) {
    *out = v[0].get<int64_t>();
    return absl::OkStatus();
  }
  if (!v.is_number_integer()) return JsonError(key, "an integer or a list of integers", v);
  *out = v.get<int64_t>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaConfig> LlamaConfig::FromHfJson(absl::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("config.json: not well-formed JSON");
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat("config.json: expected an object, found ", j.dump()));
  if (j.contains("model_type") && j["model_type"] != "llama") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json \"model_type\": expected \"llama\", found ", j["model_type"].dump()));
  }
  if (j.contains("hidden_act") && j["hidden_act"] != "silu") {
    return absl::UnimplementedError(
        absl::StrCat("config.json \"hidden_act\": expected \"silu\" (SwiGLU), found ", j["hidden_act"].dump()));
  }
  LlamaConfig c;
  c.num_key_value_heads = -1;  // defaults to num_attention_heads below
  ZS_RETURN_IF_ERROR(ReadInt(j, "vocab_size", &c.vocab_size));
  ZS_RETURN_IF_ERROR(ReadInt(j, "hidden_size", &c.hidden_size));
  ZS_RETURN_IF_ERROR(ReadInt(j, "intermediate_size", &c.intermediate_size));
  ZS_RETURN_IF_ERROR(ReadInt(j, "num_hidden_layers", &c.num_hidden_layers));
  ZS_RETURN_IF_ERROR(ReadInt(j, "num_attention_heads", &c.num_attention_heads));
  ZS_RETURN_IF_ERROR(ReadInt(j, "num_key_value_heads", &c.num_key_value_heads));
  ZS_RETURN_IF_ERROR(ReadInt(j, "head_dim", &c.head_dim));
  ZS_RETURN_IF_ERROR(ReadInt(j, "max_position_embeddings", &c.max_position_embeddings));
  ZS_RETURN_IF_ERROR(ReadNum(j, "rms_norm_eps", &c.rms_norm_eps));
  ZS_RETURN_IF_ERROR(ReadNum(j, "rope_theta", &c.rope_theta));
  ZS_RETURN_IF_ERROR(ReadBool(j, "tie_word_embeddings", &c.tie_word_embeddings));
  ZS_RETURN_IF_ERROR(ReadBool(j, "attention_bias", &c.attention_bias));
  ZS_RETURN_IF_ERROR(ReadBool(j, "mlp_bias", &c.mlp_bias));
  ZS_RETURN_IF_ERROR(ReadNum(j, "initializer_range", &c.initializer_range));
  ZS_RETURN_IF_ERROR(ReadTokenId(j, "bos_token_id", &c.bos_token_id));
  ZS_RETURN_IF_ERROR(ReadTokenId(j, "eos_token_id", &c.eos_token_id));
  if (c.num_key_value_heads == -1) c.num_key_value_heads = c.num_attention_heads;
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const Json& r = j["rope_scaling"];
    if (!r.is_object()) return JsonError("rope_scaling", "null or an object", r);
    // transformers accepts both spellings ("type" is the older).
    const Json type = r.contains("rope_type") ? r["rope_type"] : (r.contains("type") ? r["type"] : Json());
    if (type == "default") {
      // No scaling.
    } else if (type == "llama3") {
      Llama3RopeScaling s;
      ZS_RETURN_IF_ERROR(ReadNum(r, "factor", &s.factor));
      ZS_RETURN_IF_ERROR(ReadNum(r, "low_freq_factor", &s.low_freq_factor));
      ZS_RETURN_IF_ERROR(ReadNum(r, "high_freq_factor", &s.high_freq_factor));
      ZS_RETURN_IF_ERROR(ReadInt(r, "original_max_position_embeddings", &s.original_max_position_embeddings));
      c.rope_scaling = s;
    } else {
      return absl::UnimplementedError(absl::StrCat(
          "config.json \"rope_scaling\": rope_type ", type.dump(),
          " is not supported (expected \"llama3\" or \"default\")"));
    }
  }
  ZS_RETURN_IF_ERROR(c.Validate());
  return c;
}

std::string LlamaConfig::ToHfJson(absl::string_view torch_dtype) const {
  Json j;  // nlohmann's object keeps keys sorted: a stable file
  j["architectures"] = Json::array({"LlamaForCausalLM"});
  j["model_type"] = "llama";
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_size();
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  if (rope_scaling) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope_scaling->factor},
                         {"low_freq_factor", rope_scaling->low_freq_factor},
                         {"high_freq_factor", rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings", rope_scaling->original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = attention_bias;
  j["attention_dropout"] = 0.0;
  j["mlp_bias"] = mlp_bias;
  j["hidden_act"] = "silu";
  j["initializer_range"] = initializer_range;
  j["pretraining_tp"] = 1;
  j["use_cache"] = true;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  j["torch_dtype"] = std::string(torch_dtype);
  return j.dump(2) + "\n";
}

std::string LlamaConfig::ToString() const {
  std::string s = absl::StrFormat(
      "Llama(layers=%d, hidden=%d, heads=%d, kv_heads=%d, head_dim=%d, intermediate=%d, vocab=%d, "
      "max_positions=%d, rms_norm_eps=%g, rope_theta=%g",
      num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, head_size(), intermediate_size,
      vocab_size, max_position_embeddings, rms_norm_eps, rope_theta);
  if (rope_scaling) {
    absl::StrAppendFormat(&s, ", llama3 rope scaling x%g (low %g, high %g, original %d)", rope_scaling->factor,
                          rope_scaling->low_freq_factor, rope_scaling->high_freq_factor,
                          rope_scaling->original_max_position_embeddings);
  }
  if (tie_word_embeddings) absl::StrAppend(&s, ", tied embeddings");
  if (attention_bias) absl::StrAppend(&s, ", attention bias");
  if (mlp_bias) absl::StrAppend(&s, ", mlp bias");
  if (activation_checkpointing) absl::StrAppend(&s, ", activation_checkpointing");
  return s + ")";
}

// ================================================================ layers

RmsNorm::RmsNorm(int64_t dim, double eps) : UnaryModule("LlamaRMSNorm"), eps_(eps) {
  RegisterParameter("weight", {dim}, InitSpec::Ones());
}

absl::StatusOr<Variable> RmsNorm::Forward(const Variable& x) {
  return ops::RmsNorm(x, FindParameter("weight")->var, eps_);
}

absl::StatusOr<const RopeTables*> LlamaRotary::Get(int64_t seq_len, const Tensor& like) {
  if (seq_len > rows_ || !(like.device() == device_)) {
    // Grow to the next power of two (at least 64 rows), so a generation that
    // lengthens its context one token at a time rebuilds the tables rarely.
    int64_t rows = std::max<int64_t>(64, rows_);
    while (rows < seq_len) rows *= 2;
    Allocator* where = like.device().is_cpu() ? nullptr : like.allocator();
    ZS_ASSIGN_OR_RETURN(tables_, MakeRopeTables(options_, rows, head_dim_, where));
    rows_ = rows;
    device_ = like.device();
  }
  return &tables_;
}

namespace {

std::shared_ptr<Linear> LlamaLinear(int64_t in, int64_t out, bool bias, const LlamaConfig& c) {
  return std::make_shared<Linear>(in, out, bias, InitSpec::Normal(0.0f, static_cast<float>(c.initializer_range)),
                                  InitSpec::Zeros());
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& c, std::shared_ptr<LlamaRotary> rotary)
    : UnaryModule("LlamaAttention"),
      n_head_(c.num_attention_heads),
      n_kv_head_(c.num_key_value_heads),
      head_dim_(c.head_size()),
      rotary_(std::move(rotary)) {
  const int64_t C = c.hidden_size;
  q_proj_ = RegisterModule("q_proj", LlamaLinear(C, n_head_ * head_dim_, c.attention_bias, c));
  k_proj_ = RegisterModule("k_proj", LlamaLinear(C, n_kv_head_ * head_dim_, c.attention_bias, c));
  v_proj_ = RegisterModule("v_proj", LlamaLinear(C, n_kv_head_ * head_dim_, c.attention_bias, c));
  o_proj_ = RegisterModule("o_proj", LlamaLinear(n_head_ * head_dim_, C, c.attention_bias, c));
}

absl::StatusOr<Variable> LlamaAttention::Forward(const Variable& x) {
  if (x.dim() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("LlamaAttention: expected x [B, T, C], got ", ShapeToString(x.shape())));
  }
  const int64_t B = x.size(0), T = x.size(1), H = n_head_, K = n_kv_head_, D = head_dim_;
  ZS_ASSIGN_OR_RETURN(const RopeTables* tables, rotary_->Get(T, x.value()));
  // Projections [B, T, heads * D] seen as [B, T, heads, D]; rotary on q and k
  // there, then [B, heads, T, D] views (unit stride in D) for attention.
  ZS_ASSIGN_OR_RETURN(Variable q, (*q_proj_)(x));
  ZS_ASSIGN_OR_RETURN(Variable k, (*k_proj_)(x));
  ZS_ASSIGN_OR_RETURN(Variable v, (*v_proj_)(x));
  ZS_ASSIGN_OR_RETURN(q, ops::Reshape(q, {B, T, H, D}));
  ZS_ASSIGN_OR_RETURN(k, ops::Reshape(k, {B, T, K, D}));
  ZS_ASSIGN_OR_RETURN(v, ops::Reshape(v, {B, T, K, D}));
  ZS_ASSIGN_OR_RETURN(q, ops::Rope(q, *tables));
  ZS_ASSIGN_OR_RETURN(k, ops::Rope(k, *tables));
  ZS_ASSIGN_OR_RETURN(q, ops::Transpose(q, 1, 2));
  ZS_ASSIGN_OR_RETURN(k, ops::Transpose(k, 1, 2));
  ZS_ASSIGN_OR_RETURN(v, ops::Transpose(v, 1, 2));
  ZS_ASSIGN_OR_RETURN(Variable y, ops::Attention(q, k, v, {.causal = true}));  // [B, H, T, D]
  ZS_ASSIGN_OR_RETURN(Variable yt, ops::Transpose(y, 1, 2));                   // [B, T, H, D]
  ZS_ASSIGN_OR_RETURN(Variable merged, ops::Reshape(yt, {B, T, H * D}));
  return (*o_proj_)(merged);
}

LlamaMlp::LlamaMlp(const LlamaConfig& c) : UnaryModule("LlamaMLP") {
  gate_proj_ = RegisterModule("gate_proj", LlamaLinear(c.hidden_size, c.intermediate_size, c.mlp_bias, c));
  up_proj_ = RegisterModule("up_proj", LlamaLinear(c.hidden_size, c.intermediate_size, c.mlp_bias, c));
  down_proj_ = RegisterModule("down_proj", LlamaLinear(c.intermediate_size, c.hidden_size, c.mlp_bias, c));
}

absl::StatusOr<Variable> LlamaMlp::Forward(const Variable& x) {
  ZS_ASSIGN_OR_RETURN(Variable gate, (*gate_proj_)(x));
  ZS_ASSIGN_OR_RETURN(Variable up, (*up_proj_)(x));
  ZS_ASSIGN_OR_RETURN(Variable h, ops::SiluGate(gate, up));
  return (*down_proj_)(h);
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, std::shared_ptr<LlamaRotary> rotary)
    : UnaryModule("LlamaDecoderLayer") {
  self_attn_ = RegisterModule("self_attn", std::make_shared<LlamaAttention>(c, std::move(rotary)));
  mlp_ = RegisterModule("mlp", std::make_shared<LlamaMlp>(c));
  input_layernorm_ = RegisterModule("input_layernorm", std::make_shared<RmsNorm>(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm_ =
      RegisterModule("post_attention_layernorm", std::make_shared<RmsNorm>(c.hidden_size, c.rms_norm_eps));
}

absl::StatusOr<Variable> LlamaDecoderLayer::Forward(const Variable& x) {
  ZS_ASSIGN_OR_RETURN(Variable a, (*input_layernorm_)(x));
  ZS_ASSIGN_OR_RETURN(Variable b, (*self_attn_)(a));
  ZS_ASSIGN_OR_RETURN(Variable h, ops::Add(x, b));
  ZS_ASSIGN_OR_RETURN(Variable c, (*post_attention_layernorm_)(h));
  ZS_ASSIGN_OR_RETURN(Variable d, (*mlp_)(c));
  return ops::Add(h, d);
}

// ================================================================ the model

namespace {
// Hugging Face's LlamaModel (the "model." namespace).
class LlamaModel : public Module {
 public:
  LlamaModel() : Module("LlamaModel") {}
};
}  // namespace

Llama::Llama(const LlamaConfig& c) : CausalLm("LlamaForCausalLM"), config_(c) {
  const absl::Status valid = c.Validate();
  ZS_CHECK(valid.ok(), valid.ToString());
  rotary_ = std::make_shared<LlamaRotary>(RopeOptions{.theta = c.rope_theta, .llama3 = c.rope_scaling},
                                          c.head_size());
  const InitSpec init = InitSpec::Normal(0.0f, static_cast<float>(c.initializer_range));
  model_ = RegisterModule("model", std::make_shared<LlamaModel>());
  embed_tokens_ = model_->RegisterModule("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, init));
  layers_ = model_->RegisterModule("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers_->Append(std::make_shared<LlamaDecoderLayer>(c, rotary_));
  norm_ = model_->RegisterModule("norm", std::make_shared<RmsNorm>(c.hidden_size, c.rms_norm_eps));
  lm_head_ = RegisterModule("lm_head", std::make_shared<Linear>(c.hidden_size, c.vocab_size, false, init));
  if (c.tie_word_embeddings) {
    const absl::Status tied = lm_head_->TieParameter("weight", *embed_tokens_->FindParameter("weight"));
    ZS_CHECK(tied.ok(), tied.ToString());
  }
}

double Llama::TrainFlopsPerToken(int64_t seq_len) {
  const LlamaConfig& c = config_;
  // Every weight is used once per token in a matrix multiply, except the
  // untied input embedding (a row lookup) and the norm weights (elementwise).
  double matmul_weights = static_cast<double>(NumParameters());
  if (!c.tie_word_embeddings) matmul_weights -= static_cast<double>(c.vocab_size * c.hidden_size);
  matmul_weights -= static_cast<double>((2 * c.num_hidden_layers + 1) * c.hidden_size);
  return 6.0 * matmul_weights +
         12.0 * static_cast<double>(c.num_hidden_layers * seq_len * c.num_attention_heads * c.head_size());
}

absl::StatusOr<LmOutput> Llama::ForwardLm(const Tensor& ids, const Tensor& targets) {
  if (ids.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Llama: expected token ids [B, T], got ", ShapeToString(ids.shape())));
  }
  const int64_t T = ids.size(1);
  if (T > config_.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("Llama: sequence of length ", T,
                                                   " is longer than max_position_embeddings ",
                                                   config_.max_position_embeddings));
  }
  ZS_ASSIGN_OR_RETURN(Variable x, (*embed_tokens_)(ids));  // [B, T, C]
  for (size_t i = 0; i < layers_->size(); ++i) {
    auto* layer = static_cast<LlamaDecoderLayer*>((*layers_)[i].get());
    if (config_.activation_checkpointing && is_training()) {
      ZS_ASSIGN_OR_RETURN(std::vector<Variable> out,
                          autograd::Checkpoint(
                              [layer](const std::vector<Variable>& in) -> absl::StatusOr<std::vector<Variable>> {
                                ZS_ASSIGN_OR_RETURN(Variable y, (*layer)(in[0]));
                                return std::vector<Variable>{y};
                              },
                              {x}, {}));
      x = out[0];
    } else {
      ZS_ASSIGN_OR_RETURN(x, (*layer)(x));
    }
  }
  ZS_ASSIGN_OR_RETURN(x, (*norm_)(x));
  LmOutput out;
  ZS_ASSIGN_OR_RETURN(out.logits, (*lm_head_)(x));  // [B, T, V]
  if (targets.defined()) {
    if (targets.shape() != ids.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("Llama: targets of shape ", ShapeToString(targets.shape()),
                                                     " for ids of shape ", ShapeToString(ids.shape())));
    }
    ZS_ASSIGN_OR_RETURN(out.loss, ops::CrossEntropy(out.logits, targets));
  }
  return out;
}

}  // namespace zeroshard::nn
