// Log: the one way the library reports what it cannot return as a Status
// (issue 22): a failure inside a destructor, a collective's ring of recent
// operations on an error, the watchdog's flight records, a failed ZS_CHECK.
// Nothing in the library writes to stderr or stdout itself
// (tools/check_no_direct_output.sh fails the build's tests if it does); every
// such event goes through the process's log handler, which an embedder may
// replace:
//
//   // Send the library's events to your own logger (and keep the old handler):
//   zeroshard::LogHandler previous = zeroshard::SetLogHandler([](const zeroshard::LogEvent& e) {
//     my_logger.Write(LogLevelName(e.level), e.source, e.message, e.detail);
//   });
//   ...
//   zeroshard::SetLogHandler(std::move(previous));  // or nullptr: the default again
//
//   // Inside the library:
//   Log(LogLevel::kError, "stream", absl::StrCat("destroying a stream: ", s.ToString()));
//
// The default handler (DefaultLogHandler) writes each event to stderr as lines
// a program can parse, every one starting with the same identifying prefix:
//
//   zeroshard level=error source=collectives: DEADLINE_EXCEEDED: all_gather #5 ...
//   zeroshard level=error source=collectives | last 4 collectives of rank 1 of 4 (local)
//   zeroshard level=error source=collectives |   #2 all_gather f32 x 1024 completed ...
//
// The first line is `zeroshard level=<level> source=<source>: <message>`; each
// line of the detail follows as `zeroshard level=<level> source=<source> | <line>`
// (an empty detail line as `... source=<source> |`). So `grep '^zeroshard '`
// finds every line the library wrote, and `cut -d' ' -f2-3` says whose it is.
// Rules that keep it one event per line:
//   - message: newlines are escaped, not replaced: `\n` becomes the two
//     characters backslash-n, `\r` backslash-r, a backslash becomes two
//     backslashes, and any other control character (below 0x20 except tab, and
//     0x7f) becomes `\xHH`; so the text can be recovered exactly.
//   - detail: split at each '\n' (a final '\n' ends the last line, it adds no
//     empty one); each line escaped like the message (it has no '\n' left).
//   - source: letters, digits, '_', '-' and '.' are kept, anything else
//     becomes '_'; an empty source is written as "unknown".
// Each event is one fwrite of all its lines, then fflush, under a mutex: lines
// of events logged by several threads at once never interleave.
//
// Threads. Log may be called from any thread: the training threads, the
// communicators' threads (in-process ranks, MPI and NCCL progress), the
// watchdog's thread, and from destructors at process exit. So a handler is
// called on any of those threads, possibly from several at once, and must be
// thread-safe itself; it should not block for long (the watchdog calls it
// just before it ends the process, ZS_CHECK just before it aborts). Log calls
// the handler outside any lock of the log's own: a handler may call
// SetLogHandler, and an event it logs itself (or any Log on the thread while
// the handler runs) goes to the default handler instead of recursing.
// SetLogHandler is thread-safe; a Log that started before it may still finish
// in the previous handler.
#ifndef ZEROSHARD_RUNTIME_LOG_H_
#define ZEROSHARD_RUNTIME_LOG_H_

#include <functional>
#include <string>

#include "absl/strings/string_view.h"

namespace zeroshard {

enum class LogLevel {
  kDebug,
  kInfo,
  kWarning,  // something was wrong and was worked around (e.g. segments kept, not freed under a user)
  kError,    // an operation failed and no Status could carry it (destructors, a collective's ring)
  kFatal,    // the library ends the process right after this event (ZS_CHECK, the watchdog)
};

// "debug", "info", "warning", "error", "fatal": the `level=` of the default format.
absl::string_view LogLevelName(LogLevel level);

// One event. The views are valid only during the handler's call: copy what
// you keep.
struct LogEvent {
  LogLevel level = LogLevel::kInfo;
  // Which part of the library: "allocator", "caching_allocator", "collectives",
  // "watchdog", "stream", "check" (a failed ZS_CHECK), ...
  absl::string_view source;
  // One line of text (a newline inside is the caller's mistake, escaped by the
  // default handler).
  absl::string_view message;
  // Optional multi-line text that belongs to the event (a collective ring dump,
  // the flight records); empty when there is none.
  absl::string_view detail;
};

using LogHandler = std::function<void(const LogEvent&)>;

// Installs `handler` for every later event of the process; nullptr restores
// the default. Returns the handler it replaces (nullptr if that was the
// default), so passing the result back restores the earlier state.
LogHandler SetLogHandler(LogHandler handler);

// Reports one event through the current handler.
void Log(LogLevel level, absl::string_view source, absl::string_view message,
         absl::string_view detail = {});

// The default handler: FormatLogEvent(event) to stderr, one fwrite and an
// fflush under a process-wide mutex. A replacement may call it too (to tee).
void DefaultLogHandler(const LogEvent& event);

// The default handler's text for `event`: all its lines, each ending in '\n'.
std::string FormatLogEvent(const LogEvent& event);

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_LOG_H_
