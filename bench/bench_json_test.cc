// JsonReport (bench/bench_json.h): the file parses back with the schema's fields, the
// median and spread of the repeats, the baseline's figure beside each that names one;
// bad reports are refused with what is wrong; TakeJsonOutFlag leaves the other flags.
#include "zeroshard/bench/bench_json.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace zeroshard::bench {
namespace {

std::string TmpPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

TEST(JsonReportTest, WritesTheSchemaWithMedianSpreadAndBaseline) {
  JsonReport report("demo_bench");
  // Repeats 10, 11, 9, 12, 10: median 10; deviations 0, 1, 1, 2, 0 -> MAD 1 -> spread 0.1.
  report.Add("demo/ours", "GB/s", true, {10, 11, 9, 12, 10}, "demo/memcpy");
  report.Add("demo/memcpy", "GB/s", true, {20, 22});  // even count: median 21, MAD 1, spread 1/21
  report.Add("demo/step", "s", false, {0.5});
  const std::string path = TmpPath("demo.json");
  ASSERT_TRUE(report.Write(path).ok());
  const nlohmann::json j = ReadJson(path);
  EXPECT_EQ(j["schema"], "zeroshard-bench/1");
  EXPECT_EQ(j["bench"], "demo_bench");
  EXPECT_TRUE(j["machine"]["cpu"].is_string());
  EXPECT_GE(j["machine"]["cores"].get<int>(), 1);
  EXPECT_TRUE(j["machine"]["hostname"].is_string());
  EXPECT_TRUE(j["machine"]["isa"].is_string());
  EXPECT_TRUE(j["build"]["compiler"].is_string());
  EXPECT_TRUE(j["build"]["mode"].is_string());
  EXPECT_TRUE(j["build"].contains("commit"));
  EXPECT_EQ(j["date"].get<std::string>().size(), std::string("2024-01-01T00:00:00Z").size());
  ASSERT_EQ(j["results"].size(), 3u);
  const nlohmann::json& ours = j["results"][0];
  EXPECT_EQ(ours["name"], "demo/ours");
  EXPECT_EQ(ours["unit"], "GB/s");
  EXPECT_EQ(ours["higher_is_better"], true);
  EXPECT_EQ(ours["value"], 10.0);
  EXPECT_EQ(ours["median"], 10.0);
  EXPECT_DOUBLE_EQ(ours["spread"].get<double>(), 0.1);
  EXPECT_EQ(ours["repeats"], nlohmann::json({10.0, 11.0, 9.0, 12.0, 10.0}));
  EXPECT_EQ(ours["baseline"]["name"], "demo/memcpy");
  EXPECT_EQ(ours["baseline"]["value"], 21.0);
  EXPECT_EQ(ours["baseline"]["unit"], "GB/s");
  EXPECT_DOUBLE_EQ(j["results"][1]["spread"].get<double>(), 1.0 / 21);
  EXPECT_FALSE(j["results"][1].contains("baseline"));
  EXPECT_EQ(j["results"][2]["higher_is_better"], false);
  EXPECT_EQ(j["results"][2]["spread"], 0.0);  // one repeat
}

TEST(JsonReportTest, RefusesBadReports) {
  const std::string path = TmpPath("bad.json");
  {
    JsonReport r("b");
    r.Add("x", "s", false, {1}, "nowhere");
    const absl::Status st = r.Write(path);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("baseline \"nowhere\""), std::string::npos) << st;
  }
  {
    JsonReport r("b");
    r.Add("x", "s", false, {1});
    r.Add("x", "s", false, {2});
    EXPECT_NE(r.Write(path).message().find("\"x\" repeated"), std::string::npos);
  }
  {
    JsonReport r("b");
    r.Add("x", "s", false, {});
    EXPECT_NE(r.Write(path).message().find("no repeats"), std::string::npos);
  }
  {
    JsonReport r("b");
    r.Add("x", "s", false, {1});
    const absl::Status st = r.Write("/nonexistent-dir/x.json");
    EXPECT_NE(st.message().find("/nonexistent-dir/x.json"), std::string::npos) << st;
  }
}

TEST(TakeJsonOutFlagTest, RemovesOnlyItsFlag) {
  char a0[] = "bench", a1[] = "--repeats=3", a2[] = "--json_out=/tmp/a.json", a3[] = "-b", a4[] = "--json_out",
       a5[] = "/tmp/b.json", a6[] = "64K";
  char* argv[] = {a0, a1, a2, a3, a4, a5, a6, nullptr};
  int argc = 7;
  EXPECT_EQ(TakeJsonOutFlag(&argc, argv), "/tmp/b.json");  // the last one wins
  ASSERT_EQ(argc, 4);
  EXPECT_STREQ(argv[1], "--repeats=3");
  EXPECT_STREQ(argv[2], "-b");
  EXPECT_STREQ(argv[3], "64K");
  EXPECT_EQ(argv[4], nullptr);
}

}  // namespace
}  // namespace zeroshard::bench
