// Disk faults (issue 26; docs/reliability.md, "Disk faults"): a full disk met
// for real and every way a checkpoint file can go bad, at 4 in-process ranks.
//
//   - Full disk: a small tmpfs (when this process may mount one: root with
//     CAP_SYS_ADMIN; skipped otherwise, e.g. in CI containers), a file-size
//     limit (RLIMIT_FSIZE, any user: write(2) past it fails with EFBIG) and the
//     injected ENOSPC of one rank (SaveOptions::file.fail_after_bytes), for
//     sharded and full checkpoints, synchronous and asynchronous saves, and the
//     Hugging Face folder. Every rank returns the same ResourceExhausted naming
//     the rank and the file; the previous checkpoint is byte for byte as it was
//     and loads to the same parameters bitwise; nothing is left behind.
//   - Corruption: every file of a sharded and of a full checkpoint, as the
//     directory lists it (a new kind of file is covered without a change
//     here), truncated, with a bit flipped, deleted, replaced by a symbolic
//     link to the same file of another valid checkpoint, and with a key written
//     twice (and replaced by a FIFO). A load at world 4 fails on every rank
//     with the same status naming the file, well within the collective timeout
//     (no rank waits for a peer that has given up, nor blocks in open(2)).
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/hf_folder.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::zeroshard::testing::BlockOptions;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::TinyConfig;
using ::zeroshard::testing::TinyData;

using Params = std::map<std::string, std::vector<float>>;
using Files = std::map<std::string, std::string>;  // name -> bytes

// A hang would end at this collective timeout; every case below must return
// in well under half of it (a load of this tiny model takes milliseconds; 10 s
// leaves a 2-core CI box under load a thousandfold margin).
constexpr absl::Duration kCollectiveTimeout = absl::Seconds(20);
constexpr double kNoHangSeconds = 10;

