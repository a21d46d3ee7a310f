// LogSink: rank 0's lines go to the log file (appended) as given; the other
// ranks' sinks write nothing; an unwritable log is an error.
#include "zeroshard/train/log_sink.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace zeroshard
