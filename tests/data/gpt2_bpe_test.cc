// GPT-2's BPE against golden ids written by GPT-2's own algorithm
// (tools/golden/gpt2_bpe_golden.py), for the whole bundled Shakespeare and a file of
// hard cases; round trips; the pre-tokenizer; errors for bad vocabulary files.
#include "zeroshard/data/gpt2_bpe.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "zeroshard/data/unicode_classes.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<int32_t> ReadUint16(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<int32_t> ids(bytes.size() / 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<uint8_t>(bytes[2 * i]) | (static_cast<uint8_t>(bytes[2 * i + 1]) << 8);
  }
  return ids;
}

// tests/data/testdata/bpe_hard_cases.ids: "line N: ids" per line of the text, "whole: ids".
struct HardCases {
  std::vector<std::string> lines;
  std::vector<std::vector<int32_t>> line_ids;
  std::string whole;
  std::vector<int32_t> whole_ids;
};

HardCases ReadHardCases() {
  HardCases h;
  h.whole = ReadFile("tests/data/testdata/bpe_hard_cases.txt");
  h.lines = absl::StrSplit(h.whole, '\n');
  if (!h.lines.empty() && h.lines.back().empty()) h.lines.pop_back();
  std::istringstream ids(ReadFile("tests/data/testdata/bpe_hard_cases.ids"));
  std::string row;
  while (std::getline(ids, row)) {
    if (row.empty() || row[0] == '#') continue;
    const size_t colon = row.find(':');
    std::vector<int32_t> v;
    for (absl::string_view field : absl::StrSplit(row.substr(colon + 1), ' ', absl::SkipEmpty())) {
      int32_t id;
      EXPECT_TRUE(absl::SimpleAtoi(field, &id)) << row;
      v.push_back(id);
    }
    if (absl::StartsWith(row, "whole:")) {
      h.whole_ids = v;
    } else {
      h.line_ids.push_back(v);
    }
  }
  EXPECT_EQ(h.lines.size(), h.line_ids.size());
  EXPECT_FALSE(h.whole_ids.empty());
  return h;
}

std::unique_ptr<Gpt2Bpe> Bundled(const Gpt2Bpe::Options& options = {}) {
  auto bpe = Gpt2Bpe::Bundled(options);
  EXPECT_TRUE(bpe.ok()) << bpe.status();
  return std::move(bpe).value();
}

// The three ways to merge: cached scan (the default), no cache with the scan only,
// no cache with the heap for every word (Note [Long words]).
std::vector<Gpt2Bpe::Options> AllMergePaths() {
  return {Gpt2Bpe::Options{},
          Gpt2Bpe::Options{.cache_entries = 0, .heap_merge_min_bytes = SIZE_MAX},
          Gpt2Bpe::Options{.cache_entries = 0, .heap_merge_min_bytes = 0}};
}

TEST(Gpt2Bpe, Vocabulary) {
  auto bpe = Bundled();
  EXPECT_EQ(bpe->name(), "gpt2");
  EXPECT_EQ(bpe->vocab_size(), 50257);
  EXPECT_EQ(bpe->num_merges(), 50000);
  EXPECT_EQ(bpe->eot_token(), 50256);
  EXPECT_EQ(bpe->token_bytes(50256), "<|endoftext|>");
  EXPECT_EQ(bpe->token_bytes(220), " ");
  EXPECT_EQ(bpe->Encode("Hello world!"), (std::vector<int32_t>{15496, 995, 0}));
  // The special token's text is ordinary text, as in GPT-2's encoder.py.
  EXPECT_NE(bpe->Encode("<|endoftext|>"), (std::vector<int32_t>{50256}));
  EXPECT_TRUE(bpe->Encode("").empty());
}

TEST(Gpt2Bpe, ShakespeareMatchesGolden) {
  const std::string text = ReadFile("data/tinyshakespeare.txt");
  const std::vector<int32_t> golden = ReadUint16("tests/data/testdata/tinyshakespeare_gpt2.bin");
  ASSERT_EQ(golden.size(), 338025u);
  for (const Gpt2Bpe::Options& options : AllMergePaths()) {
    auto bpe = Bundled(options);
    const std::vector<int32_t> ids = bpe->Encode(text);
    ASSERT_EQ(ids.size(), golden.size()) << "cache " << options.cache_entries << ", heap from "
                                         << options.heap_merge_min_bytes;
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_EQ(ids[i], golden[i]) << "token " << i << ", cache " << options.cache_entries << ", heap from "
                                   << options.heap_merge_min_bytes;
    }
  }
  ZS_ASSERT_OK_AND_ASSIGN(std::string decoded, Bundled()->Decode(golden));
  EXPECT_TRUE(decoded == text);
}

