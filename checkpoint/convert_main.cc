// Turns a sharded checkpoint into a full one offline, without a communicator:
// each parameter (and its optimizer state) is assembled from the byte ranges
// of the shard files, one at a time.
//
//   bazel run //checkpoint:convert -- --from=work/step-000300 --to=work/step-000300-full
//
// The result loads at any world size and into PyTorch (model.safetensors has
// nanoGPT names).
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "zeroshard/checkpoint/checkpoint.h"

ABSL_FLAG(std::string, from, "", "a sharded checkpoint directory");
ABSL_FLAG(std::string, to, "", "the full checkpoint directory to write");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string from = absl::GetFlag(FLAGS_from), to = absl::GetFlag(FLAGS_to);
  if (from.empty() || to.empty()) {
    std::fprintf(stderr, "convert: --from=<sharded checkpoint> and --to=<new directory> are required\n");
    return 2;
  }
  const absl::Status s = zeroshard::ConvertShardedToFull(from, to);
  if (!s.ok()) {
    std::fprintf(stderr, "convert: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote %s\n", to.c_str());
  return 0;
}
