// The library's log (runtime/log.h): the default handler's exact lines on
// stderr, a replaced handler getting every field, restoring the default,
// several threads logging at once (every line intact and attributable, the
// lines of one event together), newlines and control characters escaped, a
// handler that logs, and ZS_CHECK reporting through the handler before it
// aborts.
#include "zeroshard/runtime/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "zeroshard/runtime/check.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Redirects file descriptor 2 to a temporary file while alive; Text() gives
// back what was written. fflush(stderr) around the switch keeps stdio's view
// consistent (stderr is unbuffered, so this only matters if a test changed it).
class StderrCapture {
 public:
  StderrCapture() : path_(::testing::TempDir() + "/log_test_stderr_" + std::to_string(::getpid())) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0) << path_;
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~StderrCapture() { Restore(); }

  std::string Text() {
    Restore();
    std::ifstream f(path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

 private:
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::string path_;
  int saved_ = -1;
};

// Every test leaves the default handler installed.
class LogTest : public ::testing::Test {
 protected:
  void TearDown() override { SetLogHandler(nullptr); }
};

TEST_F(LogTest, DefaultHandlerWritesOnePrefixedLinePerEventAndOnePerDetailLine) {
  StderrCapture capture;
  Log(LogLevel::kWarning, "allocator", "allocator 'cpu' destroyed with 4.00 KiB still in use");
  Log(LogLevel::kError, "collectives", "DEADLINE_EXCEEDED: all_gather #5 timed out",
      "last 2 collectives of rank 1 of 4 (local), oldest first:\n  #4 barrier completed\n\n"
      "  #5 all_gather timed out\n");
  Log(LogLevel::kDebug, "stream", "d");
  Log(LogLevel::kInfo, "stream", "i");
  Log(LogLevel::kFatal, "check", "f");
  EXPECT_EQ(capture.Text(),
            "zeroshard level=warning source=allocator: allocator 'cpu' destroyed with 4.00 KiB still in use\n"
            "zeroshard level=error source=collectives: DEADLINE_EXCEEDED: all_gather #5 timed out\n"
            "zeroshard level=error source=collectives | last 2 collectives of rank 1 of 4 (local), oldest first:\n"
            "zeroshard level=error source=collectives |   #4 barrier completed\n"
            "zeroshard level=error source=collectives |\n"
            "zeroshard level=error source=collectives |   #5 all_gather timed out\n"
            "zeroshard level=debug source=stream: d\n"
            "zeroshard level=info source=stream: i\n"
            "zeroshard level=fatal source=check: f\n");
}

TEST_F(LogTest, NewlinesAndControlCharactersAreEscapedNotSplit) {
  // The message: \n, \r, a backslash and other control characters escaped
  // (reversibly: the backslash doubled), a tab kept.
  EXPECT_EQ(FormatLogEvent({.level = LogLevel::kError, .source = "stream",
                            .message = "two\nlines\r, a \\ and \x01\x7f\tend"}),
            "zeroshard level=error source=stream: two\\nlines\\r, a \\\\ and \\x01\\x7f\tend\n");
  // The detail is split at each \n (a final one adds no empty line); a \r
  // inside a detail line is escaped like the message's.
  EXPECT_EQ(FormatLogEvent({.level = LogLevel::kInfo, .source = "x", .message = "m", .detail = "a\r\nb"}),
            "zeroshard level=info source=x: m\n"
            "zeroshard level=info source=x | a\\r\n"
            "zeroshard level=info source=x | b\n");
  EXPECT_EQ(FormatLogEvent({.level = LogLevel::kInfo, .source = "x", .message = "m", .detail = "\n"}),
            "zeroshard level=info source=x: m\n"
            "zeroshard level=info source=x |\n");
  // A source is one token: other characters become '_'; empty is "unknown".
  EXPECT_EQ(FormatLogEvent({.level = LogLevel::kInfo, .source = "my lib: io/x", .message = ""}),
            "zeroshard level=info source=my_lib__io_x: \n");
  EXPECT_EQ(FormatLogEvent({.level = LogLevel::kInfo, .source = "", .message = "m"}),
            "zeroshard level=info source=unknown: m\n");
  // Through the default handler, a message with newlines stays one line.
  StderrCapture capture;
  Log(LogLevel::kError, "collectives", "first\nsecond\n");
  EXPECT_EQ(capture.Text(), "zeroshard level=error source=collectives: first\\nsecond\\n\n");
}

TEST_F(LogTest, AReplacedHandlerGetsEveryFieldAndStderrNothing) {
  struct Seen {
    LogLevel level;
    std::string source, message, detail;
  };
  std::vector<Seen> seen;
  StderrCapture capture;
  // The default was installed: the previous handler is empty.
  LogHandler previous = SetLogHandler([&](const LogEvent& e) {
    seen.push_back({e.level, std::string(e.source), std::string(e.message), std::string(e.detail)});
  });
  EXPECT_FALSE(previous);
  Log(LogLevel::kError, "collectives", "ABORTED: rank 1", "ring line 1\nring line 2\n");
  Log(LogLevel::kWarning, "allocator", "leak");
  EXPECT_EQ(capture.Text(), "");
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].level, LogLevel::kError);
  EXPECT_EQ(seen[0].source, "collectives");
  EXPECT_EQ(seen[0].message, "ABORTED: rank 1");
  EXPECT_EQ(seen[0].detail, "ring line 1\nring line 2\n");  // as given: the handler formats
  EXPECT_EQ(seen[1].level, LogLevel::kWarning);
  EXPECT_EQ(seen[1].source, "allocator");
  EXPECT_EQ(seen[1].message, "leak");
  EXPECT_EQ(seen[1].detail, "");
}

