// Running jobs from configs: each ready config in examples/configs/ is valid
// and trains; a run folder holds the resolved config, the log, metrics.csv and
// a TensorBoard event file; checkpoint.resume "auto" finds the last run's
// checkpoint; examples/configs/resnet.json trains through RunResNetConfig.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/metrics.h"
#include "zeroshard/train/resnet_job.h"
#include "zeroshard/train/run_dir.h"
#include "zeroshard/train/trainer.h"
#include "zeroshard/tests/train/config_testing.h"
#include "zeroshard/tests/train/tfevents_reader.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MustParse;
using testing::ReadFile;
using testing::StatusIs;
using testing::TempDir;

// tag -> (step, value) of each scalar.
using Scalars = std::map<std::string, std::vector<std::pair<int64_t, float>>>;

// The scalars of the one event file in a run folder's tensorboard/: the file
// version first, then one value per event, none before the first's time.
Scalars ReadScalars(const std::string& tensorboard_dir) {
  std::vector<std::string> event_files;
  for (const auto& e : std::filesystem::directory_iterator(tensorboard_dir)) {
    event_files.push_back(e.path().string());
  }
  Scalars scalars;
  EXPECT_EQ(event_files.size(), 1u);
  if (event_files.size() != 1) return scalars;
  EXPECT_THAT(event_files[0], HasSubstr("/tensorboard/events.out.tfevents."));
  absl::StatusOr<std::vector<testing::TestEvent>> events = testing::ReadEventFile(event_files[0]);
  EXPECT_TRUE(events.ok()) << events.status();
  if (!events.ok() || events->empty()) {
    ADD_FAILURE() << "no events in " << event_files[0];
    return scalars;
  }
  EXPECT_EQ((*events)[0].file_version, "brain.Event:2");
  for (size_t i = 1; i < events->size(); ++i) {
    const testing::TestEvent& e = (*events)[i];
    EXPECT_EQ(e.values.size(), 1u);
    EXPECT_GE(e.wall_time, (*events)[0].wall_time);
    if (e.values.size() == 1) scalars[e.values[0].first].emplace_back(e.step, e.values[0].second);
  }
  return scalars;
}

std::vector<std::string> Tags(const Scalars& scalars) {
  std::vector<std::string> tags;
  for (const auto& [tag, v] : scalars) tags.push_back(tag);
  return tags;
}

// ============================================================ ready configs

