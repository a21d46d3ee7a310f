#include "zeroshard/collectives/cpu_reduce.h"

#include <emmintrin.h>  // SSE2 streaming stores: baseline x86-64

#include <algorithm>
#include <cstring>
#include <vector>

#include "zeroshard/runtime/check.h"

namespace zeroshard {
namespace {

// Elements per block when the result goes through a small buffer (several
// outputs, or streaming stores): the buffer stays in L1.
constexpr int64_t kBlock = 1024;
// Outputs at least this large in all are written with streaming
// (non-temporal) stores: they would not stay in the 32 MiB L3 anyway, and
// skipping the read-for-ownership of every line is worth ~1.3-1.5x at DRAM
// sizes. (At 8 MiB, streaming measured 3-4x slower than cached stores in
// collectives_bench: the next use still found the data in L3.)
constexpr int64_t kStreamingBytes = int64_t{16} << 20;

// The hot loop is compiled for AVX-512, AVX2 and baseline x86-64 and picked at
// load time: target_clones makes a GCC ifunc whose resolver the dynamic linker
// runs while it relocates the library, before any constructor. Under
// -fsanitize=thread GCC instruments the resolver too (__tsan_func_entry),
// which then runs before the TSan runtime is initialised, and the process dies
// with SIGSEGV before main. TSan builds (--config=tsan) therefore compile the
// baseline loop only: it gives bitwise the same results (-ffp-contract=off,
// .bazelrc), and TSan checks threads, not vector code.
#if defined(__SANITIZE_THREAD__)
#define ZS_REDUCE_CLONES
#else
#define ZS_REDUCE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// out[i] = Store(Finish(in[0][i] op in[1][i] op ... op in[N-1][i])).
// N is a compile-time count (the inner loop unrolls and the outer one
// vectorises); N == 0 takes the count at run time (slower, any number).
// `out` may be exactly one of the inputs: element i is read before written.
template <typename T, ReduceOp kOp, int N>
ZS_REDUCE_CLONES
void ReduceFused(const T* const* in, int num_inputs, T* out, int64_t count) {
  using Tr = ReduceTraits<T>;
  using Acc = typename Tr::Acc;
  if constexpr (N > 0) {
    const T* src[N];
    for (int k = 0; k < N; ++k) src[k] = in[k];
    for (int64_t i = 0; i < count; ++i) {
      Acc acc = Tr::Load(src[0][i]);
      for (int k = 1; k < N; ++k) acc = ReduceCombine<kOp>(acc, Tr::Load(src[k][i]));
      out[i] = Tr::Store(ReduceFinish<kOp>(acc, N));
    }
  } else {
    // Any number of inputs: accumulate a block at a time in an L1 buffer.
    alignas(64) Acc acc[kBlock];
    for (int64_t base = 0; base < count; base += kBlock) {
      const int64_t n = std::min(kBlock, count - base);
      const T* first = in[0] + base;
      for (int64_t i = 0; i < n; ++i) acc[i] = Tr::Load(first[i]);
      for (int k = 1; k < num_inputs; ++k) {
        const T* src = in[k] + base;
        for (int64_t i = 0; i < n; ++i) acc[i] = ReduceCombine<kOp>(acc[i], Tr::Load(src[i]));
      }
      T* dst = out + base;
      for (int64_t i = 0; i < n; ++i) dst[i] = Tr::Store(ReduceFinish<kOp>(acc[i], num_inputs));
    }
  }
}

template <typename T, ReduceOp kOp>
void ReduceFusedAnyN(const T* const* in, int num_inputs, T* out, int64_t count) {
  switch (num_inputs) {
    case 2: return ReduceFused<T, kOp, 2>(in, num_inputs, out, count);
    case 3: return ReduceFused<T, kOp, 3>(in, num_inputs, out, count);
    case 4: return ReduceFused<T, kOp, 4>(in, num_inputs, out, count);
    case 5: return ReduceFused<T, kOp, 5>(in, num_inputs, out, count);
    case 6: return ReduceFused<T, kOp, 6>(in, num_inputs, out, count);
    case 7: return ReduceFused<T, kOp, 7>(in, num_inputs, out, count);
    case 8: return ReduceFused<T, kOp, 8>(in, num_inputs, out, count);
    default: return ReduceFused<T, kOp, 0>(in, num_inputs, out, count);
  }
}

// memcpy with streaming stores for the 16-byte-aligned middle.
void StreamCopy(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
}

template <typename T, ReduceOp kOp>
void ReduceTyped(const void* const* inputs, int num_inputs, void* const* outputs,
                 int num_outputs, int64_t count) {
  const T* const* in = reinterpret_cast<const T* const*>(inputs);
  const bool streaming =
      count * static_cast<int64_t>(sizeof(T)) * num_outputs >= kStreamingBytes;
  if (num_outputs == 1 && !streaming) {
    return ReduceFusedAnyN<T, kOp>(in, num_inputs, static_cast<T*>(outputs[0]), count);
  }
  // Several outputs or streaming stores: reduce a block into L1, then copy
  // it to every output.
  alignas(64) T block[kBlock];
  const T* shifted[64];  // the inputs advanced to the block (heap past 64)
  std::vector<const T*> many;
  const T** ins = shifted;
  if (num_inputs > 64) {
    many.resize(num_inputs);
    ins = many.data();
  }
  for (int64_t base = 0; base < count; base += kBlock) {
    const int64_t n = std::min(kBlock, count - base);
    for (int k = 0; k < num_inputs; ++k) ins[k] = in[k] + base;
    ReduceFusedAnyN<T, kOp>(ins, num_inputs, block, n);
    for (int j = 0; j < num_outputs; ++j) {
      T* dst = static_cast<T*>(outputs[j]) + base;
      if (streaming) {
        StreamCopy(dst, block, n * sizeof(T));
      } else {
        std::memcpy(dst, block, n * sizeof(T));
      }
    }
  }
  if (streaming) _mm_sfence();  // order the streaming stores before what follows
}

template <typename T>
void ReduceDispatchOp(ReduceOp op, const void* const* inputs, int num_inputs,
                      void* const* outputs, int num_outputs, int64_t count) {
  switch (op) {
    case ReduceOp::kSum:
      return ReduceTyped<T, ReduceOp::kSum>(inputs, num_inputs, outputs, num_outputs, count);
    case ReduceOp::kAvg:
      return ReduceTyped<T, ReduceOp::kAvg>(inputs, num_inputs, outputs, num_outputs, count);
    case ReduceOp::kMax:
      return ReduceTyped<T, ReduceOp::kMax>(inputs, num_inputs, outputs, num_outputs, count);
  }
  ZS_CHECK(false, "invalid ReduceOp ", static_cast<int>(op));
}

}  // namespace

void ReduceBuffers(DType dtype, ReduceOp op, absl::Span<const void* const> inputs,
                   absl::Span<void* const> outputs, int64_t count) {
  ZS_CHECK(!inputs.empty(), "ReduceBuffers needs at least one input");
  if (count <= 0 || outputs.empty()) return;
  if (inputs.size() == 1) {  // a copy: avoid the round trip through fp32
    const size_t bytes = static_cast<size_t>(count) * DTypeSize(dtype);
    for (void* out : outputs) {
      if (out != inputs[0]) std::memcpy(out, inputs[0], bytes);
    }
    return;
  }
  DispatchDType(dtype, [&]<typename T>() {
    ReduceDispatchOp<T>(op, inputs.data(), static_cast<int>(inputs.size()), outputs.data(),
                        static_cast<int>(outputs.size()), count);
  });
}

}  // namespace zeroshard
