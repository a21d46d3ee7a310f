// CausalLm: what the training job needs of a decoder-only language model (GPT,
// Llama): ids in, next-token logits and mean cross-entropy out, the longest
// sequence it takes, its dropout stream and its model FLOPs.
//
//   std::shared_ptr<nn::CausalLm> lm = std::make_shared<nn::Llama>(config);
//   ZS_ASSIGN_OR_RETURN(nn::LmOutput out, lm->Forward(batch.inputs, batch.targets));
//   ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
//
// The job (train/trainer.h) is written against this interface only, so a new
// family is a subclass and a case in the job's model factory. A subclass
// implements ForwardLm; Forward runs it inside the module's forward hooks
// (Note [Module forward] in module.h), so the sharding runtime's root unit is
// gathered around it.
#ifndef ZEROSHARD_AUTOGRAD_NN_CAUSAL_LM_H_
#define ZEROSHARD_AUTOGRAD_NN_CAUSAL_LM_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "zeroshard/autograd/nn/module.h"
#include "zeroshard/kernels/math/philox.h"

namespace zeroshard::nn {

struct LmOutput {
  Variable logits;  // [B, T, V]
  Variable loss;    // 0-d mean cross-entropy; undefined without targets
  // What the forward hooks see (Note [Module forward] in module.h).
  template <typename F>
  void ForEachVariable(F&& f) {
    f(logits);
    f(loss);
  }
};

class CausalLm : public Module {
 public:
  using Module::Module;
  // ids, targets: [B, T] (i32/i64), T <= max_positions(); targets may be undefined.
  absl::StatusOr<LmOutput> Forward(const Tensor& ids, const Tensor& targets = Tensor()) {
    return RunForward([&]() { return ForwardLm(ids, targets); }, ids, targets);
  }
  // The longest sequence Forward accepts.
  virtual int64_t max_positions() const = 0;
  virtual int64_t vocab_size() const = 0;
  // The module type that is one decoder layer (the default wrap policy's unit).
  virtual std::string layer_type() const = 0;
  // Model FLOPs of one token's forward and backward at sequence length T:
  // 6 per weight of the matrix multiplies plus the attention scores and
  // values (PaLM's appendix B; the MFU's numerator).
  virtual double TrainFlopsPerToken(int64_t seq_len) = 0;
  // The stream dropout draws from (checkpointed: resumed runs continue it).
  PhiloxGenerator& dropout_generator() { return generator_; }
  // A one-line description of the configuration.
  virtual std::string ConfigString() const = 0;

 protected:
  // The family's forward, run by Forward (targets may be undefined).
  virtual absl::StatusOr<LmOutput> ForwardLm(const Tensor& ids, const Tensor& targets) = 0;

  PhiloxGenerator generator_;
};

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_CAUSAL_LM_H_
