#include "zeroshard/runtime/crc32c.h"

#include <random>
#include <string>
#include <vector>

#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

TEST(Crc32c, StandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, InstructionPathEqualsTablesAtEveryLengthAndAlignment) {
  std::vector<unsigned char> data(4096 + 64);
  std::mt19937 rng(11);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (size_t start = 0; start < 16; ++start) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{1000}, size_t{4096}}) {
      EXPECT_EQ(Crc32c(data.data() + start, n), Crc32cExtendPortable(0, data.data() + start, n))
          << "start " << start << " n " << n;
    }
  }
  // Incremental equals one go.
  const uint32_t whole = Crc32c(data.data(), 3000);
  EXPECT_EQ(Crc32cExtend(Crc32cExtend(0, data.data(), 1234), data.data() + 1234, 3000 - 1234), whole);
}

}  // namespace
}  // namespace zeroshard
