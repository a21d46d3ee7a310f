// Activation checkpointing: run a piece of the model without keeping its
// inner activations, and recompute them during backward.
//
//   // y = block(x), keeping only x (and y); the dropout stream replays exactly.
//   ZS_ASSIGN_OR_RETURN(std::vector<Variable> y,
//       Checkpoint([&](const std::vector<Variable>& in) -> absl::StatusOr<std::vector<Variable>> {
//                    ZS_ASSIGN_OR_RETURN(Variable out, (*block)(in[0]));
//                    return std::vector<Variable>{out};
//                  },
//                  {x}, {.generators = {&dropout_generator}}));
//
// Forward runs `fn` with recording off: the outputs hang off one Checkpoint
// node that saves only the inputs and the generators' offsets. When backward
// reaches that node it restores the offsets, re-runs `fn` with recording on
// (module hooks run again, so a sharded unit sees its recompute), runs an inner
// backward from the recomputed outputs, and hands on the inputs' gradients.
// Parameters used inside `fn` receive their gradients from the inner backward.
// The recomputed activations are bit-identical to the forward's: kernels are
// deterministic and every random draw comes from the replayed generators.
#ifndef ZEROSHARD_AUTOGRAD_CHECKPOINT_H_
#define ZEROSHARD_AUTOGRAD_CHECKPOINT_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/kernels/math/philox.h"

namespace zeroshard::autograd {

using CheckpointFn =
    std::function<absl::StatusOr<std::vector<Variable>>(const std::vector<Variable>& inputs)>;

struct CheckpointOptions {
  // Every generator `fn` draws from; their offsets are replayed in the recompute.
  std::vector<PhiloxGenerator*> generators;
};

absl::StatusOr<std::vector<Variable>> Checkpoint(const CheckpointFn& fn,
                                                 const std::vector<Variable>& inputs,
                                                 const CheckpointOptions& options = {});

}  // namespace zeroshard::autograd

#endif  // ZEROSHARD_AUTOGRAD_CHECKPOINT_H_
