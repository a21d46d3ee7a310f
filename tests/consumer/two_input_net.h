// The consumer's own model, written against the installed headers only: not a
// GPT, a module tree whose blocks take two inputs. A MixBlock mixes its input
// with a context through a residual,
//
//   out = x + fc2(gelu(fc1(x) + fc3(context)))
//
// and the net is  pred = head(block_n(... block_1(stem(x), ctx) ..., ctx)),
// ctx = ctx_proj(context). Each MixBlock is one sharding unit (wrap by type);
// nothing here calls a sharding hook: ForwardModule's operator() runs them
// whatever the signature (zeroshard/autograd/nn/module.h, Note [Module forward]).
#ifndef CONSUMER_TWO_INPUT_NET_H_
#define CONSUMER_TWO_INPUT_NET_H_

#include <memory>
#include <string>
#include <vector>

#include "zeroshard/zeroshard.h"

namespace consumer {

using zeroshard::autograd::Variable;
namespace nn = zeroshard::nn;
namespace ops = zeroshard::ops;

class MixBlock : public nn::ForwardModule<Variable(Variable, Variable)> {
 public:
  explicit MixBlock(int64_t width) : ForwardModule("MixBlock") {
    fc1_ = RegisterModule("fc1", std::make_shared<nn::Linear>(width, 2 * width));
    fc3_ = RegisterModule("fc3", std::make_shared<nn::Linear>(width, 2 * width));
    fc2_ = RegisterModule("fc2", std::make_shared<nn::Linear>(2 * width, width));
  }

 protected:
  absl::StatusOr<Variable> Forward(const Variable& x, const Variable& context) override {
    ZS_ASSIGN_OR_RETURN(Variable a, (*fc1_)(x));
    ZS_ASSIGN_OR_RETURN(Variable b, (*fc3_)(context));
    ZS_ASSIGN_OR_RETURN(Variable h, ops::Add(a, b));
    ZS_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    ZS_ASSIGN_OR_RETURN(h, (*fc2_)(h));
    return ops::Add(x, h);
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_, fc3_;
};

class TwoInputNet : public nn::ForwardModule<Variable(Variable, Variable)> {
 public:
  TwoInputNet(int64_t in, int64_t context, int64_t width, int blocks) : ForwardModule("TwoInputNet") {
    stem_ = RegisterModule("stem", std::make_shared<nn::Linear>(in, width));
    ctx_ = RegisterModule("ctx_proj", std::make_shared<nn::Linear>(context, width));
    for (int i = 0; i < blocks; ++i) {
      blocks_.push_back(RegisterModule("block" + std::to_string(i), std::make_shared<MixBlock>(width)));
    }
    head_ = RegisterModule("head", std::make_shared<nn::Linear>(width, 1));
  }

 protected:
  absl::StatusOr<Variable> Forward(const Variable& x, const Variable& context) override {
    ZS_ASSIGN_OR_RETURN(Variable h, (*stem_)(x));
    ZS_ASSIGN_OR_RETURN(Variable c, (*ctx_)(context));
    for (auto& block : blocks_) {
      ZS_ASSIGN_OR_RETURN(h, (*block)(h, c));
    }
    return (*head_)(h);
  }

 private:
  std::shared_ptr<nn::Linear> stem_, ctx_, head_;
  std::vector<std::shared_ptr<MixBlock>> blocks_;
};

}  // namespace consumer

#endif  // CONSUMER_TWO_INPUT_NET_H_
