// The checkpoint manifest's validation on hand-written manifests: sizes and
// offsets near 2^63, products that wrap, numbers that do not fit their field.
// Each such manifest passed validation before it checked arithmetic for
// overflow (signed overflow: undefined behaviour, wrapping in practice, so
// 2^63 - 8 + 16 came out negative and "fit" any unit). Then the manifest's
// own checksum (Note [Manifest checksum]) and duplicate keys.
#include "zeroshard/checkpoint/manifest.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::AllOf;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::StatusIs;

// The numbers of a one-unit, one-parameter sharded manifest.
struct Numbers {
  std::string world_size = "2";
  std::string shard_group_size = "2";
  std::string step = "3";
  std::string unit_numel = "32";
  std::string padded_numel = "32";
  std::string shard_numel = "16";
  std::string unit_group = "2";
  std::string shape = "[4, 4]";
  std::string numel = "16";
  std::string offset = "8";
  std::string crc32c = "1";
};

std::string Manifest(const Numbers& n) {
  return absl::StrCat(R"({"format": "zeroshard-checkpoint", "version": 1, "type": "sharded",
  "world_size": )", n.world_size, R"(, "strategy": "FULL_SHARD", "shard_group_size": )", n.shard_group_size, R"(,
  "optimizer": "adamw", "optimizer_step": 3,
  "state": {"step": )", n.step, R"(},
  "files": {"rank_0.safetensors": {"bytes": 100, "crc32c": )", n.crc32c, R"(}},
  "layout": [{"name": "h.0", "numel": )", n.unit_numel, R"(, "padded_numel": )", n.padded_numel,
                      R"(, "shard_numel": )", n.shard_numel, R"(, "shard_group_size": )", n.unit_group, R"(,
    "params": [{"name": "h.0.w", "aliases": [], "shape": )", n.shape, R"(, "numel": )", n.numel,
                      R"(, "offset": )", n.offset, R"(}]}]})");
}

constexpr char kSource[] = "/ckpt/step-000003/checkpoint.json";

absl::StatusOr<CheckpointManifest> Parse(const Numbers& n) { return ParseCheckpointManifest(Manifest(n), kSource); }

TEST(ManifestValidation, TheHandWrittenManifestParses) {
  ZS_ASSERT_OK_AND_ASSIGN(CheckpointManifest m, Parse(Numbers{}));
  ASSERT_EQ(m.layout.size(), 1u);
  ASSERT_EQ(m.layout[0].params.size(), 1u);
  EXPECT_EQ(m.layout[0].params[0].offset, 8);
  EXPECT_EQ(m.layout[0].params[0].numel, 16);
  EXPECT_EQ(m.layout[0].shard_numel, 16);
  EXPECT_EQ(m.state.step, 3);
}

// offset + numel past 2^63 - 1: wrapped, it was negative and so "inside" the unit.
TEST(ManifestValidation, OffsetNearTwoToThe63IsRefused) {
  for (const std::string offset : {"9223372036854775800", "9223372036854775807", "9223372036854775793"}) {
    SCOPED_TRACE(offset);
    Numbers n;
    n.offset = offset;
    EXPECT_THAT(Parse(n), StatusIs(absl::StatusCode::kDataLoss,
                                   AllOf(HasSubstr(kSource), HasSubstr("layout[0].params[0].offset"),
                                         HasSubstr(offset), HasSubstr("overflows"))));
  }
}

// shard_numel * shard_group_size wraps to a small number that equals padded_numel:
// (2^62 + 1) * 4 = 2^64 + 4, which is 4 modulo 2^64; 2^62 * 4 is 0 modulo 2^64.
TEST(ManifestValidation, ShardSizeTimesCountThatWrapsIsRefused) {
  struct Case {
    std::string shard_numel, group, padded, numel, shape, offset;
  };
  for (const Case& c : {Case{"4611686018427387905", "4", "4", "4", "[4]", "0"},
                        Case{"4611686018427387904", "4", "0", "0", "[0]", "0"},
                        Case{"3074457345618258603", "6", "2", "2", "[2]", "0"}}) {
    SCOPED_TRACE(c.shard_numel);
    Numbers n;
    n.shard_numel = c.shard_numel;
    n.unit_group = c.group;
    n.padded_numel = c.padded;
    n.unit_numel = c.numel;
    n.numel = c.numel;
    n.shape = c.shape;
    n.offset = c.offset;
    EXPECT_THAT(Parse(n), StatusIs(absl::StatusCode::kDataLoss,
                                   AllOf(HasSubstr(kSource), HasSubstr("layout[0].shard_numel"),
                                         HasSubstr(c.shard_numel), HasSubstr("overflows"))));
  }
}

// A number that does not fit its field: converted, 2^32 + 2 became int 2 and a
// float of 1e300 was cast to int (undefined behaviour).
TEST(ManifestValidation, NumbersOutsideTheirFieldsRangeAreRefused) {
  struct Case {
    std::string field, value;
    void (*set)(Numbers&, const std::string&);
  };
  const Case cases[] = {
      {"shard_group_size", "4294967298", [](Numbers& n, const std::string& v) { n.shard_group_size = v; }},
      {"world_size", "1e300", [](Numbers& n, const std::string& v) { n.world_size = v; }},
      {"world_size", "2.5", [](Numbers& n, const std::string& v) { n.world_size = v; }},
      {"layout[0].shard_group_size", "4294967298", [](Numbers& n, const std::string& v) { n.unit_group = v; }},
      {"layout[0].numel", "1e30", [](Numbers& n, const std::string& v) { n.unit_numel = v; }},
      {"layout[0].params[0].offset", "18446744073709551615", [](Numbers& n, const std::string& v) { n.offset = v; }},
      {"layout[0].params[0].shape[1]", "-4", [](Numbers& n, const std::string& v) { n.shape = "[4, " + v + "]"; }},
      {"state.step", "-1", [](Numbers& n, const std::string& v) { n.step = v; }},
      {"files.rank_0.safetensors.crc32c", "4294967296", [](Numbers& n, const std::string& v) { n.crc32c = v; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field + " = " + c.value);
    Numbers n;
    c.set(n, c.value);
    EXPECT_THAT(Parse(n), StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(kSource), HasSubstr(c.field))));
  }
}

// Through a checkpoint directory: the error names the manifest's path.
TEST(ManifestValidation, AReaderRefusesTheManifestNamingItsFile) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/manifest_overflow/step-000003");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Numbers n;
  n.offset = "9223372036854775800";
  std::string text = Manifest(n);
  // No files: the manifest alone decides.
  text.replace(text.find(R"({"rank_0.safetensors": {"bytes": 100, "crc32c": 1}})"),
               std::string(R"({"rank_0.safetensors": {"bytes": 100, "crc32c": 1}})").size(), "{}");
  std::ofstream(dir + "/checkpoint.json") << text;
  EXPECT_THAT(ConvertShardedToFull(dir, dir + "_full"),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(dir + "/checkpoint.json"), HasSubstr("layout[0].params[0].offset"))));
}

