#include "zeroshard/train/metrics.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace zeroshard {

std::vector<std::string> MetricsWriter::Columns(int world_size) {
  std::vector<std::string> c = {"step", "loss", "lr", "tokens_per_s", "ms_per_step", "val_loss"};
  for (int r = 0; r < world_size; ++r) c.push_back(absl::StrCat("peak_bytes_rank", r));
  return c;
}

absl::StatusOr<MetricsWriter> MetricsWriter::Open(const std::string& path, int world_size, bool append) {
  const std::string header = absl::StrCat(absl::StrJoin(Columns(world_size), ","), "\n");
  if (append) {
    std::ifstream in(path);
    std::string first;
    if (in && std::getline(in, first) && !first.empty()) {
      if (first + "\n" != header) {
        return absl::FailedPreconditionError(absl::StrCat("metrics: cannot continue ", path, ": expected the header \"",
                                                          absl::StripSuffix(header, "\n"), "\", found \"", first, "\""));
      }
      std::FILE* f = std::fopen(path.c_str(), "a");
      if (f == nullptr) {
        return absl::PermissionDeniedError(absl::StrCat("metrics: cannot append to ", path, ": ", std::strerror(errno)));
      }
      return MetricsWriter(path, world_size, f);
    }
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("metrics: cannot create ", path, ": ", std::strerror(errno)));
  }
  MetricsWriter w(path, world_size, f);
  if (std::fputs(header.c_str(), f) < 0 || std::fflush(f) != 0) {
    return absl::DataLossError(absl::StrCat("metrics: cannot write ", path, ": ", std::strerror(errno)));
  }
  return w;
}

absl::Status MetricsWriter::Write(const StepMetrics& m) {
  if (static_cast<int>(m.peak_bytes.size()) != world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("metrics: expected ", world_size_, " peak_bytes values, found ",
                                                   m.peak_bytes.size()));
  }
  std::string row = absl::StrFormat("%d,%.9g,%.6g,%.1f,%.3f,%s", m.step, m.loss, m.lr, m.tokens_per_s, m.ms_per_step,
                                    m.val_loss ? absl::StrFormat("%.9g", *m.val_loss) : "");
  for (int64_t b : m.peak_bytes) absl::StrAppend(&row, ",", b);
  row += "\n";
  if (std::fputs(row.c_str(), file_.get()) < 0 || std::fflush(file_.get()) != 0) {
    return absl::DataLossError(absl::StrCat("metrics: cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
