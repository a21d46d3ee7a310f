// Hugging Face model folders: the weights of a (possibly sharded) model as
// `save_pretrained` writes them and `from_pretrained` reads them, read into
// and written from a ShardedModel whose parameters carry the Hugging Face names.
//
//   // Load (collective): each rank reads only the byte ranges of its own shards.
//   ZS_ASSIGN_OR_RETURN(HfLoadResult r, LoadHfWeights("llama-3.2-1b", *sharded));
//   r.bytes_read;                        // this rank's tensor bytes, about total / world
//
//   // Save (collective): gathered one unit at a time, written by rank 0.
//   ZS_RETURN_IF_ERROR(SaveHfWeights("out/hf", *sharded,
//                                    {.dtype = DType::kBF16, .config_json = config.dump(2)}));
//
//   // Look inside a folder without a model.
//   ZS_ASSIGN_OR_RETURN(HfWeights w, HfWeights::Open("out/hf"));
//   for (const std::string& name : w.names()) std::cout << (*w.Entry(name))->DebugString() << "\n";
//   ZS_ASSIGN_OR_RETURN(nn::NamedTensors all, ReadHfStateDict("out/hf"));   // small models only
//
// Note [Hugging Face folder]
// A folder is
//   config.json                          the model's configuration (written verbatim from
//                                        HfSaveOptions::config_json; never read here)
// and either one file
//   model.safetensors                    every tensor
// or an index and the shard files it names
//   model.safetensors.index.json         {"metadata": {"total_size": <bytes of tensor data>},
//                                         "weight_map": {"<tensor name>": "<file>", ...}}
//   model-00001-of-00003.safetensors     shard files (Note [Safetensors layout])
//   ...
// Tensors are stored by their Hugging Face names ("model.embed_tokens.weight",
// "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"), row-major, in
// F32, BF16 or F16; the model being loaded or saved uses exactly those names
// for its parameters. When the word embeddings are tied (Note [Tied
// parameters] in sharding/sharded_model.h), the files hold the tensor once,
// under its first name ("model.embed_tokens.weight"), and "lm_head.weight" is
// absent, as save_pretrained writes it. As from_pretrained does, a folder with
// both model.safetensors and an index is read from model.safetensors.
//
// Note [Hugging Face folder validation]
// HfWeights::Open trusts nothing in the folder. Naming the folder, the file and
// the tensor, it refuses (DataLoss unless said otherwise):
//   - a folder with neither model.safetensors nor the index (NotFound);
//   - an index that is not JSON, not an object, nests deeper than 64 levels,
//     repeats a key in one object (a tensor listed twice), or whose
//     "weight_map" is missing or not an object of strings ("metadata", when
//     present, must be an object; its "total_size" is informative and not
//     checked, as from_pretrained does not check it);
//   - a file name that is not a plain name inside the folder: empty, ".",
//     "..", or holding a '/' (so no "../x" or "/etc/x");
//   - a file the index names that is missing (NotFound) or is not a valid
//     safetensors file (Note [Safetensors validation]);
//   - a tensor the index lists that its file does not hold, and a tensor a
//     shard file holds that the index does not put in that file (a stray copy,
//     or one tensor in two files).
// Only headers are read by Open; tensor bytes are read on demand.
//
// Note [Hugging Face folder shards]
// SaveHfWeights writes the tensors in the model's parameter order
// (Module::NamedParameterSlots, registration order, which is save_pretrained's
// state dict order) and splits them greedily into files: a tensor starts a new
// file when adding it to a non-empty current file would take it above
// max_shard_bytes, so a tensor larger than max_shard_bytes is a file of its
// own (transformers' shard_checkpoint). huggingface_hub's splitter, which newer
// transformers call, also gives an oversized tensor a file of its own but may
// go on filling the file it interrupted, so its files can differ from these
// around such tensors; loaders go by the index either way. Files are filled
// in order, so each holds consecutive tensors. One file is named
// model.safetensors and has no index; N > 1
// files are model-0000i-of-0000N.safetensors (5 digits, i from 1) with
// model.safetensors.index.json, whose total_size is the sum of the tensors'
// bytes in the stored dtype and whose weight_map lists every tensor (keys
// sorted, 2-space indent, as transformers dumps it). Each file's
// `__metadata__` is {"format": "pt"}.
//
// Buffers (module state that is not a parameter: BatchNorm statistics, a
// rotary table) are not part of the folder: SaveHfWeights writes parameters
// only and LoadHfWeights reads parameters only; a folder tensor named as a
// model buffer is an unexpected key. (The Llama model has no buffers.) So are
// the parameters of ignored modules (ShardingOptions::ignored_modules), which
// are in no unit: not written, and unexpected when found, as in full checkpoints.
#ifndef ZEROSHARD_CHECKPOINT_HF_FOLDER_H_
#define ZEROSHARD_CHECKPOINT_HF_FOLDER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/autograd/nn/module.h"
#include "zeroshard/checkpoint/atomic_file.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/sharding/sharded_model.h"

namespace zeroshard {

// The file names of Note [Hugging Face folder].
inline constexpr char kHfConfigFile[] = "config.json";
inline constexpr char kHfSingleFile[] = "model.safetensors";
inline constexpr char kHfIndexFile[] = "model.safetensors.index.json";
// "model-00002-of-00003.safetensors" for i = 2, n = 3 (i counts from 1).
std::string HfShardFileName(int i, int n);

// ---------------------------------------------------------------- reading a folder

// The tensors of a Hugging Face folder: which file holds each, its dtype and
// shape, validated as Note [Hugging Face folder validation] says. Reads use
// pread (SafetensorsFile), one byte range at a time. Movable, not copyable.
class HfWeights {
 public:
  static absl::StatusOr<HfWeights> Open(const std::string& dir);
  HfWeights(HfWeights&&) = default;
  HfWeights& operator=(HfWeights&&) = default;

