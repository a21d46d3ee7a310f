// libFuzzer target for the checkpoint manifest parser (checkpoint/manifest.h):
// any input either fails with a Status or yields a manifest whose layout holds
// its invariants. Built two ways: under Bazel into
// //tests/checkpoint:manifest_fuzz_test (seed inputs, every build), and by
// `make fuzz` with clang's libFuzzer for a bounded time (tools/fuzz.sh).
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "zeroshard/checkpoint/manifest.h"
#include "zeroshard/runtime/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zeroshard;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<CheckpointManifest> m = ParseCheckpointManifest(text, "fuzz");
  if (!m.ok()) return 0;
  ZS_CHECK(m->world_size >= 1 && m->shard_group_size >= 1, "sizes");
  for (const ManifestUnit& u : m->layout) {
    ZS_CHECK(u.padded_numel == u.shard_numel * u.shard_group_size, "tiling of ", u.name);
    ZS_CHECK(u.numel <= u.padded_numel, "padding of ", u.name);
    for (const ManifestParam& p : u.params) {
      ZS_CHECK(p.offset >= 0 && p.offset + p.numel <= u.numel, "bounds of ", p.name);
      ZS_CHECK(NumElements(p.shape) == p.numel, "numel of ", p.name);
    }
  }
  for (const auto& [name, info] : m->files) ZS_CHECK(!name.empty() && name.find('/') == std::string::npos, name);
  return 0;
}
