// TensorBoard event files (train/tensorboard.h): read back with the
// independent decoder of tests/train/tfevents_reader.h, one record checked
// byte for byte, the CRC checked against the CRC-32C standard vector.
#include "zeroshard/train/tensorboard.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "zeroshard/runtime/crc32c.h"
#include "zeroshard/tests/train/tfevents_reader.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

std::string Hex(std::string_view s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

TEST(TensorBoard, TheCrcIsCrc32cAndTheMaskIsTfRecords) {
  // The CRC-32C (Castagnoli) check value; CRC-32 (zlib) would give 0xCBF43926.
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(testing::BitwiseCrc32c("123456789"), 0xE3069283u);  // the test reader's own
  // mask(c) = rotate right by 15, plus 0xa282ead8.
  EXPECT_EQ(tensorboard::MaskCrc(0xE3069283u), std::rotr(0xE3069283u, 15) + 0xa282ead8u);
  EXPECT_EQ(tensorboard::MaskCrc(0), 0xa282ead8u);
  EXPECT_EQ(tensorboard::MaskedCrc32c("123456789"), testing::TestMaskedCrc("123456789"));
}

TEST(TensorBoard, OneScalarRecordByteForByte) {
  // Event {wall_time 2.0, step 1, summary {value {tag "a", simple_value 1.0}}}:
  //   09                        key: field 1 (wall_time), wire type 1 (fixed64)
  //   00 00 00 00 00 00 00 40   2.0 as an IEEE double (0x4000000000000000), little-endian
  //   10 01                     key: field 2 (step), wire type 0 (varint); 1
  //   2a 0a                     key: field 5 (summary), wire type 2; 10 bytes follow
  //     0a 08                   Summary key: field 1 (value), wire type 2; 8 bytes
  //       0a 01 61              Value key: field 1 (tag), wire type 2; "a"
  //       15 00 00 80 3f        Value key: field 2 (simple_value), wire type 5 (fixed32); 1.0f = 0x3f800000
  // 23 bytes. The TFRecord around them:
  //   17 00 00 00 00 00 00 00   length 23, uint64 little-endian
  //   e7 ce f8 1e               masked CRC-32C of those 8 bytes (0x1ef8cee7)
  //   <the 23 bytes>
  //   4a 86 fd da               masked CRC-32C of the data (0xdafd864a)
  // (the CRCs computed by a separate bitwise CRC-32C, the one checked above).
  const std::string event = tensorboard::ScalarEvent("a", 1, 1.0f, 2.0);
  EXPECT_EQ(Hex(event), "09000000000000004010012a0a0a080a0161150000803f");
  EXPECT_EQ(Hex(tensorboard::FrameRecord(event)),
            "1700000000000000e7cef81e"
            "09000000000000004010012a0a0a080a0161150000803f"
            "4a86fdda");
  EXPECT_EQ(tensorboard::MaskedCrc32c(std::string("\x17\0\0\0\0\0\0\0", 8)), 0x1ef8cee7u);
  EXPECT_EQ(testing::TestMaskedCrc(event), 0xdafd864au);
  // file_version: 09 <8 bytes> 1a 0d "brain.Event:2" (field 3, wire type 2, 13 bytes).
  EXPECT_EQ(Hex(tensorboard::FileVersionEvent(2.0)),
            "0900000000000000401a0d" + Hex("brain.Event:2"));
  // A step of 300 is a two-byte varint: 0xac 0x02 (300 = 0b10_0101100).
  EXPECT_TRUE(absl::StrContains(tensorboard::ScalarEvent("a", 300, 1.0f, 2.0), "\x10\xac\x02"));
}

TEST(TensorBoard, TheFileNameIsTensorBoards) {
  EXPECT_EQ(tensorboard::EventFileName(1700000000, "host"), "events.out.tfevents.1700000000.host");
  EXPECT_EQ(tensorboard::EventFileName(12, "h"), "events.out.tfevents.0000000012.h");
}

TEST(TensorBoard, WrittenEventsReadBack) {
  const std::string dir = TempDir() + "/tb_readback/sub";
  std::filesystem::remove_all(TempDir() + "/tb_readback");
  ZS_ASSERT_OK_AND_ASSIGN(TensorBoardWriter w, TensorBoardWriter::Open(dir, 1700000000.25));
  EXPECT_TRUE(absl::StartsWith(std::filesystem::path(w.path()).filename().string(),
                               "events.out.tfevents.1700000000."))
      << w.path();
  EXPECT_EQ(std::filesystem::path(w.path()).parent_path().string(), dir);
  const float values[] = {5.625f, 0.1f, -3.0e-8f, 12345.678f};
  const char* tags[] = {"train/loss", "train/lr", "val/loss", "memory/peak_bytes_rank0"};
  for (int64_t step = 0; step < 3; ++step) {
    for (int i = 0; i < 4; ++i) {
      ZS_ASSERT_OK(w.AddScalar(tags[i], step * 1000, values[i] + step, 1700000001.5 + step));
    }
    ZS_ASSERT_OK(w.Flush());
    // Flushed: a reader sees every step so far.
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<testing::TestEvent> so_far, testing::ReadEventFile(w.path()));
    EXPECT_EQ(so_far.size(), 1u + 4 * (step + 1));
  }
  ZS_ASSERT_OK_AND_ASSIGN(std::vector<testing::TestEvent> events, testing::ReadEventFile(w.path()));
  ASSERT_EQ(events.size(), 13u);
  // The first record: the file version, nothing else.
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].wall_time, 1700000000.25);
  EXPECT_EQ(events[0].step, 0);
  EXPECT_TRUE(events[0].values.empty());
  for (int64_t step = 0; step < 3; ++step) {
    for (int i = 0; i < 4; ++i) {
      const testing::TestEvent& e = events[1 + 4 * step + i];
      EXPECT_FALSE(e.file_version.has_value());
      EXPECT_EQ(e.step, step * 1000);
      EXPECT_EQ(e.wall_time, 1700000001.5 + step);
      ASSERT_EQ(e.values.size(), 1u);
      EXPECT_EQ(e.values[0].first, tags[i]);
      const float want = values[i] + step;
      EXPECT_EQ(std::bit_cast<uint32_t>(e.values[0].second), std::bit_cast<uint32_t>(want)) << tags[i];
    }
  }
}