std::string FreshDir(const std::string& name) {
  const std::string d = absl::StrCat(::testing::TempDir(), "/disk_faults_", ::getpid(), "_", name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

Files ReadFiles(const std::string& dir) {
  Files out;
  for (const std::string& name : Listing(dir)) out[name] = ReadBytes(dir + "/" + name);
  return out;
}

// ================================================================ runs

enum class SaveMode {
  kSync,            // SaveCheckpoint
  kAsyncWait,       // AsyncCheckpointer::Start, then Wait
  kAsyncNextStart,  // Start, one more training step, then the next save's Start
};

std::string ModeName(SaveMode m) {
  return m == SaveMode::kSync ? "sync" : m == SaveMode::kAsyncWait ? "async, Wait" : "async, next Start";
}

struct RunSpec {
  int world = 4;
  int steps = 1;         // AdamW steps from the initial values
  std::string load;      // a checkpoint loaded before training
  std::string save;      // a checkpoint saved after training
  StateDictType type = StateDictType::kSharded;
  SaveMode mode = SaveMode::kSync;
  std::function<void(int rank, SaveOptions&)> tweak;  // per-rank save options
  std::string hf_save;   // a Hugging Face folder saved after training
  LoadOptions load_options;
};

struct RunResult {
  std::vector<absl::Status> statuses;  // per rank
  Params params;                       // rank 0's full parameters at the end (when every rank got there)
  double seconds = 0;
};

RunResult RunWorld(const RunSpec& spec) {
  RunResult out;
  const auto start = std::chrono::steady_clock::now();
  out.statuses = RunRanks(
      spec.world,
      [&](Communicator& comm) -> absl::Status {
        auto gpt = std::make_shared<nn::Gpt>(TinyConfig());
        ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
        o.init_seed = 42;
        ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
        optim::OptimizerOptions oo{.kind = optim::OptimizerKind::kAdamW, .lr = 1e-2, .weight_decay = 0.1};
        ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, oo));
        if (!spec.load.empty()) {
          ZS_RETURN_IF_ERROR(LoadCheckpoint(spec.load, *sharded, &opt, spec.load_options).status());
        }
        const TokenData data = TinyData();
        auto step = [&](int s) -> absl::Status {
          ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = s, .rank = comm.rank(), .world_size = comm.size(),
                                                      .batch_size = 12 / comm.size(), .block_size = 8}));
          ZS_ASSIGN_OR_RETURN(nn::GptOutput y, gpt->Forward(b.inputs, b.targets));
          ZS_RETURN_IF_ERROR(autograd::Backward(y.loss));
          ZS_RETURN_IF_ERROR(opt.Step(1e-2));
          return sharded->ZeroGrad();
        };
        for (int s = 0; s < spec.steps; ++s) ZS_RETURN_IF_ERROR(step(s));
        if (!spec.save.empty()) {
          SaveOptions so{.type = spec.type, .file = {.fsync = false}};
          if (spec.tweak) spec.tweak(comm.rank(), so);
          const TrainingState state{.step = spec.steps};
          if (spec.mode == SaveMode::kSync) {
            ZS_RETURN_IF_ERROR(SaveCheckpoint(spec.save, *sharded, &opt, state, so));
          } else {
            AsyncCheckpointer saver;
            ZS_RETURN_IF_ERROR(saver.Start(spec.save, *sharded, &opt, state, so));
            if (spec.mode == SaveMode::kAsyncNextStart) {
              // Training goes on while the save is written; the next save
              // reports how the previous one ended.
              ZS_RETURN_IF_ERROR(step(spec.steps));
              const TrainingState next{.step = spec.steps + 1};
              ZS_RETURN_IF_ERROR(saver.Start(spec.save + "_next", *sharded, &opt, next, so));
            }
            ZS_RETURN_IF_ERROR(saver.Wait());
          }
        }
        if (!spec.hf_save.empty()) {
          HfSaveOptions ho{.file = {.fsync = false}};
          if (spec.tweak) {
            SaveOptions so;
            spec.tweak(comm.rank(), so);
            ho.file = so.file;
          }
          ZS_RETURN_IF_ERROR(SaveHfWeights(spec.hf_save, *sharded, ho));
        }
        return sharded->SummonFullParams([&]() -> absl::Status {
          if (comm.rank() != 0) return absl::OkStatus();
          for (auto& [n, v] : gpt->NamedParameters()) {
            ZS_ASSIGN_OR_RETURN(out.params[n], v.value().ToVector<float>());
          }
          return absl::OkStatus();
        });
      },
      LocalOptions{.comm = {.timeout = kCollectiveTimeout}});
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

void ExpectAllOk(const RunResult& r) {
  for (size_t i = 0; i < r.statuses.size(); ++i) EXPECT_TRUE(r.statuses[i].ok()) << "rank " << i << ": " << r.statuses[i];
}

// Every rank failed with the same status (Agree), matching `code` and `message`.
void ExpectAgreedFailure(const RunResult& r, absl::StatusCode code, const ::testing::Matcher<std::string>& message) {
  ASSERT_FALSE(r.statuses.empty());
  for (size_t i = 0; i < r.statuses.size(); ++i) {
    EXPECT_THAT(r.statuses[i], StatusIs(code, message)) << "rank " << i;
    EXPECT_EQ(r.statuses[i], r.statuses[0]) << "rank " << i << " disagrees with rank 0";
  }
}

// ================================================================ full disk

// RLIMIT_FSIZE for as long as it lives. The limit is the process's: it holds
// for every thread (the rank threads and the async savers' writers, as wanted)
// and for every file written past `bytes`, the test's own output included
// (it applies to file offsets, and a test log is a file). So it is armed only
// around the run of the save, which writes nothing but the checkpoint, and
// nothing is printed meanwhile: statuses are checked after. SIGXFSZ, which
// would kill the process at the first such write, is ignored meanwhile, so
// write(2) fails with EFBIG instead. Both are restored.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &old_), 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    EXPECT_EQ(::sigaction(SIGXFSZ, &ignore, &old_action_), 0);
    rlimit lower = old_;
    lower.rlim_cur = std::min<rlim_t>(bytes, old_.rlim_max);  // lowering needs no privilege
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &lower), 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::sigaction(SIGXFSZ, &old_action_, nullptr);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  struct sigaction old_action_ {};
};