std::vector<std::string> ReadyConfigs() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("examples/configs")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ReadyConfigs, EveryFileIsValidAndItsResolvedFormIsAFixedPoint) {
  const std::vector<std::string> files = ReadyConfigs();
  EXPECT_GE(files.size(), 10u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    absl::StatusOr<RunConfig> c = LoadConfig(f, {});
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string resolved = ResolvedConfigJson(*c);
    absl::StatusOr<RunConfig> again = ConfigFromText(resolved, {}, f);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(ResolvedConfigJson(*again), resolved);
    EXPECT_TRUE(CheckWorldSize(*c, c->world_size).ok());
  }
  // The default is what `make train` runs: 4 ranks, FULL_SHARD, one unit per block.
  absl::StatusOr<RunConfig> d = LoadConfig("examples/configs/default.json", {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->world_size, 4);
  EXPECT_EQ(d->train.sharding.strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(d->train.sharding.wrap.types, std::set<std::string>{"Block"});
  EXPECT_EQ(d->experiment_name, "default");
}

// Shrinks a ready config to a run of a few seconds.
const std::vector<std::string> kTiny = {"model.n_layer=2", "model.n_embd=32",  "model.n_head=2",
                                        "model.block_size=32", "train.steps=4", "train.eval_iters=2",
                                        "sample.tokens=8", "train.log_every=2", "work_dir="};

TEST(ReadyConfigs, EveryOneTrains) {
  for (const std::string& f : ReadyConfigs()) {
    SCOPED_TRACE(f);
    std::vector<std::string> tiny = kTiny;
    if (absl::StrContains(f, "nvme")) {  // its swap files in the test's directory, not /local_nvme
      for (const char* kind : {"offload_optimizer", "offload_param"}) {
        tiny.push_back(absl::StrCat("deepspeed.zero_optimization.", kind, ".nvme_path=", TempDir()));
      }
    }
    if (absl::StatusOr<RunConfig> as_is = LoadConfig(f, {}); as_is.ok() && as_is->model_type == "resnet") {
      continue;  // the vision job: ResNetConfig.ReadyConfigTrainsThroughTheMainProgramsEntry
    }
    absl::StatusOr<RunConfig> c = LoadConfig(f, tiny);
    ASSERT_TRUE(c.ok()) << c.status();
    TrainSummary s;
    std::vector<absl::Status> st =
        RunRanks(c->world_size, [&](Communicator& comm) { return RunTraining(c->train, comm, &s); });
    for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
    ASSERT_EQ(s.losses.size(), 4u);
    EXPECT_TRUE(std::isfinite(s.final_val_loss));
    EXPECT_LT(s.losses.back(), s.losses.front());
  }
}

// ============================================================ distributed.timeout_s

// The config's collective timeout is the communicators': RunTraining and the
// vision job print the one their communicator has at the start, and a peer
// that never arrives fails the collective after it, not after the 10 minutes
// of CommunicatorOptions' default.
TEST(DistributedTimeout, ReachesTheCommunicatorsAndIsPrintedAtTheStart) {
  std::vector<std::string> tiny = kTiny;
  tiny.push_back("distributed.timeout_s=42");
  tiny.push_back("distributed.world_size=2");
  absl::StatusOr<RunConfig> gpt = LoadConfig("examples/configs/default.json", tiny);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  gpt->train.log_file = TempDir() + "/timeout_gpt.log";
  std::filesystem::remove(gpt->train.log_file);
  std::vector<absl::Status> st =
      RunRanks(gpt->world_size, [&](Communicator& comm) { return RunTraining(gpt->train, comm); },
               LocalOptions{.comm = CommunicatorOptionsOf(*gpt)});
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;
  EXPECT_THAT(ReadFile(gpt->train.log_file), HasSubstr("zeroshard train: 2 ranks (local, collective timeout 42s)\n"));

  // The vision job's entry (train_gpt runs it) makes its communicators itself.
  absl::StatusOr<RunConfig> resnet = LoadConfig(
      "examples/configs/resnet.json",
      {"model.widths=[8]", "model.depths=[1]", "data.image_size=8", "data.train_size=32", "data.val_size=0",
       "train.batch_size=4", "train.steps=1", "train.eval_every=0", "train.log_every=1", "train.threads_per_rank=1",
       "distributed.timeout_s=42", "work_dir="});
  ASSERT_TRUE(resnet.ok()) << resnet.status();
  resnet->resnet.log_file = TempDir() + "/timeout_resnet.log";
  std::filesystem::remove(resnet->resnet.log_file);
  ASSERT_TRUE(RunResNetConfig(*resnet).ok());
  EXPECT_THAT(ReadFile(resnet->resnet.log_file), HasSubstr("2 ranks (local, collective timeout 42s)"));

  // A peer that has returned: the barrier fails after distributed.timeout_s.
  const RunConfig short_timeout = MustParse(R"({"distributed": {"timeout_s": 0.3}})");
  const auto start = std::chrono::steady_clock::now();
  st = RunRanks(2, [](Communicator& comm) { return comm.rank() == 1 ? absl::OkStatus() : comm.Barrier(); },
                LocalOptions{.comm = CommunicatorOptionsOf(short_timeout)});
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_THAT(st[0], StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("timed out after 300ms")));
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 60);  // the default would hold it 600 s; 60 leaves room for a loaded machine
}

// ============================================================ the run folder

