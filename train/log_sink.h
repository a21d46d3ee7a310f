// LogSink: the one place a run's printed lines go through. Rank 0's sink
// writes each line to stdout and appends it to the run folder's log file
// (train/run_dir.h); every other rank's sink drops it, so a loop calls Line
// on every rank without asking who it is.
//
//   ZS_ASSIGN_OR_RETURN(LogSink log, LogSink::Open({.lead = comm.rank() == 0, .log_file = o.log_file}));
//   log.Line(absl::StrFormat("step %d loss %.4f\n", step, loss));
//
// With a progress bar on the terminal (train/progress.h) a line first clears
// the bar ("\r\33[2K"); the loop redraws the bar after the step (Bar), and the
// bar never goes to the log file. Every write is flushed: a run that stops
// early leaves what it printed.
//
// These lines are the run's output, not the library's diagnostics (those go
// through runtime/log.h). An embedder that owns stdout sets Options::writer
// (TrainOptions::output and ResNetTrainOptions::output for the jobs): each line
// then goes to the writer instead of stdout, the log file still gets it, and
// nothing is written to stdout (no progress bar either):
//
//   LogSink::Open({.log_file = path, .writer = [&](absl::string_view line) { ui.Append(line); }});
#ifndef ZEROSHARD_TRAIN_LOG_SINK_H_
#define ZEROSHARD_TRAIN_LOG_SINK_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace zeroshard {

class LogSink {
 public:
  // Receives each line as Line got it (with its newlines), on the lead rank's
  // thread that calls Line.
  using Writer = std::function<void(absl::string_view text)>;
  struct Options {
    bool lead = true;           // rank 0: the only rank that writes
    std::string log_file;       // appended to ("": none)
    bool to_stdout = true;      // false: the log file only (quiet runs)
    bool progress_bar = false;  // stdout holds a progress bar that lines clear first
    // Set: every line goes here instead of stdout (to_stdout and progress_bar
    // are then ignored: nothing goes to stdout); the log file still gets it.
    Writer writer;
  };
  // Opens the log file for appending on the lead rank.
  static absl::StatusOr<LogSink> Open(const Options& options);

  // `text` as given (it carries its newlines).
  void Line(const std::string& text) const;
  // The progress bar's line (ProgressLine), to stdout only.
  void Bar(const std::string& bar) const;
  // Whether Line writes anywhere (a caller may skip formatting otherwise).
  bool active() const { return print_ || writer_ != nullptr || log_ != nullptr; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  LogSink(bool print, bool progress_bar, std::FILE* log, Writer writer = nullptr)
      : print_(print), progress_bar_(progress_bar), writer_(std::move(writer)), log_(log) {}

  bool print_ = false;
  bool progress_bar_ = false;
  Writer writer_;
  std::unique_ptr<std::FILE, Closer> log_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_LOG_SINK_H_
