// Checkpoint throughput: save and load of full and sharded checkpoints of a
// GPT of about 100M parameters (with AdamW state: ~1.2 GB) over in-process
// ranks, beside a plain sequential write and read of the same number of bytes
// in the same run, and the time the training loop is blocked by an async save
// (the snapshot) against a synchronous one.
//
//   bazel run -c opt //bench:checkpoint_bench -- --dir=/tmp/ckpt_bench [--n_layer=12 --n_embd=768]
//       [--json_out=<file>]   also the figures as data (bench/bench_json.h; one repeat each)
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/bench/bench_json.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/runtime/status.h"

ABSL_FLAG(std::string, dir, "/tmp/zeroshard_checkpoint_bench", "scratch directory (removed at the end)");
ABSL_FLAG(int64_t, n_layer, 12, "");
ABSL_FLAG(int64_t, n_embd, 768, "");
ABSL_FLAG(int64_t, vocab_size, 50304, "");
ABSL_FLAG(int, world_size, 2, "");

namespace zeroshard {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds to write then read `bytes` bytes sequentially (fsync'd), the baseline.
std::pair<double, double> PlainIo(const std::string& path, int64_t bytes) {
  std::vector<char> buf(64 << 20, 1);
  double t0 = Now();
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::write(fd, buf.data(), std::min<int64_t>(buf.size(), bytes - done));
    if (n <= 0) break;
    done += n;
  }
  ::fsync(fd);
  ::close(fd);
  const double w = Now() - t0;
  t0 = Now();
  fd = ::open(path.c_str(), O_RDONLY);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
  const double r = Now() - t0;
  ::unlink(path.c_str());
  return {w, r};
}

// "save sharded" -> "checkpoint/save/sharded"; the async row -> "checkpoint/async_save/blocked".
std::string FigureName(const std::string& what) {
  if (what.rfind("async save", 0) == 0) return "checkpoint/async_save/blocked";
  std::string name = "checkpoint/" + what;
  for (char& ch : name) {
    if (ch == ' ') ch = '/';
  }
  return name;
}

int Main(const std::string& json_out) {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str());
  nn::GptConfig c{.vocab_size = absl::GetFlag(FLAGS_vocab_size), .block_size = 1024,
                  .n_layer = absl::GetFlag(FLAGS_n_layer), .n_head = 12, .n_embd = absl::GetFlag(FLAGS_n_embd)};
  const int world = absl::GetFlag(FLAGS_world_size);
  std::mutex mu;
  int64_t params = 0;
  struct Row { std::string what; double seconds; };
  std::vector<Row> rows;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    auto gpt = std::make_shared<nn::Gpt>(c);
    ShardingOptions o;
    o.wrap = WrapPolicy::ByType({"Block"});
    o.init_seed = 1;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, {.lr = 1e-3}));
    if (comm.rank() == 0) params = gpt->NumParameters();
    const TrainingState state{.step = 1};
    auto timed = [&](const std::string& what, const std::function<absl::Status()>& fn) -> absl::Status {
      ZS_RETURN_IF_ERROR(comm.Barrier());
      const double t0 = Now();
      ZS_RETURN_IF_ERROR(fn());
      ZS_RETURN_IF_ERROR(comm.Barrier());
      if (comm.rank() == 0) {
        std::lock_guard<std::mutex> lock(mu);
        rows.push_back({what, Now() - t0});
      }
      return absl::OkStatus();
    };
    for (StateDictType t : {StateDictType::kSharded, StateDictType::kFull}) {
      const std::string d = absl::StrCat(dir, "/", StateDictTypeName(t));
      ZS_RETURN_IF_ERROR(timed(absl::StrCat("save ", StateDictTypeName(t)), [&] {
        return SaveCheckpoint(d, *sharded, &opt, state, {.type = t});
      }));
      ZS_RETURN_IF_ERROR(timed(absl::StrCat("load ", StateDictTypeName(t)), [&] {
        return LoadCheckpoint(d, *sharded, &opt).status();
      }));
    }
    // Async: the training loop waits only for the snapshot.
    AsyncCheckpointer saver;
    double blocked = 0;
    ZS_RETURN_IF_ERROR(timed("async save: training blocked (snapshot)", [&] {
      return saver.Start(absl::StrCat(dir, "/async"), *sharded, &opt, state, {.type = StateDictType::kSharded}, &blocked);
    }));
    ZS_RETURN_IF_ERROR(saver.Wait());
    return comm.Barrier();
  });
  for (const absl::Status& s : st) {
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
  }
  const int64_t bytes = params * 4 * 3;  // parameters + exp_avg + exp_avg_sq, f32
  const auto [w, r] = PlainIo(dir + "/plain.bin", bytes);
  std::printf("checkpoint_bench: GPT %lld parameters, %lld bytes of state (params + AdamW, f32), %d in-process ranks\n",
              static_cast<long long>(params), static_cast<long long>(bytes), world);
  std::printf("%-42s %9s %9s\n", "operation", "seconds", "GB/s");
  std::printf("%-42s %9.3f %9.2f\n", "plain sequential write + fsync (baseline)", w, bytes / w / 1e9);
  std::printf("%-42s %9.3f %9.2f\n", "plain sequential read (baseline)", r, bytes / r / 1e9);
  for (const Row& row : rows) {
    std::printf("%-42s %9.3f %9.2f\n", row.what.c_str(), row.seconds, bytes / row.seconds / 1e9);
  }
  std::system(absl::StrCat("rm -rf ", dir).c_str());
  if (!json_out.empty()) {
    bench::JsonReport report("checkpoint_bench");
    report.Add("checkpoint/plain/write", "GB/s", /*higher_is_better=*/true, {bytes / w / 1e9});
    report.Add("checkpoint/plain/read", "GB/s", true, {bytes / r / 1e9});
    for (const Row& row : rows) {
      const std::string name = FigureName(row.what);
      if (name == "checkpoint/async_save/blocked") {
        report.Add(name, "s", false, {row.seconds});
      } else {
        report.Add(name, "GB/s", true, {bytes / row.seconds / 1e9},
                   name.rfind("checkpoint/save/", 0) == 0 ? "checkpoint/plain/write" : "checkpoint/plain/read");
      }
    }
    if (absl::Status s = report.Write(json_out); !s.ok()) {
      std::fprintf(stderr, "checkpoint_bench: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  return 0;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  const std::string json_out = zeroshard::bench::TakeJsonOutFlag(&argc, argv);
  absl::ParseCommandLine(argc, argv);
  return zeroshard::Main(json_out);
}