// Every tensor file of the tiny GPT's checkpoints at world 4 is larger than
// this (a rank file holds ~1.8k f32 values x 3 slots, ~22 KB; the full model
// file ~30 KB) and every marker file of an async save smaller (a few hundred
// bytes), so the limit fails the first tensor file each writer writes.
constexpr rlim_t kFileSizeLimit = 4096;

// One full-disk case: `parent`/ckpt is saved at step 1 without a fault; then,
// between fill() and unfill(), a save of step 2 to the same directory fails.
void ExpectFullDiskKeepsThePreviousCheckpoint(const std::string& parent, StateDictType type, SaveMode mode,
                                              const std::function<void()>& fill,
                                              const std::function<void()>& unfill,
                                              const std::function<void(int, SaveOptions&)>& tweak,
                                              const ::testing::Matcher<std::string>& message) {
  SCOPED_TRACE(absl::StrCat(StateDictTypeName(type), ", ", ModeName(mode)));
  const std::string dir = parent + "/ckpt";
  const RunResult first = RunWorld({.steps = 1, .save = dir, .type = type});
  ExpectAllOk(first);
  ASSERT_FALSE(first.params.empty());
  const Files before = ReadFiles(dir);
  fill();
  const RunResult failed = RunWorld({.steps = 2, .save = dir, .type = type, .mode = mode, .tweak = tweak});
  unfill();
  ExpectAgreedFailure(failed, absl::StatusCode::kResourceExhausted, message);
  EXPECT_LT(failed.seconds, kNoHangSeconds);
  // Nothing left behind: no ckpt.tmp (nor a temporary file in it), no
  // ckpt.old.<pid>, no ckpt_next (the failure stopped the next async save).
  EXPECT_EQ(Listing(parent), std::vector<std::string>{"ckpt"});
  EXPECT_EQ(ReadFiles(dir), before) << "the previous checkpoint changed";
  const RunResult loaded = RunWorld({.steps = 0, .load = dir});
  ExpectAllOk(loaded);
  EXPECT_EQ(loaded.params, first.params) << "the previous checkpoint does not load to the same parameters";
}

const SaveMode kModes[] = {SaveMode::kSync, SaveMode::kAsyncWait, SaveMode::kAsyncNextStart};
const StateDictType kTypes[] = {StateDictType::kSharded, StateDictType::kFull};

// The first failing rank and its file: rank 0's shard file, or a file of the
// full checkpoint (both are opened, their headers written, before any data).
::testing::Matcher<std::string> NamesRankAndFile(StateDictType type, absl::string_view errno_text) {
  return AllOf(HasSubstr("rank 0: "),
               ContainsRegex(type == StateDictType::kSharded ? "/ckpt\\.tmp/rank_0\\.safetensors"
                                                             : "/ckpt\\.tmp/(model|optimizer)\\.safetensors"),
               HasSubstr(std::string(errno_text)));
}

TEST(FullDisk, FileSizeLimitIsResourceExhaustedOnEveryRankAndKeepsThePreviousCheckpoint) {
  for (StateDictType type : kTypes) {
    for (SaveMode mode : kModes) {
      std::optional<FileSizeLimit> limit;
      ExpectFullDiskKeepsThePreviousCheckpoint(
          FreshDir(absl::StrCat("fsize_", StateDictTypeName(type), static_cast<int>(mode))), type, mode,
          [&] { limit.emplace(kFileSizeLimit); }, [&] { limit.reset(); }, nullptr,
          NamesRankAndFile(type, "File too large"));
    }
  }
}