TEST(TensorBoard, TheReaderCatchesACorruptedByte) {
  const std::string rec = tensorboard::FrameRecord(tensorboard::ScalarEvent("a", 1, 1.0f, 2.0));
  for (size_t i = 0; i < rec.size(); ++i) {
    std::string bad = rec;
    bad[i] ^= 0x20;
    EXPECT_FALSE(testing::DecodeEventFile(bad).ok()) << "byte " << i;
  }
  ZS_EXPECT_OK(testing::DecodeEventFile(rec));
}

TEST(TensorBoard, AnUnwritableDirectoryIsAClearError) {
  // A regular file where a directory should be (fails even as root).
  const std::string file = TempDir() + "/tb_not_a_dir";
  std::ofstream(file) << "x";
  EXPECT_THAT(TensorBoardWriter::Open(file + "/tensorboard"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("tensorboard: cannot create " + file + "/tensorboard")));
}

TEST(TensorBoard, TwoWritersInOneSecondDoNotShareAFile) {
  const std::string dir = TempDir() + "/tb_twice";
  std::filesystem::remove_all(dir);
  ZS_ASSERT_OK(TensorBoardWriter::Open(dir, 1700000000.0));
  EXPECT_THAT(TensorBoardWriter::Open(dir, 1700000000.5),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("events.out.tfevents.1700000000.")));
}

}  // namespace
}  // namespace zeroshard
