// The simulator's launch errors, for code that must not see cuda_sim.h's CUDA
// spellings (fake_cudart.cc, compiled against the toolkit's headers).
#ifndef ZEROSHARD_TOOLS_CUDA_SIM_SIM_ERRORS_H_
#define ZEROSHARD_TOOLS_CUDA_SIM_SIM_ERRORS_H_

#include <string>

namespace zs_cuda_sim {

// The error of the last failed launch as a cudaError_t value, cleared by Take
// (cudaGetLastError) and kept by Peek (cudaPeekAtLastError).
int TakeLastLaunchError();
int PeekLastLaunchError();
// The last launch's error message ("" after a good launch).
std::string LastError();

}  // namespace zs_cuda_sim

#endif  // ZEROSHARD_TOOLS_CUDA_SIM_SIM_ERRORS_H_
