// LogSink: rank 0's lines go to the log file (appended) as given; the other
// ranks' sinks write nothing; an unwritable log is an error; a writer takes
// stdout's place.
#include "zeroshard/train/log_sink.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(LogSink, LeadAppendsEveryLineOthersWriteNothing) {
  const std::string path = ::testing::TempDir() + "/log_sink_test.log";
  std::remove(path.c_str());
  {
    std::ofstream(path) << "header\n";
    ZS_ASSERT_OK_AND_ASSIGN(LogSink lead, LogSink::Open({.lead = true, .log_file = path, .to_stdout = false}));
    ZS_ASSERT_OK_AND_ASSIGN(LogSink other, LogSink::Open({.lead = false, .log_file = path}));
    EXPECT_TRUE(lead.active());
    EXPECT_FALSE(other.active());
    lead.Line("step 0 loss 5.5\n");
    other.Line("from rank 1\n");
    lead.Bar("\r[>   ] 1/4 steps");  // stdout only
    lead.Line("two\nlines\n");
    EXPECT_EQ(Read(path), "header\nstep 0 loss 5.5\ntwo\nlines\n");  // flushed at once
  }
  ZS_ASSERT_OK_AND_ASSIGN(LogSink quiet, LogSink::Open({.lead = true, .to_stdout = false}));
  EXPECT_FALSE(quiet.active());
}

TEST(LogSink, UnwritableLogIsAnError) {
  const absl::Status s = LogSink::Open({.log_file = ::testing::TempDir() + "/no/such/dir/x.log"}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("cannot append to the log"), std::string::npos) << s;
}

// Redirects file descriptor 1 to `path` while alive.
class StdoutToFile {
 public:
  explicit StdoutToFile(const std::string& path) {
    std::fflush(stdout);
    saved_ = ::dup(1);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0) << path;
    ::dup2(fd, 1);
    ::close(fd);
  }
  ~StdoutToFile() {
    std::fflush(stdout);
    ::dup2(saved_, 1);
    ::close(saved_);
  }

 private:
  int saved_ = -1;
};

// With a writer, every line of the lead goes to it as given and to the log
// file, and nothing (no line, no bar) to stdout, whatever to_stdout and
// progress_bar say.
TEST(LogSink, AWriterTakesStdoutsPlaceAndTheLogFileStillGetsEveryLine) {
  const std::string path = ::testing::TempDir() + "/log_sink_writer_test.log";
  const std::string out_path = ::testing::TempDir() + "/log_sink_writer_test.stdout";
  std::remove(path.c_str());
  std::vector<std::string> got;
  const LogSink::Writer writer = [&](absl::string_view text) { got.emplace_back(text); };
  {
    StdoutToFile capture(out_path);  // fd 1 into a file while the sinks write
    ZS_ASSERT_OK_AND_ASSIGN(LogSink lead, LogSink::Open({.lead = true, .log_file = path, .to_stdout = true,
                                                         .progress_bar = true, .writer = writer}));
    ZS_ASSERT_OK_AND_ASSIGN(LogSink other, LogSink::Open({.lead = false, .writer = writer}));
    ZS_ASSERT_OK_AND_ASSIGN(LogSink no_file, LogSink::Open({.lead = true, .to_stdout = false, .writer = writer}));
    EXPECT_TRUE(no_file.active());
    EXPECT_FALSE(other.active());
    lead.Line("step 0 loss 5.5\n");
    lead.Bar("\r[>   ] 1/4 steps");
    other.Line("from rank 1\n");
    lead.Line("two\nlines\n");
    no_file.Line("quiet but written\n");
  }
  EXPECT_EQ(got, (std::vector<std::string>{"step 0 loss 5.5\n", "two\nlines\n", "quiet but written\n"}));
  EXPECT_EQ(Read(path), "step 0 loss 5.5\ntwo\nlines\n");
  EXPECT_EQ(Read(out_path), "");
}

}  // namespace
}  // namespace zeroshard
