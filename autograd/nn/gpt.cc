#include "zeroshard/autograd/nn/gpt.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/checkpoint.h"
#include "zeroshard/autograd/ops.h"

namespace zeroshard::nn {

namespace {
// A plain container for the "transformer" namespace of nanoGPT.
class Container : public Module {
 public:
  Container() : Module("ModuleDict") {}
};
}  // namespace

Gpt::Gpt(const GptConfig& c, uint64_t dropout_seed)
    : CausalLm("GPT"), config_(c) {
  generator_ = PhiloxGenerator{.seed = dropout_seed};
  const DropoutContext dropout{c.dropout, &generator_};
  transformer_ = RegisterModule("transformer", std::make_shared<Container>());
  wte_ = transformer_->RegisterModule(
      "wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, InitSpec::Normal(0.0f, 0.02f)));
  wpe_ = transformer_->RegisterModule(
      "wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, InitSpec::Normal(0.0f, 0.02f)));
  h_ = transformer_->RegisterModule("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) h_->Append(std::make_shared<Block>(c, dropout));
  ln_f_ = transformer_->RegisterModule("ln_f", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias));
  lm_head_ = RegisterModule("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false,
                                                               InitSpec::Normal(0.0f, 0.02f)));
  // Weight tying: lm_head.weight is transformer.wte.weight (same shape [V, C]).
  absl::Status tied = lm_head_->TieParameter("weight", *wte_->FindParameter("weight"));
  ZS_CHECK(tied.ok(), tied.ToString());
}

double Gpt::TrainFlopsPerToken(const GptConfig& c, int64_t num_params, int64_t seq_len) {
  return 6.0 * static_cast<double>(num_params) + 12.0 * static_cast<double>(c.n_layer * seq_len * c.n_embd);
}

double Gpt::TrainFlopsPerToken(int64_t seq_len) { return TrainFlopsPerToken(config_, NumParameters(), seq_len); }

absl::StatusOr<GptOutput> Gpt::ForwardLm(const Tensor& ids, const Tensor& targets) {
  if (ids.dim() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("GPT: expected token ids [B, T], got ",
                                                   ShapeToString(ids.shape())));
  }
  const int64_t B = ids.size(0), T = ids.size(1);
  if (T > config_.block_size) {
    return absl::InvalidArgumentError(absl::StrCat("GPT: sequence of length ", T,
                                                   " is longer than block_size ", config_.block_size));
  }
  ZS_ASSIGN_OR_RETURN(Variable tok, (*wte_)(ids));  // [B, T, C]
  Tensor pos_ids;
  // On a GPU the positions live where the ids do, copied there once (a copy
  // from the host would synchronise it every step). A virtual device (the
  // simulator) keeps the per-forward copy: its memory accounts are the model
  // state's closed forms, which a cached buffer would not be part of.
  const bool cache = ids.device().is_cuda();
  if (cache && device_positions_.defined() && device_positions_.size(0) >= T &&
      device_positions_.allocator() == ids.allocator()) {
    ZS_ASSIGN_OR_RETURN(pos_ids, device_positions_.Narrow(0, 0, T));
  } else {
    const int64_t n = cache ? config_.block_size : T;
    std::vector<int64_t> positions(n);
    for (int64_t t = 0; t < n; ++t) positions[t] = t;
    ZS_ASSIGN_OR_RETURN(pos_ids, Tensor::FromVector(positions, {n}));
    if (!cache && !ids.device().is_cpu()) {
      ZS_ASSIGN_OR_RETURN(pos_ids, pos_ids.To(ids.allocator()));
    } else if (cache) {
      ZS_ASSIGN_OR_RETURN(device_positions_, pos_ids.To(ids.allocator()));
      ZS_ASSIGN_OR_RETURN(pos_ids, device_positions_.Narrow(0, 0, T));
    }
  }
  ZS_ASSIGN_OR_RETURN(Variable pos, (*wpe_)(pos_ids));  // [T, C]
  ZS_ASSIGN_OR_RETURN(Variable x, ops::Add(tok, pos));
  if (config_.dropout > 0) {
    ZS_ASSIGN_OR_RETURN(x, ops::Dropout(x, config_.dropout, generator_, is_training()));
  }
  for (size_t i = 0; i < h_->size(); ++i) {
    auto* block = static_cast<Block*>((*h_)[i].get());
    if (config_.activation_checkpointing && is_training()) {
      ZS_ASSIGN_OR_RETURN(std::vector<Variable> out,
                          autograd::Checkpoint(
                              [block](const std::vector<Variable>& in)
                                  -> absl::StatusOr<std::vector<Variable>> {
                                ZS_ASSIGN_OR_RETURN(Variable y, (*block)(in[0]));
                                return std::vector<Variable>{y};
                              },
                              {x}, {.generators = {&generator_}}));
      x = out[0];
    } else {
      ZS_ASSIGN_OR_RETURN(x, (*block)(x));
    }
  }
  ZS_ASSIGN_OR_RETURN(x, (*ln_f_)(x));
  GptOutput out;
  ZS_ASSIGN_OR_RETURN(out.logits, (*lm_head_)(x));  // [B, T, V]
  if (targets.defined()) {
    if (targets.shape() != ids.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("GPT: targets of shape ",
                                                     ShapeToString(targets.shape()),
                                                     " for ids of shape ", ShapeToString(ids.shape())));
    }
    ZS_ASSIGN_OR_RETURN(out.loss, ops::CrossEntropy(out.logits, targets));
  }
  (void)B;
  return out;
}

}  // namespace zeroshard::nn
