// cuda_bench in a CPU-only build (make CUDA=0): nothing to measure. It takes
// cuda_bench's arguments (--quick, --json_out=<file>) so that scripts run both
// builds alike, and writes no file: there are no figures.
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  bool json_out = false;
  for (int i = 1; i < argc; ++i) json_out = json_out || std::strncmp(argv[i], "--json_out", 10) == 0;
  std::printf("cuda_bench: zeroshard was built without CUDA (ZEROSHARD_CUDA=0 or no toolkit): "
              "nothing to measure (exit 0%s). See docs/gpu.md.\n",
              json_out ? "; no --json_out file written" : "");
  return 0;
}
