// How a checkpoint directory appears complete or not at all, and which
// complete checkpoints a work dir holds (checkpoint.h: Integrity,
// LatestCheckpoint, KeepLastCheckpoints). Files are written under <dir>.tmp;
// the lead writes checkpoint.json last and renames the directory into place.
// Shared with the other checkpoint files through checkpoint_internal.h.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_internal.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using nlohmann::json;

namespace checkpoint_internal {

// ================================================================ files and names

std::string Quoted(absl::string_view s) { return absl::StrCat("'", s, "'"); }
std::string ShardFile(int shard_rank) { return absl::StrCat("rank_", shard_rank, ".safetensors"); }

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

namespace {

absl::Status MakeDirs(const std::string& path) {
  std::string cur;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty()) {
      if (cur.empty()) cur = "/";
      continue;
    }
    cur = cur.empty() || cur == "/" ? absl::StrCat(cur, part) : absl::StrCat(cur, "/", part);
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("creating directory ", Quoted(cur)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RemoveTree(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    ::unlink(path.c_str());
    return;
  }
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string child = path + "/" + name;
    struct stat st;
    if (::lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      RemoveTree(child);
    } else {
      ::unlink(child.c_str());
    }
  }
  ::closedir(d);
  ::rmdir(path.c_str());
}

absl::Status CheckRegularFile(const std::string& dir, const std::string& name, uint64_t* bytes) {
  const std::string path = dir + "/" + name;
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string what = absl::StrCat("checkpoint ", Quoted(dir), ": file ", Quoted(name));
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(what, " is missing"));
    return ErrnoStatus(err, what);
  }
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    const ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", Quoted(dir), ": file ", Quoted(name), " is a symbolic link (to ",
        n >= 0 ? Quoted(absl::string_view(target, static_cast<size_t>(n))) : std::string("an unreadable target"),
        "); a save writes regular files only, so another file stands in its place (Note [Checkpoint files are "
        "regular files])"));
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    return absl::DataLossError(absl::StrCat("checkpoint ", Quoted(dir), ": file ", Quoted(name), " is ", kind,
                                            ", not a regular file"));
  }
  if (bytes != nullptr) *bytes = static_cast<uint64_t>(st.st_size);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", Quoted(path)));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ================================================================ the directory protocol

absl::Status PrepareTmpDir(const DirNames& d) {
  RemoveTree(d.tmp_dir);  // a stale, incomplete save
  ZS_RETURN_IF_ERROR(MakeDirs(DirectoryOf(d.final_dir)));
  return MakeDirs(d.tmp_dir);
}

absl::Status Finalize(const DirNames& d, const json& manifest, const AtomicFileOptions& file) {
  ZS_RETURN_IF_ERROR(WriteFileAtomically(d.tmp_dir + "/" + kManifest, SealCheckpointManifest(manifest.dump(2)), file));
  return SwapIntoPlace(d, file);
}

absl::Status SwapIntoPlace(const DirNames& d, const AtomicFileOptions& file) {
  if (file.fsync) {
    ZS_RETURN_IF_ERROR(FsyncDirectory(d.tmp_dir));
  }
  std::string old;
  if (Exists(d.final_dir)) {
    old = absl::StrCat(d.final_dir, ".old.", ::getpid());
    RemoveTree(old);
    if (::rename(d.final_dir.c_str(), old.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("moving the previous checkpoint ", Quoted(d.final_dir), " aside"));
    }
  }
  if (::rename(d.tmp_dir.c_str(), d.final_dir.c_str()) != 0) {
    const absl::Status s = ErrnoStatus(errno, absl::StrCat("renaming ", Quoted(d.tmp_dir), " to ", Quoted(d.final_dir)));
    if (!old.empty()) ::rename(old.c_str(), d.final_dir.c_str());
    return s;
  }
  if (file.fsync) {
    ZS_RETURN_IF_ERROR(FsyncDirectory(DirectoryOf(d.final_dir)));
  }
  if (!old.empty()) RemoveTree(old);
  return absl::OkStatus();
}

