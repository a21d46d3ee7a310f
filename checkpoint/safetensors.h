// Safetensors: read and write a flat dict of named tensors in the safetensors
// format (https://github.com/huggingface/safetensors), the weight format of
// Hugging Face and of this project's full checkpoints.
//
//   // Write (atomically: a temporary file, fsync, rename, fsync of the directory).
//   ZS_RETURN_IF_ERROR(WriteSafetensors("model.safetensors",
//                                       {{"wte.weight", wte}, {"wpe.weight", wpe}},
//                                       {{"step", "100"}}));
//
//   // Read: Open parses and validates the header only; data is read on demand.
//   ZS_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open("model.safetensors"));
//   for (const SafetensorsEntry& e : f.entries()) std::cout << e.DebugString() << "\n";
//   ZS_ASSIGN_OR_RETURN(Tensor wte, f.Read("wte.weight"));
//   ZS_RETURN_IF_ERROR(f.ReadInto("wpe.weight", param));             // any strides/device
//   ZS_RETURN_IF_ERROR(f.ReadRange("wte.weight", 1024, 512, shard)); // elements [1024, 1536)
//
// Note [Safetensors layout]
// A file is
//   bytes [0, 8)       N, the header size, a little-endian uint64;
//   bytes [8, 8 + N)   a UTF-8 JSON object (possibly padded with trailing spaces):
//                        {"__metadata__": {"k": "v", ...},            (optional)
//                         "<name>": {"dtype": "F32", "shape": [2, 3],
//                                    "data_offsets": [begin, end]}, ...}
//   bytes [8 + N, EOF) the data section: each tensor's elements, row-major,
//                      little-endian, at [begin, end) relative to 8 + N.
// Dtypes are spelled as the format spells them; zeroshard reads and writes
// "F32", "BF16", "F16", "I32", "I64". The format's other dtypes ("F64", "U8",
// "BOOL", ...) are refused with Unimplemented, strings it does not define with
// InvalidArgument, both naming the entry.
//
// Note [Safetensors validation]
// The reader trusts nothing in the file. Before Open returns it checks, naming the
// file, the entry and what was expected versus found:
//   - the file holds at least the 8-byte prefix; 2 <= N <= kMaxSafetensorsHeaderSize
//     and 8 + N <= file size (a header may not overrun the file);
//   - the header starts with '{', is well-formed UTF-8 JSON with no duplicate keys
//     at any level, and is an object;
//   - `__metadata__`, if present, is an object whose values are all strings;
//   - every other value is an object with "dtype" (a string), "shape" (an array of
//     non-negative integers) and "data_offsets" (two integers, begin <= end);
//     other keys in an entry object are ignored, as the reference reader does;
//   - the dtype is one of the five above; numel(shape) * itemsize == end - begin
//     (computed without overflow); the product of the dimensions with zeros
//     counted as 1 fits int64 too, since a tensor's strides multiply up to it
//     (a [0, 2^62, 4] entry holds no bytes, but its strides would overflow);
//   - sorted by (begin, end), the entries tile the data section exactly: the first
//     begins at 0, each begins where the previous ends (no overlap, no hole), and
//     the last ends at the end of the file. Holes and trailing bytes are refused,
//     as the format's specification requires (it forbids polyglot files).
// Malformed or truncated files give DataLoss; dtypes the format defines but
// zeroshard does not support give Unimplemented; a missing file or entry gives
// NotFound; bad arguments from the caller give InvalidArgument or OutOfRange.
// No read ever goes outside the bytes the header was validated against; if the
// file shrinks after Open, the short read is reported as DataLoss.
//
// Note [Safetensors writer order]
// The writer is deterministic: the same entries and metadata give the same bytes.
// The header lists `__metadata__` first (its keys sorted, as std::map orders
// them; omitted when empty), then the entries in the caller's order, each as
// {"dtype","shape","data_offsets"} in that key order, compact JSON (no spaces),
// padded with spaces to a multiple of 8 bytes; the data section holds the tensors
// in the same order, back to back. (The Python `safetensors` package instead sorts
// entries by dtype size, then name, so that every tensor is aligned for mmap; this
// reader never maps the file, so the caller's order is kept.)
#ifndef ZEROSHARD_CHECKPOINT_SAFETENSORS_H_
#define ZEROSHARD_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

// The largest header accepted (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderSize = 100'000'000;

// "F32", "BF16", "F16", "I32", "I64".
absl::string_view SafetensorsDTypeName(DType dtype);
// The inverse of SafetensorsDTypeName. Unimplemented for the format's other
// dtypes ("F64", "U8", ...), InvalidArgument for strings it does not define.
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

// ---------------------------------------------------------------- header

// One tensor of a file, as its header describes it.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  // Byte range [data_begin, data_end) relative to the start of the data section
  // (SafetensorsHeader::data_offset in the file).
  uint64_t data_begin = 0;
  uint64_t data_end = 0;

  int64_t numel() const { return NumElements(shape); }
  uint64_t nbytes() const { return data_end - data_begin; }
  // "wte.weight: F32 [32, 16] bytes [0, 2048)".
  std::string DebugString() const;
};

struct SafetensorsHeader {
  uint64_t header_size = 0;  // N: the JSON bytes after the 8-byte prefix, padding included
  uint64_t data_offset = 0;  // 8 + N: where the data section starts in the file
  uint64_t data_size = 0;    // file size - data_offset
  // Sorted by data_begin: the order of the bytes in the file.
  std::vector<SafetensorsEntry> entries;
  // The `__metadata__` block (empty when absent).
  std::map<std::string, std::string> metadata;

