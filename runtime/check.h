// ZS_CHECK: aborts with file, line and a message when a programmer invariant fails.
//
//   ZS_CHECK(offset + n <= numel, "slice [", offset, ", ", offset + n, ") past ", numel);
//
// Only for invariants the library itself guarantees. Anything a user can get
// wrong (shapes, dtypes, config, I/O) returns an absl::Status instead.
//
// The failure is reported through the log (runtime/log.h) as a kFatal event of
// source "check", message "<file>:<line>: ZS_CHECK(<cond>) failed: <message>",
// then the process aborts, whatever the handler did (unless it never returns).
#ifndef ZEROSHARD_RUNTIME_CHECK_H_
#define ZEROSHARD_RUNTIME_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/log.h"

namespace zeroshard::internal {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond,
                                     const std::string& message) {
  ::zeroshard::Log(LogLevel::kFatal, "check",
                   ::absl::StrCat(file, ":", line, ": ZS_CHECK(", cond, ") failed: ", message));
  std::abort();
}

}  // namespace zeroshard::internal

#define ZS_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      ::zeroshard::internal::CheckFailed(__FILE__, __LINE__, #cond,                       \
                                         ::absl::StrCat("" __VA_OPT__(, ) __VA_ARGS__));  \
    }                                                                                     \
  } while (0)

#endif  // ZEROSHARD_RUNTIME_CHECK_H_
