#include "zeroshard/train/loop.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/train/progress.h"

namespace zeroshard {

using autograd::Variable;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

absl::Status Invalid(const std::string& what) { return absl::InvalidArgumentError(absl::StrCat("LoopOptions.", what)); }

}  // namespace

// ---------------------------------------------------------------- the pieces

absl::StatusOr<std::vector<int64_t>> GatherPerRank(Communicator& comm, int64_t value) {
  ZS_ASSIGN_OR_RETURN(Tensor mine, Tensor::FromVector(std::vector<int64_t>{value}, {1}));
  ZS_ASSIGN_OR_RETURN(Tensor all, Tensor::Zeros({comm.size()}, DType::kI64));
  ZS_RETURN_IF_ERROR(comm.AllGather(mine, all));
  return all.ToVector<int64_t>();
}

int64_t BytesSent(const Communicator& comm, const Communicator& host) {
  return comm.bytes_sent() + (&host != &comm ? host.bytes_sent() : 0);
}

std::string StepLine(int64_t step, double loss, double lr, double ms_per_step, int64_t tokens_per_step) {
  if (tokens_per_step <= 0) return absl::StrFormat("step %d loss %.9g lr %.3e %.1f ms/step\n", step, loss, lr, ms_per_step);
  return absl::StrFormat("step %d loss %.9g lr %.3e %.1f ms/step %.0f tokens/s\n", step, loss, lr, ms_per_step,
                         tokens_per_step / (ms_per_step / 1000.0));
}

absl::StatusOr<StepRecorder> StepRecorder::Open(bool lead, const std::string& metrics_csv,
                                                const std::string& tensorboard_dir, int world_size,
                                                bool append_metrics, bool unique_event_file) {
  StepRecorder r;
  if (lead && !metrics_csv.empty()) {
    ZS_ASSIGN_OR_RETURN(r.metrics_, MetricsWriter::Open(metrics_csv, world_size, append_metrics));
  }
  if (lead && !tensorboard_dir.empty()) {
    const double now = WallTimeNow();
    absl::StatusOr<TensorBoardWriter> tb = TensorBoardWriter::Open(tensorboard_dir, now);
    for (int k = 1; unique_event_file && !tb.ok() && k < 16; ++k) {
      // Whatever made the first fail (the name taken, or the folder unwritable)
      // is reported if no other name works.
      absl::StatusOr<TensorBoardWriter> next = TensorBoardWriter::Open(tensorboard_dir, now, absl::StrCat(".", k));
      if (next.ok()) tb = std::move(next);
    }
    ZS_ASSIGN_OR_RETURN(r.tensorboard_, std::move(tb));
  }
  return r;
}

absl::Status StepRecorder::Write(const StepMetrics& r, const std::vector<std::pair<std::string, double>>& extra) {
  if (metrics_) ZS_RETURN_IF_ERROR(metrics_->Write(r));
  if (!tensorboard_) return absl::OkStatus();
  std::vector<std::pair<std::string, double>> scalars = {
      {"train/loss", r.loss}, {"train/lr", r.lr}, {"train/tokens_per_s", r.tokens_per_s},
      {"train/ms_per_step", r.ms_per_step}};
  if (r.val_loss) scalars.emplace_back("val/loss", *r.val_loss);
  for (size_t i = 0; i < r.peak_bytes.size(); ++i) {
    scalars.emplace_back(absl::StrCat("memory/peak_bytes_rank", i), static_cast<double>(r.peak_bytes[i]));
  }
  scalars.insert(scalars.end(), extra.begin(), extra.end());
  return tensorboard_->AddScalars(r.step, scalars);
}

