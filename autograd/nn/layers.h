// The layers of a GPT, with nanoGPT's names: Embedding, LayerNorm, ModuleList,
// Mlp (c_fc, GELU, c_proj), CausalSelfAttention (c_attn, c_proj), Block
// (ln_1, attn, ln_2, mlp).
//
//   auto ln = std::make_shared<nn::LayerNorm>(256);            // weight ones, bias zeros
//   ZS_ASSIGN_OR_RETURN(Variable y, (*ln)(x));                   // x [..., 256]
#ifndef ZEROSHARD_AUTOGRAD_NN_LAYERS_H_
#define ZEROSHARD_AUTOGRAD_NN_LAYERS_H_

#include <memory>
#include <vector>

#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/nn/module.h"
#include "zeroshard/kernels/math/philox.h"

namespace zeroshard::nn {

// weight [num, dim]; takes token ids (not differentiable).
class Embedding : public ForwardModule<Variable(Tensor)> {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, InitSpec init = InitSpec::Normal(0.0f, 1.0f));
  const Variable& weight() { return FindParameter("weight")->var; }

 protected:
  absl::StatusOr<Variable> Forward(const Tensor& ids) override;
};

class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  double eps_;
  bool bias_;
};

// Children named "0", "1", ...
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  template <typename M>
  std::shared_ptr<M> Append(std::shared_ptr<M> m) {
    items_.push_back(m);
    return RegisterModule(std::to_string(items_.size() - 1), std::move(m));
  }
  size_t size() const { return items_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return items_[i]; }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

// What every GPT layer needs to know.
struct GptConfig {
  int64_t vocab_size = 256;
  int64_t block_size = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 256;
  double dropout = 0.0;  // embedding and residual dropout (not on attention probabilities)
  bool bias = true;
  bool activation_checkpointing = false;  // recompute each Block in backward
  std::string ToString() const;
};

// Dropout draws come from one generator the whole model shares (it is what a
// checkpointed block replays).
struct DropoutContext {
  double p = 0.0;
  PhiloxGenerator* generator = nullptr;
};

class Mlp : public UnaryModule {
 public:
  Mlp(const GptConfig& config, DropoutContext dropout);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  std::shared_ptr<Linear> c_fc_, c_proj_;
  DropoutContext dropout_;
};

class CausalSelfAttention : public UnaryModule {
 public:
  CausalSelfAttention(const GptConfig& config, DropoutContext dropout);
  absl::StatusOr<Variable> Forward(const Variable& x) override;  // x [B, T, C]

 private:
  int64_t n_head_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
  DropoutContext dropout_;
};

// Pre-LayerNorm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(.)).
class Block : public UnaryModule {
 public:
  Block(const GptConfig& config, DropoutContext dropout);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<Mlp> mlp_;
};

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_LAYERS_H_
