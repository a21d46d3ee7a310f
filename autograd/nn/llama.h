// Llama: the Llama family of decoder-only transformers (Llama 2 and 3,
// TinyLlama, SmolLM, ... anything Hugging Face loads as LlamaForCausalLM),
// with Hugging Face's parameter names, layouts and rotary convention, so a
// model folder moves between this project and `transformers` unchanged
// (checkpoint/hf_folder.h reads and writes the folders).
//
//   ZS_ASSIGN_OR_RETURN(nn::LlamaConfig config, nn::LlamaConfig::FromHfJson(config_json_text));
//   auto llama = std::make_shared<nn::Llama>(config);        // shapes only
//   ZS_RETURN_IF_ERROR(llama->Materialize(/*seed=*/1337));    // or shard it first (deferred init)
//   ZS_ASSIGN_OR_RETURN(nn::LmOutput out, llama->Forward(batch.inputs, batch.targets));
//
// Layout (C = hidden_size, H = num_attention_heads, K = num_key_value_heads,
// D = head_dim, F = intermediate_size, V = vocab_size), Hugging Face's names:
//   model.embed_tokens.weight                         [V, C]
//   model.layers.{i}.input_layernorm.weight           [C]        RMSNorm
//   model.layers.{i}.self_attn.q_proj.weight          [H D, C]   (bias [H D] with attention_bias)
//   model.layers.{i}.self_attn.k_proj.weight          [K D, C]
//   model.layers.{i}.self_attn.v_proj.weight          [K D, C]
//   model.layers.{i}.self_attn.o_proj.weight          [C, H D]   (bias [C] with attention_bias)
//   model.layers.{i}.post_attention_layernorm.weight  [C]
//   model.layers.{i}.mlp.gate_proj.weight             [F, C]     (biases [F], [F], [C] with mlp_bias)
//   model.layers.{i}.mlp.up_proj.weight               [F, C]
//   model.layers.{i}.mlp.down_proj.weight             [C, F]
//   model.norm.weight                                 [C]
//   lm_head.weight                                    [V, C]     with tie_word_embeddings, the same
//                                                                 Variable as model.embed_tokens.weight
//
// The math, as transformers' modeling_llama.py computes it:
//   h = embed_tokens[ids]
//   per layer:  h = h + o_proj(attn(rope(q_proj(rms_1(h))), rope(k_proj(.)), v_proj(.)))
//               h = h + down_proj(silu(gate_proj(rms_2(h))) * up_proj(rms_2(h)))
//   logits = lm_head(norm(h))
// RMSNorm: x / sqrt(mean(x^2) + rms_norm_eps) * weight, in fp32.
// Rotary embeddings, the rotate-half convention (the q/k projection rows of a
// head are [first halves | second halves], not interleaved pairs as Meta's
// original checkpoints store them): for i < D/2 and angle a = p theta^(-2i/D)
// at position p, (x_i, x_{i+D/2}) -> (x_i cos a - x_{i+D/2} sin a,
// x_{i+D/2} cos a + x_i sin a); rope_scaling {"rope_type": "llama3", ...}
// rescales the frequencies as Llama 3.1 does (kernels/rope.h).
// Attention: causal, scale 1/sqrt(D), query head h reads key/value head
// h / (H / K) (grouped-query; K = 1 is multi-query), without repeating K and V.
// No dropout (Llama has none). Init as transformers' _init_weights: every
// Linear and the embedding N(0, initializer_range), zero biases, unit RMSNorm weights.
#ifndef ZEROSHARD_AUTOGRAD_NN_LLAMA_H_
#define ZEROSHARD_AUTOGRAD_NN_LLAMA_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/autograd/nn/causal_lm.h"
#include "zeroshard/autograd/nn/layers.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/kernels/rope.h"