// ================================================================ Note [Manifest checksum]

// The hand-written manifest as a version-2 writer stores it.
std::string Sealed(const Numbers& n = {}) {
  nlohmann::json j = nlohmann::json::parse(Manifest(n));
  j["version"] = 2;
  return SealCheckpointManifest(j.dump(2));
}

TEST(ManifestChecksum, EveryFlippedBitOfASealedManifestIsRefused) {
  const std::string text = Sealed();
  ASSERT_EQ(text.find("{\n  \"manifest_crc32c\": \""), 0u) << text;
  ZS_ASSERT_OK_AND_ASSIGN(CheckpointManifest m, ParseCheckpointManifest(text, kSource));
  EXPECT_EQ(m.state.step, 3);
  // Each of the 8 bits of every byte. Without the checksum some flips parse
  // to other values: "3" -> "2" in state.step, "16" -> "17"... (below).
  int accepted = 0;
  std::string example;
  for (size_t i = 0; i < text.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = text;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      if (ParseCheckpointManifest(flipped, kSource).ok() && accepted++ == 0) {
        example = absl::StrCat("byte ", i, " bit ", bit, ": ", flipped);
      }
    }
  }
  EXPECT_EQ(accepted, 0) << "e.g. " << example;
}

TEST(ManifestChecksum, AFlipInsideAValueIsCorruptionNamingTheFile) {
  std::string text = Sealed();
  const size_t at = text.find("\"step\": 3");
  ASSERT_NE(at, std::string::npos);
  text[at + 8] = '2';  // '3' ^ 1: state.step 3 -> 2, valid JSON
  EXPECT_THAT(ParseCheckpointManifest(text, kSource),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(kSource), HasSubstr("CRC-32C"),
                                                          HasSubstr("corrupted"))));
  // A version-1 manifest has no checksum: the same flip loads as step 2.
  std::string old = Manifest(Numbers{});
  old.replace(old.find("\"step\": 3"), 9, "\"step\": 2");
  ZS_ASSERT_OK_AND_ASSIGN(CheckpointManifest m, ParseCheckpointManifest(old, kSource));
  EXPECT_EQ(m.state.step, 2);
}

TEST(ManifestChecksum, VersionTwoNeedsItVersionOneIsReadWithoutIt) {
  nlohmann::json j = nlohmann::json::parse(Manifest(Numbers{}));
  j["version"] = 2;
  EXPECT_THAT(ParseCheckpointManifest(j.dump(2), kSource),
              StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr(kSource), HasSubstr("manifest_crc32c"),
                                                          HasSubstr("altered"))));
  j["version"] = 1;
  ZS_EXPECT_OK(ParseCheckpointManifest(j.dump(2), kSource));
  // A version-1 manifest that carries one has it checked.
  const std::string sealed_v1 = SealCheckpointManifest(j.dump(2));
  ZS_EXPECT_OK(ParseCheckpointManifest(sealed_v1, kSource));
  std::string bad = sealed_v1;
  bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 1);
  EXPECT_FALSE(ParseCheckpointManifest(bad, kSource).ok());
  // The digits exactly as written: upper case is one flipped bit per letter.
  std::string upper = Sealed();
  const size_t digits = std::string("{\n  \"manifest_crc32c\": \"").size();
  bool changed = false;
  for (size_t i = digits; i < digits + 8; ++i) {
    if (upper[i] >= 'a' && upper[i] <= 'f') {
      upper[i] = static_cast<char>(upper[i] - 'a' + 'A');
      changed = true;
    }
  }
  if (changed) {
    EXPECT_THAT(ParseCheckpointManifest(upper, kSource),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("8 hex digits")));
  }
}

TEST(ManifestChecksum, ADuplicateKeyIsRefusedNamingIt) {
  // nlohmann keeps the last of two keys; the first would be read by another tool.
  std::string text = Manifest(Numbers{});
  text.replace(text.find("\"world_size\": 2"), 15, "\"world_size\": 4, \"world_size\": 2");
  EXPECT_THAT(ParseCheckpointManifest(text, kSource),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(kSource), HasSubstr("'world_size' appears twice"))));
  // At any depth.
  std::string nested = Manifest(Numbers{});
  nested.replace(nested.find("\"step\": 3"), 9, "\"step\": 3, \"step\": 4");
  EXPECT_THAT(ParseCheckpointManifest(nested, kSource),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("'step' appears twice")));
}

}  // namespace
}  // namespace zeroshard
