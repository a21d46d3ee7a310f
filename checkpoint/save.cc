// Saving: SaveCheckpoint (collective; returns when the checkpoint is complete
// on disk) and AsyncCheckpointer (snapshot to host memory, write on a thread,
// ranks coordinating through marker files). What is written comes from
// state_dict.cc, how the directory appears complete from checkpoint_dir.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_internal.h"
#include "zeroshard/runtime/crc32c.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using checkpoint_internal::AddFile;
using checkpoint_internal::Agree;
using checkpoint_internal::BaseManifest;
using checkpoint_internal::Buffers;
using checkpoint_internal::DirNames;
using checkpoint_internal::Exists;
using checkpoint_internal::Finalize;
using checkpoint_internal::FullPlan;
using checkpoint_internal::GatherFull;
using checkpoint_internal::kBuffersFile;
using checkpoint_internal::kModelFile;
using checkpoint_internal::kOptimizerFile;
using checkpoint_internal::PlanFull;
using checkpoint_internal::PlanShardFile;
using checkpoint_internal::PrepareTmpDir;
using checkpoint_internal::ReadWholeFile;
using checkpoint_internal::RemoveTree;
using checkpoint_internal::ShardFile;
using checkpoint_internal::ShardFilePlan;
using checkpoint_internal::StreamWriter;
using checkpoint_internal::WriteShardFile;
using nlohmann::json;

namespace {

// Rank 0's buffers.safetensors (the model's buffers are replicated), recorded in the manifest.
absl::Status WriteBuffersFile(const DirNames& d, const SafetensorsTensors& buffers, const AtomicFileOptions& file,
                              json& manifest) {
  const std::string path = d.tmp_dir + "/" + kBuffersFile;
  ZS_RETURN_IF_ERROR(
      WriteSafetensors(path, buffers, {}, {.fsync = file.fsync, .fail_after_bytes = file.fail_after_bytes}));
  ZS_ASSIGN_OR_RETURN(uint32_t crc, Crc32cOfFile(path));
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat of '", path, "'"));
  AddFile(manifest, kBuffersFile, {static_cast<uint64_t>(st.st_size), crc});
  return absl::OkStatus();
}

}  // namespace

// ================================================================ SaveCheckpoint

absl::Status SaveCheckpoint(const std::string& dir, ShardedModel& model, optim::ShardedOptimizer* optimizer,
                            const TrainingState& state, const SaveOptions& o) {
  Communicator& world = o.host != nullptr ? *o.host : model.world();  // host tensors
  const bool lead = world.rank() == 0;
  const DirNames d(dir);
  ZS_RETURN_IF_ERROR(Agree(world, lead ? PrepareTmpDir(d) : absl::OkStatus()));
  json manifest = BaseManifest(o.type, model, optimizer, state, o);
  absl::Status mine;
  if (o.type == StateDictType::kSharded) {
    absl::StatusOr<ShardFilePlan> plan = PlanShardFile(model, optimizer, o, /*snapshot=*/false);
    std::pair<uint64_t, uint32_t> info{0, 0};
    mine = plan.status();
    if (mine.ok() && plan->writes) {
      auto r = WriteShardFile(d, *plan, o.file, &model, optimizer);
      mine = r.status();
      if (r.ok()) info = *r;
    }
    if (mine.ok() && lead && !Buffers(model).empty()) mine = WriteBuffersFile(d, Buffers(model), o.file, manifest);
    if (absl::Status agreed = Agree(world, mine); !agreed.ok()) {
      if (lead) RemoveTree(d.tmp_dir);
      return agreed;
    }
    // Every writer's (bytes, crc) to the lead: [writes, bytes, crc] per rank.
    ZS_ASSIGN_OR_RETURN(Tensor mine_info, Tensor::FromVector(std::vector<int64_t>{
        plan->writes ? 1 : 0, static_cast<int64_t>(info.first), static_cast<int64_t>(info.second),
        model.shard_group().rank()}, {4}));
    ZS_ASSIGN_OR_RETURN(Tensor all_info, Tensor::Empty({4 * world.size()}, DType::kI64));
    ZS_RETURN_IF_ERROR(world.AllGather(mine_info, all_info));
    if (lead) {
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> v, all_info.ToVector<int64_t>());
      for (int r = 0; r < world.size(); ++r) {
        if (v[4 * r] == 0) continue;
        AddFile(manifest, ShardFile(static_cast<int>(v[4 * r + 3])),
                {static_cast<uint64_t>(v[4 * r + 1]), static_cast<uint32_t>(v[4 * r + 2])});
      }
    }
  } else {
    const FullPlan plan = PlanFull(model, optimizer, o);
    std::unique_ptr<StreamWriter> model_w, opt_w;
    if (lead) {
      auto mw = StreamWriter::Open(d.tmp_dir + "/" + kModelFile, plan.model_entries, plan.ModelMetadata(), o.file);
      mine = mw.status();
      if (mine.ok()) model_w = *std::move(mw);
      if (mine.ok() && !plan.optimizer_entries.empty()) {
        auto ow = StreamWriter::Open(d.tmp_dir + "/" + kOptimizerFile, plan.optimizer_entries, {}, o.file);
        mine = ow.status();
        if (mine.ok()) opt_w = *std::move(ow);
      }
    }
    // The gathers are collective: every rank takes part even if the lead failed to open.
    absl::Status gathered = GatherFull(model, optimizer, o, [&](bool model_file, const std::string& name,
                                                                 const Tensor& t) -> absl::Status {
      if (!mine.ok()) return absl::OkStatus();
      mine = (model_file ? model_w : opt_w)->Append(name, t);
      return absl::OkStatus();
    });
    if (mine.ok()) mine = gathered;
    if (lead && mine.ok()) {
      auto r = model_w->Commit();
      mine = r.status();
      if (r.ok()) AddFile(manifest, kModelFile, *r);
      if (mine.ok() && opt_w) {
        auto r2 = opt_w->Commit();
        mine = r2.status();
        if (r2.ok()) AddFile(manifest, kOptimizerFile, *r2);
      }
    }
    model_w.reset();  // an unfinished file's temporary goes before its directory
    opt_w.reset();
    if (absl::Status agreed = Agree(world, mine); !agreed.ok()) {
      if (lead) RemoveTree(d.tmp_dir);
      return agreed;
    }
  }
  absl::Status fin = lead ? Finalize(d, manifest, o.file) : absl::OkStatus();
  if (lead && !fin.ok()) RemoveTree(d.tmp_dir);
  return Agree(world, fin);
}

