// Machine-readable figures: one JSON object per line, appended to the file that
// the environment variable ZEROSHARD_FIGURES names (nothing when it is unset).
// The benches, the main job and a few GPU tests write them beside what they
// print, so the GPU record (tools/gpu_bundle, docs/gpu.md) and the docs read
// numbers, not tables.
//
//   EmitFigure("cuda_bench", "gemm qkv bf16 8192x2304x768", 641.8, "TFLOP/s",
//              {{"baseline", 640.2}, {"us", 45.2}}, "baseline: cublasGemmEx");
//
// writes
//   {"bench":"cuda_bench","name":"gemm qkv bf16 8192x2304x768","value":641.8,
//    "unit":"TFLOP/s","baseline":640.2,"us":45.2,"note":"baseline: cublasGemmEx"}
//
// Each call opens, appends one line and closes (O_APPEND: lines from several
// processes or threads do not interleave), so a program that dies later keeps
// the figures it already wrote.
#ifndef ZEROSHARD_RUNTIME_FIGURES_H_
#define ZEROSHARD_RUNTIME_FIGURES_H_

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>
#include <utility>

namespace zeroshard {

namespace figures_internal {

inline void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

inline void AppendNumber(std::string& out, double v) {
  if (!std::isfinite(v)) {  // JSON has no NaN or Inf
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  out += buf;
}

}  // namespace figures_internal

// Whether figures are being collected (ZEROSHARD_FIGURES is set).
inline bool FiguresWanted() {
  const char* path = std::getenv("ZEROSHARD_FIGURES");
  return path != nullptr && path[0] != '\0';
}

// Fields built at run time (a vector of (key, value)): the same line.
template <typename Fields>
void EmitFigureFields(std::string_view bench, std::string_view name, double value, std::string_view unit,
                      const Fields& extra, std::string_view note = {}) {
  const char* path = std::getenv("ZEROSHARD_FIGURES");
  if (path == nullptr || path[0] == '\0') return;
  using figures_internal::AppendJsonString;
  using figures_internal::AppendNumber;
  std::string line = "{\"bench\":";
  AppendJsonString(line, bench);
  line += ",\"name\":";
  AppendJsonString(line, name);
  line += ",\"value\":";
  AppendNumber(line, value);
  line += ",\"unit\":";
  AppendJsonString(line, unit);
  for (const auto& [key, v] : extra) {
    line += ',';
    AppendJsonString(line, key);
    line += ':';
    AppendNumber(line, v);
  }
  if (!note.empty()) {
    line += ",\"note\":";
    AppendJsonString(line, note);
  }
  line += "}\n";
  if (std::FILE* f = std::fopen(path, "a")) {
    std::fwrite(line.data(), 1, line.size(), f);
    std::fclose(f);
  }
}

inline void EmitFigure(std::string_view bench, std::string_view name, double value,
                       std::string_view unit,
                       std::initializer_list<std::pair<std::string_view, double>> extra = {},
                       std::string_view note = {}) {
  EmitFigureFields(bench, name, value, unit, extra, note);
}

inline void EmitFigure(std::string_view bench, std::string_view name, double value, std::string_view unit,
                       const std::vector<std::pair<std::string, double>>& extra, std::string_view note = {}) {
  EmitFigureFields(bench, name, value, unit, extra, note);
}

}  // namespace zeroshard

#endif  // ZEROSHARD_RUNTIME_FIGURES_H_