namespace zeroshard::nn {

// Hugging Face's LlamaConfig, the fields that shape the model (same names).
struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;  // rope_type "llama3"
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  double initializer_range = 0.02;
  int64_t bos_token_id = -1;  // written to config.json when >= 0
  int64_t eos_token_id = -1;
  bool activation_checkpointing = false;  // ours: recompute each decoder layer in backward

  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  // Every rule the model relies on, each violation an InvalidArgument naming
  // the field, what was expected and what was found.
  absl::Status Validate() const;
  // From the text of a config.json: the fields above (absent ones keep
  // transformers' defaults: num_key_value_heads = num_attention_heads,
  // rms_norm_eps 1e-6, rope_theta 10000, ...). model_type must be "llama" and
  // hidden_act "silu"; rope_scaling null or of rope_type "llama3" (others are
  // Unimplemented, named); then Validate.
  static absl::StatusOr<LlamaConfig> FromHfJson(absl::string_view text);
  // config.json text transformers reads back as the same LlamaConfig
  // (architectures ["LlamaForCausalLM"], model_type "llama", torch_dtype `dtype_name`).
  std::string ToHfJson(absl::string_view torch_dtype = "float32") const;
  std::string ToString() const;
};

// Hugging Face's LlamaRMSNorm: weight [C], ones at init.
class RmsNorm : public UnaryModule {
 public:
  RmsNorm(int64_t dim, double eps);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  double eps_;
};

// The rotary tables every layer shares: cos/sin [rows, D/2] on the device the
// activations are on, grown when a longer sequence (or another device) comes.
// Off the CPU they come from the activations' allocator (in the job, the
// rank's caching allocator on the compute stream, which the ops use too) and
// are kept across steps, so that allocator must outlive the model (the job
// and tests/autograd/cuda_llama_model_test.cc declare it first).
class LlamaRotary {
 public:
  LlamaRotary(RopeOptions options, int64_t head_dim) : options_(options), head_dim_(head_dim) {}
  // Tables with at least `seq_len` rows where `like` lives.
  absl::StatusOr<const RopeTables*> Get(int64_t seq_len, const Tensor& like);

 private:
  RopeOptions options_;
  int64_t head_dim_;
  int64_t rows_ = 0;
  Device device_;
  RopeTables tables_;
};

class LlamaAttention : public UnaryModule {
 public:
  LlamaAttention(const LlamaConfig& config, std::shared_ptr<LlamaRotary> rotary);
  absl::StatusOr<Variable> Forward(const Variable& x) override;  // x [B, T, C]

 private:
  int64_t n_head_, n_kv_head_, head_dim_;
  std::shared_ptr<LlamaRotary> rotary_;
  std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, o_proj_;
};

class LlamaMlp : public UnaryModule {
 public:
  explicit LlamaMlp(const LlamaConfig& config);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  std::shared_ptr<Linear> gate_proj_, up_proj_, down_proj_;
};

// Pre-norm decoder layer (the wrap policy's unit: type "LlamaDecoderLayer").
class LlamaDecoderLayer : public UnaryModule {
 public:
  LlamaDecoderLayer(const LlamaConfig& config, std::shared_ptr<LlamaRotary> rotary);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  std::shared_ptr<RmsNorm> input_layernorm_, post_attention_layernorm_;
  std::shared_ptr<LlamaAttention> self_attn_;
  std::shared_ptr<LlamaMlp> mlp_;
};

// LlamaForCausalLM.
class Llama : public CausalLm {
 public:
  // The config must be valid (LlamaConfig::Validate; checked, fatal otherwise).
  explicit Llama(const LlamaConfig& config);
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  std::string layer_type() const override { return "LlamaDecoderLayer"; }
  // 6 N (N without the input embedding, which is a lookup; the tied lm_head
  // counts once) + 12 L T H D (scores and values, forward and backward).
  double TrainFlopsPerToken(int64_t seq_len) override;
  std::string ConfigString() const override { return config_.ToString(); }

  const LlamaConfig& config() const { return config_; }
  ModuleList& layers() { return *layers_; }

 protected:
  absl::StatusOr<LmOutput> ForwardLm(const Tensor& ids, const Tensor& targets) override;

 private:
  LlamaConfig config_;
  std::shared_ptr<LlamaRotary> rotary_;
  std::shared_ptr<Module> model_;
  std::shared_ptr<Embedding> embed_tokens_;
  std::shared_ptr<ModuleList> layers_;
  std::shared_ptr<RmsNorm> norm_;
  std::shared_ptr<Linear> lm_head_;
};

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_LLAMA_H_
