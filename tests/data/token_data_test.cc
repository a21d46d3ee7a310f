#include "zeroshard/data/token_data.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

TokenData Counting(int n) {
  std::vector<uint16_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(i);
  return TokenData::FromTokens(t, n);
}

TEST(TokenData, WindowRuleSingleRank) {
  TokenData d = Counting(23);  // W = floor(22 / 5) = 4 windows
  EXPECT_EQ(d.NumWindows(5), 4);
  ZS_ASSERT_OK_AND_ASSIGN(Batch b, d.GetBatch({.step = 1, .batch_size = 3, .block_size = 5}));
  // Rows g = 3, 4, 5 -> windows 3, 0, 1.
  const std::vector<int64_t> in = b.inputs.ToVector<int64_t>().value();
  const std::vector<int64_t> tg = b.targets.ToVector<int64_t>().value();
  EXPECT_EQ(std::vector<int64_t>(in.begin(), in.begin() + 5), (std::vector<int64_t>{15, 16, 17, 18, 19}));
  EXPECT_EQ(std::vector<int64_t>(in.begin() + 5, in.begin() + 10), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(std::vector<int64_t>(tg.begin() + 10, tg.end()), (std::vector<int64_t>{6, 7, 8, 9, 10}));
}

TEST(TokenData, GlobalBatchIsTheSameForAnyRanksAndAccumulation) {
  TokenData d = Counting(1000);
  const int64_t T = 7, step = 3;
  ZS_ASSERT_OK_AND_ASSIGN(Batch whole, d.GetBatch({.step = step, .batch_size = 8, .block_size = T}));
  std::vector<int64_t> pieces;
  for (int64_t m = 0; m < 2; ++m) {
    for (int64_t r = 0; r < 2; ++r) {
      ZS_ASSERT_OK_AND_ASSIGN(Batch b, d.GetBatch({.step = step, .micro_step = m, .accum_steps = 2,
                                                   .rank = r, .world_size = 2, .batch_size = 2,
                                                   .block_size = T}));
      ZS_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> rows, b.inputs.ToVector<int64_t>());
      pieces.insert(pieces.end(), rows.begin(), rows.end());
    }
  }
  EXPECT_EQ(pieces, whole.inputs.ToVector<int64_t>().value());
}

