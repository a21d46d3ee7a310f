#include "zeroshard/runtime/trace.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard {

void TraceRecorder::AddSpan(std::string name, std::string category, TraceRow row, double start_us,
                            double end_us, std::string args) {
  if (!keep_spans_) return;
  absl::MutexLock lock(&mu_);
  spans_.push_back(Span{std::move(name), std::move(category), row, start_us, end_us - start_us, std::move(args)});
}

void TraceRecorder::NameProcess(int pid, std::string name) {
  absl::MutexLock lock(&mu_);
  process_names_.emplace(pid, std::move(name));
}

void TraceRecorder::NameRow(TraceRow row, std::string name) {
  absl::MutexLock lock(&mu_);
  for (const auto& [r, n] : row_names_) {
    if (r == row) return;
  }
  row_names_.emplace_back(row, std::move(name));
}

void TraceRecorder::SetOtherData(std::string key, std::string json_value) {
  absl::MutexLock lock(&mu_);
  other_data_[std::move(key)] = std::move(json_value);
}

double TraceRecorder::TotalUs(const std::string& category, int pid) const {
  absl::MutexLock lock(&mu_);
  double total = 0;
  for (const Span& s : spans_) {
    if (s.category == category && (pid < 0 || s.row.pid == pid)) total += s.dur_us;
  }
  return total;
}

size_t TraceRecorder::size() const {
  absl::MutexLock lock(&mu_);
  return spans_.size();
}

std::vector<TraceRecorder::Span> TraceRecorder::spans() const {
  absl::MutexLock lock(&mu_);
  return spans_;
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

absl::Status TraceRecorder::WriteJson(const std::string& path) const {
  std::string json = "{\"traceEvents\": [\n";
  {
    absl::MutexLock lock(&mu_);
    bool first = true;
    auto sep = [&first] {
      const char* s = first ? "" : ",\n";
      first = false;
      return s;
    };
    for (const auto& [pid, name] : process_names_) {
      absl::StrAppend(&json, sep(),
                      absl::StrFormat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                                      "\"args\": {\"name\": \"%s\"}}",
                                      pid, Escaped(name)));
      // Perfetto orders processes by this index: rank order.
      absl::StrAppend(&json, sep(),
                      absl::StrFormat("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
                                      "\"args\": {\"sort_index\": %d}}",
                                      pid, pid));
    }
    for (const auto& [row, name] : row_names_) {
      absl::StrAppend(&json, sep(),
                      absl::StrFormat("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                                      "\"args\": {\"name\": \"%s\"}}",
                                      row.pid, row.tid, Escaped(name)));
      absl::StrAppend(&json, sep(),
                      absl::StrFormat("{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                                      "\"args\": {\"sort_index\": %d}}",
                                      row.pid, row.tid, row.tid));
    }
    for (const Span& s : spans_) {
      absl::StrAppend(&json, sep(),
                      absl::StrFormat("{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                                      "\"dur\": %.3f, \"pid\": %d, \"tid\": %d",
                                      Escaped(s.name), Escaped(s.category), s.start_us, s.dur_us, s.row.pid,
                                      s.row.tid));
      if (!s.args.empty()) absl::StrAppend(&json, ", \"args\": {", s.args, "}");
      json += "}";
    }
    json += "\n], \"displayTimeUnit\": \"ms\"";
    if (!other_data_.empty()) {
      json += ", \"otherData\": {";
      bool first_other = true;
      for (const auto& [key, value] : other_data_) {
        absl::StrAppend(&json, first_other ? "" : ", ", "\"", Escaped(key), "\": ", value);
        first_other = false;
      }
      json += "}";
    }
    json += "}\n";
  }
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("trace: cannot write \"", path, "\""));
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !ok) return absl::DataLossError(absl::StrCat("trace: short write to \"", path, "\""));
  return absl::OkStatus();
}

// ================================================================ serialized form
//
// "zstrace1" then records, each a tag byte and its fields: strings as a u32
// length and the bytes, ints as i32, times as f64, in this machine's byte
// order (the ranks of one job share an architecture).
//   'P' pid name    'R' pid tid name    'O' key value    'S' name category pid tid start dur args