TEST(RunFolder, HoldsTheResolvedConfigTheLogMetricsAndTensorBoardEvents) {
  const std::string work = TempDir() + "/runs";
  absl::StatusOr<RunConfig> c = LoadConfig("examples/configs/default.json", kTiny);
  ASSERT_TRUE(c.ok()) << c.status();
  c->work_dir = work;
  c->train.eval_every = 2;  // a validation loss at step 1 and at the end
  absl::StatusOr<RunDir> dir = StartRun(&*c, "config: examples/configs/default.json\n", 1700000000);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(dir->path(), work + "/default/" + RunTimestamp(1700000000));
  TrainSummary summary;
  std::vector<absl::Status> st =
      RunRanks(c->world_size, [&](Communicator& comm) { return RunTraining(c->train, comm, &summary); });
  for (const absl::Status& x : st) ASSERT_TRUE(x.ok()) << x;

  // config.json: the resolved config, which reads back to this run.
  const std::string resolved = ReadFile(dir->config_path());
  EXPECT_EQ(resolved, ResolvedConfigJson(*c));
  absl::StatusOr<RunConfig> back = ConfigFromText(resolved, {}, dir->config_path());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->train.steps, 4);

  // The log: the header, then what rank 0 printed.
  const std::string log = ReadFile(dir->log_path());
  EXPECT_THAT(log, AllOf(HasSubstr("config: examples/configs/default.json\n"), HasSubstr("zeroshard train: 4 ranks"),
                         HasSubstr("step 0 loss "), HasSubstr("step 1 val loss"), HasSubstr("final val loss"),
                         HasSubstr("done: 4 steps")));

  // metrics.csv: the header and one row per step.
  const std::string csv = ReadFile(dir->metrics_path());
  std::vector<std::string> rows = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 5u) << csv;
  EXPECT_EQ(rows[0], "step,loss,lr,tokens_per_s,ms_per_step,val_loss,peak_bytes_rank0,peak_bytes_rank1,"
                     "peak_bytes_rank2,peak_bytes_rank3");
  for (int i = 1; i <= 4; ++i) {
    const std::vector<std::string> f = absl::StrSplit(rows[i], ',');
    ASSERT_EQ(f.size(), 10u) << rows[i];
    EXPECT_EQ(f[0], absl::StrCat(i - 1));
    EXPECT_GT(std::stod(f[1]), 0);
    EXPECT_GT(std::stod(f[2]), 0);
    EXPECT_GT(std::stod(f[3]), 0);
    EXPECT_GT(std::stod(f[4]), 0);
    EXPECT_EQ(f[5].empty(), i != 2 && i != 4) << rows[i];  // evaluated after step 1 and at the end
    for (int r = 6; r < 10; ++r) EXPECT_GT(std::stoll(f[r]), 0);
  }
  // tensorboard/: one event file, the file version first, then each step's
  // scalars with the same values as metrics.csv (as floats).
  EXPECT_EQ(c->train.tensorboard_dir, dir->tensorboard_dir());
  Scalars scalars = ReadScalars(dir->tensorboard_dir());
  EXPECT_THAT(Tags(scalars),
              ElementsAre("memory/peak_bytes_rank0", "memory/peak_bytes_rank1", "memory/peak_bytes_rank2",
                          "memory/peak_bytes_rank3", "train/loss", "train/lr", "train/ms_per_step",
                          "train/tokens_per_s", "val/loss"));
  ASSERT_EQ(scalars["train/loss"].size(), 4u);
  for (int i = 1; i <= 4; ++i) {
    const std::vector<std::string> f = absl::StrSplit(rows[i], ',');
    EXPECT_EQ(scalars["train/loss"][i - 1].first, i - 1);
    EXPECT_EQ(scalars["train/loss"][i - 1].second, static_cast<float>(summary.losses[i - 1]));
    EXPECT_NEAR(scalars["train/lr"][i - 1].second, std::stod(f[2]), 1e-5 * std::stod(f[2]));  // csv: 6 digits
    EXPECT_EQ(scalars["memory/peak_bytes_rank0"][i - 1].second, static_cast<float>(std::stoll(f[6])));
  }
  ASSERT_EQ(scalars["val/loss"].size(), 2u);  // after step 1 and at the end
  EXPECT_EQ(scalars["val/loss"][0].first, 1);
  EXPECT_EQ(scalars["val/loss"][1].first, 3);
  EXPECT_EQ(scalars["val/loss"][1].second, static_cast<float>(summary.final_val_loss));
  // A second run in the same second gets its own folder.
  absl::StatusOr<RunDir> second = RunDir::Create(work, "default", 1700000000);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->path(), dir->path() + "_1");
}

