#include "zeroshard/runtime/nvme/swap_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "zeroshard/runtime/allocator.h"
#include "zeroshard/runtime/crc32c.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

constexpr char kPrefix[] = "zeroshard-";
constexpr char kSuffix[] = ".swap";

std::string Quoted(const std::string& s) { return absl::StrCat("'", s, "'"); }

// The pid in "zeroshard-<pid>-...swap", or -1 for other names.
int64_t PidOfSwapFile(const std::string& name) {
  if (!absl::StartsWith(name, kPrefix) || !absl::EndsWith(name, kSuffix)) return -1;
  std::vector<std::string> parts = absl::StrSplit(name.substr(sizeof(kPrefix) - 1), '-');
  int64_t pid = -1;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0) return -1;
  return pid;
}

std::string FreeSpace(const std::string& dir) {
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) return "unknown free space";
  return absl::StrCat(FormatBytes(static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize)), " free");
}

}  // namespace

std::pair<int, int64_t> SwapFile::RemoveStaleFiles(const std::string& dir) {
  int files = 0;
  int64_t bytes = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return {0, 0};
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const int64_t pid = PidOfSwapFile(name);
    if (pid < 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    const std::string path = dir + "/" + name;
    struct stat st;
    const int64_t size = ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
    if (::unlink(path.c_str()) == 0) {
      ++files;
      bytes += size;
    }
  }
  ::closedir(d);
  return {files, bytes};
}

absl::StatusOr<std::unique_ptr<SwapFile>> SwapFile::Create(const SwapFileOptions& o,
                                                           const std::vector<int64_t>& region_bytes,
                                                           std::vector<std::string> region_names,
                                                           AioEngine* engine) {
  const std::string what = absl::StrCat("NVMe swap file for ", o.tag, " in ", Quoted(o.dir));
  if (o.dir.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": nvme_path is empty"));
  struct stat st;
  if (::stat(o.dir.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(what, ": nvme_path ", Quoted(o.dir),
                                                   " must be an existing directory"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": nvme_path ", Quoted(o.dir), " is not a directory"));
  }
  std::unique_ptr<SwapFile> f(new SwapFile());
  ZS_RETURN_IF_ERROR(f->Layout(region_bytes, std::move(region_names), what));
  f->engine_ = engine;
  f->verify_ = o.verify_checksums;
  f->crc_.assign(region_bytes.size(), 0);
  f->written_.assign(region_bytes.size(), false);

  std::vector<std::string> notes;
  const auto [stale_files, stale_bytes] = RemoveStaleFiles(o.dir);
  if (stale_files > 0) {
    notes.push_back(absl::StrCat("removed ", stale_files, " stale swap file(s) of exited processes (",
                                 FormatBytes(stale_bytes), ")"));
  }
  static std::atomic<int64_t> sequence{0};
  f->path_ = absl::StrCat(o.dir, "/", kPrefix, ::getpid(), "-", sequence++, "-rank", o.rank, "-", o.tag, kSuffix);
  if (o.faults != nullptr && o.faults->create_errno.load() != 0) {
    return absl::ErrnoToStatus(o.faults->create_errno.load(),
                               absl::StrCat(what, ": creating ", Quoted(f->path_), " (injected)"));
  }
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  int fd = -1;
  if (o.direct) {
    const bool refuse = o.faults != nullptr && o.faults->refuse_o_direct.load();
    fd = refuse ? -1 : ::open(f->path_.c_str(), flags | O_DIRECT, 0600);
    const int err = refuse ? EINVAL : errno;
    if (fd >= 0) {
      f->direct_ = true;
    } else if (err == EINVAL || err == EOPNOTSUPP) {
      notes.push_back(absl::StrCat("the filesystem of ", Quoted(o.dir), " refuses O_DIRECT (", std::strerror(err),
                                   "): buffered I/O through the page cache instead"));
      ::unlink(f->path_.c_str());  // a refused O_DIRECT open may still have created it
    } else {
      return absl::ErrnoToStatus(err, absl::StrCat(what, ": creating ", Quoted(f->path_)));
    }
  }
  if (fd < 0) {
    fd = ::open(f->path_.c_str(), flags, 0600);
    if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat(what, ": creating ", Quoted(f->path_)));
  }
  f->fd_ = fd;
  // Reserve the whole file now: a full disk fails here, with the sizes.
  // (An injected write budget is the free space: Note [Swap faults].)
  const int64_t budget = o.faults != nullptr ? o.faults->write_budget.load() : -1;
  const bool injected_full = budget >= 0 && budget < f->file_bytes_;
  if (f->file_bytes_ > 0 && (injected_full || ::fallocate(fd, 0, 0, f->file_bytes_) != 0)) {
    const int err = injected_full ? ENOSPC : errno;
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": the swap file needs ", FormatBytes(f->file_bytes_),
                                                       " but the filesystem has ",
                                                       injected_full ? absl::StrCat(FormatBytes(budget), " free")
                                                                     : FreeSpace(o.dir),
                                                       " (",
                                                       std::strerror(err), ")"));
    }
    if (err != EOPNOTSUPP && err != ENOSYS) {
      return absl::ErrnoToStatus(err, absl::StrCat(what, ": reserving ", FormatBytes(f->file_bytes_)));
    }
    if (::ftruncate(fd, f->file_bytes_) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat(what, ": sizing to ", FormatBytes(f->file_bytes_)));
    }
  }
  f->note_ = absl::StrJoin(notes, "; ");
  return f;
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