  // The entry called `name`, or nullptr.
  const SafetensorsEntry* Find(absl::string_view name) const;

 private:
  friend absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view bytes,
                                                                  uint64_t file_size,
                                                                  absl::string_view source);
  absl::flat_hash_map<std::string, size_t> index_;  // name -> position in entries
};

// Reads N from the first 8 bytes of a file of `file_size` bytes and checks it
// (see Note [Safetensors validation]). `source` names the file in errors.
absl::StatusOr<uint64_t> ParseSafetensorsHeaderSize(absl::string_view prefix, uint64_t file_size,
                                                    absl::string_view source = "<memory>");

// Parses and validates the header of a file of `file_size` bytes whose first
// bytes are `bytes`: at least 8 + N of them (the whole file will do), and no more
// than `file_size`. Reads nothing past 8 + N. This is what Open runs and what a
// fuzz target drives.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view bytes,
                                                         uint64_t file_size,
                                                         absl::string_view source = "<memory>");

// ---------------------------------------------------------------- reader

// An open safetensors file whose header has been validated. Reads use pread on
// the file descriptor, so one SafetensorsFile may be read from several threads.
// Movable, not copyable; closes the file when destroyed.
class SafetensorsFile {
 public:
  // NotFound if the file does not exist; DataLoss if it is not a valid
  // safetensors file (see Note [Safetensors validation]); other errno-based
  // errors for I/O failures. Reads only the first 8 + N bytes.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool Contains(absl::string_view name) const { return header_.Find(name) != nullptr; }
  // NotFound (naming the file and up to a few of its entries) when absent.
  absl::StatusOr<const SafetensorsEntry*> Find(absl::string_view name) const;

  // A new contiguous tensor with the entry's dtype and shape, in memory from
  // `allocator` (nullptr: DefaultCpuAllocator(); a device allocator: read to the
  // host first, then copied).
  absl::StatusOr<Tensor> Read(absl::string_view name, Allocator* allocator = nullptr) const;

  // Reads the entry into `out`, which must have the entry's shape; it may have
  // any strides (no stride-0 dimensions) and live on any device. If out's dtype
  // differs, the values are converted as Tensor::CopyFrom converts (floats round
  // to nearest-even) between two floating dtypes or two integer dtypes;
  // converting between a floating and an integer dtype is refused
  // (InvalidArgument). A contiguous CPU `out` of the entry's dtype is read into
  // directly, with no staging copy.
  absl::Status ReadInto(absl::string_view name, const Tensor& out) const;

  // Reads elements [element_offset, element_offset + count) of the entry, in
  // row-major order, into `out` (out.numel() == count, any shape; dtype and
  // layout rules as ReadInto). Only those bytes are read from the file. A range
  // outside the entry gives OutOfRange.
  absl::Status ReadRange(absl::string_view name, int64_t element_offset, int64_t count,
                         const Tensor& out) const;

 private:
  SafetensorsFile(std::string path, int fd, uint64_t file_size, SafetensorsHeader header);
  absl::Status ReadRangeImpl(const SafetensorsEntry& entry, int64_t element_offset,
                             int64_t count, const Tensor& out) const;
  // pread exactly `nbytes` at file offset `offset` into `dst`.
  absl::Status PreadExact(void* dst, uint64_t nbytes, uint64_t offset,
                          const SafetensorsEntry& entry) const;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  SafetensorsHeader header_;
};

// ---------------------------------------------------------------- writer

// One named tensor to write: any dtype, strides (stride-0 dims included) and
// device; written contiguous.
using SafetensorsTensors = std::vector<std::pair<std::string, Tensor>>;

struct SafetensorsWriteOptions {
  // fsync the file before the rename and the directory after it. Tests may turn
  // it off for speed; a checkpoint never should.
  bool fsync = true;
  // Test hook: when >= 0, the write fails once this many bytes of the file have
  // been written, as a full disk does (ResourceExhausted, "No space left on
  // device (injected: fail_after_bytes)": Note [Full disk] in atomic_file.h).
  // The temporary file is removed and the file at `path` is untouched.
  int64_t fail_after_bytes = -1;
};

// The header bytes (the 8-byte prefix and the padded JSON) for `tensors` and
// `metadata`, laid out as Note [Safetensors writer order] says. InvalidArgument
// for an undefined tensor, an empty or duplicate name, a tensor named
// `__metadata__`, or a name or metadata string that is not valid UTF-8.
absl::StatusOr<std::string> BuildSafetensorsHeader(
    const SafetensorsTensors& tensors, const std::map<std::string, std::string>& metadata = {});

// The whole file in memory (for tests, small files and fuzz seeds).
absl::StatusOr<std::string> SerializeSafetensors(
    const SafetensorsTensors& tensors, const std::map<std::string, std::string>& metadata = {});

// Writes the file at `path` atomically: to `<path>.tmp.<pid>.<n>` in the same
// directory, fsync, rename over `path`, fsync the directory. On any failure the
// temporary file is removed and whatever was at `path` is left as it was.
absl::Status WriteSafetensors(const std::string& path, const SafetensorsTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {},
                              const SafetensorsWriteOptions& options = {});

}  // namespace zeroshard

#endif  // ZEROSHARD_CHECKPOINT_SAFETENSORS_H_
