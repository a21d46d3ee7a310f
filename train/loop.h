// RunLoop: the training loop of any model, around TrainStep
// (train/train_step.h): resume, the steps, metrics.csv, TensorBoard scalars,
// the log lines (through LogSink, so an embedder's writer gets them), the
// progress bar, an evaluation every eval_every steps, and checkpoints every
// save_every steps and at the end (sync or in the background), keeping the
// newest keep_last. The user gives the forward of one micro-batch of a step;
// the data is theirs, a function of (step, micro_step, rank), so a resumed run
// sees the batches the uninterrupted one would have.
//
//   ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(model, comm, sharding));
//   ZS_ASSIGN_OR_RETURN(TrainStep step, TrainStep::Create(*sharded, step_options));
//   ZS_ASSIGN_OR_RETURN(LoopResult r, RunLoop(*sharded, step, {
//       .steps = 300, .log_every = 10, .work_dir = "runs/mine",   // or RunDir::path()
//       .save_every = 100, .keep_last = 2, .async_save = true, .resume = "auto",
//       .log = {.writer = [&](absl::string_view line) { ui.Append(line); }}},
//     [&](int64_t s, int64_t micro_step) -> absl::StatusOr<Variable> {
//       auto [x, y] = MyBatch(s, micro_step, comm.rank());     // this rank's rows
//       ZS_ASSIGN_OR_RETURN(Variable logits, (*model)(Variable(x)));
//       return ops::CrossEntropy(logits, y);
//     }));
//   // r.losses (this call's steps, global means), r.last_checkpoint
//
// What it writes under work_dir (the layout of a RunDir, train/run_dir.h; an
// empty work_dir writes no file and allows no checkpoint):
//   metrics.csv                     one row per step (train/metrics.h), rank 0
//   tensorboard/events.out.tfevents.*  the row as scalars (train/*, val/loss,
//                                   memory/peak_bytes_rank<r>) plus
//                                   train/grad_norm (and train/loss_scale under
//                                   loss scaling), rank 0
//   checkpoints/step-<n>            checkpoint/checkpoint.h, every rank's part
// The log file is LoopOptions::log.log_file (RunDir::log_path() for a run folder).
// A resumed run appends to metrics.csv (rows of steps after the checkpoint
// that the stopped run had written come twice) and adds an event file.
//
// The order each step, as the GPT job's loop (train/trainer.cc) has it, whose
// pieces below it shares (ResumeTraining, LoopCheckpointer, StepRecorder,
// StepLine): TrainStep::Run; the skipped-step line; the row's time and
// every rank's peak memory (when a row or the bar needs them); the log line
// (step 0, every log_every, the last); the checkpoint (every save_every);
// the evaluation (every eval_every, not on the last step: the final one
// follows the loop); on_step; the progress bar; the row (the last one waits
// for the final evaluation). After the loop: the end checkpoint, the wait for
// a background save and keep_last, the final evaluation, "done".
//
// Every rank calls RunLoop with the same options (the figures and saves are
// collective); rank 0 writes the files and prints.
#ifndef ZEROSHARD_TRAIN_LOOP_H_
#define ZEROSHARD_TRAIN_LOOP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/train/log_sink.h"
#include "zeroshard/train/metrics.h"
#include "zeroshard/train/tensorboard.h"
#include "zeroshard/train/train_step.h"

