// Internal to checkpoint/: what SaveCheckpoint, AsyncCheckpointer,
// LoadCheckpoint and ConvertShardedToFull (checkpoint.h) share. Not for use
// outside this folder. The code, one file per question:
//   checkpoint_dir.cc  how a checkpoint directory appears complete or not at
//                      all (the directory protocol), and which complete ones a
//                      work dir holds (LatestCheckpoint, KeepLastCheckpoints)
//   state_dict.cc      what a checkpoint holds: the manifest, the full state
//                      dict (gathered unit by unit) and the sharded one (this
//                      rank's shard file), tied parameters in model files, and
//                      the writer that streams them into safetensors files
//   save.cc            SaveCheckpoint and AsyncCheckpointer
//   load.cc            reading either format at any world size (re-sharding),
//                      LoadCheckpoint and ConvertShardedToFull
//   hf_folder.cc       Hugging Face model folders (hf_folder.h; its own
//                      library, sharing the directory protocol, Agree, WithUnit
//                      and StreamWriter from here)
#ifndef ZEROSHARD_CHECKPOINT_CHECKPOINT_INTERNAL_H_
#define ZEROSHARD_CHECKPOINT_CHECKPOINT_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/checkpoint/atomic_file.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/safetensors.h"

namespace zeroshard {
namespace checkpoint_internal {

// ================================================================ files and names (checkpoint_dir.cc)

inline constexpr char kManifest[] = "checkpoint.json";
inline constexpr char kModelFile[] = "model.safetensors";
inline constexpr char kOptimizerFile[] = "optimizer.safetensors";
inline constexpr char kBuffersFile[] = "buffers.safetensors";

std::string Quoted(absl::string_view s);
std::string ShardFile(int shard_rank);
bool Exists(const std::string& path);
// rm -rf for the checkpoint's own directories (files and one level of subdirectories).
void RemoveTree(const std::string& path);
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
// Note [Checkpoint files are regular files] (issue 26): a save writes every
// file of a checkpoint itself, as a regular file in the checkpoint's
// directory, so a load takes nothing else in a file's place. A symbolic link
// (to another checkpoint's file, say) is DataLoss naming the file and its
// target, even when the bytes behind it would pass the size and CRC-32C
// checks: the target belongs to another directory's life (retention deletes
// it, a later save to that directory replaces it), and with
// verify_checksums = false, or a file of the same size whose CRC happens to
// match, another step's state would load as this one's. Anything else that
// is not a regular file (a FIFO would block the open forever, a directory)
// is DataLoss too. The directory itself may be reached through a link.
// Hugging Face folders (hf_folder.h) are exempt: its cache links every file
// to a blob. OK with the file's size in *bytes (may be null); NotFound when
// the file is absent.
absl::Status CheckRegularFile(const std::string& dir, const std::string& name, uint64_t* bytes);

// ================================================================ the directory protocol (checkpoint_dir.cc)

// Files go to <dir>.tmp; the lead renames it to <dir> once everything is in.
struct DirNames {
  std::string final_dir, tmp_dir;
  explicit DirNames(const std::string& dir) : final_dir(dir), tmp_dir(dir + ".tmp") {}
};

absl::Status PrepareTmpDir(const DirNames& d);
// Writes the manifest last, then swaps the directory into place.
absl::Status Finalize(const DirNames& d, const nlohmann::json& manifest, const AtomicFileOptions& file);
// Renames the complete <dir>.tmp to <dir> (moving a previous <dir> aside and
// removing it after), with the fsyncs that make it durable. Finalize's last
// step; Hugging Face folders (hf_folder.cc), which have no manifest, end with it.
absl::Status SwapIntoPlace(const DirNames& d, const AtomicFileOptions& file);
// A status every rank agrees on: the first non-OK (in rank order), its code
// and "rank <r>: <its message>" the same on every rank (the failing one
// included), or OK. One all-reduce when every rank is OK, two broadcasts more
// otherwise.
absl::Status Agree(Communicator& comm, const absl::Status& mine);
// Records a written file's {bytes, crc32c} in the manifest.
void AddFile(nlohmann::json& manifest, const std::string& name, std::pair<uint64_t, uint32_t> info);

// ================================================================ streaming safetensors (state_dict.cc)

// Writes a safetensors file whose header is known before its data: the
// tensors are appended in header order, one at a time.
class StreamWriter {
 public:
  using Entry = std::tuple<std::string, DType, Shape>;