  const std::string& dir() const { return dir_; }
  // The safetensors files in use, relative to dir(): {"model.safetensors"}, or
  // the files the index names, sorted.
  std::vector<std::string> files() const;
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  bool Contains(const std::string& name) const { return index_.count(name) > 0; }
  // Its dtype and shape (NotFound naming the folder when absent).
  absl::StatusOr<const SafetensorsEntry*> Entry(const std::string& name) const;
  // The file (relative to dir()) that holds `name`.
  absl::StatusOr<std::string> FileOf(const std::string& name) const;

  // Elements [offset, offset + count) of tensor `name` (flattened row-major)
  // into `out` (count elements, any floating dtype, any layout and device),
  // converted as Tensor::CopyFrom converts (round to nearest-even). Reads only
  // those bytes. InvalidArgument for a non-floating tensor or `out`; OutOfRange
  // for a range outside the tensor.
  absl::Status ReadRange(const std::string& name, int64_t offset, int64_t count, const Tensor& out);
  // The whole tensor as a new contiguous f32 CPU tensor of its shape (for small
  // models and tests).
  absl::StatusOr<Tensor> Read(const std::string& name);
  // Tensor bytes (in the stored dtype) read so far through this object.
  int64_t bytes_read() const { return bytes_read_; }

 private:
  struct Located {
    size_t file = 0;                          // index into files_
    const SafetensorsEntry* entry = nullptr;  // owned by *files_[file]
  };
  HfWeights() = default;
  absl::StatusOr<const Located*> Find(const std::string& name) const;

  std::string dir_;
  std::vector<std::string> file_names_;                    // relative to dir_
  std::vector<std::unique_ptr<SafetensorsFile>> files_;   // stable entry pointers across moves
  std::map<std::string, Located> index_;
  int64_t bytes_read_ = 0;
};

// Unsharded convenience for small models and tests: every tensor of the folder
// as an f32 CPU tensor, sorted by name.
absl::StatusOr<nn::NamedTensors> ReadHfStateDict(const std::string& dir);

// ---------------------------------------------------------------- loading into a ShardedModel

struct HfLoadOptions {
  bool strict = true;  // missing or unexpected tensors are errors
  // As SaveOptions::host (checkpoint.h): the ranks' agreement on statuses
  // (host tensors) goes through it; nullptr: the model's world. On GPUs pass
  // the host communicator that bootstrapped the world (the job's `host`).
  Communicator* host = nullptr;
};

struct HfLoadResult {
  std::vector<std::string> missing_keys;     // model parameters the folder lacks (kept at their init)
  std::vector<std::string> unexpected_keys;  // folder tensors the model lacks (not read)
  int64_t bytes_read = 0;                    // tensor bytes this rank read
};

// Collective over the model's world: every rank calls it, and every rank
// returns the same status (the first failing rank's). Each rank reads, for each
// piece of its own shards (FlatParameter::PiecesOfShard), only the byte ranges
// that hold it, so it never reads a tensor it holds no piece of and reads
// about 1 / shard-group-size of the folder. Shards resident on NVMe are read,
// filled and written back unit by unit. On a GPU the shards are device
// memory: each range is read into host memory and copied in (SafetensorsFile
// stages any read whose output is not contiguous host memory of its dtype).
// A tied parameter is found under any of its names; names present together
// must hold equal values; an absent
// lm_head.weight is no missing key when the model ties it. InvalidArgument,
// naming the tensor and both sides, for a shape that differs ("model.layers.0.
// mlp.up_proj.weight: the folder has [64, 32], the model expects [96, 32]") or
// a non-floating dtype; with `strict`, for missing and unexpected tensors
// (all listed). Folder faults as HfWeights::Open.
absl::StatusOr<HfLoadResult> LoadHfWeights(const std::string& dir, ShardedModel& model,
                                           const HfLoadOptions& options = {});

// ---------------------------------------------------------------- saving a ShardedModel

struct HfSaveOptions {
  // save_pretrained's max_shard_size ("5GB"): bytes of tensor data per file;
  // a tensor larger than it gets a file of its own (Note [Hugging Face folder shards]).
  int64_t max_shard_bytes = 5'000'000'000;
  DType dtype = DType::kF32;  // stored dtype: kF32, kBF16 or kF16, rounded to nearest-even
  // Written verbatim as config.json (the caller builds it); must be a JSON
  // object. Empty: no config.json (a weights-only folder).
  std::string config_json;
  bool write_tied_once = true;  // a tied parameter under its first name only (Hugging Face's layout)
  AtomicFileOptions file;       // fsync; fail_after_bytes injects a failure into each file (tests)
  Communicator* host = nullptr;  // as HfLoadOptions::host
};

// Collective over the model's world. The f32 master values are gathered over
// the shard group one run of parameters at a time (the parameters, in the
// model's order, that one unit holds: never more than one unit unsharded at
// once, as full checkpoints; on a GPU gathered in device memory and copied to
// the host), and rank 0 streams them into the files of Note
// [Hugging Face folder shards]. Everything is written into `<dir>.tmp` and
// renamed to `dir` only when complete: a failed save leaves an existing folder
// at `dir` as it was and removes the temporary directory. InvalidArgument for
// a non-floating dtype, max_shard_bytes < 1 or a config_json that is not a
// JSON object.
absl::Status SaveHfWeights(const std::string& dir, ShardedModel& model, const HfSaveOptions& options);

}  // namespace zeroshard

#endif  // ZEROSHARD_CHECKPOINT_HF_FOLDER_H_
