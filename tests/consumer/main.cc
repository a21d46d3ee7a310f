// The consumer test (make consumer-test): a program of someone else's, built
// with CMake against the installed library (find_package(zeroshard)), never
// seeing this repository's Bazel workspace. It defines its own model
// (two_input_net.h: blocks with two inputs and a residual, not a GPT), trains
// it with FULL_SHARD on 4 in-process ranks, saves a sharded checkpoint,
// resumes from it, and checks
//   1. the FULL_SHARD losses equal, bit for bit, those of the same training
//      with the parameters not sharded (NO_SHARD: every rank holds the whole
//      model, gradients all-reduced). Both runs do the same per-rank work on
//      the same rows, sum each gradient element over the ranks in the same
//      order (reduce-scatter and all-reduce of the same communicator), and
//      AdamW is element-wise, so every rounding is the same;
//   2. resuming at step kSaveAt from the checkpoint (new model, new ranks)
//      gives the remaining losses of the uninterrupted run bit for bit: the
//      checkpoint holds the exact fp32 shards, Adam moments, step count and
//      schedule position;
//   3. training learns: the last loss is below half the first.
// No gradient clipping: the total norm is a sum of squares over shards
// (FULL_SHARD) or over whole parameters (NO_SHARD), two summation orders, so
// the clipping factor, and everything after it, would differ in the last bits.
// Prints one line per check and exits non-zero on any failure.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "two_input_net.h"
#include "zeroshard/zeroshard.h"

namespace {

using namespace zeroshard;
using autograd::Variable;

constexpr int64_t kIn = 6, kContext = 4, kWidth = 16;
constexpr int kBlocks = 3;
constexpr int kWorld = 4;
constexpr int64_t kRowsPerRank = 8;
constexpr int64_t kSteps = 12, kSaveAt = 6;

// Row g of an endless data set, a fixed function of g: inputs on [-1, 1] and
// a smooth target of both inputs.
void Row(int64_t g, float* x, float* c, float* y) {
  for (int64_t i = 0; i < kIn; ++i) x[i] = std::sin(0.37f * static_cast<float>((g + 1) * (i + 1)));
  for (int64_t i = 0; i < kContext; ++i) c[i] = std::cos(0.23f * static_cast<float>((g + 3) * (i + 2)));
  *y = 0.5f * x[0] * c[0] - 0.25f * x[1] + 0.3f * c[1] * c[2];
}

struct Batch {
  Tensor x, c, y;
};

absl::StatusOr<Batch> RankBatch(int64_t step, const Communicator& comm) {
  std::vector<float> x(kRowsPerRank * kIn), c(kRowsPerRank * kContext), y(kRowsPerRank);
  const int64_t first = (step * comm.size() + comm.rank()) * kRowsPerRank;
  for (int64_t r = 0; r < kRowsPerRank; ++r) Row(first + r, &x[r * kIn], &c[r * kContext], &y[r]);
  Batch b;
  ZS_ASSIGN_OR_RETURN(b.x, Tensor::FromVector(x, {kRowsPerRank, kIn}));
  ZS_ASSIGN_OR_RETURN(b.c, Tensor::FromVector(c, {kRowsPerRank, kContext}));
  ZS_ASSIGN_OR_RETURN(b.y, Tensor::FromVector(y, {kRowsPerRank, 1}));
  return b;
}

struct RunOptions {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  std::string save_dir;  // saved after step kSaveAt when set
  std::string load_dir;  // resumed from when set
};

// Steps [start, kSteps) on this rank; returns the global mean loss of each.
absl::StatusOr<std::vector<double>> Train(Communicator& comm, const RunOptions& o) {
  auto model = std::make_shared<consumer::TwoInputNet>(kIn, kContext, kWidth, kBlocks);
  ShardingOptions sharding;
  sharding.strategy = o.strategy;
  sharding.wrap = WrapPolicy::ByType({"MixBlock"});
  ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(model, comm, sharding));
  ZS_ASSIGN_OR_RETURN(TrainStep train_step, TrainStep::Create(*sharded, {
      .optimizer = {.kind = optim::OptimizerKind::kAdamW, .weight_decay = 0.01},
      .lr = {.kind = optim::LrScheduleKind::kCosine, .lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2,
             .decay_steps = kSteps}}));
  int64_t start = 0;
  if (!o.load_dir.empty()) {
    ZS_ASSIGN_OR_RETURN(LoadResult r, LoadCheckpoint(o.load_dir, *sharded, &train_step.optim().optimizer()));
    start = r.state.step;
    train_step.set_step(start);
    ZS_ASSIGN_OR_RETURN(train_step.optim().scheduler(), optim::LrScheduler::FromStateDict(r.state.lr_scheduler));
  }
  std::vector<double> losses;
  for (int64_t step = start; step < kSteps; ++step) {
    ZS_ASSIGN_OR_RETURN(const StepResult r, train_step.Run([&](int64_t) -> absl::StatusOr<Variable> {
      ZS_ASSIGN_OR_RETURN(Batch b, RankBatch(step, comm));
      ZS_ASSIGN_OR_RETURN(Variable pred, (*model)(Variable(b.x), Variable(b.c)));
      ZS_ASSIGN_OR_RETURN(Variable err, ops::Sub(pred, Variable(b.y)));
      ZS_ASSIGN_OR_RETURN(Variable sq, ops::Square(err));
      return ops::MeanAll(sq);
    }));
    losses.push_back(r.loss);
    if (!o.save_dir.empty() && step + 1 == kSaveAt) {
      TrainingState state;
      state.step = step + 1;
      state.lr_scheduler = train_step.optim().scheduler().StateDict();
      ZS_RETURN_IF_ERROR(SaveCheckpoint(o.save_dir, *sharded, &train_step.optim().optimizer(), state));
    }
  }
  return losses;
}