TEST(TokenData, LoadsBytesAndBinAndSplits) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream f(dir + "/t.txt", std::ios::binary);
    f << "abcabcabcd";
  }
  ZS_ASSERT_OK_AND_ASSIGN(TokenData text, TokenData::Load(dir + "/t.txt"));
  EXPECT_EQ(text.size(), 10);
  EXPECT_EQ(text.vocab_size(), 256);
  EXPECT_EQ(text.token(3), 'a');
  ZS_ASSERT_OK_AND_ASSIGN(TokenData val, text.Split(0.9, 1.0));
  EXPECT_EQ(val.size(), 1);
  EXPECT_EQ(val.token(0), 'd');
  // Entropy of {a:3, b:3, c:3, d:1}/10.
  const double h = -(3 * 0.3 * std::log(0.3) + 0.1 * std::log(0.1));
  EXPECT_NEAR(text.UnigramEntropy(), h, 1e-12);
  {
    std::ofstream f(dir + "/t.bin", std::ios::binary);
    const unsigned char bytes[] = {0x01, 0x00, 0x2c, 0x01, 0x05, 0x00};  // 1, 300, 5
    f.write(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  }
  ZS_ASSERT_OK_AND_ASSIGN(TokenData bin, TokenData::Load(dir + "/t.bin"));
  EXPECT_EQ(bin.size(), 3);
  EXPECT_EQ(bin.token(1), 300);
  EXPECT_EQ(bin.vocab_size(), 301);
  // llm.c's format: a 256-int32 header (magic 20240520, version 1, count), then uint16 tokens.
  auto write_llmc = [&](const std::string& name, uint32_t magic, uint32_t version, uint32_t count,
                        std::vector<uint16_t> tokens) {
    std::vector<uint32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(reinterpret_cast<const char*>(tokens.data()), 2 * tokens.size());
  };
  write_llmc("llmc.bin", 20240520, 1, 3, {50256, 7, 9});
  ZS_ASSERT_OK_AND_ASSIGN(TokenData llmc, TokenData::Load(dir + "/llmc.bin"));
  EXPECT_EQ(llmc.size(), 3);
  EXPECT_EQ(llmc.token(0), 50256);
  EXPECT_EQ(llmc.vocab_size(), 50257);
  write_llmc("short.bin", 20240520, 1, 4, {1, 2, 3});
  EXPECT_THAT(TokenData::Load(dir + "/short.bin"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("announces 4 tokens (1032 bytes with the header), found 1030 bytes")));
  write_llmc("v2.bin", 20240520, 2, 3, {1, 2, 3});
  EXPECT_THAT(TokenData::Load(dir + "/v2.bin"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 2, expected 1")));
  write_llmc("llama.bin", 20240801, 1, 3, {1, 2, 3});
  EXPECT_THAT(TokenData::Load(dir + "/llama.bin"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("uint32 tokens")));
  EXPECT_THAT(TokenData::Load(dir + "/missing.txt"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot open")));
  EXPECT_THAT(text.GetBatch({.batch_size = 1, .block_size = 20}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hold no window")));
}

// ---------------------------------------------------------------- read errors

// A nanoGPT token file of `tokens` tokens (0, 1, 2, ... modulo 65536).
std::string WriteCountingBin(const std::string& name, int64_t tokens) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::vector<uint16_t> t(tokens);
  for (int64_t i = 0; i < tokens; ++i) t[i] = static_cast<uint16_t>(i);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(t.data()), 2 * tokens);
  return path;
}

// 3 MiB read in 1 MiB chunks; the file is cut to 2 MiB after the first chunk.
// Both sizes are even, so the ifstream reader took the 1M tokens left for the
// whole data set, silently.
TEST(TokenDataReadErrors, AFileTruncatedWhileBeingReadIsAnError) {
  const std::string path = WriteCountingBin("shrinks.bin", 3 << 19);
  TokenFileReadOptions read;
  read.chunk_bytes = 1 << 20;
  read.before_read = [&](int, uint64_t offset) {
    if (offset == (1u << 20)) { ASSERT_EQ(::truncate(path.c_str(), 2 << 20), 0); }
  };
  EXPECT_THAT(TokenData::Load(path, read),
              StatusIs(absl::StatusCode::kDataLoss,
                       ::testing::AllOf(HasSubstr(path), HasSubstr("ended at byte 2097152"),
                                        HasSubstr("3145728 bytes when it was opened"))));
  // Unchanged, the same file loads whole in the same chunks.
  WriteCountingBin("shrinks.bin", 3 << 19);
  ZS_ASSERT_OK_AND_ASSIGN(TokenData whole, TokenData::Load(path, {.chunk_bytes = 1 << 20}));
  EXPECT_EQ(whole.size(), 3 << 19);
  EXPECT_EQ(whole.token((3 << 19) - 1), static_cast<uint16_t>((3 << 19) - 1));
}

// A read(2) that fails in the middle of the file (here: a directory put behind
// the descriptor after the first MiB, so read gives EISDIR) names the file,
// the byte and the errno text.
TEST(TokenDataReadErrors, AReadErrorInTheMiddleNamesFileOffsetAndErrno) {
  const std::string path = WriteCountingBin("fails.bin", 3 << 19);
  const int dir_fd = ::open(::testing::TempDir().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dir_fd, 0);
  TokenFileReadOptions read;
  read.chunk_bytes = 1 << 20;
  read.before_read = [&](int fd, uint64_t offset) {
    if (offset == (1u << 20)) { ASSERT_EQ(::dup2(dir_fd, fd), fd); }
  };
  const absl::StatusOr<TokenData> loaded = TokenData::Load(path, read);
  ::close(dir_fd);
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(),
              ::testing::AllOf(HasSubstr(path), HasSubstr("at byte 1048576"), HasSubstr("Is a directory")));
}

// A directory as the data path: the ifstream reader read nothing and said the
// file "holds 0 tokens".
TEST(TokenDataReadErrors, ADirectoryIsAReadError) {
  const std::string dir = ::testing::TempDir() + "/a_dir.bin";
  std::filesystem::create_directories(dir);
  const absl::StatusOr<TokenData> loaded = TokenData::Load(dir);
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(),
              ::testing::AllOf(HasSubstr(dir), HasSubstr("at byte 0"), HasSubstr("Is a directory")));
}

// A pipe has no size to hold the bytes to: it is read to its end.
TEST(TokenDataReadErrors, APipeIsReadToItsEnd) {
  const std::string fifo = ::testing::TempDir() + "/tokens.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    std::ofstream f(fifo, std::ios::binary);  // opens once the reader has
    f << "abcabcabcd";
  });
  const absl::StatusOr<TokenData> loaded = TokenData::Load(fifo);
  writer.join();
  ZS_ASSERT_OK(loaded.status());
  EXPECT_EQ(loaded->size(), 10);
  EXPECT_EQ(loaded->token(9), 'd');
}

}  // namespace
}  // namespace zeroshard
