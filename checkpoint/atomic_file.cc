#include "zeroshard/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/crc32c.h"

namespace zeroshard {

namespace {
constexpr uint64_t kMaxIoChunk = uint64_t{1} << 30;
std::string Quoted(absl::string_view s) { return absl::StrCat("'", s, "'"); }
// The fail_after_bytes hook's ENOSPC, marked as injected.
absl::Status Injected(const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(s.message(), " (injected: fail_after_bytes)"));
}
}  // namespace

absl::Status ErrnoStatus(int err, absl::string_view what) {
  absl::Status s = absl::ErrnoToStatus(err, what);
  // absl maps EFBIG to OutOfRange; for a writer it is the same fault as a full
  // disk: the bytes did not fit (Note [Full disk]).
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) return absl::ResourceExhaustedError(s.message());
  return s;
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status FsyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening directory ", Quoted(dir)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, absl::StrCat("fsync of directory ", Quoted(dir)));
  return absl::OkStatus();
}

namespace {

// The process's umask, read without changing it (umask(2) can only set it, and
// setting it even briefly would race with other threads creating files): the
// "Umask:" line of /proc/self/status (Linux 4.7+); 022, the common default,
// where that line is missing.
mode_t CurrentUmask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "Umask:")) {
      uint32_t mask = 0;
      const std::string octal(absl::StripAsciiWhitespace(line.substr(6)));
      if (absl::numbers_internal::safe_strtou32_base(octal, &mask, 8)) return static_cast<mode_t>(mask & 0777);
    }
  }
  return 022;
}

}  // namespace

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Open(const std::string& path,
                                                        const AtomicFileOptions& options, std::string what) {
  AtomicFileWriter w;
  w.path_ = path;
  w.options_ = options;
  w.what_ = what.empty() ? absl::StrCat("writing ", Quoted(path)) : std::move(what);
  w.tmp_ = absl::StrCat(path, ".tmp.", ::getpid(), ".XXXXXX");
  w.fd_ = ::mkostemp(w.tmp_.data(), O_CLOEXEC);
  if (w.fd_ < 0) return ErrnoStatus(errno, absl::StrCat(w.what_, ": creating a temporary file"));
  // mkostemp creates 0600; the output gets what open(path, O_CREAT, 0666) would
  // give it, so the user's umask decides who may read checkpoints (issue 26).
  ::fchmod(w.fd_, 0666 & ~CurrentUmask());
  return w;
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), what_(std::move(o.what_)),
      options_(o.options_), fd_(std::exchange(o.fd_, -1)), written_(o.written_), crc_(o.crc_),
      committed_(std::exchange(o.committed_, true)) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& o) noexcept {
  if (this != &o) {
    Abandon();
    path_ = std::move(o.path_);
    tmp_ = std::move(o.tmp_);
    what_ = std::move(o.what_);
    options_ = o.options_;
    fd_ = std::exchange(o.fd_, -1);
    written_ = o.written_;
    crc_ = o.crc_;
    committed_ = std::exchange(o.committed_, true);
  }
  return *this;
}

AtomicFileWriter::~AtomicFileWriter() { Abandon(); }

void AtomicFileWriter::Abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
  committed_ = true;
}

absl::Status AtomicFileWriter::Write(const void* data, size_t nbytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(what_, ": the file is closed"));
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(nbytes, kMaxIoChunk));
    if (options_.fail_after_bytes >= 0) {
      const uint64_t limit = static_cast<uint64_t>(options_.fail_after_bytes);
      const uint64_t budget = limit - std::min(written_, limit);
      if (budget == 0) {
        return Injected(ErrnoStatus(ENOSPC, absl::StrCat(what_, ": writing ", Quoted(tmp_), " at byte ", written_)));
      }
      chunk = static_cast<size_t>(std::min<uint64_t>(chunk, budget));
    }
    const ssize_t put = ::write(fd_, p, chunk);
    if (put < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat(what_, ": writing ", Quoted(tmp_), " at byte ", written_));
    }
    crc_ = Crc32cExtend(crc_, p, static_cast<size_t>(put));
    p += put;
    nbytes -= static_cast<size_t>(put);
    written_ += static_cast<uint64_t>(put);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  absl::Status status;
  if (options_.fail_after_bytes >= 0 && written_ >= static_cast<uint64_t>(options_.fail_after_bytes)) {
    // The whole file fit in the budget exactly: the disk is full at the fsync
    // (as delayed allocation can make it), still before the rename.
    status = Injected(ErrnoStatus(ENOSPC, absl::StrCat(what_, ": fsync of ", Quoted(tmp_), " after ", written_, " bytes")));
  }
  if (status.ok() && options_.fsync && ::fsync(fd_) != 0) {
    status = ErrnoStatus(errno, absl::StrCat(what_, ": fsync of ", Quoted(tmp_)));
  }
  if (::close(fd_) != 0 && status.ok()) status = ErrnoStatus(errno, absl::StrCat(what_, ": closing ", Quoted(tmp_)));
  fd_ = -1;
  if (status.ok() && ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    status = ErrnoStatus(errno, absl::StrCat(what_, ": renaming ", Quoted(tmp_), " to ", Quoted(path_)));
  }
  if (!status.ok()) {
    Abandon();
    return status;
  }
  committed_ = true;
  if (options_.fsync) {
    // Makes the rename durable; the new file is in place even if this fails.
    absl::Status s = FsyncDirectory(DirectoryOf(path_));
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(what_, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 const AtomicFileOptions& options) {
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Open(path, options);
  if (!w.ok()) return w.status();
  absl::Status s = w->Write(contents.data(), contents.size());
  if (!s.ok()) return s;
  return w->Commit();
}

}  // namespace zeroshard
