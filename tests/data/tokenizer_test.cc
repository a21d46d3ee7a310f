// MakeTokenizer and the byte tokenizer; token files written in both formats read
// back by TokenData (the path prepare_data takes).
#include "zeroshard/data/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "zeroshard/data/token_data.h"
#include "zeroshard/data/token_file.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

TEST(Tokenizer, MakeTokenizer) {
  ZS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Tokenizer> gpt2, MakeTokenizer("gpt2"));
  EXPECT_EQ(gpt2->name(), "gpt2");
  EXPECT_EQ(gpt2->vocab_size(), 50257);
  EXPECT_EQ(gpt2->Encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  ZS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Tokenizer> bytes, MakeTokenizer("bytes"));
  EXPECT_EQ(bytes->name(), "bytes");
  EXPECT_THAT(MakeTokenizer("gpt4").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown tokenizer \"gpt4\", expected \"gpt2\" or \"bytes\"")));
}

TEST(Tokenizer, Bytes) {
  ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 256);
  EXPECT_EQ(t.eot_token(), -1);
  const std::string s = std::string("a\xff\0b", 4);
  const std::vector<int32_t> ids = t.Encode(s);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 255, 0, 'b'}));
  ZS_ASSERT_OK_AND_ASSIGN(std::string back, t.Decode(ids));
  EXPECT_EQ(back, s);
  EXPECT_THAT(t.Decode(std::vector<int32_t>{1, 256}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token 256 at position 1 is outside")));
  EXPECT_EQ(t.NextCut(s, 2), 2u);
  EXPECT_EQ(t.NextCut(s, 9), 4u);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(TokenFile, BothFormatsReadBackAsTheGoldenIds) {
  ZS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Tokenizer> gpt2, MakeTokenizer("gpt2"));
  const std::vector<int32_t> ids = gpt2->Encode(ReadFile("data/tinyshakespeare.txt"));
  ZS_ASSERT_OK_AND_ASSIGN(TokenData golden, TokenData::Load("tests/data/testdata/tinyshakespeare_gpt2.bin"));
  ASSERT_EQ(golden.size(), static_cast<int64_t>(ids.size()));
  const std::string dir = ::testing::TempDir();
  for (TokenFileFormat format : {TokenFileFormat::kNanoGpt, TokenFileFormat::kLlmc}) {
    const std::string path = dir + "/shakespeare_" + std::string(TokenFileFormatName(format)) + ".bin";
    ZS_ASSERT_OK(WriteTokenFile(path, ids, format));
    const std::string bytes = ReadFile(path);
    const size_t header = format == TokenFileFormat::kLlmc ? 1024 : 0;
    ASSERT_EQ(bytes.size(), header + 2 * ids.size());
    if (format == TokenFileFormat::kLlmc) {
      auto u32 = [&](int k) {
        uint32_t v = 0;
        for (int b = 0; b < 4; ++b) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[4 * k + b])) << (8 * b);
        return v;
      };
      EXPECT_EQ(u32(0), 20240520u);
      EXPECT_EQ(u32(1), 1u);
      EXPECT_EQ(u32(2), ids.size());
      for (int k = 3; k < 256; ++k) ASSERT_EQ(u32(k), 0u);
    }
    ZS_ASSERT_OK_AND_ASSIGN(TokenData data, TokenData::Load(path));
    ASSERT_EQ(data.size(), golden.size());
    for (int64_t i = 0; i < data.size(); ++i) ASSERT_EQ(data.token(i), golden.token(i)) << i;
  }
}

TEST(TokenFile, Errors) {
  const std::string path = ::testing::TempDir() + "/bad.bin";
  EXPECT_THAT(WriteTokenFile(path, std::vector<int32_t>{1, 65536}, TokenFileFormat::kNanoGpt),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token 65536 at position 1 does not fit uint16 (0 to 65535)")));
  EXPECT_THAT(WriteTokenFile("/nonexistent/dir/x.bin", std::vector<int32_t>{1}, TokenFileFormat::kLlmc),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot create \"/nonexistent/dir/x.bin\"")));
  EXPECT_THAT(ParseTokenFileFormat("npy").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected \"nanogpt\" or \"llmc\"")));
}

}  // namespace
}  // namespace zeroshard