absl::Status Agree(Communicator& comm, const absl::Status& mine) {
  absl::StatusOr<Tensor> flag = Tensor::Full({1}, mine.ok() ? 0.0 : static_cast<double>(comm.rank() + 1),
                                             DType::kF32, DefaultCpuAllocator());
  if (!flag.ok()) return flag.status();
  // Smallest failing rank + 1, via max of (size - rank) encodings.
  ZS_RETURN_IF_ERROR(flag->Fill(mine.ok() ? 0.0 : static_cast<double>(comm.size() - comm.rank())));
  ZS_RETURN_IF_ERROR(comm.AllReduce(*flag, ReduceOp::kMax));
  ZS_ASSIGN_OR_RETURN(double v, flag->Item());
  if (v == 0) return absl::OkStatus();
  const int failed = comm.size() - static_cast<int>(v);
  // The failing rank's code and message, with its rank in front, to everyone:
  // [code, length], then the message's bytes one per i32 element (there is no
  // byte dtype). The failing rank returns the same status as its peers.
  const std::string text = mine.ok() ? std::string() : absl::StrCat("rank ", comm.rank(), ": ", mine.message());
  ZS_ASSIGN_OR_RETURN(Tensor head, Tensor::FromVector(std::vector<int64_t>{static_cast<int64_t>(mine.code()),
                                                                           static_cast<int64_t>(text.size())},
                                                      {2}, DType::kI64, DefaultCpuAllocator()));
  ZS_RETURN_IF_ERROR(comm.Broadcast(head, failed));
  ZS_ASSIGN_OR_RETURN(std::vector<int64_t> h, head.ToVector<int64_t>());
  std::vector<int32_t> bytes(h[1]);
  for (size_t i = 0; i < text.size() && i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(text[i]);
  if (h[1] > 0) {
    ZS_ASSIGN_OR_RETURN(Tensor body, Tensor::FromVector(bytes, {h[1]}, DType::kI32, DefaultCpuAllocator()));
    ZS_RETURN_IF_ERROR(comm.Broadcast(body, failed));
    ZS_ASSIGN_OR_RETURN(bytes, body.ToVector<int32_t>());
  }
  std::string message(bytes.size(), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) message[i] = static_cast<char>(bytes[i]);
  const absl::StatusCode code = static_cast<absl::StatusCode>(h[0]);
  return absl::Status(code == absl::StatusCode::kOk ? absl::StatusCode::kUnknown : code, message);
}

void AddFile(json& manifest, const std::string& name, std::pair<uint64_t, uint32_t> info) {
  manifest["files"][name] = {{"bytes", info.first}, {"crc32c", info.second}};
}

}  // namespace checkpoint_internal

// ================================================================ work dir

using checkpoint_internal::Exists;
using checkpoint_internal::kManifest;
using checkpoint_internal::Quoted;
using checkpoint_internal::RemoveTree;

namespace {
// (step, dir) of complete checkpoints, oldest first.
std::vector<std::pair<int64_t, std::string>> CompleteCheckpoints(const std::string& work_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = ::opendir(work_dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    int64_t step = 0;
    if (!absl::StartsWith(name, "step-") || !absl::SimpleAtoi(name.substr(5), &step)) continue;
    const std::string path = work_dir + "/" + name;
    if (Exists(path + "/" + kManifest)) out.emplace_back(step, path);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::string CheckpointDir(const std::string& work_dir, int64_t step) {
  return absl::StrFormat("%s/step-%06d", work_dir, step);
}

absl::StatusOr<std::string> LatestCheckpoint(const std::string& work_dir) {
  auto all = CompleteCheckpoints(work_dir);
  if (all.empty()) return absl::NotFoundError(absl::StrCat("no complete checkpoint under ", Quoted(work_dir)));
  return all.back().second;
}

namespace {
// Whether `name` ends in ".<marker>.<pid>" or ".<marker>.<pid>.<suffix>" naming a
// process that no longer exists (kill(pid, 0) fails with ESRCH).
bool OfADeadProcess(const std::string& name, absl::string_view marker) {
  const std::string key = absl::StrCat(".", marker, ".");
  const size_t at = name.rfind(key);
  if (at == std::string::npos) return false;
  std::string rest = name.substr(at + key.size());
  if (const size_t dot = rest.find('.'); dot != std::string::npos) rest = rest.substr(0, dot);
  int pid = 0;
  if (!absl::SimpleAtoi(rest, &pid) || pid <= 0) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}
}  // namespace

absl::StatusOr<std::vector<std::string>> RemoveOrphanedSaves(const std::string& work_dir) {
  std::vector<std::string> removed;
  DIR* d = ::opendir(work_dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return removed;  // nothing saved there yet
    return ErrnoStatus(errno, absl::StrCat("listing ", Quoted(work_dir), " for orphaned saves"));
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const std::string& name : names) {
    const bool stale_tmp_dir = absl::StartsWith(name, "step-") && absl::EndsWith(name, ".tmp");
    if (stale_tmp_dir || OfADeadProcess(name, "old") || OfADeadProcess(name, "tmp")) {
      const std::string path = work_dir + "/" + name;
      RemoveTree(path);
      if (Exists(path)) return absl::InternalError(absl::StrCat("could not remove the orphaned ", Quoted(path)));
      removed.push_back(path);
    }
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

absl::Status KeepLastCheckpoints(const std::string& work_dir, int keep) {
  if (keep <= 0) return absl::OkStatus();
  auto all = CompleteCheckpoints(work_dir);
  for (size_t i = 0; i + keep < all.size(); ++i) RemoveTree(all[i].second);
  return absl::OkStatus();
}

}  // namespace zeroshard
