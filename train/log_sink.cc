#include "zeroshard/train/log_sink.h"

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::StatusOr<LogSink> LogSink::Open(const Options& options) {
  if (!options.lead) return LogSink(false, false, nullptr);
  std::FILE* log = nullptr;
  if (!options.log_file.empty() && (log = std::fopen(options.log_file.c_str(), "a")) == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("cannot append to the log ", options.log_file));
  }
  return LogSink(options.to_stdout, options.to_stdout && options.progress_bar, log);
}

void LogSink::Line(const std::string& text) const {
  if (print_) {
    if (progress_bar_) std::fputs("\r\33[2K", stdout);  // over the bar; it is redrawn after the step
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
  if (log_ != nullptr) {
    std::fputs(text.c_str(), log_.get());
    std::fflush(log_.get());
  }
}

void LogSink::Bar(const std::string& bar) const {
  if (!print_) return;
  std::fputs(bar.c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace zeroshard