namespace zeroshard {

struct LoopOptions {
  // Run until this many optimizer steps are done (a resumed run continues to
  // it from the checkpoint's step; a TrainStep that already ran continues from
  // its step()). At least 1.
  int64_t steps = 0;
  // A step line at step 0, every log_every steps and at the last; 0: none.
  int log_every = 10;
  // Outputs and checkpoints under this folder (created); "": none.
  std::string work_dir;
  bool metrics_csv = true;   // work_dir/metrics.csv
  bool tensorboard = true;   // work_dir/tensorboard/
  // Checkpoints into work_dir/checkpoints/step-<n> every save_every steps
  // (0: none) and after the last step (save_at_end). keep_last > 0 keeps the
  // newest keep_last complete ones (async: at most keep_last + the one being
  // written). async_save: AsyncCheckpointer (training blocks for the snapshot only).
  int64_t save_every = 0;
  bool save_at_end = true;
  int keep_last = 0;
  bool async_save = false;
  SaveOptions save;          // sharded or full, tied parameters once, ...
  // "" (fresh), "auto" (the newest complete checkpoint under
  // work_dir/checkpoints, fresh when there is none) or a checkpoint folder.
  // Restores the model's shards, the optimizer state, the step, the LR
  // schedule and the loss scaler.
  std::string resume;
  LoadOptions load;
  // Call the eval hook every eval_every steps (0: only at the end) when given.
  int64_t eval_every = 0;
  // Tokens (or samples) of one step over all ranks: the tokens/s figures; 0: not shown.
  int64_t tokens_per_step = 0;
  // Rank 0 redraws a progress bar on stdout after each step (train/progress.h;
  // not with a log writer).
  bool progress_bar = false;
  // Where the lines go (its `lead` is set from the rank; `progress_bar` from above).
  LogSink::Options log;
  // Kept in each checkpoint's training state (e.g. the options as text).
  std::string config;
  // Carries the host-side figures (per-rank peak memory): the model's world when null.
  Communicator* host = nullptr;
};

// Optional callbacks; each runs on every rank.
struct LoopHooks {
  // After each step, its checkpoint and its evaluation (the order above). An
  // error stops the loop.
  std::function<absl::Status(const StepResult& result)> on_step;
  // Returns the validation loss (the same on every rank), e.g. from ValStep;
  // `step` is the step just finished (steps - 1 for the final one).
  std::function<absl::StatusOr<double>(int64_t step)> eval;
  // Adds to the state a checkpoint saves (e.g. rng_offsets, extra); collective.
  std::function<absl::Status(TrainingState& state)> on_save;
  // Restores what on_save added, after the loop's own state is restored.
  std::function<absl::Status(const LoadResult& loaded)> on_resume;
};

struct LoopResult {
  std::vector<double> losses;         // each step this call ran, global means
  int64_t start_step = 0;             // > 0 when resumed
  int64_t skipped_steps = 0;          // overflowed (loss scaling) steps of this call
  std::optional<double> final_val_loss;  // with an eval hook
  std::string last_checkpoint;        // "" when none was saved
  double seconds = 0;                 // the loop's wall time
  double save_blocked_seconds = 0;    // of it, inside saves (async: the snapshots)
  int64_t peak_bytes = 0;             // this rank's allocator high-water mark over the steps
  // Bytes this rank sent per step of this call, as the communicators count
  // them (Note [Bytes sent] in collectives/communicator.h: the model's world
  // with its splits, and LoopOptions::host when it is another); the "done:"
  // line's comm_bytes_per_step, as the GPT job's (train/trainer.cc).
  int64_t comm_bytes_per_step = 0;
};

// The user's forward of micro-batch `micro_step` of step `step`: its loss, a 0-d Variable.
using LoopForward = std::function<absl::StatusOr<autograd::Variable>(int64_t step, int64_t micro_step)>;

// Runs on every rank; every rank returns the same losses.
absl::StatusOr<LoopResult> RunLoop(ShardedModel& model, TrainStep& step, const LoopOptions& options,
                                   const LoopForward& forward, const LoopHooks& hooks = {});

// InvalidArgument naming the option, what was expected and what was found.
absl::Status ValidateLoopOptions(const LoopOptions& options, const LoopHooks& hooks = {});

// work_dir/checkpoints ("" for an empty work_dir).
std::string LoopCheckpointDir(const LoopOptions& options);

// ---------------------------------------------------------------- the pieces
// (RunLoop's and the GPT job's, train/trainer.cc)

// Every rank's `value`, in rank order (one all-gather).
absl::StatusOr<std::vector<int64_t>> GatherPerRank(Communicator& comm, int64_t value);

// What this rank has sent so far (Note [Bytes sent], collectives/communicator.h)
// on the model's communicator, and on `host` where it is another: the
// difference around a step is the done line's comm_bytes_per_step.
int64_t BytesSent(const Communicator& comm, const Communicator& host);

// "step 12 loss 2.31 lr 9.000e-04 190.0 ms/step 5300 tokens/s\n" (tokens/s
// only when tokens_per_step > 0).
std::string StepLine(int64_t step, double loss, double lr, double ms_per_step, int64_t tokens_per_step);

// Rank 0's metrics.csv and TensorBoard event file; writes nothing elsewhere.
class StepRecorder {
 public:
  // "" for either: that file is not written. `append_metrics`: continue an
  // existing metrics.csv (MetricsWriter::Open's append; a resumed run).
  // `unique_event_file`: when this second's event file name is taken (a run
  // of the same second in the same folder), the next free of <name>.1 ..
  // <name>.15 instead of an error.
  static absl::StatusOr<StepRecorder> Open(bool lead, const std::string& metrics_csv,
                                           const std::string& tensorboard_dir, int world_size,
                                           bool append_metrics = false, bool unique_event_file = false);
  // Whether a file is written (on rank 0).
  bool active() const { return metrics_.has_value() || tensorboard_.has_value(); }
  // One row; its scalars train/loss, train/lr, train/tokens_per_s,
  // train/ms_per_step, val/loss (when set), memory/peak_bytes_rank<r>, then
  // `extra` (tag, value), at the row's step.
  absl::Status Write(const StepMetrics& row, const std::vector<std::pair<std::string, double>>& extra = {});