TEST_F(LogTest, SetLogHandlerReturnsThePreviousOneAndNullptrRestoresTheDefault) {
  std::vector<std::string> a, b;
  SetLogHandler([&](const LogEvent& e) { a.emplace_back(e.message); });
  LogHandler was_a = SetLogHandler([&](const LogEvent& e) { b.emplace_back(e.message); });
  ASSERT_TRUE(was_a);
  Log(LogLevel::kInfo, "t", "to b");
  // Putting the returned handler back restores it.
  LogHandler was_b = SetLogHandler(std::move(was_a));
  ASSERT_TRUE(was_b);
  Log(LogLevel::kInfo, "t", "to a");
  EXPECT_THAT(a, ElementsAre("to a"));
  EXPECT_THAT(b, ElementsAre("to b"));
  // nullptr: the default again, and what it replaced comes back.
  StderrCapture capture;
  LogHandler was_a_again = SetLogHandler(nullptr);
  ASSERT_TRUE(was_a_again);
  Log(LogLevel::kInfo, "t", "to stderr");
  EXPECT_EQ(capture.Text(), "zeroshard level=info source=t: to stderr\n");
  EXPECT_THAT(a, ElementsAre("to a"));
  // With the default installed, SetLogHandler(nullptr) returns an empty one.
  EXPECT_FALSE(SetLogHandler(nullptr));
}

// A handler that logs (or that calls code that logs) does not recurse: the
// inner event goes to the default handler.
TEST_F(LogTest, AnEventLoggedInsideTheHandlerGoesToTheDefault) {
  int calls = 0;
  SetLogHandler([&](const LogEvent& e) {
    ++calls;
    Log(LogLevel::kInfo, "inner", absl::StrCat("about ", e.message));
  });
  StderrCapture capture;
  Log(LogLevel::kInfo, "outer", "m");
  EXPECT_EQ(capture.Text(), "zeroshard level=info source=inner: about m\n");
  EXPECT_EQ(calls, 1);
}