TEST(FullDisk, OneRanksFullDiskIsNamedOnEveryRank) {
  // Only rank 2's disk fills (the injected ENOSPC takes the real ENOSPC's path,
  // Note [Full disk] in checkpoint/atomic_file.h): ranks 0, 1 and 3 write their
  // files, and still every rank returns rank 2's error.
  for (SaveMode mode : kModes) {
    ExpectFullDiskKeepsThePreviousCheckpoint(
        FreshDir(absl::StrCat("rank2_", static_cast<int>(mode))), StateDictType::kSharded, mode, [] {}, [] {},
        [](int rank, SaveOptions& so) {
          if (rank == 2) so.file.fail_after_bytes = 1000;
        },
        AllOf(HasSubstr("rank 2: "), HasSubstr("/ckpt.tmp/rank_2.safetensors"),
              HasSubstr("No space left on device (injected: fail_after_bytes)")));
  }
}

// A tmpfs of `size` at `dir` for as long as it lives (when mount(2) is allowed).
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    mounted_ = ::mount("zeroshard-test", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                       absl::StrCat("size=", size, ",mode=0755").c_str()) == 0;
    error_ = mounted_ ? 0 : errno;
  }
  ~Tmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  int error() const { return error_; }

 private:
  std::string dir_;
  bool mounted_ = false;
  int error_ = 0;
};

TEST(FullDisk, ARealFullFilesystemIsResourceExhaustedOnEveryRankAndKeepsThePreviousCheckpoint) {
  const std::string parent = FreshDir("tmpfs");
  Tmpfs tmpfs(parent, "1m");
  if (!tmpfs.mounted()) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(tmpfs.error())
                 << "; needs root with CAP_SYS_ADMIN): the file-size limit and injected cases stand in";
  }
  const std::string filler = parent + "/filler";
  for (StateDictType type : kTypes) {
    for (SaveMode mode : kModes) {
      fs::remove_all(parent + "/ckpt");
      // Leaves free half the bytes of the checkpoint already there: no save of
      // the same model fits, and some ranks' files do (the others fail midway).
      auto fill = [&] {
        uint64_t checkpoint_bytes = 0;
        for (const auto& [name, bytes] : ReadFiles(parent + "/ckpt")) checkpoint_bytes += bytes.size();
        struct statvfs vfs;
        ASSERT_EQ(::statvfs(parent.c_str(), &vfs), 0);
        const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
        const uint64_t keep = checkpoint_bytes / 2;
        ASSERT_GT(free_bytes, keep);
        const int fd = ::open(filler.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        ASSERT_GE(fd, 0);
        EXPECT_EQ(::posix_fallocate(fd, 0, static_cast<off_t>(free_bytes - keep)), 0);
        ::close(fd);
      };
      auto unfill = [&] { ::unlink(filler.c_str()); };
      // Which rank fails first depends on the race for the last free pages.
      ExpectFullDiskKeepsThePreviousCheckpoint(
          parent, type, mode, fill, unfill, nullptr,
          AllOf(ContainsRegex("^rank [0-3]: "),
                ContainsRegex(type == StateDictType::kSharded ? "/ckpt\\.tmp/rank_[0-3]\\.safetensors"
                                                              : "/ckpt\\.tmp/(model|optimizer)\\.safetensors"),
                HasSubstr("No space left on device")));
    }
  }
}

TEST(FullDisk, HuggingFaceSaveKeepsThePreviousFolder) {
  const std::string parent = FreshDir("hf");
  const std::string dir = parent + "/hf";
  const RunResult first = RunWorld({.steps = 1, .hf_save = dir});
  ExpectAllOk(first);
  const Files before = ReadFiles(dir);
  RunResult failed;
  {
    FileSizeLimit limit(kFileSizeLimit);
    failed = RunWorld({.steps = 2, .hf_save = dir});
  }
  ExpectAgreedFailure(failed, absl::StatusCode::kResourceExhausted,
                      AllOf(HasSubstr("rank 0: "), HasSubstr("/hf.tmp/model.safetensors"), HasSubstr("File too large")));
  EXPECT_EQ(Listing(parent), std::vector<std::string>{"hf"});
  EXPECT_EQ(ReadFiles(dir), before);
}

// ================================================================ corruption

// Flips bit `bit` of byte `at`.
void FlipBit(const std::string& path, size_t at, int bit) {
  std::string bytes = ReadBytes(path);
  ASSERT_LT(at, bytes.size()) << path;
  bytes[at] = static_cast<char>(bytes[at] ^ (1 << bit));
  WriteBytes(path, bytes);
}