TEST(Gpt2Bpe, HardCasesMatchGolden) {
  const HardCases h = ReadHardCases();
  for (const Gpt2Bpe::Options& options : AllMergePaths()) {
    auto bpe = Bundled(options);
    for (size_t i = 0; i < h.lines.size(); ++i) {
      EXPECT_EQ(bpe->Encode(h.lines[i]), h.line_ids[i])
          << "line " << i + 1 << " \"" << h.lines[i] << "\", cache " << options.cache_entries << ", heap from "
          << options.heap_merge_min_bytes;
      ZS_ASSERT_OK_AND_ASSIGN(std::string decoded, bpe->Decode(h.line_ids[i]));
      EXPECT_EQ(decoded, h.lines[i]);
    }
    EXPECT_EQ(bpe->Encode(h.whole), h.whole_ids);
    ZS_ASSERT_OK_AND_ASSIGN(std::string decoded, bpe->Decode(h.whole_ids));
    EXPECT_EQ(decoded, h.whole);
  }
}

TEST(Gpt2Bpe, FromFilesEqualsBundled) {
  ZS_ASSERT_OK_AND_ASSIGN(auto files, Gpt2Bpe::FromFiles("data/gpt2/encoder.json", "data/gpt2/vocab.bpe"));
  const HardCases h = ReadHardCases();
  EXPECT_EQ(files->Encode(h.whole), h.whole_ids);
  EXPECT_EQ(files->vocab_size(), 50257);
}

TEST(Gpt2Bpe, PreTokenizer) {
  using V = std::vector<absl::string_view>;
  EXPECT_EQ(Gpt2Bpe::PreTokenize("Hello world!"), (V{"Hello", " world", "!"}));
  EXPECT_EQ(Gpt2Bpe::PreTokenize("a  \n b"), (V{"a", "  \n", " b"}));
  EXPECT_EQ(Gpt2Bpe::PreTokenize("x   y"), (V{"x", "  ", " y"}));
  EXPECT_EQ(Gpt2Bpe::PreTokenize(" \t x\n\n"), (V{" \t", " x", "\n\n"}));
  EXPECT_EQ(Gpt2Bpe::PreTokenize("don't!'s 'll"), (V{"don", "'t", "!'", "s", " '", "ll"}));
  EXPECT_EQ(Gpt2Bpe::PreTokenize("abc123 \u0661\u0662 e\u0301"), (V{"abc", "123", " \u0661\u0662", " e", "\u0301"}));
  // U+0085 is white space (Unicode's White_Space, Python's `regex`), U+FEFF is not.
  EXPECT_EQ(Gpt2Bpe::PreTokenize("a \u0085b"), (V{"a", " ", "\u0085", "b"}));
  EXPECT_EQ(Gpt2Bpe::PreTokenize("a \ufeffb"), (V{"a", " \ufeff", "b"}));
  EXPECT_EQ(Gpt2Bpe::PreTokenize("   "), (V{"   "}));
  EXPECT_TRUE(Gpt2Bpe::PreTokenize("").empty());
  // Invalid UTF-8: each bad byte is an "other" character.
  EXPECT_EQ(Gpt2Bpe::PreTokenize("a\xff\xfe b\xc3"), (V{"a", "\xff\xfe", " b", "\xc3"}));
}