// ================================================================ async

namespace {

// Tells the lead that this rank's shard file `name` is complete
// ("<name>.done": {"bytes", "crc32c"}) or not ("<name>.failed": the error).
// Returns the rank's own status: `written`'s, or the marker's failure. On a
// full disk the marker's bytes may not fit either: an empty "<name>.failed"
// is made then, which needs an inode and no data block, so the lead never
// waits for a marker that cannot come; the rank reports its error itself
// (AsyncCheckpointer::Wait agrees on it).
absl::Status WriteMarker(const DirNames& d, const std::string& name,
                         const absl::StatusOr<std::pair<uint64_t, uint32_t>>& written) {
  const std::string base = d.tmp_dir + "/" + name;
  const json info = {{"bytes", written.ok() ? written->first : 0},
                     {"crc32c", written.ok() ? written->second : 0},
                     {"error", written.status().ToString()}};
  const absl::Status marked =
      WriteFileAtomically(base + (written.ok() ? ".done" : ".failed"), info.dump(), {.fsync = false});
  if (marked.ok()) return written.status();
  const int fd = ::open((base + ".failed").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  return written.ok() ? marked : written.status();
}

}  // namespace

AsyncCheckpointer::~AsyncCheckpointer() {
  // Not Wait(): that is collective, and a destructor may run on one rank alone
  // (an error unwinding the training loop). The save finishes; nobody hears of it.
  if (thread_.joinable()) thread_.join();
}

absl::Status AsyncCheckpointer::Wait() {
  if (thread_.joinable()) thread_.join();
  if (world_ == nullptr) return status_;  // nothing was ever started
  // The lead's thread saw a peer's ".failed" marker: that peer reports its own
  // error (which names its file and errno), so the lead contributes OK.
  absl::Status agreed = Agree(*world_, status_);
  if (agreed.ok() && peer_failed_) {
    // Cannot happen: a ".failed" marker is written only by a rank whose save failed.
    return absl::InternalError("async checkpoint: a peer marked its shard file failed but reports OK");
  }
  return agreed;
}

absl::Status AsyncCheckpointer::Start(const std::string& dir, ShardedModel& model,
                                      optim::ShardedOptimizer* optimizer, const TrainingState& state,
                                      const SaveOptions& o, double* blocked_seconds) {
  const auto start = std::chrono::steady_clock::now();
  // One save at a time. A failure of the previous save is reported here, once:
  // this save does not start, and the next Start does.
  const absl::Status previous = Wait();
  status_ = absl::OkStatus();
  peer_failed_ = false;
  if (!previous.ok()) return previous;
  Communicator& world = o.host != nullptr ? *o.host : model.world();  // host tensors
  world_ = &world;
  const bool lead = world.rank() == 0;
  const DirNames d(dir);
  ZS_RETURN_IF_ERROR(Agree(world, lead ? PrepareTmpDir(d) : absl::OkStatus()));
  json manifest = BaseManifest(o.type, model, optimizer, state, o);
  const int writers = model.shard_group().size();
  // The snapshot: host copies of everything this rank writes.
  auto plan = std::make_shared<ShardFilePlan>();
  auto full = std::make_shared<std::vector<std::pair<bool, std::pair<std::string, Tensor>>>>();
  FullPlan full_plan;
  SafetensorsTensors buffers;
  absl::Status snapshot;
  if (o.type == StateDictType::kSharded) {
    absl::StatusOr<ShardFilePlan> planned = PlanShardFile(model, optimizer, o, /*snapshot=*/true);
    snapshot = planned.status();
    if (planned.ok()) *plan = *std::move(planned);
    if (snapshot.ok() && lead) {
      for (auto& [n, t] : Buffers(model)) {
        absl::StatusOr<Tensor> c = t.Clone(DefaultCpuAllocator());
        if (!c.ok()) {
          snapshot = c.status();
          break;
        }
        buffers.emplace_back(n, *c);
      }
    }
  } else {
    full_plan = PlanFull(model, optimizer, o);
    snapshot = GatherFull(model, optimizer, o, [&](bool model_file, const std::string& name,
                                                   const Tensor& t) -> absl::Status {
      ZS_ASSIGN_OR_RETURN(Tensor c, t.Clone(DefaultCpuAllocator()));
      full->push_back({model_file, {name, c}});
      return absl::OkStatus();
    });
  }
  // Every rank's snapshot or no save: a rank that started no writer would
  // leave the lead waiting for its marker.
  if (absl::Status agreed = Agree(world, snapshot); !agreed.ok()) {
    if (lead) RemoveTree(d.tmp_dir);
    return agreed;
  }
  if (blocked_seconds != nullptr) {
    *blocked_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const AtomicFileOptions file = o.file;
  const StateDictType type = o.type;
  const int my_shard = plan->writes ? model.shard_group().rank() : -1;
  thread_ = std::thread([this, d, manifest, plan, full, full_plan, buffers, file, type, lead, writers,
                         my_shard]() mutable {
    absl::Status s;            // this rank's own failure
    bool peer_failed = false;  // lead: a peer's shard file failed (that peer reports why)
    if (type == StateDictType::kSharded) {
      if (plan->writes) {
        const absl::StatusOr<std::pair<uint64_t, uint32_t>> written = WriteShardFile(d, *plan, file);
        if (lead) {  // the lead needs no marker of its own
          s = written.status();
          if (written.ok()) AddFile(manifest, plan->name, *written);
        } else {
          s = WriteMarker(d, plan->name, written);
        }
      }
      if (lead && s.ok() && !buffers.empty()) s = WriteBuffersFile(d, buffers, file, manifest);
      if (lead) {
        // Every peer's marker, even after a failure here: the directory is
        // removed only once no rank writes in it any more.
        for (int r = 0; r < writers; ++r) {
          if (r == my_shard) continue;
          const std::string base = d.tmp_dir + "/" + ShardFile(r);
          for (int tries = 0;; ++tries) {
            if (Exists(base + ".failed")) {
              peer_failed = true;
              break;
            }
            if (Exists(base + ".done")) {
              absl::StatusOr<std::string> text = ReadWholeFile(base + ".done");
              const json info = text.ok() ? json::parse(*text, nullptr, /*allow_exceptions=*/false) : json();
              if (info.is_object() && info.contains("bytes") && info.contains("crc32c")) {
                AddFile(manifest, ShardFile(r), {info["bytes"].get<uint64_t>(), info["crc32c"].get<uint32_t>()});
                ::unlink((base + ".done").c_str());
                break;
              }
            }
            if (tries > 600000) {
              if (s.ok()) {
                s = absl::DeadlineExceededError(
                    absl::StrCat("async checkpoint: no marker of ", ShardFile(r), " after 10 minutes"));
              }
              break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }
      }
    } else if (lead) {
      auto mw = StreamWriter::Open(d.tmp_dir + "/" + kModelFile, full_plan.model_entries, full_plan.ModelMetadata(), file);
      s = mw.status();
      std::unique_ptr<StreamWriter> ow;
      if (s.ok() && !full_plan.optimizer_entries.empty()) {
        auto o2 = StreamWriter::Open(d.tmp_dir + "/" + kOptimizerFile, full_plan.optimizer_entries, {}, file);
        s = o2.status();
        if (s.ok()) ow = *std::move(o2);
      }
      for (size_t i = 0; s.ok() && i < full->size(); ++i) {
        const auto& [model_file, nt] = (*full)[i];
        s = (model_file ? *mw : ow)->Append(nt.first, nt.second);
      }
      if (s.ok()) {
        auto r = (*mw)->Commit();
        s = r.status();
        if (r.ok()) AddFile(manifest, kModelFile, *r);
      }
      if (s.ok() && ow) {
        auto r = ow->Commit();
        s = r.status();
        if (r.ok()) AddFile(manifest, kOptimizerFile, *r);
      }
    }
    if (lead) {
      if (s.ok() && !peer_failed) s = Finalize(d, manifest, file);
      if (!s.ok() || peer_failed) RemoveTree(d.tmp_dir);
    }
    status_ = s;
    peer_failed_ = peer_failed;
  });
  return absl::OkStatus();
}

}  // namespace zeroshard