// A JSON object's text with its last member written again at its start (for
// the manifest: "world_size", which nlohmann would have read from the last of
// the two, silently).
std::string DuplicateLastKey(const std::string& text) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  auto last = j.begin();
  for (auto it = j.begin(); it != j.end(); ++it) last = it;
  const size_t brace = text.find('{');
  return absl::StrCat(text.substr(0, brace + 1), nlohmann::json(last.key()).dump(), ": ", last.value().dump(), ",",
                      text.substr(brace + 1));
}

// A safetensors file whose header names one entry twice: a later entry renamed
// to an earlier one of the same length when there is one (the file keeps its
// size, so only its CRC-32C and the parser can tell), else the first entry
// written again (the header and the file grow).
std::string DuplicateSafetensorsKey(const std::string& bytes) {
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  std::string header = bytes.substr(8, n);
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(header);
  std::vector<std::string> names;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  for (size_t a = 0; a < names.size(); ++a) {
    for (size_t b = a + 1; b < names.size(); ++b) {
      if (names[a].size() != names[b].size()) continue;
      const std::string quoted = nlohmann::json(names[b]).dump();
      const size_t at = header.find(quoted + ":");
      if (at == std::string::npos) continue;
      header.replace(at, quoted.size(), nlohmann::json(names[a]).dump());
      return bytes.substr(0, 8) + header + bytes.substr(8 + n);
    }
  }
  std::string grown = DuplicateLastKey(header);
  const uint64_t m = grown.size();
  std::string prefix(8, '\0');
  std::memcpy(prefix.data(), &m, 8);
  return prefix + grown + bytes.substr(8 + n);
}

enum class Damage { kTruncate, kBitFlip, kDelete, kSymlink, kDuplicateKey, kFifo };

struct DamageCase {
  Damage damage;
  const char* name;
};
const DamageCase kDamages[] = {{Damage::kTruncate, "truncated to half"},
                               {Damage::kBitFlip, "one bit flipped"},
                               {Damage::kDelete, "deleted"},
                               {Damage::kSymlink, "a symbolic link to another valid checkpoint's file"},
                               {Damage::kDuplicateKey, "a key written twice"},
                               // Not in the list: a FIFO blocks open(2) until a writer comes.
                               {Damage::kFifo, "replaced by a FIFO"}};

bool IsJson(const std::string& name) { return absl::EndsWith(name, ".json"); }

// Damages `dir`/`name`; `other` is another valid checkpoint of the same model
// (another step), with a file of that name.
void Apply(Damage damage, const std::string& dir, const std::string& name, const std::string& other) {
  const std::string path = dir + "/" + name;
  const std::string bytes = ReadBytes(path);
  switch (damage) {
    case Damage::kTruncate:
      ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(bytes.size() / 2)), 0);
      break;
    case Damage::kBitFlip: {
      // In the manifest, state.step 1 -> 0 (once loaded without complaint: the
      // manifest had no checksum of its own); in a tensor file, a bit of the data.
      size_t at = bytes.size() / 2;
      if (IsJson(name)) {
        const size_t key = bytes.find("\"step\": ");
        ASSERT_NE(key, std::string::npos);
        at = key + 8;
        ASSERT_EQ(bytes[at], '1');
      }
      FlipBit(path, at, 0);
      break;
    }
    case Damage::kDelete:
      ASSERT_EQ(::unlink(path.c_str()), 0);
      break;
    case Damage::kSymlink:
      ASSERT_EQ(::unlink(path.c_str()), 0);
      ASSERT_EQ(::symlink((other + "/" + name).c_str(), path.c_str()), 0);
      break;
    case Damage::kDuplicateKey:
      WriteBytes(path, IsJson(name) ? DuplicateLastKey(bytes) : DuplicateSafetensorsKey(bytes));
      break;
    case Damage::kFifo:
      ASSERT_EQ(::unlink(path.c_str()), 0);
      ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
      break;
  }
}

