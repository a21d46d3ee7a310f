// SwapFile: one rank's file of fixed-size regions under an NVMe path (one
// region per unit), read and written asynchronously through an AioEngine,
// with O_DIRECT where the filesystem allows it and a CRC-32C per region.
//
//   SwapFileOptions o{.dir = "/local_nvme", .tag = "optimizer", .rank = 0};
//   ZS_ASSIGN_OR_RETURN(auto file, SwapFile::Create(o, {bytes_unit0, bytes_unit1}, {"u0", "u1"}, engine));
//   ZS_RETURN_IF_ERROR(file->Write(0, aligned_buffer)->Wait());   // checksum recorded
//   auto t = file->Read(0, aligned_buffer);  ...  ZS_RETURN_IF_ERROR(t->Wait());
//   ZS_RETURN_IF_ERROR(file->Verify(0, aligned_buffer));          // check mode: CRC-32C match
//
// Note [Swap file layout]: region r occupies [offset(r), offset(r) +
// region_bytes(r)), every offset and size a multiple of 4096 (O_DIRECT), in
// region order. The file is preallocated (fallocate) at creation, so a disk
// without room fails then, with the sizes in the message, not in the middle of
// training. Its name is zeroshard-<pid>-<n>-rank<r>-<tag>.swap: the pid lets a
// later run find the files of a process that died without removing them
// (Create removes those: stale files are cleaned on restart, never files of a
// live process), n tells apart two files of one process and rank (tests run
// several models side by side). The destructor removes the file (a clean exit).
//
// O_DIRECT: refused by some filesystems (tmpfs before Linux 6.6, some
// overlayfs, FUSE); the file is then opened buffered and note() says so.
// Buffers must be 4096-aligned either way.
//
// Integrity: a region's CRC-32C is taken from the buffer as it is written
// (check mode) and compared after every read: a file changed underneath gives
// DataLoss naming the region instead of silent garbage. A file truncated
// underneath gives DataLoss in either mode (the read comes up short).
#ifndef ZEROSHARD_RUNTIME_NVME_SWAP_FILE_H_
#define ZEROSHARD_RUNTIME_NVME_SWAP_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/runtime/nvme/aio_engine.h"

namespace zeroshard {

struct SwapFileOptions {
  std::string dir;  // must exist and be writable (the nvme_path)
  std::string tag;  // in the file name: "optimizer", "params"
  int rank = 0;
  bool verify_checksums = true;  // check mode
  bool direct = true;            // try O_DIRECT
  std::shared_ptr<IoFaults> faults;
};

// Where a SwapSpace's regions rest between uses: a SwapFile (below) on a
// disk, or on a virtual device's host side the simulator's VirtualSwapStore
// (virtual_swap_store.h), which moves no bytes and times each transfer on the
// device's "nvme" track. Regions are laid out as Note [Swap file layout] says
// either way, so sizes and offsets agree.
class SwapStore {
 public:
  virtual ~SwapStore() = default;
  // Writes region r from `buffer` (4096-aligned, region_bytes(r) long), which
  // must stay unchanged until the ticket is done.
  virtual std::shared_ptr<IoTicket> Write(int r, const void* buffer) = 0;
  // Reads region r into `buffer`. Fails (in the ticket) when r was never written.
  virtual std::shared_ptr<IoTicket> Read(int r, void* buffer) = 0;
  // After a completed read: whether the bytes are the ones written (OK when unchecked).
  virtual absl::Status Verify(int r, const void* buffer) const = 0;
  // False when the buffers are a virtual device's host memory: addresses
  // with no bytes behind them, which nothing may read, write or pin.
  virtual bool holds_bytes() const { return true; }
  // The clock that I/O waits are measured on, in seconds: the steady clock,
  // or the virtual host clock.
  virtual double Now() const;
  // Where the regions are, for SwapSpace::ToString: "'<path>' (O_DIRECT, io_uring)".
  virtual std::string Describe() const = 0;

  int num_regions() const { return static_cast<int>(offsets_.size()); }
  int64_t region_bytes(int r) const { return sizes_[r]; }
  int64_t max_region_bytes() const;
  int64_t file_bytes() const { return file_bytes_; }
  const std::string& region_name(int r) const { return names_[r]; }
  // The file's path; "" for a virtual store.
  const std::string& path() const { return path_; }
  // What happened at creation worth a log line (O_DIRECT refused, stale files removed); "" if nothing.
  const std::string& note() const { return note_; }

 protected:
  // Sizes rounded up to 4096 and consecutive offsets (Note [Swap file layout]);
  // `what` names the store in errors.
  absl::Status Layout(const std::vector<int64_t>& region_bytes, std::vector<std::string> region_names,
                      const std::string& what);

  std::string path_;
  std::string note_;
  std::vector<int64_t> offsets_, sizes_;
  std::vector<std::string> names_;
  int64_t file_bytes_ = 0;
};

class SwapFile final : public SwapStore {
 public:
  // `region_bytes` are rounded up to 4096; `region_names` name them in errors.
  static absl::StatusOr<std::unique_ptr<SwapFile>> Create(const SwapFileOptions& options,
                                                          const std::vector<int64_t>& region_bytes,
                                                          std::vector<std::string> region_names,
                                                          AioEngine* engine);
  ~SwapFile();  // closes and removes the file
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  // In check mode records the buffer's CRC-32C first.
  std::shared_ptr<IoTicket> Write(int r, const void* buffer) override;
  std::shared_ptr<IoTicket> Read(int r, void* buffer) override;
  // In check mode, the CRC-32C of `buffer` against the one recorded at the
  // last write (DataLoss if they differ); OK otherwise.
  absl::Status Verify(int r, const void* buffer) const override;
  std::string Describe() const override;

  bool direct() const { return direct_; }

  // Removes swap files of processes that no longer run from `dir`; returns
  // how many files and bytes went. Create calls it.
  static std::pair<int, int64_t> RemoveStaleFiles(const std::string& dir);

 private:
  SwapFile() = default;
  std::string What(int r) const;

  int fd_ = -1;
  bool direct_ = false;
  bool verify_ = true;
  std::vector<uint32_t> crc_;
  std::vector<bool> written_;
  AioEngine* engine_ = nullptr;
};

// `bytes` rounded up to a multiple of `alignment` (a power of two).
inline int64_t AlignUp(int64_t bytes, int64_t alignment) { return (bytes + alignment - 1) & ~(alignment - 1); }

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_NVME_SWAP_FILE_H_
