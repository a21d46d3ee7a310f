// GPT: a GPT-2-style language model with nanoGPT's parameter names and layouts,
// so weights move between this project and PyTorch code unchanged.
//
//   nn::GptConfig config{.vocab_size = 256, .block_size = 128, .n_layer = 4,
//                        .n_head = 4, .n_embd = 256};
//   auto gpt = std::make_shared<nn::Gpt>(config);       // shapes only
//   ZS_RETURN_IF_ERROR(gpt->Materialize(/*seed=*/1337));
//   ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(batch.inputs, batch.targets));
//   ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
//
// Layout (C = n_embd, V = vocab_size):
//   transformer.wte.weight [V, C]        token embedding, tied to lm_head.weight
//   transformer.wpe.weight [block, C]    learned positions
//   transformer.h.{i}.ln_1.{weight,bias} [C]
//   transformer.h.{i}.attn.c_attn.{weight [3C, C], bias [3C]}   q, k, v in that order
//   transformer.h.{i}.attn.c_proj.{weight [C, C], bias [C]}
//   transformer.h.{i}.ln_2.{weight,bias} [C]
//   transformer.h.{i}.mlp.c_fc.{weight [4C, C], bias [4C]}
//   transformer.h.{i}.mlp.c_proj.{weight [C, 4C], bias [C]}
//   transformer.ln_f.{weight,bias} [C]
//   lm_head.weight [V, C]                the same Variable as wte (counted once)
// Pre-LayerNorm blocks (eps 1e-5), GELU tanh form, causal multi-head attention,
// 4x MLP. GPT-2 init: N(0, 0.02), residual projections (c_proj) N(0,
// 0.02/sqrt(2 n_layer)), zero biases, unit LayerNorm weights.
#ifndef ZEROSHARD_AUTOGRAD_NN_GPT_H_
#define ZEROSHARD_AUTOGRAD_NN_GPT_H_

#include <memory>

#include "zeroshard/autograd/nn/causal_lm.h"
#include "zeroshard/autograd/nn/layers.h"

namespace zeroshard::nn {

using GptOutput = LmOutput;

class Gpt : public CausalLm {
 public:
  explicit Gpt(const GptConfig& config, uint64_t dropout_seed = 0);
  int64_t max_positions() const override { return config_.block_size; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  std::string layer_type() const override { return "Block"; }
  // 6 N + 12 n_layer T n_embd (N counts the tied matrix once).
  double TrainFlopsPerToken(int64_t seq_len) override;
  static double TrainFlopsPerToken(const GptConfig& config, int64_t num_params, int64_t seq_len);
  std::string ConfigString() const override { return config_.ToString(); }

  const GptConfig& config() const { return config_; }
  ModuleList& blocks() { return *h_; }
  // Parameters that get weight decay: 2-D weights (nanoGPT's groups).
  static bool DecaysWeight(const Shape& shape) { return shape.size() >= 2; }

 protected:
  // ids, targets: [B, T] (i32/i64), T <= block_size. targets may be undefined.
  absl::StatusOr<GptOutput> ForwardLm(const Tensor& ids, const Tensor& targets) override;

 private:
  GptConfig config_;
  std::shared_ptr<Module> transformer_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<ModuleList> h_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> lm_head_;
  // 0 .. block_size - 1 on the ids' device, made by the first forward there
  // (held like a parameter: the allocator outlives the model).
  Tensor device_positions_;
};

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_GPT_H_
