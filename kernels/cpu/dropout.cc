#include "zeroshard/kernels/cpu/dropout.h"

#include <omp.h>

#include <algorithm>

#include "zeroshard/kernels/cpu/isa.h"
#include "zeroshard/runtime/strided_loop.h"

namespace zeroshard::cpu {

namespace {

// Elements per chunk: the words of a chunk live on the stack (8 KiB) and stay
// in L1 between the generating loop and the applying loop.
constexpr int64_t kChunk = 2048;

// Runs body(begin, len, words) over [0, n) in chunks, words[i] being the stream
// word of element begin + i; chunks are spread over threads for large n.
template <typename Body>
void ForEachChunk(const PhiloxStream& stream, int64_t n, const Body& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= 2 * kParallelGrain && !omp_in_parallel())
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    const int64_t len = std::min(kChunk, n - begin);
    alignas(64) uint32_t words[kChunk + 3];
    PhiloxWords(stream.seed, stream.offset + static_cast<uint64_t>(begin), len, words);
    body(begin, len, static_cast<const uint32_t*>(words));
  }
}

}  // namespace

void PhiloxWords(uint64_t seed, uint64_t first, int64_t n, uint32_t* words) {
  if (n <= 0) return;
  // Blocks first/4 .. (first + n - 1)/4 into a block-aligned buffer, shifted
  // by first % 4 through a copy when first is not a multiple of 4
  // (PhiloxGenerator keeps offsets aligned, and chunks are multiples of 4).
  const uint64_t block0 = first >> 2;
  const int64_t lead = static_cast<int64_t>(first & 3u);
  const int64_t blocks = (lead + n + 3) >> 2;
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const uint32_t lo = static_cast<uint32_t>(block0), hi = static_cast<uint32_t>(block0 >> 32);
  auto generate = [&](uint32_t* dst) {
    RunWithIsa([&] {
      for (int64_t j = 0; j < blocks; ++j) {
        uint32_t c0 = lo + static_cast<uint32_t>(j);
        uint32_t c1 = hi + (c0 < lo ? 1u : 0u);  // carry into the high word
        uint32_t c2 = 0, c3 = 0;
        Philox4x32x10(c0, c1, c2, c3, k0, k1);
        dst[4 * j + 0] = c0;
        dst[4 * j + 1] = c1;
        dst[4 * j + 2] = c2;
        dst[4 * j + 3] = c3;
      }
    });
  };
  if (lead == 0) {  // writes 4 * blocks <= n + 3 words
    generate(words);
    return;
  }
  if (n > kChunk) {  // unaligned and long: in pieces of kChunk (a multiple of 4)
    for (int64_t done = 0; done < n; done += kChunk) {
      PhiloxWords(seed, first + static_cast<uint64_t>(done), std::min(kChunk, n - done), words + done);
    }
    return;
  }
  alignas(64) uint32_t tmp[kChunk + 8];  // lead + n + 3 <= kChunk + 6 words
  generate(tmp);
  std::copy(tmp + lead, tmp + lead + n, words);
}

void Dropout(const Tensor& x, const DropoutParams& dp, const PhiloxStream& stream,
             const Tensor& out) {
  DispatchFloatDType(x.dtype(), [&]<typename T>() {
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op = static_cast<T*>(out.raw_data());
    ForEachChunk(stream, x.numel(), [&](int64_t begin, int64_t len, const uint32_t* w) {
      const T* a = xp + begin;
      T* o = op + begin;
      RunWithIsa([&] {
        for (int64_t i = 0; i < len; ++i) {
          o[i] = ConvertElement<T>(DropoutApply(ConvertElement<float>(a[i]), w[i], dp));
        }
      });
    });
  });
}

void DropoutMask(const DropoutParams& dp, const PhiloxStream& stream, const Tensor& mask) {
  DispatchFloatDType(mask.dtype(), [&]<typename T>() {
    T* mp = static_cast<T*>(mask.raw_data());
    ForEachChunk(stream, mask.numel(), [&](int64_t begin, int64_t len, const uint32_t* w) {
      T* m = mp + begin;
      RunWithIsa([&] {
        for (int64_t i = 0; i < len; ++i) {
          m[i] = ConvertElement<T>(DropoutKeep(w[i], dp) ? 1.0f : 0.0f);
        }
      });
    });
  });
}

}  // namespace zeroshard::cpu