TEST(Gpt2Bpe, UnicodeClasses) {
  EXPECT_EQ(ClassifyCodePoint(U'a'), UnicodeClass::kLetter);
  EXPECT_EQ(ClassifyCodePoint(0x4E2D), UnicodeClass::kLetter);   // 中
  EXPECT_EQ(ClassifyCodePoint(0x1D401), UnicodeClass::kLetter);  // mathematical bold B
  EXPECT_EQ(ClassifyCodePoint(0x0661), UnicodeClass::kNumber);   // Arabic-Indic one
  EXPECT_EQ(ClassifyCodePoint(0x00BD), UnicodeClass::kNumber);   // ½
  EXPECT_EQ(ClassifyCodePoint(0x216B), UnicodeClass::kNumber);   // Ⅻ
  EXPECT_EQ(ClassifyCodePoint(0x3000), UnicodeClass::kSpace);
  EXPECT_EQ(ClassifyCodePoint(0x0085), UnicodeClass::kSpace);
  EXPECT_EQ(ClassifyCodePoint(0xFEFF), UnicodeClass::kOther);
  EXPECT_EQ(ClassifyCodePoint(0x200B), UnicodeClass::kOther);    // zero width space
  EXPECT_EQ(ClassifyCodePoint(0x0301), UnicodeClass::kOther);    // combining acute
  EXPECT_EQ(ClassifyCodePoint(0x1F600), UnicodeClass::kOther);   // 😀
  EXPECT_EQ(ClassifyCodePoint(0x110000), UnicodeClass::kOther);
}

// Random byte strings (valid UTF-8 and not), long runs included: Decode(Encode(s)) == s,
// and the three merge paths agree.
TEST(Gpt2Bpe, RoundTripOfRandomBytes) {
  std::vector<std::unique_ptr<Gpt2Bpe>> bpes;
  for (const auto& options : AllMergePaths()) bpes.push_back(Bundled(options));
  std::mt19937 rng(23);
  const std::vector<std::string> pieces = {"a", "Z", " ", "  ", "\n", "\t", "'", "'s", "1", "!", "\xc3\xa9",
                                           "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xe2\x80\x83", "\xff", "\x80",
                                           "\xc3", "\xed\xa0\x80", "=", "\xc2\x85"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    const int n = trial % 50 == 0 ? 600 : static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) s += pieces[rng() % (trial % 7 == 0 ? 3 : pieces.size())];
    const std::vector<int32_t> ids = bpes[0]->Encode(s);
    ZS_ASSERT_OK_AND_ASSIGN(std::string back, bpes[0]->Decode(ids));
    ASSERT_EQ(back, s);
    ASSERT_EQ(bpes[1]->Encode(s), ids);
    ASSERT_EQ(bpes[2]->Encode(s), ids);
  }
}

TEST(Gpt2Bpe, CutsDoNotChangeTheIds) {
  const std::string text = ReadFile("data/tinyshakespeare.txt").substr(0, 200000);
  auto bpe = Bundled();
  const std::vector<int32_t> whole = bpe->Encode(text);
  std::vector<int32_t> pieces;
  int cuts = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t cut = bpe->NextCut(text, pos + 1000);
    ASSERT_GT(cut, pos);
    bpe->EncodeTo(absl::string_view(text).substr(pos, cut - pos), &pieces);
    pos = cut;
    ++cuts;
  }
  EXPECT_GT(cuts, 100);
  EXPECT_EQ(pieces, whole);
  EXPECT_EQ(bpe->NextCut("no newline here", 3), 15u);
  EXPECT_EQ(bpe->NextCut("ab \nc\nd", 1), 6u);  // not after " \n": the space would join
}

TEST(Gpt2Bpe, CacheEvictionKeepsTheIds) {
  const HardCases h = ReadHardCases();
  auto small = Bundled({.cache_entries = 3});
  for (int round = 0; round < 2; ++round) EXPECT_EQ(small->Encode(h.whole), h.whole_ids);
}

