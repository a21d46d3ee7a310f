#include "zeroshard/autograd/nn/layers.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "zeroshard/autograd/ops.h"

namespace zeroshard::nn {

std::string GptConfig::ToString() const {
  return absl::StrFormat(
      "GPT(n_layer=%d, n_head=%d, n_embd=%d, block_size=%d, vocab_size=%d, dropout=%g, bias=%s%s)",
      n_layer, n_head, n_embd, block_size, vocab_size, dropout, bias ? "true" : "false",
      activation_checkpointing ? ", activation_checkpointing" : "");
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, InitSpec init) : ForwardModule("Embedding") {
  RegisterParameter("weight", {num_embeddings, dim}, init);
}

absl::StatusOr<Variable> Embedding::Forward(const Tensor& ids) { return ops::Embedding(weight(), ids); }

LayerNorm::LayerNorm(int64_t dim, double eps, bool bias) : UnaryModule("LayerNorm"), eps_(eps), bias_(bias) {
  RegisterParameter("weight", {dim}, InitSpec::Ones());
  if (bias) RegisterParameter("bias", {dim}, InitSpec::Zeros());
}

absl::StatusOr<Variable> LayerNorm::Forward(const Variable& x) {
  return ops::LayerNorm(x, FindParameter("weight")->var,
                        bias_ ? FindParameter("bias")->var : Variable(), eps_);
}

namespace {

// GPT-2 init: N(0, 0.02) weights, zero biases; residual projections
// N(0, 0.02 / sqrt(2 n_layer)).
std::shared_ptr<Linear> GptLinear(int64_t in, int64_t out, const GptConfig& c, bool residual) {
  const float std = residual ? 0.02f / std::sqrt(2.0f * static_cast<float>(c.n_layer)) : 0.02f;
  return std::make_shared<Linear>(in, out, c.bias, InitSpec::Normal(0.0f, std), InitSpec::Zeros());
}

absl::StatusOr<Variable> MaybeDropout(const Variable& x, const DropoutContext& d, bool training) {
  if (d.p == 0.0 || d.generator == nullptr) return x;
  return ops::Dropout(x, d.p, *d.generator, training);
}

}  // namespace

Mlp::Mlp(const GptConfig& c, DropoutContext dropout) : UnaryModule("Mlp"), dropout_(dropout) {
  c_fc_ = RegisterModule("c_fc", GptLinear(c.n_embd, 4 * c.n_embd, c, false));
  c_proj_ = RegisterModule("c_proj", GptLinear(4 * c.n_embd, c.n_embd, c, true));
}

absl::StatusOr<Variable> Mlp::Forward(const Variable& x) {
  // One op, GELU inside the GEMMs on CUDA (Note [GELU in the GEMM]), unless a
  // child carries a hook (an FSDP unit or a user's hook on a Linear): then
  // each child is called through its hooks. The same values either way on the
  // CPU; on CUDA the fused op rounds GELU's input once less.
  if (!c_fc_->has_forward_hooks() && !c_proj_->has_forward_hooks()) {
    ZS_ASSIGN_OR_RETURN(Variable y, ops::GeluMlp(x, c_fc_->weight(), c_fc_->bias(), c_proj_->weight(),
                                                 c_proj_->bias()));
    return MaybeDropout(y, dropout_, is_training());
  }
  ZS_ASSIGN_OR_RETURN(Variable h, (*c_fc_)(x));
  ZS_ASSIGN_OR_RETURN(Variable a, ops::Gelu(h));
  ZS_ASSIGN_OR_RETURN(Variable y, (*c_proj_)(a));
  return MaybeDropout(y, dropout_, is_training());
}

CausalSelfAttention::CausalSelfAttention(const GptConfig& c, DropoutContext dropout)
    : UnaryModule("CausalSelfAttention"), n_head_(c.n_head), dropout_(dropout) {
  c_attn_ = RegisterModule("c_attn", GptLinear(c.n_embd, 3 * c.n_embd, c, false));
  c_proj_ = RegisterModule("c_proj", GptLinear(c.n_embd, c.n_embd, c, true));
}

absl::StatusOr<Variable> CausalSelfAttention::Forward(const Variable& x) {
  if (x.dim() != 3) {
    return absl::InvalidArgumentError(absl::StrCat("CausalSelfAttention: expected x [B, T, C], got ",
                                                   ShapeToString(x.shape())));
  }
  ZS_ASSIGN_OR_RETURN(Variable qkv, (*c_attn_)(x));  // [B, T, 3C]: q, k, v in that order
  // Heads split and merged as strided views (Note [Packed attention]).
  ZS_ASSIGN_OR_RETURN(Variable merged, ops::QkvAttention(qkv, n_head_, {.causal = true}));  // [B, T, C]
  ZS_ASSIGN_OR_RETURN(Variable out, (*c_proj_)(merged));
  return MaybeDropout(out, dropout_, is_training());
}

Block::Block(const GptConfig& c, DropoutContext dropout) : UnaryModule("Block") {
  ln_1_ = RegisterModule("ln_1", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias));
  attn_ = RegisterModule("attn", std::make_shared<CausalSelfAttention>(c, dropout));
  ln_2_ = RegisterModule("ln_2", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias));
  mlp_ = RegisterModule("mlp", std::make_shared<Mlp>(c, dropout));
}

absl::StatusOr<Variable> Block::Forward(const Variable& x) {
  ZS_ASSIGN_OR_RETURN(Variable a, (*ln_1_)(x));
  ZS_ASSIGN_OR_RETURN(Variable b, (*attn_)(a));
  ZS_ASSIGN_OR_RETURN(Variable x1, ops::Add(x, b));
  ZS_ASSIGN_OR_RETURN(Variable c, (*ln_2_)(x1));
  ZS_ASSIGN_OR_RETURN(Variable d, (*mlp_)(c));
  return ops::Add(x1, d);
}

}  // namespace zeroshard::nn