// What the load says about the damaged file (besides its name).
::testing::Matcher<std::string> Reason(Damage damage, const std::string& name) {
  switch (damage) {
    case Damage::kTruncate:
      return HasSubstr(IsJson(name) ? "not valid JSON" : "bytes, expected");
    case Damage::kBitFlip:
      return HasSubstr("CRC-32C");
    case Damage::kDelete:
      return HasSubstr("is missing");
    case Damage::kSymlink:
      return AllOf(HasSubstr("is a symbolic link"), HasSubstr("_other/" + name));
    case Damage::kDuplicateKey:
      // A renamed tensor entry keeps the size: the file's CRC-32C catches it
      // (and the parser, with checksums off: below).
      if (IsJson(name)) return HasSubstr("appears twice");  // before the checksum is looked at
      return ::testing::AnyOf(HasSubstr("CRC-32C"), HasSubstr("bytes, expected"));
    case Damage::kFifo:
      return HasSubstr("is a FIFO, not a regular file");
  }
  return HasSubstr("?");
}

TEST(Corruption, EveryFileEveryWayFailsOnEveryRankNamingTheFile) {
  for (StateDictType type : kTypes) {
    const std::string kind(StateDictTypeName(type));
    const std::string good = FreshDir("good_" + kind) + "/ckpt", other = FreshDir("other_" + kind) + "/ckpt_other";
    ExpectAllOk(RunWorld({.world = 2, .steps = 1, .save = good, .type = type}));
    ExpectAllOk(RunWorld({.world = 2, .steps = 2, .save = other, .type = type}));
    // The harness loads the undamaged checkpoint at world 4.
    const RunResult intact = RunWorld({.steps = 0, .load = good});
    ExpectAllOk(intact);
    const std::vector<std::string> files = Listing(good);
    ASSERT_GE(files.size(), 3u) << kind;  // the manifest and at least two tensor files
    ASSERT_TRUE(std::count(files.begin(), files.end(), "checkpoint.json")) << kind;
    ASSERT_EQ(Listing(other), files);
    for (const std::string& name : files) {
      for (const DamageCase& c : kDamages) {
        SCOPED_TRACE(absl::StrCat(kind, " checkpoint, ", name, " ", c.name));
        const std::string dir = FreshDir("damaged") + "/ckpt";
        fs::copy(good, dir);
        Apply(c.damage, dir, name, fs::path(other).string());
        const RunResult r = RunWorld({.steps = 0, .load = dir});
        // No manifest: not a (complete) checkpoint, NotFound; every other fault is DataLoss.
        const absl::StatusCode code = name == "checkpoint.json" && c.damage == Damage::kDelete
                                          ? absl::StatusCode::kNotFound
                                          : absl::StatusCode::kDataLoss;
        ExpectAgreedFailure(r, code, AllOf(HasSubstr(name + "'"), Reason(c.damage, name)));
        EXPECT_LT(r.seconds, kNoHangSeconds);
      }
    }
    // A tensor file's duplicate key is refused by the parser too, when checksums are off.
    int parsed = 0;
    for (const std::string& name : files) {
      if (IsJson(name)) continue;
      SCOPED_TRACE(absl::StrCat(kind, " checkpoint, ", name, " with a key written twice, checksums off"));
      const std::string dir = FreshDir("duplicate") + "/ckpt";
      fs::copy(good, dir);
      Apply(Damage::kDuplicateKey, dir, name, other);
      if (ReadBytes(dir + "/" + name).size() != ReadBytes(good + "/" + name).size()) continue;  // the size catches it
      const RunResult r = RunWorld({.steps = 0, .load = dir, .load_options = {.verify_checksums = false}});
      ExpectAgreedFailure(r, absl::StatusCode::kDataLoss, AllOf(HasSubstr(name), HasSubstr("twice in one object")));
      ++parsed;
    }
    EXPECT_GT(parsed, 0) << kind << ": no tensor file has two entry names of one length";
  }
}

}  // namespace
}  // namespace zeroshard
