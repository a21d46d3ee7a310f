// Sharded-vs-unsharded training parity, shared by the in-process test and
// the MPI test binary: a tiny GPT on a learnable token stream, the unsharded
// single-rank reference (plain module, one AdamW state per parameter), and one
// rank's part of a sharded run of the same global batch.
#ifndef ZEROSHARD_TESTS_RUNTIME_SHARDING_PARITY_H_
#define ZEROSHARD_TESTS_RUNTIME_SHARDING_PARITY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "zeroshard/autograd/nn/causal_lm.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/data/token_data.h"
#include "zeroshard/sharding/sharding_options.h"

namespace zeroshard::testing {

nn::GptConfig TinyConfig();
TokenData TinyData();

using ParamValues = std::map<std::string, std::vector<float>>;

struct Result {
  std::vector<double> losses;  // global mean loss per step
  ParamValues params;          // final parameters by name
  ParamValues initial;         // the reference's parameters before its first step (TrainUnsharded)
  int64_t tokens_per_step = 0;  // the reference's global batch x block size (TrainUnsharded)
};

// Note [Parity bounds]: what two fp32 runs of the same AdamW training agree to
// when they differ only in summation order (another world size, batch split,
// reduction order, instruction set: Eigen's GEMM rounds differently with
// AVX2/AVX-512 FMA than on plain x86-64). Each bound comes from the math, not
// from the machine:
//  - Adam's envelope. Step t moves an element by lr * m^_t / (sqrt(v^_t) + eps),
//    and by Cauchy-Schwarz |m^_t| / sqrt(v^_t) <= B_t =
//    (1-b1)/(1-b1^t) * sqrt((1-b2^t)/(1-b2)) * sqrt(sum_{j<t} (b1^2/b2)^j)
//    whatever the gradients (B_1 = 1; B_t -> 7.3 for 0.9/0.999). So T steps
//    move an element by at most E = lr * sum_t B_t (weight decay aside).
//  - An element whose true gradient is exactly zero (GPT's attention key bias:
//    adding a constant to every key leaves each softmax row unchanged) gets a
//    computed gradient of pure rounding noise, whose sign depends on the
//    summation order; Adam normalises it into steps of any size up to the
//    envelope. All that is true of it, in every run, is |w_T - w_0| <= E.
//  - Every other element: rounding changes each normalised step by a small
//    fraction of it, while the faults these tests exist for (a stale or
//    unsynchronised shard, a lost or doubled reduction, a misplaced slice)
//    change steps by O(1). The bound is E / 1024 (a thousandth of the largest
//    move Adam allows) plus 2 u |w| per step for rounding the update itself
//    (u = 2^-24). Measured on an AMD EPYC (Zen 5) under ZEROSHARD_CPU_ISA
//    baseline, avx2 and avx512, the largest difference is 0.95e-4 E: ten
//    times inside (docs/benchmarks.md, "Processors the test suite has run on").
//  - Losses: the mean over N tokens of per-token cross-entropies carries a
//    relative rounding error of at most gamma_N = N u; the two runs may err
//    in opposite directions, so |dL| <= 2 N u |L| (N = 96: 1.1e-5 relative).
struct AdamSteps {
  double lr = 1e-2;
  int steps = 1;
  double beta1 = 0.9, beta2 = 0.999;
};
// lr * sum_{t=1..steps} B_t (Note [Parity bounds]).
double AdamEnvelope(const AdamSteps& adam);
// Parameters of `got` against `want`, element by element, with the bounds of
// Note [Parity bounds]. `zero_gradient(name, i)` marks elements whose true
// gradient is exactly zero: those are checked in each run against `initial`
// (required for them) and not against each other.
using ZeroGradient = std::function<bool(const std::string& name, int64_t index)>;
void ExpectParamsMatch(const ParamValues& got, const ParamValues& want, const AdamSteps& adam,
                       const ZeroGradient& zero_gradient, const ParamValues* initial,
                       const std::string& what);
// Losses within 2 N u relative (N tokens per step; Note [Parity bounds]).
void ExpectLossesMatch(const std::vector<double>& got, const std::vector<double>& want, int64_t tokens,
                       const std::string& what);
// GPT's attention key bias: c_attn.bias[C, 2C).
ZeroGradient GptKeyBias(int64_t n_embd);

struct ShardedRun {
  int world = 1;
  ShardingOptions options;
  // The rank's device memory (unset: a CpuAllocator of its own). A CUDA
  // allocator puts the batches on the GPU too (tests/sharding/cuda_sharded_model_test.cc).
  std::function<Allocator*(int rank)> device;
  Allocator* host = nullptr;  // the offload policy's host memory (nullptr: the default CPU allocator)
  int accum = 1;         // micro-batches per step
  bool no_sync = false;  // accumulate unsharded (no_sync) instead of reduce-scattering each micro-batch
  bool checkpoint = false;
  // The model, shapes only (unset: a TinyConfig GPT, its layers checkpointed
  // with `checkpoint`). It must take TinyData's 32 tokens in sequences of 8;
  // its decoder layers are the units `options.wrap` names.
  std::function<std::shared_ptr<nn::CausalLm>()> model;
};

// The reference run.
Result TrainUnsharded(int steps, int global_batch);
// One rank's part of a sharded run; rank 0 fills *rank0.
absl::Status TrainShardedRank(Communicator& comm, const ShardedRun& run, int steps, int global_batch,
                              Result* rank0);
// All ranks in-process (RunRanks).
Result TrainSharded(const ShardedRun& run, int steps, int global_batch);
// Losses and parameters of a TinyConfig GPT trained `steps` AdamW steps at
// parity.cc's learning rate on `global_batch` sequences per step, against the
// reference (`want`, from TrainUnsharded), with Note [Parity bounds].
void ExpectMatches(const Result& got, const Result& want, const std::string& what);
ShardingOptions BlockOptions(ShardingStrategy s, BackwardPrefetch bp = BackwardPrefetch::kBackwardPre,
                             bool forward_prefetch = false);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_RUNTIME_SHARDING_PARITY_H_
