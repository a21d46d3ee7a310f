// Checkpoints of a sharded training run: model, optimizer state and the rest
// of the training state, in two formats, loadable at any world size and
// strategy, written atomically, checksummed, optionally in the background.
//
//   TrainingState state{.step = step, .lr_scheduler = scheduler.StateDict()};
//   ZS_RETURN_IF_ERROR(SaveCheckpoint(work_dir + "/step-000200", *sharded, &opt, state,
//                                     {.type = StateDictType::kSharded}));
//   ...  // later, at any world size, any strategy:
//   ZS_ASSIGN_OR_RETURN(LoadResult r, LoadCheckpoint(dir, *sharded, &opt));
//   r.state.step;   // where to continue
//
// Formats (Note [Checkpoint layout]):
//   full     <dir>/model.safetensors      every parameter and buffer by its nanoGPT-style
//                                         name (a tied weight under both names): PyTorch
//                                         code loads it as is
//            <dir>/optimizer.safetensors  "<param>.exp_avg", "<param>.exp_avg_sq"
//                                         (AdamW/Adam), "<param>.momentum_buffer" (SGD)
//                                         or "<param>.<slot>" per slot of a user's rule
//                                         (optim/shard_rule.h)
//            <dir>/checkpoint.json        format version, training state, layout, checksums,
//                                         the optimizer's name and its slot names
//                                         ("optimizer", "optimizer_slots"; a load into
//                                         another optimizer, or other slots, is refused)
//   sharded  <dir>/rank_<s>.safetensors   shard s of every unit: "<unit>.param" and the
//                                         optimizer state of the shard (one file per shard
//                                         group rank; replicas write nothing)
// Frozen parameters (Note [Frozen parameters] in sharding/sharded_model.h)
// have no optimizer state and none is written (neither "<param>.exp_avg" nor a
// frozen unit's "<unit>.exp_avg"); a load into a parameter that trains reads
// zeros for it, as it would have been.
//            <dir>/buffers.safetensors    module buffers (replicated), written by rank 0
//            <dir>/checkpoint.json        as above, with every unit's flat layout (names,
//                                         shapes, offsets, padding, shard boundaries)
// A full checkpoint is gathered one unit at a time (never the whole model
// unsharded) and written by rank 0; in a sharded one each rank writes only its
// own bytes, in parallel.
//
// Note [Tied parameters in files] (GPT's lm_head.weight is transformer.wte.weight):
// a full model file holds a tied parameter under every name by default, and
// under its first name only with SaveOptions::write_tied_once (Hugging Face's
// layout; safetensors tools refuse shared storage). Either way its
// `__metadata__` has "tied_parameters": a JSON object, alias -> the name the
// values are under, e.g. {"lm_head.weight": "transformer.wte.weight"}; PyTorch
// code restores the alias from it before load_state_dict(strict=True)
// (tools/golden/gpt_golden.py). The converter's full files carry it too.
// Loading (LoadCheckpoint, Module::LoadStateDict for --init_from, the
// converter) finds a tied parameter under any of its names; an alias missing
// because another name is present is not a missing key; names present
// together must hold equal values, else InvalidArgument naming both.
//
// Loading re-shards: every rank reads, for each piece of its new shards, only
// the byte ranges that hold it (safetensors ReadRange), from whichever format
// and whatever world size, strategy and wrap policy saved it. Parameters are
// found by name (after `revise_keys`), never by position.
//
// The code: save.cc, load.cc, state_dict.cc and checkpoint_dir.cc, one question
// each (checkpoint_internal.h lists them). Hugging Face model folders (weights
// only, by Hugging Face names) are in hf_folder.h; docs/checkpoints.md compares
// the three formats.
//
// Integrity: files are written under a temporary directory and the directory
// is renamed into place only when complete (checkpoint.json is written last),
// so a crash mid-save never damages an earlier checkpoint. Every file's
// CRC-32C is in checkpoint.json, and checkpoint.json's own (Note [Manifest
// checksum] in manifest.h), checked on load. Truncated, corrupted, missing,
// replaced (a symbolic link, Note [Checkpoint files are regular files] in
// checkpoint_internal.h) or mismatched files give a Status naming the file
// and the fault, the same on every rank. A full disk gives ResourceExhausted
// naming the file and the rank (Note [Full disk] in atomic_file.h); the
// previous checkpoint stays, and nothing is left behind.
#ifndef ZEROSHARD_CHECKPOINT_CHECKPOINT_H_
#define ZEROSHARD_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/checkpoint/atomic_file.h"
#include "zeroshard/checkpoint/manifest.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/sharding/sharded_model.h"