  static absl::StatusOr<std::unique_ptr<StreamWriter>> Open(const std::string& path,
                                                            const std::vector<Entry>& entries,
                                                            const std::map<std::string, std::string>& metadata,
                                                            const AtomicFileOptions& options);
  absl::Status Append(const std::string& name, const Tensor& t);
  // Returns {bytes, crc32c}.
  absl::StatusOr<std::pair<uint64_t, uint32_t>> Commit();

 private:
  StreamWriter(AtomicFileWriter file, std::vector<Entry> entries)
      : file_(std::move(file)), entries_(std::move(entries)) {}
  AtomicFileWriter file_;
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

// ================================================================ what a checkpoint holds (state_dict.cc)

// Names of the optimizer state tensors for `opt` ("exp_avg", ...).
std::vector<std::string> OptimizerSlots(const optim::ShardedOptimizer* opt);
// Runs fn with unit i's master shard and (when `slots` is not empty) its
// optimizer state tensors, in `slots` order, resident: one unit at a time,
// so state offloaded to NVMe streams through its swap buffers and is never
// all in memory (Note [NVMe offload]). `write`: fn's changes are kept. A
// frozen unit has no optimizer state (Note [Frozen parameters]): fn gets none.
absl::Status WithUnit(ShardedModel& model, optim::ShardedOptimizer* opt, size_t i,
                      const std::vector<std::string>& slots, bool write,
                      const std::function<absl::Status(const Tensor& shard, const std::vector<Tensor>& states)>& fn);
// checkpoint.json without its "files" (Note [Checkpoint layout]).
nlohmann::json BaseManifest(StateDictType type, ShardedModel& model, optim::ShardedOptimizer* opt,
                            const TrainingState& state, const SaveOptions& o);

// ================================================================ sharded state dict (state_dict.cc)

struct ShardFilePlan {
  bool writes = false;  // this rank writes a shard file (replica rank 0)
  std::string name;
  std::vector<std::string> slots;  // optimizer state saved per unit
  std::vector<StreamWriter::Entry> entries;
  std::vector<Tensor> snapshot;  // host copies in entry order (async saves); empty: read at write time
};

absl::StatusOr<ShardFilePlan> PlanShardFile(ShardedModel& model, optim::ShardedOptimizer* opt,
                                            const SaveOptions& o, bool snapshot);
// Writes the planned shard file from the snapshot or, without one, from the
// model and optimizer (then unit by unit: model and opt are needed).
absl::StatusOr<std::pair<uint64_t, uint32_t>> WriteShardFile(const DirNames& d, const ShardFilePlan& p,
                                                             const AtomicFileOptions& file,
                                                             ShardedModel* model = nullptr,
                                                             optim::ShardedOptimizer* opt = nullptr);
// Buffers are replicated: rank 0 writes them (sharded format) or puts them in the model file (full).
SafetensorsTensors Buffers(ShardedModel& model);

// ================================================================ full state dict (state_dict.cc)

// Every rank runs this (the gathers are collective); `sink` runs on the lead
// with each named tensor, in the order of Entries().
struct FullPlan {
  std::vector<StreamWriter::Entry> model_entries, optimizer_entries;
  std::map<std::string, std::string> tied;  // alias -> name (Note [Tied parameters in files])
  std::map<std::string, std::string> ModelMetadata() const { return ModelFileMetadata(tied); }
};

FullPlan PlanFull(ShardedModel& model, optim::ShardedOptimizer* opt, const SaveOptions& o);
// Gathers unit by unit (f32 masters and optimizer shards: one unit's full
// buffers exist at a time) and hands the lead every tensor of the plan in order.
absl::Status GatherFull(ShardedModel& model, optim::ShardedOptimizer* opt, const SaveOptions& o,
                        const std::function<absl::Status(bool model_file, const std::string&, const Tensor&)>& sink);

}  // namespace checkpoint_internal
}  // namespace zeroshard

#endif  // ZEROSHARD_CHECKPOINT_CHECKPOINT_INTERNAL_H_
