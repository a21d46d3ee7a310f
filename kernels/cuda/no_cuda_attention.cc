// CPU-only build: the launchers of kernels/cuda/attention_launch.h exist so that
// the op entries link, and report "not built" (no CUDA tensor exists in such a build).
#include "zeroshard/kernels/cuda/attention_launch.h"

namespace zeroshard::cuda {

namespace {
constexpr int kNotBuilt = 35;  // cudaErrorInsufficientDriver's value: "no CUDA here"
}  // namespace

int LaunchAttentionForward(int, const AttentionLaunchDims&, AttentionOperand, AttentionOperand,
                           AttentionOperand, AttentionOperand, AttentionOperand, void*) {
  return kNotBuilt;
}

int LaunchAttentionBackward(int, const AttentionLaunchDims&, AttentionOperand, AttentionOperand,
                            AttentionOperand, AttentionOperand, AttentionOperand, AttentionOperand,
                            AttentionOperand, AttentionOperand, AttentionOperand, float*, void*) {
  return kNotBuilt;
}

int LaunchAttentionForwardTc(int, const AttentionLaunchDims&, AttentionOperand, AttentionOperand,
                             AttentionOperand, AttentionOperand, AttentionOperand, void*) {
  return kNotBuilt;
}

int LaunchAttentionBackwardTc(int, const AttentionLaunchDims&, AttentionOperand, AttentionOperand,
                              AttentionOperand, AttentionOperand, AttentionOperand, AttentionOperand,
                              AttentionOperand, AttentionOperand, AttentionOperand, float*, void*) {
  return kNotBuilt;
}

}  // namespace zeroshard::cuda