// kThreads threads log kEvents events each, every event with kDetail detail
// lines, through the default handler into one file. Every line must be
// whole, carry its event's prefix, and the lines of an event must be
// consecutive: the default handler writes an event with one fwrite under a
// mutex. The detail lines are long (~300 bytes, an event ~1.5 KB) so that an
// unsynchronised writer would split them across stdio's internal writes.
TEST_F(LogTest, ThreadsLoggingAtOnceNeverInterleaveLines) {
  constexpr int kThreads = 8, kEvents = 200, kDetail = 4;
  const std::string pad(300, '=');
  StderrCapture capture;
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEvents; ++i) {
          std::string detail;
          for (int d = 0; d < kDetail; ++d) absl::StrAppend(&detail, "t", t, " e", i, " d", d, " ", pad, "\n");
          Log(LogLevel::kWarning, absl::StrCat("thread", t), absl::StrCat("event ", i), detail);
        }
      });
    }
    for (std::thread& th : threads) th.join();
  }
  const std::string text = capture.Text();
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  std::vector<std::string> lines = absl::StrSplit(text.substr(0, text.size() - 1), '\n');
  ASSERT_EQ(lines.size(), size_t{kThreads} * kEvents * (1 + kDetail));
  std::map<int, int> next_event;  // per thread: events must also arrive in its order
  for (size_t k = 0; k < lines.size(); k += 1 + kDetail) {
    const std::string& head = lines[k];
    int t = -1, i = -1;
    ASSERT_EQ(std::sscanf(head.c_str(), "zeroshard level=warning source=thread%d: event %d", &t, &i), 2)
        << "line " << k << ": " << head;
    ASSERT_EQ(head, absl::StrCat("zeroshard level=warning source=thread", t, ": event ", i));
    ASSERT_EQ(i, next_event[t]++) << "thread " << t;
    for (int d = 0; d < kDetail; ++d) {
      ASSERT_EQ(lines[k + 1 + d], absl::StrCat("zeroshard level=warning source=thread", t, " | t", t, " e", i,
                                               " d", d, " ", pad))
          << "line " << k + 1 + d;
    }
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(next_event[t], kEvents) << "thread " << t;
}

// A replaced handler is called on the logging threads themselves, from
// several at once: every event arrives exactly once.
TEST_F(LogTest, AReplacedHandlerIsCalledFromEveryLoggingThread) {
  constexpr int kThreads = 6, kEvents = 500;
  std::mutex mu;
  std::map<std::string, int> count;
  std::map<std::thread::id, int> callers;
  SetLogHandler([&](const LogEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    ++count[absl::StrCat(e.source, "/", e.message)];
    ++callers[std::this_thread::get_id()];
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kEvents; ++i) Log(LogLevel::kInfo, absl::StrCat("t", t), absl::StrCat(i));
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(count.size(), size_t{kThreads} * kEvents);
  for (const auto& [key, n] : count) EXPECT_EQ(n, 1) << key;
  EXPECT_EQ(callers.size(), size_t{kThreads});
}

TEST(LogLevelName, NamesEveryLevel) {
  EXPECT_EQ(LogLevelName(LogLevel::kDebug), "debug");
  EXPECT_EQ(LogLevelName(LogLevel::kInfo), "info");
  EXPECT_EQ(LogLevelName(LogLevel::kWarning), "warning");
  EXPECT_EQ(LogLevelName(LogLevel::kError), "error");
  EXPECT_EQ(LogLevelName(LogLevel::kFatal), "fatal");
}

// ZS_CHECK reports through the log (the default: a fatal line on stderr),
// then aborts; with a replaced handler the handler gets it and the process
// still aborts.
TEST(LogDeathTest, ZsCheckReportsThroughTheHandlerThenAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int two = 2;
  EXPECT_DEATH(ZS_CHECK(two == 3, "two is ", two),
               "zeroshard level=fatal source=check: .*log_test.cc:[0-9]+: ZS_CHECK\\(two == 3\\) failed: two is 2");
  EXPECT_DEATH(
      {
        SetLogHandler([](const LogEvent& e) {
          const std::string line = absl::StrCat("custom handler got ", LogLevelName(e.level), " from ",
                                                e.source, ": ", e.message, "\n");
          if (::write(2, line.data(), line.size()) < 0) std::abort();
        });
        ZS_CHECK(two == 4);
      },
      "custom handler got fatal from check: .*ZS_CHECK\\(two == 4\\) failed: \n");
}

}  // namespace
}  // namespace zeroshard