// Runs Train on kWorld in-process ranks; every rank must agree.
absl::StatusOr<std::vector<double>> RunWorld(const RunOptions& o) {
  std::vector<std::vector<double>> per_rank(kWorld);
  std::vector<absl::Status> statuses = RunRanks(kWorld, [&](Communicator& comm) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(per_rank[comm.rank()], Train(comm, o));
    return absl::OkStatus();
  });
  for (int r = 0; r < kWorld; ++r) {
    if (!statuses[r].ok()) return statuses[r];
    if (per_rank[r] != per_rank[0]) return absl::InternalError("ranks disagree on the losses");
  }
  return per_rank[0];
}

int failures = 0;

void Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  failures += ok ? 0 : 1;
}

std::string Losses(const std::vector<double>& l) {
  std::string s;
  for (double v : l) s += absl::StrFormat(" %.9g", v);
  return s;
}

}  // namespace

int main() {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("zeroshard_consumer_" + std::to_string(::getpid()));
  const std::string ckpt = (dir / "step-6").string();
  std::filesystem::create_directories(dir);

  absl::StatusOr<std::vector<double>> sharded = RunWorld({.strategy = ShardingStrategy::kFullShard, .save_dir = ckpt});
  absl::StatusOr<std::vector<double>> unsharded = RunWorld({.strategy = ShardingStrategy::kNoShard});
  absl::StatusOr<std::vector<double>> resumed = RunWorld({.strategy = ShardingStrategy::kFullShard, .load_dir = ckpt});
  std::filesystem::remove_all(dir);
  for (const auto* r : {&sharded, &unsharded, &resumed}) {
    if (!r->ok()) {
      std::printf("FAIL training: %s\n", r->status().ToString().c_str());
      return 1;
    }
  }
  std::printf("FULL_SHARD, 4 ranks:%s\nNO_SHARD, 4 ranks: %s\nresumed at %ld:    %s\n", Losses(*sharded).c_str(),
              Losses(*unsharded).c_str(), static_cast<long>(kSaveAt), Losses(*resumed).c_str());
  Check(*sharded == *unsharded, "FULL_SHARD losses equal the unsharded (NO_SHARD) run's bit for bit");
  Check(std::vector<double>(sharded->begin() + kSaveAt, sharded->end()) == *resumed,
        "the run resumed from the sharded checkpoint continues bit for bit");
  Check(sharded->back() < 0.5 * sharded->front(), "the loss fell below half the first step's");
  std::printf("consumer: %s\n", failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
