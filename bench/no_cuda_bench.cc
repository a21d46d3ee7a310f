// cuda_bench in a CPU-only build (make CUDA=0): nothing to measure.
#include <cstdio>

int main() {
  std::printf("cuda_bench: zeroshard was built without CUDA (ZEROSHARD_CUDA=0 or no toolkit): "
              "nothing to measure (exit 0). See docs/gpu.md.\n");
  return 0;
}
