// TensorBoardWriter: the per-step scalars of a run as a TensorBoard event
// file, written by hand (no protobuf or TensorFlow library).
//
//   ZS_ASSIGN_OR_RETURN(TensorBoardWriter tb, TensorBoardWriter::Open("run/tensorboard"));
//   ZS_RETURN_IF_ERROR(tb.AddScalar("train/loss", /*step=*/0, 5.6f, WallTimeNow()));
//   ZS_RETURN_IF_ERROR(tb.Flush());   // once per step
//
// `tensorboard --logdir <dir or any parent>` reads it.
//
// Format facts (TensorFlow's core/util/event.proto, core/framework/summary.proto
// and the TFRecord format described in TensorFlow's "TFRecords format details"):
//
//  * The file is dir/events.out.tfevents.<unix seconds, 10 digits>.<hostname>
//    (TensorFlow's EventsWriter naming; TensorBoard only needs the
//    "tfevents" in it).
//  * It is a TFRecord file: each record is
//        uint64 length (little-endian)
//        uint32 masked_crc32c(the 8 length bytes)
//        byte   data[length]
//        uint32 masked_crc32c(data)
//    with CRC-32C (Castagnoli, runtime/crc32c.h) and
//        masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8   (uint32 arithmetic).
//  * Each record's data is one serialized tensorflow.Event:
//        Event   { double wall_time = 1; int64 step = 2;
//                  oneof what { string file_version = 3; Summary summary = 5; ... } }
//        Summary { repeated Value value = 1; }
//        Value   { string tag = 1; oneof value { float simple_value = 2; ... } }
//    in the protobuf wire format: each field is a varint key
//    (field_number << 3 | wire_type), then wire type 0 a varint (int64: two's
//    complement as uint64), 1 eight bytes little-endian (double), 2 a varint
//    length and that many bytes (string, nested message), 5 four bytes
//    little-endian (float).
//  * The first record is an Event with file_version "brain.Event:2" (what
//    TensorFlow 2 and PyTorch's SummaryWriter write), then one Event per
//    scalar, each holding a Summary of one Value {tag, simple_value}.
#ifndef ZEROSHARD_TRAIN_TENSORBOARD_H_
#define ZEROSHARD_TRAIN_TENSORBOARD_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zeroshard {

// Seconds since the Unix epoch, with the sub-second part (an Event's wall_time).
double WallTimeNow();

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) if missing, and in it a new event file
  // named for `wall_time`'s whole seconds and this host, then
  // `filename_suffix` (PyTorch SummaryWriter's; e.g. ".1"); writes the
  // file_version Event (stamped `wall_time`) and flushes. An existing file of
  // that name is an error (never two writers in one file).
  static absl::StatusOr<TensorBoardWriter> Open(const std::string& dir, double wall_time = WallTimeNow(),
                                                const std::string& filename_suffix = "");

  // Appends one Event {wall_time, step, summary {value {tag, simple_value}}}.
  // Buffered until Flush.
  absl::Status AddScalar(std::string_view tag, int64_t step, float value, double wall_time);
  absl::Status Flush();
  // One step's scalars (tag, value), stamped `wall_time`, then Flush.
  absl::Status AddScalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                          double wall_time = WallTimeNow());

  const std::string& path() const { return path_; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  TensorBoardWriter(std::string path, std::FILE* f) : path_(std::move(path)), file_(f) {}
  absl::Status WriteRecord(std::string_view data);
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
};

// The encodings, for tests.
namespace tensorboard {
// TFRecord's mask of a CRC-32C.
uint32_t MaskCrc(uint32_t crc);
// masked CRC-32C of `data`.
uint32_t MaskedCrc32c(std::string_view data);
// One TFRecord: length, its masked CRC, data, its masked CRC.
std::string FrameRecord(std::string_view data);
// Serialized Events.
std::string FileVersionEvent(double wall_time);
std::string ScalarEvent(std::string_view tag, int64_t step, float value, double wall_time);
// "events.out.tfevents.<seconds, %010d>.<host>"
std::string EventFileName(int64_t unix_seconds, std::string_view host);
}  // namespace tensorboard

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_TENSORBOARD_H_
