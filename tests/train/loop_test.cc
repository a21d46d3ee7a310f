// RunLoop (train/loop.h) on a user's own module (two Linear layers, each an
// FSDP unit, FULL_SHARD over in-process ranks):
//   - the run folder: metrics.csv (header, one row per step, val_loss where
//     evaluated), the TensorBoard event file (one train/loss per step), the
//     checkpoints of the cadence with only the newest keep_last left, sync and
//     async;
//   - a run stopped at step k and resumed with resume "auto" gives the losses
//     of the uninterrupted run bit for bit (same world size; the data is a
//     function of the step, the checkpoint holds the exact f32 shards, Adam
//     moments, step and schedule, and every reduction runs in the same order);
//   - the embedder's log writer receives rank 0's lines;
//   - bad options are refused with what was expected and what was found.
#include "zeroshard/train/loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "zeroshard/autograd/nn/linear.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/tests/testing.h"
#include "zeroshard/tests/train/tfevents_reader.h"

namespace zeroshard {
namespace {

using autograd::Variable;
using ::testing::HasSubstr;
using testing::StatusIs;
namespace fs = std::filesystem;

constexpr int64_t kIn = 4, kHidden = 8, kRows = 4;  // rows per rank per micro-batch
constexpr int kWorld = 2;

// The user's model: nothing here knows about sharding.
class TwoLayer : public nn::UnaryModule {
 public:
  TwoLayer() : UnaryModule("TwoLayer") {
    fc1_ = RegisterModule("fc1", std::make_shared<nn::Linear>(kIn, kHidden));
    fc2_ = RegisterModule("fc2", std::make_shared<nn::Linear>(kHidden, 1));
  }
  absl::StatusOr<Variable> Forward(const Variable& x) override {
    ZS_ASSIGN_OR_RETURN(Variable h, (*fc1_)(x));
    ZS_ASSIGN_OR_RETURN(h, ops::Gelu(h));
    return (*fc2_)(h);
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

// Rows [first, first + kRows) of an endless data set, a fixed function of the row.
absl::StatusOr<std::pair<Tensor, Tensor>> Rows(int64_t first) {
  std::vector<float> x, y;
  for (int64_t g = first; g < first + kRows; ++g) {
    float v[kIn];
    for (int64_t i = 0; i < kIn; ++i) v[i] = std::sin(0.37f * static_cast<float>((g + 1) * (i + 1)));
    x.insert(x.end(), v, v + kIn);
    y.push_back(0.5f * v[0] - 0.25f * v[1] + 0.3f * v[2] * v[3]);
  }
  ZS_ASSIGN_OR_RETURN(Tensor tx, Tensor::FromVector(x, {kRows, kIn}));
  ZS_ASSIGN_OR_RETURN(Tensor ty, Tensor::FromVector(y, {kRows, 1}));
  return std::make_pair(tx, ty);
}

absl::StatusOr<Variable> Mse(TwoLayer& model, int64_t first) {
  ZS_ASSIGN_OR_RETURN(auto batch, Rows(first));
  ZS_ASSIGN_OR_RETURN(Variable pred, model(Variable(batch.first)));
  ZS_ASSIGN_OR_RETURN(Variable err, ops::Sub(pred, Variable(batch.second)));
  ZS_ASSIGN_OR_RETURN(Variable sq, ops::Square(err));
  return ops::MeanAll(sq);
}

constexpr int kAccumulation = 2;

// One RunLoop per rank on a fresh model (the same initial weights every time:
// ShardingOptions::init_seed) and a fresh TrainStep; every rank must return
// the same losses. Returns rank 0's result.
absl::StatusOr<LoopResult> Train(LoopOptions o, bool with_eval = false) {
  std::vector<LoopResult> results(kWorld);
  std::vector<absl::Status> statuses = RunRanks(kWorld, [&](Communicator& comm) -> absl::Status {
    auto model = std::make_shared<TwoLayer>();
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(model, comm, {
        .strategy = ShardingStrategy::kFullShard, .wrap = WrapPolicy::ByType({"Linear"})}));
    ZS_ASSIGN_OR_RETURN(TrainStep step, TrainStep::Create(*sharded, {
        .optimizer = {.kind = optim::OptimizerKind::kAdamW, .weight_decay = 0.01},
        .lr = {.kind = optim::LrScheduleKind::kCosine, .lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2,
               .decay_steps = 10},
        .accumulative_counts = kAccumulation,
        .clip_grad_max_norm = 1.0}));
    LoopHooks hooks;
    if (with_eval) {
      // The loss on fixed rows far from the training ones, averaged over ranks by ValStep.
      hooks.eval = [&](int64_t) -> absl::StatusOr<double> {
        optim::LogVars logs;
        ZS_RETURN_IF_ERROR(ValStep(*sharded, [&]() -> absl::StatusOr<optim::Losses> {
          ZS_ASSIGN_OR_RETURN(Variable l, Mse(*model, 1'000'000 + comm.rank() * kRows));
          return optim::Losses{{"loss", l}};
        }, &logs).status());
        return logs.at(0).second;
      };
    }
    ZS_ASSIGN_OR_RETURN(LoopResult r, RunLoop(*sharded, step, o, [&](int64_t s, int64_t m) {
      return Mse(*model, ((s * kAccumulation + m) * comm.size() + comm.rank()) * kRows);
    }, hooks));
    results[comm.rank()] = std::move(r);
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  for (int r = 1; r < kWorld; ++r) EXPECT_EQ(results[r].losses, results[0].losses) << "rank " << r;
  return results[0];
}

std::string FreshDir(const std::string& name) {
  const std::string d = absl::StrCat(::testing::TempDir(), "/loop_", ::getpid(), "_", name);
  fs::remove_all(d);
  return d;
}

std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> FileLines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

class LoopFiles : public ::testing::TestWithParam<bool> {};  // async_save

TEST_P(LoopFiles, MetricsTensorBoardAndTheNewestCheckpoints) {
  const bool async = GetParam();
  const std::string dir = FreshDir(absl::StrCat("files_", async));
  // Saves after steps 2, 4, 6 and at the end (7); keep_last 2 leaves 6 and 7.
  ZS_ASSERT_OK_AND_ASSIGN(LoopResult r, Train({.steps = 7, .log_every = 0, .work_dir = dir, .save_every = 2,
                                               .keep_last = 2, .async_save = async, .eval_every = 3,
                                               .tokens_per_step = kWorld * kAccumulation * kRows},
                                              /*with_eval=*/true));
  ASSERT_EQ(r.losses.size(), 7u);
  EXPECT_EQ(r.start_step, 0);
  EXPECT_EQ(r.last_checkpoint, dir + "/checkpoints/step-000007");
  EXPECT_EQ(Listing(dir + "/checkpoints"), (std::vector<std::string>{"step-000006", "step-000007"}));
  ASSERT_TRUE(r.final_val_loss.has_value());
  EXPECT_TRUE(std::isfinite(*r.final_val_loss));

  // metrics.csv: the header, then steps 0..6 with the losses returned
  // (%.9g: a float's shortest exact form), val_loss after steps 2 and 5
  // (eval_every 3) and the final one on the last row.
  const std::vector<std::string> lines = FileLines(dir + "/metrics.csv");
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0], absl::StrJoin(MetricsWriter::Columns(kWorld), ","));
  for (int64_t s = 0; s < 7; ++s) {
    const std::vector<std::string> cells = absl::StrSplit(lines[s + 1], ',');
    ASSERT_EQ(cells.size(), MetricsWriter::Columns(kWorld).size()) << lines[s + 1];
    EXPECT_EQ(cells[0], absl::StrCat(s));
    EXPECT_EQ(cells[1], absl::StrFormat("%.9g", r.losses[s]));
    EXPECT_GT(std::stod(cells[3]), 0) << "tokens_per_s of step " << s;
    const bool evaluated = s == 2 || s == 5 || s == 6;
    EXPECT_EQ(cells[5].empty(), !evaluated) << "val_loss of step " << s;
  }
  const std::vector<std::string> last = absl::StrSplit(lines[7], ',');
  EXPECT_EQ(last[5], absl::StrFormat("%.9g", *r.final_val_loss));

  // TensorBoard: one event file; per step train/loss (the loss as f32) and train/grad_norm.
  const std::vector<std::string> events = Listing(dir + "/tensorboard");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_THAT(events[0], HasSubstr("events.out.tfevents."));
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<testing::TestEvent> ev, testing::ReadEventFile(dir + "/tensorboard/" + events[0]));
  std::vector<int64_t> loss_steps;
  int grad_norms = 0;
  for (const testing::TestEvent& e : ev) {
    for (const auto& [tag, value] : e.values) {
      if (tag == "train/loss") {
        loss_steps.push_back(e.step);
        EXPECT_EQ(value, static_cast<float>(r.losses[e.step]));
      }
      if (tag == "train/grad_norm") ++grad_norms;
    }
  }
  EXPECT_EQ(loss_steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(grad_norms, 7);
}

INSTANTIATE_TEST_SUITE_P(SyncAndAsync, LoopFiles, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Async" : "Sync"; });

class LoopResume : public ::testing::TestWithParam<std::tuple<bool, StateDictType>> {};

TEST_P(LoopResume, StoppedAndResumedEqualsUninterruptedBitForBit) {
  const auto [async, type] = GetParam();
  const std::string name = absl::StrCat("resume_", async, "_", StateDictTypeName(type));
  ZS_ASSERT_OK_AND_ASSIGN(LoopResult whole, Train({.steps = 8, .log_every = 0}));
  ASSERT_EQ(whole.losses.size(), 8u);
  EXPECT_LT(whole.losses.back(), whole.losses.front());  // it trains

  const std::string dir = FreshDir(name);
  LoopOptions o{.steps = 5, .log_every = 0, .work_dir = dir, .save_every = 2, .async_save = async,
                .save = {.type = type}, .resume = "auto"};
  // Stopped after step 5 (saved at 2, 4 and, at the end, 5); "auto" finds nothing the first time.
  ZS_ASSERT_OK_AND_ASSIGN(LoopResult first, Train(o));
  EXPECT_EQ(first.start_step, 0);
  EXPECT_EQ(first.losses, std::vector<double>(whole.losses.begin(), whole.losses.begin() + 5));
  EXPECT_EQ(first.last_checkpoint, dir + "/checkpoints/step-000005");

  o.steps = 8;
  ZS_ASSERT_OK_AND_ASSIGN(LoopResult rest, Train(o));
  EXPECT_EQ(rest.start_step, 5);
  EXPECT_EQ(rest.losses, std::vector<double>(whole.losses.begin() + 5, whole.losses.end()));
  EXPECT_EQ(rest.last_checkpoint, dir + "/checkpoints/step-000008");

  // A resume at the end runs nothing and saves nothing more.
  ZS_ASSERT_OK_AND_ASSIGN(LoopResult none, Train(o));
  EXPECT_EQ(none.start_step, 8);
  EXPECT_TRUE(none.losses.empty());
  EXPECT_EQ(none.last_checkpoint, "");

  // The resumed runs continued metrics.csv (one header, steps 0..7) and each
  // added its own event file (three runs, likely within one second).
  const std::vector<std::string> lines = FileLines(dir + "/metrics.csv");
  ASSERT_EQ(lines.size(), 9u);
  EXPECT_EQ(lines[0], absl::StrJoin(MetricsWriter::Columns(kWorld), ","));
  for (int64_t s = 0; s < 8; ++s) {
    EXPECT_EQ(lines[s + 1].substr(0, lines[s + 1].find(',', lines[s + 1].find(',') + 1)),
              absl::StrFormat("%d,%.9g", s, whole.losses[s]));
  }
  EXPECT_EQ(Listing(dir + "/tensorboard").size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(
    SyncAndAsync, LoopResume,
    ::testing::Values(std::make_tuple(false, StateDictType::kSharded), std::make_tuple(true, StateDictType::kSharded),
                      std::make_tuple(true, StateDictType::kFull)),
    [](const ::testing::TestParamInfo<std::tuple<bool, StateDictType>>& i) {
      return absl::StrCat(std::get<0>(i.param) ? "Async" : "Sync", std::string(StateDictTypeName(std::get<1>(i.param))));
    });

TEST(Loop, TheLogWriterGetsRankZerosLines) {
  const std::string dir = FreshDir("log");
  std::mutex mu;
  std::vector<std::string> lines;
  LoopOptions o{.steps = 6, .log_every = 4, .work_dir = dir, .save_every = 3, .tokens_per_step = 16,
                .progress_bar = true};  // no bar with a writer: nothing goes to stdout
  o.log.writer = [&](absl::string_view text) {
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(text);
  };
  o.log.log_file = dir + ".log";
  ZS_ASSERT_OK_AND_ASSIGN(LoopResult r, Train(o));
  ASSERT_EQ(r.losses.size(), 6u);
  // Step lines at 0, every 4th (3) and the last (5); saves after 3 and 6
  // steps (steps 2 and 5); the summary.
  std::vector<std::string> expected_prefixes = {
      absl::StrFormat("step 0 loss %.9g lr ", r.losses[0]),
      absl::StrCat("saved ", dir, "/checkpoints/step-000003 (sharded, training blocked "),
      absl::StrFormat("step 3 loss %.9g lr ", r.losses[3]),
      absl::StrFormat("step 5 loss %.9g lr ", r.losses[5]),
      absl::StrCat("saved ", dir, "/checkpoints/step-000006 (sharded, training blocked "),
      absl::StrFormat("done: 6 steps in "),
  };
  ASSERT_EQ(lines.size(), expected_prefixes.size()) << absl::StrJoin(lines, "");
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].substr(0, expected_prefixes[i].size()), expected_prefixes[i]) << lines[i];
    EXPECT_EQ(lines[i].back(), '\n');
  }
  EXPECT_THAT(lines[0], HasSubstr(" tokens/s\n"));
  EXPECT_THAT(lines[5], HasSubstr(absl::StrFormat("final train loss %.6f, last checkpoint %s/checkpoints/step-000006",
                                                  r.losses[5], dir)));
  // FULL_SHARD sends every step (all-gathers, reduce-scatters, the loss's
  // all-reduce): the figure is positive and the one printed.
  EXPECT_GT(r.comm_bytes_per_step, 0);
  EXPECT_THAT(lines[5], HasSubstr(absl::StrCat(", comm_bytes_per_step ", r.comm_bytes_per_step, "\n")));
  // The log file got the same lines.
  const std::vector<std::string> logged = FileLines(dir + ".log");
  ASSERT_EQ(logged.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(logged[i] + "\n", lines[i]);

  // A resumed run says where from.
  lines.clear();
  o.resume = "auto";
  o.steps = 7;
  ZS_ASSERT_OK_AND_ASSIGN(LoopResult more, Train(o));
  EXPECT_EQ(more.start_step, 6);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines[0], ::testing::StartsWith(absl::StrCat("  resumed from ", dir,
                                                          "/checkpoints/step-000006 (sharded, saved by 2 ranks, ")));
  EXPECT_THAT(lines[0], ::testing::EndsWith(") at step 6\n"));
}

TEST(Loop, BadOptionsNameWhatWasExpectedAndFound) {
  struct Case {
    LoopOptions o;
    bool eval = false;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{.steps = -3}, false, "LoopOptions.steps: expected at least 1 (the optimizer steps to run to), found -3"},
      {{.steps = 0}, false, "LoopOptions.steps: expected at least 1"},
      {{.steps = 5, .log_every = -1}, false, "LoopOptions.log_every: expected >= 0 (0: no step lines), found -1"},
      {{.steps = 5, .work_dir = "w", .save_every = -2}, false, "LoopOptions.save_every: expected >= 0"},
      {{.steps = 5, .keep_last = 2}, false,
       "LoopOptions.keep_last 2: expected save_every > 0 (keep_last counts the checkpoints saved every save_every "
       "steps), found save_every 0"},
      {{.steps = 5, .work_dir = "w", .save_every = 1, .keep_last = -1}, false,
       "LoopOptions.keep_last: expected >= 0 (0: keep all), found -1"},
      {{.steps = 5, .async_save = true}, false, "LoopOptions.async_save: expected save_every > 0"},
      {{.steps = 5, .save_every = 5}, false,
       "LoopOptions.save_every 5: expected a work_dir to save checkpoints under (work_dir/checkpoints), found "
       "work_dir \"\""},
      {{.steps = 5, .resume = "auto"}, false,
       "LoopOptions.resume \"auto\": expected a work_dir whose checkpoints/ to resume from, found work_dir \"\""},
      {{.steps = 5, .eval_every = 2}, false, "LoopOptions.eval_every 2: expected a LoopHooks::eval to call, found none"},
      {{.steps = 5, .eval_every = -1}, true, "LoopOptions.eval_every: expected >= 0"},
      {{.steps = 5, .tokens_per_step = -8}, false, "LoopOptions.tokens_per_step: expected >= 0"},
  };
  for (const Case& c : cases) {
    LoopHooks hooks;
    if (c.eval) hooks.eval = [](int64_t) -> absl::StatusOr<double> { return 0.0; };
    EXPECT_THAT(ValidateLoopOptions(c.o, hooks), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.message;
  }
  // RunLoop refuses them before it trains or writes anything.
  EXPECT_THAT(Train({.steps = -1}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("found -1")));
  ZS_EXPECT_OK(ValidateLoopOptions({.steps = 5, .work_dir = "w", .save_every = 2, .keep_last = 1,
                                    .async_save = true, .resume = "auto"}));
}

}  // namespace
}  // namespace zeroshard
