// A small TensorBoard event file reader for tests, independent of
// train/tensorboard.cc: its own bitwise CRC-32C and protobuf decoding.
//
//   absl::StatusOr<std::vector<TestEvent>> events = ReadEventFile(path);
//
// Checks the TFRecord framing (both masked CRCs of every record, no trailing
// bytes) and decodes the Event fields the writer uses; any other field, a
// wrong wire type or a truncated field is an error.
#ifndef ZEROSHARD_TESTS_EXAMPLES_TFEVENTS_READER_H_
#define ZEROSHARD_TESTS_EXAMPLES_TFEVENTS_READER_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace zeroshard::testing {

// CRC-32C one bit at a time: reflected polynomial 0x82F63B78, initial and
// final xor 0xFFFFFFFF.
inline uint32_t BitwiseCrc32c(std::string_view data) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : data) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0x82F63B78u : 0u);
  }
  return c ^ 0xffffffffu;
}

inline uint32_t TestMaskedCrc(std::string_view data) {
  const uint32_t c = BitwiseCrc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

struct TestEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  // Summary values: (tag, simple_value).
  std::vector<std::pair<std::string, float>> values;
};

namespace tfevents_internal {

inline uint64_t LittleEndian(std::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < s.size(); ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
  return v;
}

struct Reader {
  std::string_view s;
  size_t pos = 0;
  bool done() const { return pos == s.size(); }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= s.size()) return false;
      const unsigned char b = s[pos++];
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Fixed(int n, uint64_t* v) {
    if (s.size() - pos < static_cast<size_t>(n)) return false;
    *v = LittleEndian(s.substr(pos, n));
    pos += n;
    return true;
  }
  bool Bytes(std::string_view* out) {
    uint64_t n = 0;
    if (!Varint(&n) || s.size() - pos < n) return false;
    *out = s.substr(pos, n);
    pos += n;
    return true;
  }
};

inline absl::Status Bad(const std::string& what) { return absl::DataLossError("tfevents: " + what); }

inline absl::Status DecodeValue(std::string_view bytes, TestEvent* e) {
  Reader r{bytes};
  std::string tag;
  std::optional<float> value;
  while (!r.done()) {
    uint64_t key = 0;
    if (!r.Varint(&key)) return Bad("value key");
    if (key == ((1 << 3) | 2)) {
      std::string_view t;
      if (!r.Bytes(&t)) return Bad("tag");
      tag = t;
    } else if (key == ((2 << 3) | 5)) {
      uint64_t bits = 0;
      if (!r.Fixed(4, &bits)) return Bad("simple_value");
      const uint32_t b32 = static_cast<uint32_t>(bits);
      float f;
      std::memcpy(&f, &b32, 4);
      value = f;
    } else {
      return Bad(absl::StrCat("Summary.Value: unexpected key ", key));
    }
  }
  if (!value) return Bad("Summary.Value without simple_value");
  e->values.emplace_back(tag, *value);
  return absl::OkStatus();
}

inline absl::Status DecodeEvent(std::string_view bytes, TestEvent* e) {
  Reader r{bytes};
  while (!r.done()) {
    uint64_t key = 0;
    if (!r.Varint(&key)) return Bad("event key");
    if (key == ((1 << 3) | 1)) {  // wall_time, double
      uint64_t bits = 0;
      if (!r.Fixed(8, &bits)) return Bad("wall_time");
      std::memcpy(&e->wall_time, &bits, 8);
    } else if (key == ((2 << 3) | 0)) {  // step, int64 varint
      uint64_t v = 0;
      if (!r.Varint(&v)) return Bad("step");
      e->step = static_cast<int64_t>(v);
    } else if (key == ((3 << 3) | 2)) {  // file_version
      std::string_view v;
      if (!r.Bytes(&v)) return Bad("file_version");
      e->file_version = std::string(v);
    } else if (key == ((5 << 3) | 2)) {  // summary
      std::string_view summary;
      if (!r.Bytes(&summary)) return Bad("summary");
      Reader sr{summary};
      while (!sr.done()) {
        uint64_t skey = 0;
        std::string_view value;
        if (!sr.Varint(&skey) || skey != ((1 << 3) | 2) || !sr.Bytes(&value)) return Bad("Summary.value");
        if (absl::Status s = DecodeValue(value, e); !s.ok()) return s;
      }
    } else {
      return Bad(absl::StrCat("Event: unexpected key ", key));
    }
  }
  return absl::OkStatus();
}

}  // namespace tfevents_internal

// Splits TFRecord framing, checking both CRCs; returns each record's data.
inline absl::StatusOr<std::vector<std::string>> SplitRecords(std::string_view file) {
  using tfevents_internal::Bad;
  using tfevents_internal::LittleEndian;
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < file.size()) {
    if (file.size() - pos < 12) return Bad(absl::StrCat("truncated header at byte ", pos));
    const std::string_view len_bytes = file.substr(pos, 8);
    const uint64_t n = LittleEndian(len_bytes);
    if (LittleEndian(file.substr(pos + 8, 4)) != TestMaskedCrc(len_bytes)) {
      return Bad(absl::StrCat("length CRC mismatch at byte ", pos));
    }
    pos += 12;
    if (file.size() - pos < n + 4) return Bad(absl::StrCat("truncated record at byte ", pos));
    const std::string_view data = file.substr(pos, n);
    if (LittleEndian(file.substr(pos + n, 4)) != TestMaskedCrc(data)) {
      return Bad(absl::StrCat("data CRC mismatch at byte ", pos));
    }
    out.emplace_back(data);
    pos += n + 4;
  }
  return out;
}

inline absl::StatusOr<std::vector<TestEvent>> DecodeEventFile(std::string_view file) {
  absl::StatusOr<std::vector<std::string>> records = SplitRecords(file);
  if (!records.ok()) return records.status();
  std::vector<TestEvent> events;
  for (const std::string& r : *records) {
    TestEvent e;
    if (absl::Status s = tfevents_internal::DecodeEvent(r, &e); !s.ok()) return s;
    events.push_back(std::move(e));
  }
  return events;
}

inline absl::StatusOr<std::vector<TestEvent>> ReadEventFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("tfevents: cannot open ", path));
  std::stringstream s;
  s << in.rdbuf();
  return DecodeEventFile(s.str());
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_EXAMPLES_TFEVENTS_READER_H_
