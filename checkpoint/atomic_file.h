// AtomicFileWriter: a file that appears at its path complete or not at all.
//
//   ZS_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Open(path));
//   ZS_RETURN_IF_ERROR(w.Write(header.data(), header.size()));
//   ZS_RETURN_IF_ERROR(w.Write(bytes, n));
//   ZS_RETURN_IF_ERROR(w.Commit());   // fsync, rename over `path`, fsync the directory
//   w.crc32c();                       // the checksum of everything written
//
// Bytes go to `<path>.tmp.<pid>.XXXXXX` in the same directory; Commit renames
// it over `path`, so a crash or a failure at any point leaves whatever was at
// `path` untouched, and a writer destroyed without Commit removes its
// temporary file. `fail_after_bytes` injects a write failure (as a full disk
// or a killed process would) for tests.
//
// Note [Full disk]: a write, fsync or close that fails because the disk or
// the quota is full (ENOSPC, EDQUOT) or because the file may not grow
// (EFBIG: RLIMIT_FSIZE, a filesystem's largest file) is ResourceExhausted,
// naming the temporary file and the byte it failed at; the temporary file is
// removed and `path` keeps what it held. The injected failure takes the same
// path as ENOSPC, so tests of it test the real one.
#ifndef ZEROSHARD_CHECKPOINT_ATOMIC_FILE_H_
#define ZEROSHARD_CHECKPOINT_ATOMIC_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

struct AtomicFileOptions {
  bool fsync = true;
  // Test hook: when >= 0 the disk is "full" once this many bytes have been
  // written: the write fails as ENOSPC does (ResourceExhausted, "No space left
  // on device (injected: fail_after_bytes)", Note [Full disk]); nothing
  // appears at the path.
  int64_t fail_after_bytes = -1;
};

class AtomicFileWriter {
 public:
  // `what` prefixes error messages (e.g. "WriteSafetensors('x')").
  static absl::StatusOr<AtomicFileWriter> Open(const std::string& path, const AtomicFileOptions& options = {},
                                               std::string what = "");
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Write(const void* data, size_t nbytes);
  absl::Status Commit();
  uint64_t bytes_written() const { return written_; }
  uint32_t crc32c() const { return crc_; }
  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter() = default;
  void Abandon();

  std::string path_, tmp_, what_;
  AtomicFileOptions options_;
  int fd_ = -1;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
  bool committed_ = false;
};

// Writes `contents` to `path` atomically.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 const AtomicFileOptions& options = {});
// fsync of a directory (makes renames and unlinks in it durable).
absl::Status FsyncDirectory(const std::string& dir);
// "a/b" for "a/b/c"; "." for "c".
std::string DirectoryOf(const std::string& path);
// An errno as a Status with `what` in front: absl's mapping, except that
// ENOSPC, EDQUOT and EFBIG are all ResourceExhausted (Note [Full disk]).
absl::Status ErrnoStatus(int err, absl::string_view what);

}  // namespace zeroshard

#endif  // ZEROSHARD_CHECKPOINT_ATOMIC_FILE_H_