TEST(RunFolder, ResumeAutoFindsTheLastRunsCheckpointBesideTheRunFolders) {
  const std::string work = TempDir() + "/resume_runs";
  std::filesystem::remove_all(work);
  std::vector<std::string> first = kTiny;
  first.insert(first.end(), {"train.steps=6", "checkpoint.save_every=3", "checkpoint.keep_last=1",
                             "work_dir=" + work, "distributed.world_size=2"});
  absl::StatusOr<RunConfig> a = LoadConfig("examples/configs/default.json", first);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(StartRun(&*a, "", 1700000000).ok());
  TrainSummary sa;
  for (const absl::Status& x : RunRanks(2, [&](Communicator& comm) { return RunTraining(a->train, comm, &sa); })) {
    ASSERT_TRUE(x.ok()) << x;
  }
  EXPECT_EQ(sa.last_checkpoint, work + "/default/step-000006");
  // A later run of the experiment, in its own folder, resumes where the first stopped.
  std::vector<std::string> second = first;
  second.insert(second.end(), {"train.steps=8", "checkpoint.resume=auto"});
  absl::StatusOr<RunConfig> b = LoadConfig("examples/configs/default.json", second);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<RunDir> dir = StartRun(&*b, "", 1700000060);
  ASSERT_TRUE(dir.ok());
  TrainSummary sb;
  for (const absl::Status& x : RunRanks(2, [&](Communicator& comm) { return RunTraining(b->train, comm, &sb); })) {
    ASSERT_TRUE(x.ok()) << x;
  }
  EXPECT_EQ(sb.start_step, 6);
  EXPECT_EQ(sb.losses.size(), 2u);
  std::vector<std::string> rows = absl::StrSplit(ReadFile(dir->metrics_path()), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(absl::StartsWith(rows[1], "6,")) << rows[1];
}

TEST(RunFolder, TensorboardFalseWritesNoEventFile) {
  const std::string work = TempDir() + "/runs_no_tb";
  std::filesystem::remove_all(work);
  std::vector<std::string> keys = kTiny;
  keys.insert(keys.end(), {"train.tensorboard=false", "train.steps=2", "distributed.world_size=2", "work_dir=" + work});
  absl::StatusOr<RunConfig> c = LoadConfig("examples/configs/default.json", keys);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<RunDir> dir = StartRun(&*c, "", 1700000000);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(c->train.tensorboard_dir, "");
  for (const absl::Status& x : RunRanks(2, [&](Communicator& comm) { return RunTraining(c->train, comm); })) {
    ASSERT_TRUE(x.ok()) << x;
  }
  EXPECT_TRUE(std::filesystem::exists(dir->metrics_path()));
  EXPECT_FALSE(std::filesystem::exists(dir->tensorboard_dir()));
}

TEST(RunFolder, MetricsWriterChecksItsRows) {
  absl::StatusOr<MetricsWriter> w = MetricsWriter::Open(TempDir() + "/m.csv", 2);
  ASSERT_TRUE(w.ok());
  EXPECT_THAT(w->Write({.step = 0, .peak_bytes = {1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected 2 peak_bytes values, found 1")));
  EXPECT_THAT(MetricsWriter::Open("/no/such/dir/m.csv", 1), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("/no/such/dir/m.csv")));
}


TEST(ResNetConfig, ReadyConfigTrainsThroughTheMainProgramsEntry) {
  // examples/configs/resnet.json shrunk as train_resnet_test's small run, into a run folder.
  absl::StatusOr<RunConfig> c = LoadConfig(
      "examples/configs/resnet.json",
      {"model.widths=[8, 16]", "model.depths=[1, 1]", "data.image_size=16", "data.train_size=5000",
       "data.val_size=300", "train.batch_size=16", "train.steps=150", "lr_schedule.warmup_steps=10",
       "train.eval_every=0", "train.log_every=50", "train.threads_per_rank=1",
       absl::StrCat("work_dir=", TempDir(), "/resnet_runs")});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->world_size, 2);
  EXPECT_EQ(c->resnet.sharding.strategy, ShardingStrategy::kFullShard);
  absl::StatusOr<RunDir> dir = StartRun(&*c, "config: examples/configs/resnet.json\n", 1700000000);
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<ResNetTrainResult> r = RunResNetConfig(*c);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->losses.size(), 150u);
  double last = 0;
  for (size_t i = 140; i < 150; ++i) last += r->losses[i] / 10;
  EXPECT_GT(r->losses[0], 2.0);         // about ln 10 at the start
  EXPECT_LT(last, r->losses[0] - 0.8);  // as train_resnet_test: about 1.0 at the end
  EXPECT_GT(r->val_accuracy, 0.35);     // chance 0.1

  // The run folder: the resolved config (reads back), the log, metrics.csv.
  const std::string resolved = ReadFile(dir->config_path());
  EXPECT_EQ(resolved, ResolvedConfigJson(*c));
  EXPECT_EQ(ResolvedConfigJson(MustParse(resolved)), resolved);
  const std::string log = ReadFile(dir->log_path());
  EXPECT_THAT(log, AllOf(HasSubstr("config: examples/configs/resnet.json\n"), HasSubstr("train_resnet: ResNet("),
                         HasSubstr("step    0 loss "), HasSubstr("eval step  150 val loss"), HasSubstr("done: ")));
  std::vector<std::string> rows = absl::StrSplit(ReadFile(dir->metrics_path()), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 151u);
  EXPECT_EQ(rows[0], "step,loss,lr,images_per_s,ms_per_step,val_loss,val_accuracy");
  const std::vector<std::string> first = absl::StrSplit(rows[1], ',');
  ASSERT_EQ(first.size(), 7u);
  EXPECT_EQ(first[0], "0");
  EXPECT_EQ(first[5], "");
  const std::vector<std::string> end = absl::StrSplit(rows[150], ',');
  ASSERT_EQ(end.size(), 7u);
  EXPECT_EQ(end[0], "149");
  EXPECT_NEAR(std::stod(end[6]), r->val_accuracy, 1e-6);
  // tensorboard/: the same scalars, one event per tag and step.
  ASSERT_EQ(c->resnet.tensorboard_dir, dir->tensorboard_dir());
  Scalars scalars = ReadScalars(dir->tensorboard_dir());
  EXPECT_THAT(Tags(scalars), ElementsAre("train/images_per_s", "train/loss", "train/lr", "train/ms_per_step",
                                         "val/accuracy", "val/loss"));
  ASSERT_EQ(scalars["train/loss"].size(), 150u);
  for (int i = 0; i < 150; ++i) {
    EXPECT_EQ(scalars["train/loss"][i].first, i);
    EXPECT_EQ(scalars["train/loss"][i].second, static_cast<float>(r->losses[i]));
  }
  ASSERT_EQ(scalars["val/accuracy"].size(), 1u);  // eval_every 0: at the end only
  EXPECT_EQ(scalars["val/accuracy"][0].first, 149);
  EXPECT_EQ(scalars["val/accuracy"][0].second, static_cast<float>(r->val_accuracy));
}

}  // namespace
}  // namespace zeroshard