absl::Status SwapStore::Layout(const std::vector<int64_t>& region_bytes, std::vector<std::string> region_names,
                               const std::string& what) {
  if (region_names.size() != region_bytes.size()) {
    return absl::InternalError(absl::StrCat(what, ": ", region_names.size(), " names for ", region_bytes.size(),
                                            " regions"));
  }
  names_ = std::move(region_names);
  for (int64_t b : region_bytes) {
    if (b < 0) return absl::InternalError(absl::StrCat(what, ": negative region size ", b));
    offsets_.push_back(file_bytes_);
    sizes_.push_back(AlignUp(b, kDirectIoAlignment));
    file_bytes_ += sizes_.back();
  }
  return absl::OkStatus();
}

int64_t SwapStore::max_region_bytes() const {
  int64_t m = 0;
  for (int64_t s : sizes_) m = std::max(m, s);
  return m;
}

double SwapStore::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string SwapFile::Describe() const {
  return absl::StrFormat("'%s' (%s, %s)", path_, direct_ ? "O_DIRECT" : "buffered", engine_->backend_name());
}

std::string SwapFile::What(int r) const {
  return absl::StrCat("NVMe swap file ", Quoted(path_), " region ", r, " (", names_[r], ")");
}

std::shared_ptr<IoTicket> SwapFile::Write(int r, const void* buffer) {
  if (verify_) crc_[r] = Crc32c(buffer, static_cast<size_t>(sizes_[r]));
  written_[r] = true;
  return engine_->Submit(IoKind::kWrite, fd_, const_cast<void*>(buffer), sizes_[r], offsets_[r], What(r));
}

std::shared_ptr<IoTicket> SwapFile::Read(int r, void* buffer) {
  if (!written_[r]) {
    return IoTicket::Completed(absl::InternalError(absl::StrCat(What(r), ": read before it was ever written")));
  }
  return engine_->Submit(IoKind::kRead, fd_, buffer, sizes_[r], offsets_[r], What(r));
}

absl::Status SwapFile::Verify(int r, const void* buffer) const {
  if (!verify_) return absl::OkStatus();
  const uint32_t got = Crc32c(buffer, static_cast<size_t>(sizes_[r]));
  if (got != crc_[r]) {
    return absl::DataLossError(absl::StrFormat(
        "%s: CRC-32C %08x, expected %08x as written: the file was changed underneath", What(r), got, crc_[r]));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
