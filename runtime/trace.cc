#include "zeroshard/runtime/trace.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard {

void TraceRecorder::AddSpan(std::string name, std::string category, int tid, double start_us,
                            double end_us) {
  absl::MutexLock lock(&mu_);
  spans_.push_back(Span{std::move(name), std::move(category), tid, start_us, end_us - start_us});
}

void TraceRecorder::NameThread(int tid, std::string name) {
  absl::MutexLock lock(&mu_);
  for (const auto& [t, n] : thread_names_) {
    if (t == tid) return;
  }
  thread_names_.emplace_back(tid, std::move(name));
}

double TraceRecorder::TotalUs(const std::string& category, int tid) const {
  absl::MutexLock lock(&mu_);
  double total = 0;
  for (const Span& s : spans_) {
    if (s.category == category && (tid < 0 || s.tid == tid)) total += s.dur_us;
  }
  return total;
}

size_t TraceRecorder::size() const {
  absl::MutexLock lock(&mu_);
  return spans_.size();
}

namespace {
std::string Escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out;
}
}  // namespace

std::vector<TraceRecorder::Span> TraceRecorder::spans() const {
  absl::MutexLock lock(&mu_);
  return spans_;
}

absl::Status TraceRecorder::WriteJson(const std::string& path) const {
  std::string json = "{\"traceEvents\": [\n";
  {
    absl::MutexLock lock(&mu_);
    bool first = true;
    for (const auto& [tid, name] : thread_names_) {
      absl::StrAppend(&json, first ? "" : ",\n",
                      absl::StrFormat("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                                      "\"args\": {\"name\": \"%s\"}}",
                                      tid, Escaped(name)));
      first = false;
    }
    for (const Span& s : spans_) {
      absl::StrAppend(&json, first ? "" : ",\n",
                      absl::StrFormat("{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                                      "\"dur\": %.3f, \"pid\": 0, \"tid\": %d}",
                                      Escaped(s.name), Escaped(s.category), s.start_us, s.dur_us, s.tid));
      first = false;
    }
  }
  json += "\n], \"displayTimeUnit\": \"ms\"}\n";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("trace: cannot write \"", path, "\""));
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError(absl::StrCat("trace: short write to \"", path, "\""));
  return absl::OkStatus();
}

}  // namespace zeroshard