 private:
  std::optional<MetricsWriter> metrics_;
  std::optional<TensorBoardWriter> tensorboard_;
};

// On the lead rank, when `checkpoint_dir` is not empty: removes what saves
// killed midway left there (RemoveOrphanedSaves), one log line each.
absl::Status RemoveOrphans(bool lead, const std::string& checkpoint_dir, const LogSink& log);

// Resume ("" nothing, "auto" the newest complete checkpoint under
// checkpoint_dir, or a checkpoint folder): loads the model's shards and the
// optimizer state, sets the step, the LR schedule and the loss scaler, logs
// where it resumed. nullopt when it starts fresh.
absl::StatusOr<std::optional<LoadResult>> ResumeTraining(const std::string& resume, const std::string& checkpoint_dir,
                                                         ShardedModel& model, TrainStep& step, const LogSink& log,
                                                         const LoadOptions& load = {});

// The checkpoint cadence: saves into checkpoint_dir/step-<n>, sync or in the
// background, applies keep_last, logs each save.
class LoopCheckpointer {
 public:
  LoopCheckpointer(std::string checkpoint_dir, SaveOptions save, bool async, int keep_last, bool lead,
                   const LogSink& log)
      : dir_(std::move(checkpoint_dir)), save_(save), async_(async), keep_last_(keep_last), lead_(lead), log_(&log) {}
  // Collective. `state.step` is the step count saved.
  absl::Status Save(ShardedModel& model, optim::ShardedOptimizer* optimizer, const TrainingState& state);
  // Collective: waits for a background save and applies keep_last.
  absl::Status Finish();

  const std::string& last_checkpoint() const { return last_; }
  double blocked_seconds() const { return blocked_seconds_; }

 private:
  std::string dir_;
  SaveOptions save_;
  bool async_;
  int keep_last_;
  bool lead_;
  const LogSink* log_;
  AsyncCheckpointer async_saver_;
  std::string last_;
  double blocked_seconds_ = 0;
};

// The loop's own state of a checkpoint: the step, the LR schedule, the loss
// scaler (under loss scaling), `config`.
TrainingState LoopTrainingState(TrainStep& step, const std::string& config);

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_LOOP_H_
