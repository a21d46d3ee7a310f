// Saving: SaveCheckpoint (collective; returns when the checkpoint is complete
// on disk) and AsyncCheckpointer (snapshot to host memory, write on a thread,
// ranks coordinating through marker files). What is written comes from
// state_dict.cc, how the directory appears complete from checkpoint_dir.cc.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_internal.h"
#include "runtime/crc32c.h"
#include "runtime/status.h"

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

// ================================================================ SaveCheckpoint

absl::Status SaveCheckpoint(const std::string& dir, ShardedModel& model, optim::ShardedOptimizer* optimizer,
                            const TrainingState& state, const SaveOptions& o) {
  Communicator& world = model.world();
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
    if (mine.ok() && lead && !Buffers(model).empty()) {
      SafetensorsWriteOptions wo{.fsync = o.file.fsync, .fail_after_bytes = o.file.fail_after_bytes};
      mine = WriteSafetensors(d.tmp_dir + "/" + kBuffersFile, Buffers(model), {}, wo);
      if (mine.ok()) {
        ZS_ASSIGN_OR_RETURN(uint32_t crc, Crc32cOfFile(d.tmp_dir + "/" + kBuffersFile));
        struct stat st;
        ::stat((d.tmp_dir + "/" + kBuffersFile).c_str(), &st);
        AddFile(manifest, kBuffersFile, {static_cast<uint64_t>(st.st_size), crc});
      }
    }
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

AsyncCheckpointer::~AsyncCheckpointer() { (void)Wait(); }

absl::Status AsyncCheckpointer::Wait() {
  if (thread_.joinable()) thread_.join();
  return status_;
}

absl::Status AsyncCheckpointer::Start(const std::string& dir, ShardedModel& model,
                                      optim::ShardedOptimizer* optimizer, const TrainingState& state,
                                      const SaveOptions& o, double* blocked_seconds) {
  const auto start = std::chrono::steady_clock::now();
  ZS_RETURN_IF_ERROR(Wait());  // one save at a time
  Communicator& world = model.world();
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
  if (o.type == StateDictType::kSharded) {
    ZS_ASSIGN_OR_RETURN(*plan, PlanShardFile(model, optimizer, o, /*snapshot=*/true));
    if (lead) {
      for (auto& [n, t] : Buffers(model)) {
        ZS_ASSIGN_OR_RETURN(Tensor c, t.Clone(DefaultCpuAllocator()));
        buffers.emplace_back(n, c);
      }
    }
  } else {
    full_plan = PlanFull(model, optimizer, o);
    ZS_RETURN_IF_ERROR(GatherFull(model, optimizer, o, [&](bool model_file, const std::string& name,
                                                           const Tensor& t) -> absl::Status {
      ZS_ASSIGN_OR_RETURN(Tensor c, t.Clone(DefaultCpuAllocator()));
      full->push_back({model_file, {name, c}});
      return absl::OkStatus();
    }));
  }
  if (blocked_seconds != nullptr) {
    *blocked_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const AtomicFileOptions file = o.file;
  const StateDictType type = o.type;
  status_ = absl::OkStatus();
  thread_ = std::thread([this, d, manifest, plan, full, full_plan, buffers, file, type, lead, writers]() mutable {
    auto marker = [&](const std::string& name, const std::string& text) {
      return WriteFileAtomically(d.tmp_dir + "/" + name, text, {.fsync = false});
    };
    absl::Status s;
    if (type == StateDictType::kSharded) {
      if (plan->writes) {
        auto r = WriteShardFile(d, *plan, file);
        s = r.status();
        const std::string done = plan->name + (s.ok() ? ".done" : ".failed");
        json info = {{"bytes", r.ok() ? r->first : 0}, {"crc32c", r.ok() ? r->second : 0}, {"error", s.ToString()}};
        (void)marker(done, info.dump());
      }
      if (lead && s.ok() && !buffers.empty()) {
        s = WriteSafetensors(d.tmp_dir + "/" + kBuffersFile, buffers, {},
                             {.fsync = file.fsync, .fail_after_bytes = file.fail_after_bytes});
        if (s.ok()) {
          absl::StatusOr<uint32_t> crc = Crc32cOfFile(d.tmp_dir + "/" + kBuffersFile);
          struct stat st;
          ::stat((d.tmp_dir + "/" + kBuffersFile).c_str(), &st);
          if (crc.ok()) AddFile(manifest, kBuffersFile, {static_cast<uint64_t>(st.st_size), *crc});
        }
      }
      if (lead) {
        // Wait for every shard file's marker (the other ranks write in parallel).
        for (int r = 0; r < writers && s.ok(); ++r) {
          const std::string base = d.tmp_dir + "/" + ShardFile(r);
          for (int tries = 0;; ++tries) {
            if (Exists(base + ".failed")) {
              s = absl::AbortedError(absl::StrCat("async checkpoint: writing ", ShardFile(r), " failed"));
              break;
            }
            if (Exists(base + ".done")) {
              absl::StatusOr<std::string> text = ReadWholeFile(base + ".done");
              if (text.ok()) {
                const json info = json::parse(*text);
                AddFile(manifest, ShardFile(r), {info["bytes"].get<uint64_t>(), info["crc32c"].get<uint32_t>()});
                ::unlink((base + ".done").c_str());
                break;
              }
            }
            if (tries > 600000) {
              s = absl::DeadlineExceededError(absl::StrCat("async checkpoint: no ", ShardFile(r), " after 10 minutes"));
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
      if (s.ok()) s = Finalize(d, manifest, file);
      if (!s.ok()) RemoveTree(d.tmp_dir);
    }
    status_ = s;
  });
  return absl::OkStatus();
}

}  // namespace zeroshard