namespace {

constexpr absl::string_view kMagic = "zstrace1";

void PutBytes(std::string* out, const void* p, size_t n) { out->append(static_cast<const char*>(p), n); }
void PutI32(std::string* out, int32_t v) { PutBytes(out, &v, sizeof v); }
void PutF64(std::string* out, double v) { PutBytes(out, &v, sizeof v); }
void PutStr(std::string* out, absl::string_view s) {
  PutI32(out, static_cast<int32_t>(s.size()));
  out->append(s.data(), s.size());
}

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  size_t offset() const { return pos_; }
  bool done() const { return pos_ == in_.size(); }
  bool Bytes(void* p, size_t n) {
    if (in_.size() - pos_ < n) return false;
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool I32(int32_t* v) { return Bytes(v, sizeof *v); }
  bool F64(double* v) { return Bytes(v, sizeof *v); }
  bool Str(std::string* s) {
    int32_t n = 0;
    if (!I32(&n) || n < 0 || in_.size() - pos_ < static_cast<size_t>(n)) return false;
    s->assign(in_.data() + pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }

 private:
  absl::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

std::string TraceRecorder::Serialize(double shift_us) const {
  std::string out(kMagic);
  absl::MutexLock lock(&mu_);
  for (const auto& [pid, name] : process_names_) {
    out.push_back('P');
    PutI32(&out, pid);
    PutStr(&out, name);
  }
  for (const auto& [row, name] : row_names_) {
    out.push_back('R');
    PutI32(&out, row.pid);
    PutI32(&out, row.tid);
    PutStr(&out, name);
  }
  for (const auto& [key, value] : other_data_) {
    out.push_back('O');
    PutStr(&out, key);
    PutStr(&out, value);
  }
  for (const Span& s : spans_) {
    out.push_back('S');
    PutStr(&out, s.name);
    PutStr(&out, s.category);
    PutI32(&out, s.row.pid);
    PutI32(&out, s.row.tid);
    PutF64(&out, s.start_us + shift_us);
    PutF64(&out, s.dur_us);
    PutStr(&out, s.args);
  }
  return out;
}

absl::Status TraceRecorder::Merge(absl::string_view serialized) {
  if (!absl::StartsWith(serialized, kMagic)) {
    return absl::DataLossError(absl::StrCat("trace: expected a serialized trace starting with \"", kMagic,
                                            "\", found ", serialized.size(), " bytes starting with \"",
                                            absl::CHexEscape(serialized.substr(0, kMagic.size())), "\""));
  }
  Reader r(serialized.substr(kMagic.size()));
  std::vector<std::pair<int, std::string>> processes;
  std::vector<std::pair<TraceRow, std::string>> rows;
  std::vector<std::pair<std::string, std::string>> other;
  std::vector<Span> spans;
  while (!r.done()) {
    const size_t at = r.offset() + kMagic.size();
    char tag = 0;
    bool ok = r.Bytes(&tag, 1);
    int32_t pid = 0, tid = 0;
    std::string a, b;
    switch (ok ? tag : 0) {
      case 'P':
        ok = r.I32(&pid) && r.Str(&a);
        if (ok) processes.emplace_back(pid, std::move(a));
        break;
      case 'R':
        ok = r.I32(&pid) && r.I32(&tid) && r.Str(&a);
        if (ok) rows.emplace_back(TraceRow{pid, tid}, std::move(a));
        break;
      case 'O':
        ok = r.Str(&a) && r.Str(&b);
        if (ok) other.emplace_back(std::move(a), std::move(b));
        break;
      case 'S': {
        Span s;
        ok = r.Str(&s.name) && r.Str(&s.category) && r.I32(&pid) && r.I32(&tid) && r.F64(&s.start_us) &&
             r.F64(&s.dur_us) && r.Str(&s.args);
        s.row = TraceRow{pid, tid};
        if (ok) spans.push_back(std::move(s));
        break;
      }
      default:
        return absl::DataLossError(absl::StrCat("trace: expected a record tag (P, R, O or S) at byte ", at,
                                                " of a serialized trace, found ",
                                                ok ? absl::StrCat("byte ", static_cast<int>(tag)) : "its end"));
    }
    if (!ok) {
      return absl::DataLossError(absl::StrCat("trace: the '", std::string(1, tag), "' record at byte ", at,
                                              " of a serialized trace of ", serialized.size(),
                                              " bytes is cut short"));
    }
  }
  for (auto& [pid, name] : processes) NameProcess(pid, std::move(name));
  for (auto& [row, name] : rows) NameRow(row, std::move(name));
  absl::MutexLock lock(&mu_);
  for (auto& [key, value] : other) other_data_[std::move(key)] = std::move(value);
  for (Span& s : spans) spans_.push_back(std::move(s));
  return absl::OkStatus();
}

}  // namespace zeroshard