namespace zeroshard {

struct SaveOptions {
  StateDictType type = StateDictType::kSharded;
  bool save_optimizer = true;
  bool save_param_scheduler = true;  // the LR schedule and loss scaler state
  bool exclude_frozen_parameters = false;
  // Full checkpoints: a tied parameter once, under its first name
  // ("transformer.wte.weight", no "lm_head.weight"), as Hugging Face's
  // save_pretrained writes it; default every name (nanoGPT's state dict).
  // Either way the tie is in the model file's metadata (Note [Tied parameters in files]).
  bool write_tied_once = false;
  AtomicFileOptions file;            // fsync; fail_after_bytes injects a failure (tests)
  // The ranks' agreement (statuses, file sizes and checksums: host tensors)
  // goes through this communicator over the model's ranks; nullptr: the
  // model's world. On GPUs the world takes device tensors only: pass the
  // host communicator that bootstrapped it (the job's `host`).
  Communicator* host = nullptr;
};

struct LoadOptions {
  bool load_optimizer = true;  // false: model only (fine-tuning from a checkpoint)
  bool strict = true;          // missing or unexpected parameters are errors
  // (regex, replacement) applied in order to every name in the checkpoint.
  std::vector<std::pair<std::string, std::string>> revise_keys = {{"^module\\.", ""}};
  bool verify_checksums = true;
  // As SaveOptions::host.
  Communicator* host = nullptr;
};

struct LoadResult {
  TrainingState state;
  StateDictType type = StateDictType::kSharded;
  int saved_world_size = 0;
  std::string saved_strategy;
  std::vector<std::string> missing_keys;     // model parameters the checkpoint lacks
  std::vector<std::string> unexpected_keys;  // checkpoint parameters the model lacks
};

// The metadata key of Note [Tied parameters in files].
inline constexpr absl::string_view kTiedParametersKey = "tied_parameters";
// alias -> first name for every tied parameter of `module` (NamedParameterSlots order).
std::map<std::string, std::string> TiedAliases(nn::Module& module);
// A model file's `__metadata__`: {"format": "pt"} and, when `tied` is not
// empty, "tied_parameters" as JSON text.
std::map<std::string, std::string> ModelFileMetadata(const std::map<std::string, std::string>& tied);
// `state` for a model file: without the aliases in `tied` when write_tied_once.
SafetensorsTensors ModelFileTensors(const nn::NamedTensors& state, const std::map<std::string, std::string>& tied,
                                    bool write_tied_once);

// Collective over the model's world: every rank calls it. Returns when the
// checkpoint is complete on disk. `optimizer` may be null (model only).
absl::Status SaveCheckpoint(const std::string& dir, ShardedModel& model,
                            optim::ShardedOptimizer* optimizer, const TrainingState& state,
                            const SaveOptions& options = {});

// Collective over the model's world. Overwrites the model's shards (and the
// optimizer's state when loaded) with the checkpoint's values.
absl::StatusOr<LoadResult> LoadCheckpoint(const std::string& dir, ShardedModel& model,
                                          optim::ShardedOptimizer* optimizer,
                                          const LoadOptions& options = {});

// Background saving: Start() snapshots this rank's part of the checkpoint
// into host memory (the only time the training loop is blocked) and writes it
// on a thread; the next Start() or Wait() waits for the previous save. Ranks
// coordinate through marker files, not collectives, so training goes on.
//
// Failures (issue 26): a save that fails in the background (a full disk:
// ResourceExhausted, Note [Full disk] in atomic_file.h) leaves the previous
// checkpoint at `dir` as it was and nothing behind (the lead removes
// <dir>.tmp once every rank is done with it). The failure is reported by the
// next Wait() or Start(), the same status on every rank: the first failing
// rank's, "rank <r>: ..." naming the file. That is the next save or the end
// of training in a trainer (train/trainer.cc waits before each save and at
// the end), not the next step: a per-step check would cost a collective per
// step.
class AsyncCheckpointer {
 public:
  AsyncCheckpointer() = default;
  // Waits for the save in flight, but reports nothing (Wait is collective).
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Collective (the snapshot of a full checkpoint gathers). Returns once the
  // snapshot is taken; `blocked_seconds` (optional) receives how long that
  // took. When the previous save failed, returns its status (as Wait) and
  // starts nothing; that failure is then reported, and the next Start saves.
  absl::Status Start(const std::string& dir, ShardedModel& model, optim::ShardedOptimizer* optimizer,
                     const TrainingState& state, const SaveOptions& options,
                     double* blocked_seconds = nullptr);
  // Collective over the last Start's world: waits for the last save and
  // returns its status, agreed by every rank.
  absl::Status Wait();

 private:
  std::thread thread_;
  Communicator* world_ = nullptr;  // the last Start's model's world
  absl::Status status_;            // this rank's own failure
  bool peer_failed_ = false;       // the lead saw a peer's ".failed" marker
};

// Newest complete checkpoint directory ("step-<n>") under `work_dir`, or NotFound.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& work_dir);
// Deletes all but the newest `keep` complete checkpoints under `work_dir`
// (never an incomplete or temporary one).
absl::Status KeepLastCheckpoints(const std::string& work_dir, int keep);
// "<work_dir>/step-000123".
std::string CheckpointDir(const std::string& work_dir, int64_t step);
// What a save killed midway (kill -9, a power cut) leaves in `work_dir`, removed:
// "step-<n>.tmp" directories (a save not yet renamed into place), and
// "<name>.old.<pid>" directories and "<name>.tmp.<pid>.<suffix>" files whose
// process is gone (a checkpoint moved aside for its replacement; an atomic file
// not yet renamed). Never a complete checkpoint, and never anything of a live
// process. Call before this process saves anything there (the job does at start,
// on its lead rank). Returns the removed paths, sorted.
absl::StatusOr<std::vector<std::string>> RemoveOrphanedSaves(const std::string& work_dir);

// Turns a sharded checkpoint into a full one, offline (no communicator): each
// parameter is assembled from the byte ranges of the shard files.
absl::Status ConvertShardedToFull(const std::string& sharded_dir, const std::string& full_dir,
                                  const AtomicFileOptions& file = {});

}  // namespace zeroshard

#endif  // ZEROSHARD_CHECKPOINT_CHECKPOINT_H_
