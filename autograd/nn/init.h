// Parameter initialisation as a pure function of (seed, parameter name,
// element index), so any slice of a parameter can be initialised alone and
// equals the same slice of the whole: each rank of a sharded model
// materialises only its own shard, bit-identical to the unsharded init.
//
//   InitSpec spec = InitSpec::Normal(0.0f, 0.02f);
//   // elements [1000, 1000 + shard.numel()) of "transformer.h.0.attn.c_attn.weight":
//   ZS_RETURN_IF_ERROR(FillInit(spec, seed, "transformer.h.0.attn.c_attn.weight", 1000, shard));
//
// Draws: element i takes two 53-bit uniforms from a counter-based hash of
// (seed, FNV-1a hash of the name, 2i) and (.., 2i + 1) (SplitMix64 finaliser,
// applied twice), and a normal value by Box-Muller (the cosine branch). The
// value is computed in double and rounded once into the tensor's dtype.
#ifndef ZEROSHARD_AUTOGRAD_NN_INIT_H_
#define ZEROSHARD_AUTOGRAD_NN_INIT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard::nn {

struct InitSpec {
  enum class Kind { kZeros, kOnes, kConstant, kNormal, kUniform };
  Kind kind = Kind::kZeros;
  float a = 0.0f;  // constant value, normal mean, or uniform low
  float b = 0.0f;  // normal std, or uniform high

  static InitSpec Zeros() { return {Kind::kZeros, 0, 0}; }
  static InitSpec Ones() { return {Kind::kOnes, 0, 0}; }
  static InitSpec Constant(float v) { return {Kind::kConstant, v, 0}; }
  static InitSpec Normal(float mean, float std) { return {Kind::kNormal, mean, std}; }
  static InitSpec Uniform(float low, float high) { return {Kind::kUniform, low, high}; }
  std::string ToString() const;
};

// 64-bit FNV-1a of the name: the per-parameter key.
uint64_t NameHash(absl::string_view name);
// Uniform in [0, 1) for (seed, key, counter).
double InitUniform(uint64_t seed, uint64_t key, uint64_t counter);

// Fills `out` (contiguous or not; numel n) with elements [offset, offset + n)
// of parameter `name` initialised by `spec` (elements in row-major order).
absl::Status FillInit(const InitSpec& spec, uint64_t seed, absl::string_view name, int64_t offset,
                      const Tensor& out);

}  // namespace zeroshard::nn

#endif  // ZEROSHARD_AUTOGRAD_NN_INIT_H_
