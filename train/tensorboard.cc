#include "zeroshard/train/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/runtime/crc32c.h"

namespace zeroshard {
namespace {

// Protobuf wire types (the low 3 bits of a field's key).
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

// Base-128, least significant group first, high bit set on all but the last byte.
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutKey(std::string* out, uint32_t field, uint32_t wire_type) { PutVarint(out, (field << 3) | wire_type); }

void PutLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutDouble(std::string* out, uint32_t field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  PutKey(out, field, kFixed64);
  PutLittleEndian(out, bits, 8);
}

void PutFloat(std::string* out, uint32_t field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  PutKey(out, field, kFixed32);
  PutLittleEndian(out, bits, 4);
}

void PutBytes(std::string* out, uint32_t field, std::string_view bytes) {
  PutKey(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

// Event and Summary field numbers (event.proto, summary.proto).
constexpr uint32_t kEventWallTime = 1;
constexpr uint32_t kEventStep = 2;
constexpr uint32_t kEventFileVersion = 3;
constexpr uint32_t kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1;
constexpr uint32_t kValueSimpleValue = 2;

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

double WallTimeNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace tensorboard {

uint32_t MaskCrc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint32_t MaskedCrc32c(std::string_view data) { return MaskCrc(Crc32c(data.data(), data.size())); }

std::string FrameRecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  PutLittleEndian(&out, data.size(), 8);
  PutLittleEndian(&out, MaskedCrc32c(out), 4);  // of the 8 length bytes
  out.append(data);
  PutLittleEndian(&out, MaskedCrc32c(data), 4);
  return out;
}

std::string FileVersionEvent(double wall_time) {
  std::string e;
  PutDouble(&e, kEventWallTime, wall_time);
  PutBytes(&e, kEventFileVersion, "brain.Event:2");
  return e;
}

std::string ScalarEvent(std::string_view tag, int64_t step, float value, double wall_time) {
  std::string v;  // Summary.Value
  PutBytes(&v, kValueTag, tag);
  PutFloat(&v, kValueSimpleValue, value);
  std::string summary;
  PutBytes(&summary, kSummaryValue, v);
  std::string e;
  PutDouble(&e, kEventWallTime, wall_time);
  PutKey(&e, kEventStep, kVarint);
  PutVarint(&e, static_cast<uint64_t>(step));  // int64: negative steps take 10 bytes, as protobuf's
  PutBytes(&e, kEventSummary, summary);
  return e;
}

std::string EventFileName(int64_t unix_seconds, std::string_view host) {
  return absl::StrFormat("events.out.tfevents.%010d.%s", unix_seconds, std::string(host));
}

}  // namespace tensorboard

absl::StatusOr<TensorBoardWriter> TensorBoardWriter::Open(const std::string& dir, double wall_time,
                                                          const std::string& filename_suffix) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("tensorboard: cannot create ", dir, ": ", ec.message()));
  }
  const std::string path = absl::StrCat(
      dir, "/", tensorboard::EventFileName(static_cast<int64_t>(std::floor(wall_time)), Hostname()), filename_suffix);
  // "x": never append to another writer's file (two runs in one second on one host).
  std::FILE* f = std::fopen(path.c_str(), "wbx");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("tensorboard: cannot create ", path, ": ", std::strerror(errno)));
  }
  TensorBoardWriter w(path, f);
  if (absl::Status s = w.WriteRecord(tensorboard::FileVersionEvent(wall_time)); !s.ok()) return s;
  if (absl::Status s = w.Flush(); !s.ok()) return s;
  return w;
}

absl::Status TensorBoardWriter::WriteRecord(std::string_view data) {
  const std::string record = tensorboard::FrameRecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size()) {
    return absl::DataLossError(absl::StrCat("tensorboard: cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::AddScalar(std::string_view tag, int64_t step, float value, double wall_time) {
  return WriteRecord(tensorboard::ScalarEvent(tag, step, value, wall_time));
}

absl::Status TensorBoardWriter::AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                                           double wall_time) {
  for (const auto& [tag, v] : values) {
    if (absl::Status s = AddScalar(tag, step, static_cast<float>(v), wall_time); !s.ok()) return s;
  }
  return Flush();
}

absl::Status TensorBoardWriter::Flush() {
  if (std::fflush(file_.get()) != 0) {
    return absl::DataLossError(absl::StrCat("tensorboard: cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
