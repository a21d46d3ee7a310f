// Philox4x32-10: the counter-based random number generator behind dropout (and
// any later op that needs random numbers), shared by the CPU kernels and the
// CUDA kernels so both draw the very same bits.
//
//   uint32_t out[4];
//   Philox4x32(PhiloxCounter{3, 0, 0, 0}, PhiloxKeyFromSeed(seed), out);  // 4 words
//   uint32_t w = PhiloxWordAt(seed, /*index=*/13);                         // one word of the stream
//   float u = PhiloxUniform(w);                                            // in [0, 1)
//
// Philox (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11;
// the Random123 library) is a keyed bijection of a 128-bit counter: 10 rounds
// of two 32x32->64-bit multiplies and xors with a 64-bit key bumped by the
// Weyl constants between rounds. It has no state, so any element's number is
// computed directly from (seed, index) in any order, on any thread or device.
// Checked bit for bit against Random123's known-answer vectors in
// tests/kernels/dropout_test.cc.
//
// Note [Philox stream layout]
// The stream of a seed is a sequence of 32-bit words indexed by a 64-bit
// index g = 0, 1, 2, ...:
//   key     = {low 32 bits of seed, high 32 bits of seed}
//   block   = g / 4,   lane = g % 4
//   counter = {low 32 bits of block, high 32 bits of block, 0, 0}
//   word(g) = Philox4x32-10(counter, key)[lane]
// A kernel that draws n numbers starting at stream offset `offset` gives its
// element i (the row-major index into its tensor) word(offset + i). So the
// numbers depend on (seed, offset + i) only: not on the tensor's shape, on how
// a tensor is split into calls (split at element s, the second call passes
// offset + s), on threads, instruction sets or the device. A CUDA thread
// computes one block, i.e. four consecutive words, from one Philox call.
// Counter words 2 and 3 are zero and left for future use (e.g. a subsequence).
//
// Successive calls in one step draw disjoint parts of the stream: the caller
// (normally through PhiloxGenerator below) advances the offset by the call's
// element count rounded up to a multiple of 4, so every call starts at a block
// boundary and no two calls share a word.
//
// Uniforms: PhiloxUniform(w) = (w >> 8) * 2^-24, the top 24 bits of the word as
// a float in [0, 1): exactly representable, 2^24 equally likely values, never 1.
#ifndef ZEROSHARD_KERNELS_MATH_PHILOX_H_
#define ZEROSHARD_KERNELS_MATH_PHILOX_H_

#include <cstdint>

#include "zeroshard/runtime/host_device.h"

namespace zeroshard {

// The Random123 constants of Philox4x32.
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;  // round multipliers
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // key bumps (golden ratio, sqrt(3) - 1)
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

struct PhiloxCounter {
  uint32_t c[4];
};

struct PhiloxKey {
  uint32_t k[2];
};

ZS_HOST_DEVICE inline PhiloxKey PhiloxKeyFromSeed(uint64_t seed) {
  return PhiloxKey{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
}

// The counter of stream block `block` (see Note [Philox stream layout]).
ZS_HOST_DEVICE inline PhiloxCounter PhiloxBlockCounter(uint64_t block) {
  return PhiloxCounter{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}};
}

// One Philox4x32 round on four scalar counter words (no arrays indexed at run
// time, so the CPU vectoriser keeps everything in registers); a 32x32->64-bit
// product gives the high and low halves.
ZS_HOST_DEVICE inline void PhiloxRound(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3,
                                       uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0;
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  c0 = hi1 ^ c1 ^ k0;
  c1 = lo1;
  c2 = hi0 ^ c3 ^ k1;
  c3 = lo0;
}

// Philox4x32-10 on scalars: (c0..c3) become the bijection of the counter under
// the key (k0, k1). Ten explicit rounds, the key bumped before rounds 2..10.
ZS_HOST_DEVICE inline void Philox4x32x10(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3,
                                         uint32_t k0, uint32_t k1) {
  PhiloxRound(c0, c1, c2, c3, k0, k1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
  PhiloxRound(c0, c1, c2, c3, k0 += kPhiloxW0, k1 += kPhiloxW1);
}

// The same on the counter and key structs: out[0..3] = Philox4x32-10(ctr, key).
ZS_HOST_DEVICE inline void Philox4x32(const PhiloxCounter& ctr, const PhiloxKey& key,
                                      uint32_t out[4]) {
  uint32_t c0 = ctr.c[0], c1 = ctr.c[1], c2 = ctr.c[2], c3 = ctr.c[3];
  Philox4x32x10(c0, c1, c2, c3, key.k[0], key.k[1]);
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Word `index` of the stream of `seed` (Note [Philox stream layout]). Computes
// a whole block for one word: fine for references and tests, while kernels
// compute each block once and use its four words.
ZS_HOST_DEVICE inline uint32_t PhiloxWordAt(uint64_t seed, uint64_t index) {
  uint32_t out[4];
  Philox4x32(PhiloxBlockCounter(index >> 2), PhiloxKeyFromSeed(seed), out);
  return out[index & 3u];
}

// A uniform float in [0, 1) from a 32-bit word: (w >> 8) * 2^-24.
ZS_HOST_DEVICE inline float PhiloxUniform(uint32_t w) {
  return static_cast<float>(static_cast<int32_t>(w >> 8)) * 5.9604644775390625e-8f;  // 2^-24
}

// Where one call's random numbers start: the seed and the stream offset of
// its element 0 (Note [Philox stream layout]).
struct PhiloxStream {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The random state a training loop or the autograd layer holds: a seed and
// the next free stream offset. Each call that draws `numel` numbers takes its
// PhiloxStream from Next(numel); saving {seed, offset} saves the state
// (checkpoints), and a backward pass replays a call by keeping its stream.
//
//   PhiloxGenerator gen{.seed = 1234};
//   const PhiloxStream s = gen.Next(x.numel());   // offset 0; gen.offset -> numel rounded up to 4
//   ZS_RETURN_IF_ERROR(Dropout(x, 0.1, s, y));
//   ...                                            // backward replays s:
//   ZS_RETURN_IF_ERROR(DropoutBackward(dy, 0.1, s, dx));
struct PhiloxGenerator {
  uint64_t seed = 0;
  uint64_t offset = 0;

  // The stream for a call drawing `numel` numbers; advances `offset` by numel
  // rounded up to a multiple of 4 (one Philox block).
  PhiloxStream Next(int64_t numel) {
    const PhiloxStream s{seed, offset};
    offset += (static_cast<uint64_t>(numel) + 3u) & ~uint64_t{3};
    return s;
  }
};

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_MATH_PHILOX_H_
