// MetricsWriter: the per-step figures of a run as CSV (rank 0 writes).
//
//   ZS_ASSIGN_OR_RETURN(MetricsWriter w, MetricsWriter::Open("run/metrics.csv", /*world_size=*/4));
//   ZS_RETURN_IF_ERROR(w.Write({.step = 0, .loss = 5.6, .lr = 5e-5, .tokens_per_s = 9000,
//                               .ms_per_step = 230, .peak_bytes = {a, b, c, d}}));
//
// Columns: step,loss,lr,tokens_per_s,ms_per_step,val_loss,peak_bytes_rank0,...
// (val_loss empty when the step was not evaluated; peak_bytes_rank<r>: rank
// r's device allocator high-water mark during that step). Each row is flushed,
// so a run that stops early leaves the rows of the steps it took.
#ifndef ZEROSHARD_TRAIN_METRICS_H_
#define ZEROSHARD_TRAIN_METRICS_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zeroshard {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;      // global mean train loss of the step
  double lr = 0;
  double tokens_per_s = 0;
  double ms_per_step = 0;
  std::optional<double> val_loss;
  std::vector<int64_t> peak_bytes;  // per rank
};

class MetricsWriter {
 public:
  // Creates (truncates) `path` and writes the header. `append` (a resumed
  // run continuing the file): a file with this header is appended to; a
  // missing or empty one is created; one with another header is
  // FailedPrecondition naming both.
  static absl::StatusOr<MetricsWriter> Open(const std::string& path, int world_size, bool append = false);
  static std::vector<std::string> Columns(int world_size);

  absl::Status Write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  MetricsWriter(std::string path, int world_size, std::FILE* f) : path_(std::move(path)), world_size_(world_size), file_(f) {}
  std::string path_;
  int world_size_ = 1;
  std::unique_ptr<std::FILE, Closer> file_;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_METRICS_H_