absl::Status RemoveOrphans(bool lead, const std::string& checkpoint_dir, const LogSink& log) {
  if (!lead || checkpoint_dir.empty()) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(const std::vector<std::string> orphans, RemoveOrphanedSaves(checkpoint_dir));
  for (const std::string& path : orphans) {
    log.Line(absl::StrCat("  removed what an interrupted save left: ", path, "\n"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<LoadResult>> ResumeTraining(const std::string& resume, const std::string& checkpoint_dir,
                                                         ShardedModel& model, TrainStep& step, const LogSink& log,
                                                         const LoadOptions& load) {
  if (resume.empty()) return std::nullopt;
  std::string dir = resume;
  if (resume == "auto") {
    absl::StatusOr<std::string> latest = LatestCheckpoint(checkpoint_dir);
    if (!latest.ok()) {
      log.Line(absl::StrCat("  resume=auto: no checkpoint under ", checkpoint_dir, ", starting fresh\n"));
      return std::nullopt;
    }
    dir = *latest;
  }
  ZS_ASSIGN_OR_RETURN(LoadResult r, LoadCheckpoint(dir, model, &step.optim().optimizer(), load));
  step.set_step(r.state.step);
  if (!r.state.lr_scheduler.empty()) {
    ZS_ASSIGN_OR_RETURN(step.optim().scheduler(), optim::LrScheduler::FromStateDict(r.state.lr_scheduler));
  }
  if (!r.state.loss_scaler.empty()) {
    ZS_RETURN_IF_ERROR(step.optim().loss_scaler().LoadStateDict(r.state.loss_scaler));
  }
  log.Line(absl::StrFormat("  resumed from %s (%s, saved by %d ranks, %s) at step %d\n", dir,
                           StateDictTypeName(r.type), r.saved_world_size, r.saved_strategy, r.state.step));
  return std::optional<LoadResult>(std::move(r));
}

absl::Status LoopCheckpointer::Save(ShardedModel& model, optim::ShardedOptimizer* optimizer,
                                    const TrainingState& state) {
  const std::string dir = CheckpointDir(dir_, state.step);
  const double t0 = Now();
  if (async_) {
    // keep_last counts complete checkpoints, so the previous save is waited
    // for (Start waits for it anyway: one save at a time) and the old ones
    // removed before this one starts. The disk then never holds more than
    // keep_last complete checkpoints and the one in flight; pruned only at
    // the end, a long run kept every checkpoint it wrote.
    ZS_RETURN_IF_ERROR(async_saver_.Wait());
    if (lead_ && keep_last_ > 0) {
      ZS_RETURN_IF_ERROR(KeepLastCheckpoints(dir_, keep_last_));
    }
    ZS_RETURN_IF_ERROR(async_saver_.Start(dir, model, optimizer, state, save_));
  } else {
    ZS_RETURN_IF_ERROR(SaveCheckpoint(dir, model, optimizer, state, save_));
    if (lead_ && keep_last_ > 0) {
      ZS_RETURN_IF_ERROR(KeepLastCheckpoints(dir_, keep_last_));
    }
  }
  const double blocked = Now() - t0;
  blocked_seconds_ += blocked;
  last_ = dir;
  log_->Line(absl::StrFormat("saved %s (%s%s, training blocked %.1f ms)\n", dir, StateDictTypeName(save_.type),
                             async_ ? ", writing in the background" : "", blocked * 1e3));
  return absl::OkStatus();
}

absl::Status LoopCheckpointer::Finish() {
  ZS_RETURN_IF_ERROR(async_saver_.Wait());
  if (async_ && lead_ && keep_last_ > 0) {
    ZS_RETURN_IF_ERROR(KeepLastCheckpoints(dir_, keep_last_));
  }
  return absl::OkStatus();
}

TrainingState LoopTrainingState(TrainStep& step, const std::string& config) {
  TrainingState state;
  state.step = step.step();
  state.lr_scheduler = step.optim().scheduler().StateDict();
  if (step.optim().loss_scaling()) state.loss_scaler = step.optim().loss_scaler().StateDict();
  state.config = config;
  return state;
}

// ---------------------------------------------------------------- RunLoop

std::string LoopCheckpointDir(const LoopOptions& o) {
  return o.work_dir.empty() ? "" : o.work_dir + "/checkpoints";
}

absl::Status ValidateLoopOptions(const LoopOptions& o, const LoopHooks& hooks) {
  if (o.steps < 1) {
    return Invalid(absl::StrCat("steps: expected at least 1 (the optimizer steps to run to), found ", o.steps));
  }
  if (o.log_every < 0) return Invalid(absl::StrCat("log_every: expected >= 0 (0: no step lines), found ", o.log_every));
  if (o.save_every < 0) {
    return Invalid(absl::StrCat("save_every: expected >= 0 (0: no checkpoints), found ", o.save_every));
  }
  if (o.keep_last < 0) return Invalid(absl::StrCat("keep_last: expected >= 0 (0: keep all), found ", o.keep_last));
  if (o.keep_last > 0 && o.save_every == 0) {
    return Invalid(absl::StrCat("keep_last ", o.keep_last, ": expected save_every > 0 (keep_last counts the "
                                "checkpoints saved every save_every steps), found save_every 0"));
  }
  if (o.async_save && o.save_every == 0) {
    return Invalid("async_save: expected save_every > 0 (the checkpoints to save in the background), "
                   "found save_every 0");
  }
  if (o.save_every > 0 && o.work_dir.empty()) {
    return Invalid(absl::StrCat("save_every ", o.save_every, ": expected a work_dir to save checkpoints under "
                                "(work_dir/checkpoints), found work_dir \"\""));
  }
  if (o.resume == "auto" && o.work_dir.empty()) {
    return Invalid("resume \"auto\": expected a work_dir whose checkpoints/ to resume from, found work_dir \"\"");
  }
  if (o.eval_every < 0) {
    return Invalid(absl::StrCat("eval_every: expected >= 0 (0: only at the end), found ", o.eval_every));
  }
  if (o.eval_every > 0 && !hooks.eval) {
    return Invalid(absl::StrCat("eval_every ", o.eval_every, ": expected a LoopHooks::eval to call, found none"));
  }
  if (o.tokens_per_step < 0) {
    return Invalid(absl::StrCat("tokens_per_step: expected >= 0 (0: no tokens/s), found ", o.tokens_per_step));
  }
  return absl::OkStatus();
}

absl::StatusOr<LoopResult> RunLoop(ShardedModel& model, TrainStep& train_step, const LoopOptions& o,
                                   const LoopForward& forward, const LoopHooks& hooks) {
  ZS_RETURN_IF_ERROR(ValidateLoopOptions(o, hooks));
  if (!forward) return absl::InvalidArgumentError("RunLoop: expected a forward function, found none");
  Communicator& comm = model.world();
  Communicator& host = o.host != nullptr ? *o.host : comm;
  const bool lead = comm.rank() == 0;
  LogSink::Options log_options = o.log;
  log_options.lead = lead;
  log_options.progress_bar = o.progress_bar;
  ZS_ASSIGN_OR_RETURN(const LogSink log, LogSink::Open(log_options));
  if (lead && !o.work_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.work_dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat("LoopOptions.work_dir: cannot create ", o.work_dir, ": ",
                                                      ec.message()));
    }
  }
  const std::string checkpoint_dir = LoopCheckpointDir(o);
  // A save killed midway (kill -9) leaves a step-<n>.tmp directory or files of a
  // dead process; the lead removes them before this run saves or resumes there.
  if (o.save_every > 0 || !o.resume.empty()) ZS_RETURN_IF_ERROR(RemoveOrphans(lead, checkpoint_dir, log));
  ZS_ASSIGN_OR_RETURN(const std::optional<LoadResult> resumed,
                      ResumeTraining(o.resume, checkpoint_dir, model, train_step, log, o.load));
  if (resumed && hooks.on_resume) ZS_RETURN_IF_ERROR(hooks.on_resume(*resumed));

  LoopResult res;
  res.start_step = train_step.step();
  LoopCheckpointer saver(checkpoint_dir, o.save, o.async_save, o.keep_last, lead, log);
  int64_t last_saved = -1;
  auto save = [&](int64_t steps_done) -> absl::Status {
    TrainingState state = LoopTrainingState(train_step, o.config);
    state.step = steps_done;
    if (hooks.on_save) ZS_RETURN_IF_ERROR(hooks.on_save(state));
    ZS_RETURN_IF_ERROR(saver.Save(model, &train_step.optim().optimizer(), state));
    last_saved = steps_done;
    return absl::OkStatus();
  };
  ZS_ASSIGN_OR_RETURN(StepRecorder recorder,
                      StepRecorder::Open(lead, o.work_dir.empty() || !o.metrics_csv ? "" : o.work_dir + "/metrics.csv",
                                         o.work_dir.empty() || !o.tensorboard ? "" : o.work_dir + "/tensorboard",
                                         comm.size(), /*append_metrics=*/res.start_step > 0,
                                         /*unique_event_file=*/true));
  // Whether a row or the bar needs the step's figures: the same on every rank
  // (the per-rank peak memory is gathered from all of them).
  const bool figures = (!o.work_dir.empty() && (o.metrics_csv || o.tensorboard)) || o.progress_bar;
  Allocator* device = model.allocator();
  const bool scaling = train_step.optim().loss_scaling();
  // The TensorBoard scalars beyond the metrics.csv row.
  auto step_scalars = [&](const StepResult& s) {
    std::vector<std::pair<std::string, double>> v = {{"train/grad_norm", s.grad_norm}};
    if (scaling) v.emplace_back("train/loss_scale", s.loss_scale);
    return v;
  };

  // The training steps' traffic only (not saves' or evaluations').
  int64_t step_bytes = 0;
  const double start = Now();
  double window_start = start;
  int64_t window_first = res.start_step;  // the first step of the current log line's window
  StepMetrics row;
  StepResult r;
  for (int64_t step = res.start_step; step < o.steps; ++step) {
    const double step_start = Now();
    const int64_t bytes_before = BytesSent(comm, host);
    ZS_ASSIGN_OR_RETURN(r, train_step.Run([&](int64_t m) { return forward(step, m); }));
    step_bytes += BytesSent(comm, host) - bytes_before;
    if (r.skipped) {
      ++res.skipped_steps;
      log.Line(absl::StrFormat("step %d skipped: gradients overflowed (%s)\n", step,
                               train_step.optim().loss_scaler().ToString()));
    }
    res.losses.push_back(r.loss);
    if (figures) {
      const double ms = (Now() - step_start) * 1000.0;
      int64_t step_peak = 0;
      if (device != nullptr) {
        step_peak = device->stats().peak_bytes_in_use;
        device->ResetPeak();
      }
      res.peak_bytes = std::max(res.peak_bytes, step_peak);
      ZS_ASSIGN_OR_RETURN(std::vector<int64_t> peaks, GatherPerRank(host, step_peak));
      row = StepMetrics{.step = step, .loss = r.loss, .lr = r.lr,
                        .tokens_per_s = o.tokens_per_step > 0 ? o.tokens_per_step / (ms / 1000.0) : 0.0,
                        .ms_per_step = ms, .peak_bytes = std::move(peaks)};
    }
    if (o.log_every > 0 && ((step + 1) % o.log_every == 0 || step == res.start_step || step + 1 == o.steps)) {
      const double now = Now();
      const double ms = (now - window_start) * 1000.0 / static_cast<double>(step - window_first + 1);
      window_start = now;
      window_first = step + 1;
      log.Line(StepLine(step, r.loss, r.lr, ms, o.tokens_per_step));
    }
    if (o.save_every > 0 && (step + 1) % o.save_every == 0) ZS_RETURN_IF_ERROR(save(step + 1));
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && step + 1 < o.steps) {
      ZS_ASSIGN_OR_RETURN(const double vl, hooks.eval(step));
      log.Line(absl::StrFormat("step %d val loss %.6f\n", step, vl));
      row.val_loss = vl;
      window_start = Now();  // the evaluation's time is not a step's
      window_first = step + 1;
    }
    if (hooks.on_step) ZS_RETURN_IF_ERROR(hooks.on_step(r));
    if (lead && o.progress_bar) {
      log.Bar(ProgressLine({.step = step, .steps = o.steps, .loss = r.loss, .lr = r.lr,
                            .tokens_per_s = row.tokens_per_s, .ms_per_step = row.ms_per_step, .mfu = -1.0,
                            .peak_bytes = row.peak_bytes}));
    }
    if (recorder.active() && step + 1 < o.steps) {  // the last row waits for the final evaluation
      ZS_RETURN_IF_ERROR(recorder.Write(row, step_scalars(r)));
    }
  }
  const bool ran = !res.losses.empty();
  if (ran && o.save_every > 0 && o.save_at_end && last_saved != o.steps) ZS_RETURN_IF_ERROR(save(o.steps));
  ZS_RETURN_IF_ERROR(saver.Finish());
  res.last_checkpoint = saver.last_checkpoint();
  res.save_blocked_seconds = saver.blocked_seconds();
  res.seconds = Now() - start;
  if (hooks.eval) {
    ZS_ASSIGN_OR_RETURN(const double vl, hooks.eval(o.steps - 1));
    res.final_val_loss = vl;
    log.Line(absl::StrFormat("final val loss %.6f\n", vl));
  }
  if (recorder.active() && ran) {
    row.val_loss = res.final_val_loss;
    ZS_RETURN_IF_ERROR(recorder.Write(row, step_scalars(r)));
  }
  if (device != nullptr) res.peak_bytes = std::max(res.peak_bytes, device->stats().peak_bytes_in_use);
  const int64_t steps_run = static_cast<int64_t>(res.losses.size());
  std::string done = absl::StrFormat("done: %d steps in %.1f s", steps_run, res.seconds);
  if (o.tokens_per_step > 0 && res.seconds > 0) {
    absl::StrAppendFormat(&done, " (%.0f tokens/s)", static_cast<double>(o.tokens_per_step * steps_run) / res.seconds);
  }
  if (ran) absl::StrAppendFormat(&done, ", final train loss %.6f", res.losses.back());
  if (!res.last_checkpoint.empty()) absl::StrAppend(&done, ", last checkpoint ", res.last_checkpoint);
  res.comm_bytes_per_step = steps_run > 0 ? step_bytes / steps_run : 0;
  absl::StrAppend(&done, ", comm_bytes_per_step ", res.comm_bytes_per_step);
  log.Line(done + "\n");
  return res;
}

}  // namespace zeroshard
