// The main job's progress bar on a terminal, and the MFU estimate it shows.
//
//   const PeakFlops peak = MeasurePeakFlops();   // this machine's f32 GEMM rate, every thread
//   ProgressState s{.step = 12, .steps = 300, .loss = 2.31, .lr = 9e-4, .tokens_per_s = 5300,
//                   .ms_per_step = 190, .mfu = 0.031, .peak_bytes = {a, b, c, d}};
//   std::fputs(ProgressLine(s).c_str(), stdout);  // "\r\33[2K[>          ] 13/300 steps, loss 2.3100 ..."
//
// MFU = model FLOP/s / peak FLOP/s. Model FLOPs of a GPT training step, per
// token, as PaLM (appendix B) and nanoGPT count them: 6 N + 12 L T C (N
// parameters, L layers, T context, C width; the recomputation of activation
// checkpointing is not counted). The peak is measured, not taken from a data
// sheet: the best of a dozen 512 x 512 x 512 f32 GEMMs (kernels/cpu/gemm.h) on
// one thread, times the OpenMP threads, i.e. what this machine's matrix
// multiply achieves per core (one thread: on a shared machine the best of
// short single-thread runs is the least disturbed figure). A data-sheet peak
// (cores x FMA units x lanes x 2 x clock) needs the FMA unit count, which CPUID
// does not give (AMD Zen 4 runs AVX-512 at half the per-instruction rate).
#ifndef ZEROSHARD_TRAIN_PROGRESS_H_
#define ZEROSHARD_TRAIN_PROGRESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "zeroshard/autograd/nn/layers.h"

namespace zeroshard {

struct PeakFlops {
  double flops_per_s = 0;
  std::string how;  // "2 threads x 93.9 GFLOP/s (best single-thread f32 GEMM 512^3, avx512) = 187.8 GFLOP/s"
};
PeakFlops MeasurePeakFlops();

// 6 N + 12 L T C.
double GptTrainFlopsPerToken(const nn::GptConfig& config, int64_t num_params);

struct ProgressState {
  int64_t step = 0;   // finished steps - 1
  int64_t steps = 0;  // of the run
  double loss = 0;
  double lr = 0;
  double tokens_per_s = 0;
  double ms_per_step = 0;
  double mfu = 0;     // fraction; < 0: not shown
  std::vector<int64_t> peak_bytes;  // per rank
};

// One terminal line: carriage return, clear line, bar, figures; no newline.
std::string ProgressLine(const ProgressState& s, int bar_width = 20);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_PROGRESS_H_