TEST(Gpt2Bpe, DecodeRejectsUnknownIds) {
  auto bpe = Bundled();
  EXPECT_THAT(bpe->Decode(std::vector<int32_t>{15496, 50257}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token 50257 at position 1")));
  EXPECT_THAT(bpe->Decode(std::vector<int32_t>{-1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the vocabulary [0, 50257)")));
}

// A small vocabulary in GPT-2's format: the 256 byte tokens (spelled with
// bytes_to_unicode: 'a' is "a", the space is "\u0120"), then merged tokens.
std::string ByteTokensJson(const std::string& extra = "") {
  std::string json = "{";
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    static int shifted = 0;
    if (b == 0) shifted = 0;
    const int c = printable ? b : 256 + shifted++;
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
    json += absl::StrCat(b == 0 ? "" : ", ", "\"", buf, "\": ", id++);
  }
  return json + extra + "}";
}

TEST(Gpt2Bpe, SmallVocabulary) {
  // "a b" -> "ab" (rank 0), "ab c" -> "abc" (rank 1).
  ZS_ASSERT_OK_AND_ASSIGN(auto bpe, Gpt2Bpe::FromText(ByteTokensJson(", \"ab\": 256, \"abc\": 257"),
                                                      "#version: 0.2\na b\nab c\n"));
  EXPECT_EQ(bpe->vocab_size(), 258);
  EXPECT_EQ(bpe->eot_token(), -1);
  EXPECT_EQ(bpe->Encode("abcab"), (std::vector<int32_t>{257, 256}));
  EXPECT_EQ(bpe->Encode("cab"), (std::vector<int32_t>{'c', 256}));
}

TEST(Gpt2Bpe, BadFilesGiveClearErrors) {
  const std::string bpe_ok = "#version: 0.2\na b\n";
  const std::string json_ok = ByteTokensJson(", \"ab\": 256");
  ZS_EXPECT_OK(Gpt2Bpe::FromText(json_ok, bpe_ok).status());
  auto fails = [&](const std::string& json, const std::string& bpe, const std::string& message) {
    EXPECT_THAT(Gpt2Bpe::FromText(json, bpe).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << message;
  };
  fails("[1, 2]", bpe_ok, "encoder.json (line 1, byte 0): expected '{' (a JSON object of token -> id), found \"[1, 2]\"");
  fails("{}", bpe_ok, "expected at least one token");
  fails(ByteTokensJson(", \"ab\" 256"), bpe_ok, "expected ':' after the key");
  fails(ByteTokensJson(", \"ab\": -1"), bpe_ok, "expected a token id");
  fails(ByteTokensJson(", \"ab\": 2.5"), bpe_ok, "expected a token id");
  fails(ByteTokensJson(", \"ab\": 256,"), bpe_ok, "expected a token in double quotes, found \"}\"");
  fails(ByteTokensJson(", \"ab\": 256} x"), bpe_ok, "expected the end of the file after the object");
  fails(ByteTokensJson(", \"a\\q\": 256"), bpe_ok, "expected a JSON escape");
  fails(ByteTokensJson(", \"a b\": 256"), bpe_ok, "the token \"a b\" has the character U+0020, expected only the 256 "
                                                  "byte characters of GPT-2's bytes_to_unicode()");
  fails(ByteTokensJson(", \"ab\": 300"), bpe_ok, "the token \"ab\" has id 300, expected ids 0 to 256 for 257 tokens");
  fails(ByteTokensJson(", \"ab\": 5"), bpe_ok, "id 5 belongs to two tokens");
  fails(ByteTokensJson(", \"a\": 256"), bpe_ok, "the token \"a\" appears twice (ids 97 and 256)");
  fails("{\"a\": 0}", "#version: 0.2\n", "no token for the byte 0x00 (spelled \"\xc4\x80\")");
  fails(json_ok, "a b\n", "vocab.bpe line 1: expected \"#version: 0.2\", found \"a b\"");
  fails(json_ok, "", "vocab.bpe line 1: expected \"#version: 0.2\", found an empty file");
  fails(json_ok, "#version: 0.2\na b c\n", "vocab.bpe line 2: expected a merge \"left right\" (two tokens, one space)");
  fails(json_ok, "#version: 0.2\n\na b\n", "vocab.bpe line 2: expected a merge");
  fails(json_ok, "#version: 0.2\nb c\n", "vocab.bpe line 2: the merge \"b c\" needs the token \"bc\", which "
                                         "encoder.json does not have");
  fails(json_ok, "#version: 0.2\na b\na b\n", "vocab.bpe line 3: the merge \"a b\" repeats line 2");
  fails(json_ok, "#version: 0.2\na \xe2\x82\xac\n", "vocab.bpe line 2: the token \"\xe2\x82\xac\" has the character U+20AC");
  EXPECT_THAT(Gpt2Bpe::FromFiles("/nonexistent/encoder.json", "data/gpt2/vocab.bpe").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot open \"/nonexistent/encoder.json\"")));
}

}  // namespace
}  // namespace zeroshard
