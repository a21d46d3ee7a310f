// The checkpoint manifest (checkpoint.json): what a checkpoint holds besides
// tensors, and the layout that lets any world size re-shard it. Parsed and
// validated here, apart from the rest of checkpoint/, so that a fuzz target
// can drive the parser alone.
//
//   ZS_ASSIGN_OR_RETURN(CheckpointManifest m, ParseCheckpointManifest(text, path));
//   m.layout[0].params[0].name;   // "transformer.h.0.ln_1.weight"
//   std::string file = SealCheckpointManifest(json.dump(2));   // what the writer stores
//
// Note [Manifest checksum] (issue 26): the manifest holds every other file's
// size and CRC-32C, and nothing checked the manifest itself, so one flipped
// bit in it (state.step 1 -> 0, a shard's numel, an optimizer step) loaded as
// if it were true. Since format version 2 its first member is
//   "manifest_crc32c": "<8 hex digits>"
// the CRC-32C of the file's bytes with those 8 digits written as "00000000".
// The parser checks it before anything else it reads (so a flipped bit
// anywhere, the "version" digit included, is DataLoss "corrupted", never a
// wrong value or a misleading "unsupported version"), and a version-2 manifest
// without it is refused (a flip in the key's name would otherwise skip the
// check). Version-1 manifests (written before it) have none and are read as
// before. The checksum is of bytes, not of the parsed value: re-indenting the
// file breaks it, as it would any other file's CRC. Keys are also checked for
// duplicates while parsing (nlohmann keeps the last of two silently).
#ifndef ZEROSHARD_CHECKPOINT_MANIFEST_H_
#define ZEROSHARD_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// 2: the manifest's own checksum (Note [Manifest checksum]). 1 is still read.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr char kManifestChecksumKey[] = "manifest_crc32c";

enum class StateDictType { kFull, kSharded };
absl::string_view StateDictTypeName(StateDictType t);  // "full", "sharded"
absl::StatusOr<StateDictType> ParseStateDictType(absl::string_view name);

// Everything besides tensors that a checkpoint holds.
struct TrainingState {
  int64_t step = 0;                                   // optimizer steps taken; the data position
  std::map<std::string, std::string> lr_scheduler;    // optim::LrScheduler::StateDict()
  std::map<std::string, std::string> loss_scaler;     // optim::DynamicLossScaler::StateDict()
  std::vector<uint64_t> rng_offsets;                  // per world rank: the dropout generator's offset
  std::string config;                                 // the training configuration (JSON text)
  std::map<std::string, std::string> extra;           // free-form
};

// The parsed, validated checkpoint.json (Note [Checkpoint layout]).
struct ManifestParam {
  std::string name;
  std::vector<std::string> aliases;
  Shape shape;
  int64_t offset = 0;  // in the unit's flat buffer
  int64_t numel = 0;
  bool requires_grad = true;
};
struct ManifestUnit {
  std::string name;
  int64_t numel = 0, padded_numel = 0, shard_numel = 0;
  int shard_group_size = 1;
  std::vector<ManifestParam> params;
};
struct CheckpointManifest {
  StateDictType type = StateDictType::kSharded;
  int world_size = 0;
  std::string strategy;
  int shard_group_size = 0;
  std::string optimizer;  // "" when saved without optimizer state
  int64_t optimizer_step = 0;
  TrainingState state;
  std::map<std::string, std::pair<uint64_t, uint32_t>> files;  // name -> (bytes, crc32c)
  std::vector<ManifestUnit> layout;
};
// Parses and validates a manifest: its checksum (Note [Manifest checksum]),
// JSON without duplicate keys, of the expected shape,
// consistent layout (every parameter inside its unit, shards tiling the
// padded buffer). Every integer must be a JSON integer in its field's range,
// and the sums and products the layout is checked with must not overflow
// int64 (an offset near 2^63 or a shard size times count that wraps is
// refused, not wrapped into range). DataLoss naming `source`, the field's path
// ("layout[0].params[2].offset") and the fault otherwise; never throws.
absl::StatusOr<CheckpointManifest> ParseCheckpointManifest(absl::string_view text,
                                                           absl::string_view source = "<memory>");

// `json_text`, a JSON object as nlohmann's dump(2) writes it, with its
// checksum inserted as its first member (Note [Manifest checksum]).
std::string SealCheckpointManifest(absl::string_view json_text);

}  // namespace zeroshard

#endif  // ZEROSHARD_CHECKPOINT_MANIFEST_H_
