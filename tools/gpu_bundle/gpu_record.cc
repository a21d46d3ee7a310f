// The GPU record: what one visit to a GPU machine showed, in one JSON file, and
// the checker that fails on anything wrong in it (docs/gpu.md, "The record").
//
//   gpu_record --dir=OUTDIR [--record=OUTDIR/record.json] [--summary=OUTDIR/summary.md]
//   gpu_record --check=OUTDIR/record.json        # make gpu-check RECORD=...
//
// --dir reads what gpu_bundle/run.sh left in OUTDIR: env.txt (the card, driver
// and libraries), steps.tsv (each step's status and time), tests/*.json
// (GoogleTest's JSON output of every GPU test program and sanitizer run),
// logs/ (the sanitizer reports, crash backtraces, PyTorch's RESULT lines) and
// figures.jsonl (every figure the benches, the job and the tests wrote, see
// runtime/figures.h). It writes record.json and summary.md, prints the
// summary, and exits 1 when the record has problems (as --check would).
//
// A problem is: a step that failed or ran out of time, a failed test, a test
// program that died without its result file (a crash), a sanitizer error or an
// unfinished sanitizer run, cuDNN refusing an attention case or a convolution
// pass falling back to the legacy API where the graph was expected to run,
// a bench result check that failed, or (on a GPU) a missing GPT step figure.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

std::string ReadFile(const std::string& path, bool* ok = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (ok != nullptr) *ok = static_cast<bool>(in);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

bool StartsWith(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string Tail(const std::string& text, size_t lines) {
  const std::vector<std::string> all = Lines(text);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

// The card's datasheet dense bf16 peak, TFLOP/s (0 when unknown): MFU's denominator.
double DatasheetBf16Tflops(const std::string& card) {
  if (card.find("H100") != std::string::npos || card.find("H200") != std::string::npos) return 989;
  if (card.find("A100") != std::string::npos) return 312;
  return 0;
}

// ---------------------------------------------------------------- reading OUTDIR

json ReadEnv(const std::string& dir) {
  json env = json::object();
  json libs = json::object();
  for (const std::string& line : Lines(ReadFile(dir + "/env.txt"))) {
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon), value = Trim(line.substr(colon + 2));
    if (key == "lib") {
      const std::vector<std::string> parts = Split(value, ' ');
      libs[parts[0]]["dir"] = parts.size() > 1 ? parts[1] : "";
    } else if (key == "lib_real") {
      const size_t arrow = value.find(" -> ");
      if (arrow != std::string::npos) libs[value.substr(0, arrow)]["file"] = value.substr(arrow + 4);
    } else {
      env[key] = value;
    }
  }
  env["libraries"] = libs;
  json card = json::object();
  if (env.contains("gpu")) {
    const std::vector<std::string> parts = Split(env["gpu"].get<std::string>(), ',');
    card["name"] = Trim(parts[0]);
    if (parts.size() > 1) card["memory"] = Trim(parts[1]);
    if (parts.size() > 2) card["driver"] = Trim(parts[2]);
    if (parts.size() > 3) card["max_sm_clock"] = Trim(parts[3]);
    card["datasheet_bf16_tflops"] = DatasheetBf16Tflops(card["name"].get<std::string>());
  }
  env["card"] = card;
  return env;
}

json ReadSteps(const std::string& dir) {
  json steps = json::array();
  for (const std::string& line : Lines(ReadFile(dir + "/steps.tsv"))) {
    const std::vector<std::string> f = Split(line, '\t');
    if (f.size() < 4) continue;
    steps.push_back({{"step", f[0]}, {"name", f[1]}, {"status", f[2]},
                     {"seconds", std::atof(f[3].c_str())}, {"log", f.size() > 4 ? f[4] : ""}});
  }
  return steps;
}

// GoogleTest's JSON: testsuites[].testsuite[] with result, time, failures[].
void ReadGtestJson(const json& doc, const std::string& program, json& tests) {
  for (const json& suite : doc.value("testsuites", json::array())) {
    for (const json& t : suite.value("testsuite", json::array())) {
      std::string status = "passed";
      const std::string result = t.value("result", "COMPLETED");
      if (result == "SKIPPED" || t.value("status", "RUN") == "NOTRUN") status = "skipped";
      json failures = json::array();
      for (const json& f : t.value("failures", json::array())) {
        failures.push_back(f.value("failure", ""));
      }
      if (!failures.empty()) status = "failed";
      if (failures.size() > 5) {  // the first five say enough
        json first = json::array();
        for (int i = 0; i < 5; ++i) first.push_back(failures[i]);
        first.push_back("... and " + std::to_string(failures.size() - 5) + " more");
        failures = first;
      }
      std::string time = t.value("time", "0s");
      json entry = {{"program", program},
                    {"test", suite.value("name", "") + "." + t.value("name", "")},
                    {"status", status},
                    {"seconds", std::atof(time.c_str())}};
      if (!failures.empty()) entry["failures"] = failures;
      tests.push_back(entry);
    }
  }
}

// Vendor kernels (cuDNN, cuBLAS, CUTLASS, NCCL): a sanitizer finding in them is
// reported, but is theirs. run.sh excludes them from racecheck and synccheck
// (synccheck flags cuDNN's warp-specialised flash-attention kernels).
bool VendorKernel(const std::string& k) {
  for (const char* p : {"cudnn", "cutlass", "sm90_xmma", "sm80_xmma", "nvjet", "cublas", "ncclDevKernel",
                        "ncclKernel", "xmma_", "gemv", "gemmk", "ampere_", "cask_", "fmha", "flash"}) {
    if (k.find(p) != std::string::npos) return true;
  }
  return false;
}

json ReadSanitizer(const std::string& dir, const json& step) {
  const std::string name = step["name"];  // tool:program
  const size_t colon = name.find(':');
  json s = {{"tool", name.substr(0, colon)},
            {"program", colon == std::string::npos ? "" : name.substr(colon + 1)},
            {"seconds", step["seconds"]}};
  const std::string log = ReadFile(dir + "/" + step["log"].get<std::string>());
  static const std::regex summary(R"(ERROR SUMMARY: (\d+) error)");
  // racecheck's own summary: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)".
  static const std::regex race(R"(RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\))");
  // "=========     at void zeroshard::cuda::Gather<float>(const float *)+0x70 [in file.cu:12]"
  static const std::regex at(R"(^=+\s+at (.+?)\+0x[0-9a-f]+)");
  std::smatch m;
  int64_t errors = -1;
  std::map<std::string, int> kernels;
  for (const std::string& line : Lines(log)) {
    if (std::regex_search(line, m, summary)) errors = std::stoll(m[1]);
    if (std::regex_search(line, m, race)) {
      errors = std::stoll(m[1]);
      s["warnings"] = std::stoll(m[2]);
    }
    if (std::regex_search(line, m, at)) ++kernels[m[1]];
  }
  json ks = json::array();
  int64_t ours = 0;
  for (const auto& [k, n] : kernels) {
    const bool vendor = VendorKernel(k);
    if (!vendor) ours += n;
    ks.push_back({{"kernel", k}, {"reports", n}, {"vendor", vendor}});
  }
  s["errors"] = errors < 0 ? 0 : errors;
  s["errors_in_our_kernels"] = ours;
  s["kernels"] = ks;
  const std::string st = step["status"];
  if (st == "timeout") {
    s["status"] = "timeout";
  } else if (errors > 0) {
    s["status"] = "errors";
  } else if (errors < 0) {
    s["status"] = "no report (" + st + ")";
  } else if (st != "passed") {
    s["status"] = "test failed (" + st + ")";  // the program's own failure, no sanitizer error
  } else {
    s["status"] = "clean";
  }
  return s;
}

json ReadFigures(const std::string& dir) {
  json figures = json::array();
  for (const std::string& line : Lines(ReadFile(dir + "/figures.jsonl"))) {
    if (Trim(line).empty()) continue;
    json f = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!f.is_discarded()) figures.push_back(f);
  }
  // The test programs' own figures (bench "<program>_test"); the jobs that some
  // tests run inside them write figures too, which are not the record's.
  for (const std::string& line : Lines(ReadFile(dir + "/test_figures.jsonl"))) {
    if (Trim(line).empty()) continue;
    json f = json::parse(line, nullptr, false);
    if (f.is_discarded()) continue;
    const std::string bench = f.value("bench", "");
    if (bench.size() > 5 && bench.compare(bench.size() - 5, 5, "_test") == 0) figures.push_back(f);
  }
  // PyTorch's RESULT lines (tools/gpu_bundle/torch_gpt_step.py).
  for (const std::string& line : Lines(ReadFile(dir + "/logs/torch_gpt_step.log"))) {
    if (!StartsWith(line, "RESULT ")) continue;
    json r = json::parse(line.substr(7), nullptr, false);
    if (r.is_discarded()) continue;
    figures.push_back({{"bench", "torch"},
                       {"name", "step tokens/s GPT-2 124M B" + std::to_string(r.value("batch", 0)) + " T" +
                                    std::to_string(r.value("T", 0)) + " bf16 " + r.value("mode", "")},
                       {"value", r.value("tokens_per_s", 0.0)},
                       {"unit", "tokens/s"},
                       {"ms_per_step", r.value("ms_per_step", 0.0)},
                       {"mfu", r.value("mfu_vs_989", 0.0)},
                       {"first_loss", r.value("first_loss", 0.0)},
                       {"last_loss", r.value("last_loss", 0.0)},
                       {"peak_bytes", r.value("peak_mem_bytes", 0.0)},
                       {"note", "PyTorch " + r.value("torch", "") + " " + r.value("mode", "") +
                                    ", torch.autocast bf16, fused AdamW, one GPU, no process group"}});
  }
  return figures;
}

json Build(const std::string& dir) {
  json env = ReadEnv(dir);
  json record = {{"schema", "zeroshard.gpu_record/1"}};
  record["mode"] = env.value("mode", "gpu");
  record["date"] = env.value("date", "");
  record["commit"] = env.value("commit", "");
  record["card"] = env["card"];
  record["env"] = env;
  record["steps"] = ReadSteps(dir);
  json tests = json::array(), crashes = json::array(), sanitizer = json::array();
  for (const json& step : record["steps"]) {
    const std::string kind = step["step"], name = step["name"];
    if (kind == "tests") {
      bool ok = false;
      const std::string text = ReadFile(dir + "/tests/" + name + ".json", &ok);
      json doc = ok ? json::parse(text, nullptr, false) : json();
      if (ok && !doc.is_discarded()) ReadGtestJson(doc, name, tests);
      if ((!ok || doc.is_discarded()) && step["status"] != "passed") {
        json crash = {{"program", name}, {"status", step["status"]},
                      {"log_tail", Tail(ReadFile(dir + "/" + step["log"].get<std::string>()), 12)}};
        bool has_bt = false;
        const std::string bt = ReadFile(dir + "/logs/crash_" + name + ".txt", &has_bt);
        if (has_bt) crash["backtrace"] = Tail(bt, 40);
        crashes.push_back(crash);
      }
    } else if (kind == "sanitize") {
      if (name == "compute-sanitizer") {
        sanitizer.push_back({{"tool", "all"}, {"program", ""}, {"status", step["status"]}, {"errors", 0}});
      } else {
        sanitizer.push_back(ReadSanitizer(dir, step));
      }
    }
  }
  record["tests"] = tests;
  record["crashes"] = crashes;
  record["sanitizer"] = sanitizer;
  json figures = ReadFigures(dir);
  // MFU of the main job against the card's datasheet peak.
  const double peak = record["card"].value("datasheet_bf16_tflops", 0.0);
  for (json& f : figures) {
    if (f.value("bench", "") == "train_gpt" && peak > 0 && f.contains("model_tflops")) {
      f["mfu"] = f["model_tflops"].get<double>() / peak;
    }
  }
  record["figures"] = figures;
  int passed = 0, failed = 0, skipped = 0;
  for (const json& t : tests) {
    const std::string st = t["status"];
    (st == "passed" ? passed : st == "failed" ? failed : skipped)++;
  }
  record["counts"] = {{"tests", tests.size()}, {"passed", passed}, {"failed", failed}, {"skipped", skipped},
                      {"crashed_programs", crashes.size()}, {"sanitizer_runs", sanitizer.size()},
                      {"figures", figures.size()}};
  return record;
}

// ---------------------------------------------------------------- problems

json Problems(const json& record) {
  json problems = json::array();
  auto add = [&](const std::string& what) { problems.push_back(what); };
  // Test programs with a failed case or a crash are named below, once.
  std::set<std::string> explained;
  for (const json& t : record.value("tests", json::array())) {
    if (t.value("status", "") == "failed") explained.insert(t.value("program", ""));
  }
  for (const json& c : record.value("crashes", json::array())) explained.insert(c.value("program", ""));
  for (const json& s : record.value("steps", json::array())) {
    const std::string st = s.value("status", "");
    if (s.value("step", "") == "sanitize") continue;  // judged below, by their reports
    if (s.value("step", "") == "tests" && explained.count(s.value("name", "")) > 0) continue;
    if (st != "passed" && st != "skipped") {
      add("step " + s.value("step", "") + " " + s.value("name", "") + ": " + st + " (" + s.value("log", "") + ")");
    }
  }
  for (const json& t : record.value("tests", json::array())) {
    if (t.value("status", "") == "failed") {
      std::string first = t.contains("failures") && !t["failures"].empty() ? t["failures"][0].get<std::string>() : "";
      std::replace(first.begin(), first.end(), '\n', ' ');
      add("test " + t.value("program", "") + " " + t.value("test", "") + " failed: " + first.substr(0, 300));
    }
  }
  for (const json& c : record.value("crashes", json::array())) {
    add("program " + c.value("program", "") + " ended (" + c.value("status", "") + ") without its results");
  }
  for (const json& s : record.value("sanitizer", json::array())) {
    const std::string st = s.value("status", "");
    if (st != "clean" && !StartsWith(st, "test failed")) {
      add("compute-sanitizer " + s.value("tool", "") + " " + s.value("program", "") + ": " + st +
          (s.value("errors", 0) > 0 ? " (" + std::to_string(s.value("errors", 0)) + " errors)" : ""));
    }
  }
  bool step_figure = false;
  for (const json& f : record.value("figures", json::array())) {
    const std::string name = f.value("name", "");
    const double v = f.value("value", 0.0);
    if ((StartsWith(name, "cudnn attention refused") || StartsWith(name, "attention cudnn refused")) && v > 0) {
      add(f.value("bench", "") + ": cuDNN refused attention where it was expected to run (" + name + ")");
    }
    if (StartsWith(name, "cudnn conv legacy passes") && v > 0) {
      add(f.value("bench", "") + ": " + std::to_string(static_cast<int>(v)) +
          " convolution passes fell back to cuDNN's legacy API");
    }
    if (name == "result checks failed" && v > 0) add(f.value("bench", "") + ": result checks failed");
    // Note [Bias gradient in the GEMM]: the fallback is never silent.
    if (((StartsWith(name, "gemm bias-grad epilogue refused") ||
          StartsWith(name, "step bias-grad epilogue fallbacks")) && v > 0) ||
        f.value("bias_grad_fallbacks", 0.0) > 0) {
      add(f.value("bench", "") + ": cuBLASLt refused the bias-gradient epilogue (" + name + ")");
    }
    // Note [GELU in the GEMM]: likewise.
    if (((StartsWith(name, "step gelu epilogue fallbacks") || StartsWith(name, "gemm gelu epilogue refused")) &&
         v > 0) ||
        f.value("gelu_epilogue_fallbacks", 0.0) > 0) {
      add(f.value("bench", "") + ": cuBLASLt refused a GELU epilogue (" + name + ")");
    }
    // Note [Tensor-core attention]: on a GPU, at a head dim that is a multiple
    // of 16 up to 128 (GPT-2's 64, Llama's 128) cuDNN or our tensor-core kernel
    // takes every attention call;
    // the scalar kernel running there is a silent slowdown of 10x or more.
    // The simulator's record runs small head dims, where the scalar kernel is
    // the one that takes them.
    const double head_dim = f.value("head_dim", 0.0);
    const bool tc_head_dim = head_dim >= 16 && head_dim <= 128 && std::fmod(head_dim, 16.0) == 0;
    if (record.value("mode", "") == "gpu" && tc_head_dim &&
        ((StartsWith(name, "step attention scalar runs") && v > 0) || f.value("attention_scalar", 0.0) > 0)) {
      add(f.value("bench", "") + ": attention ran our scalar kernel at head dim " +
          std::to_string(static_cast<int>(head_dim)) + " (" + name + ")");
    }
    if (f.value("bench", "") == "cuda_bench" && StartsWith(name, "step tokens/s")) step_figure = true;
  }
  if (record.value("mode", "") == "gpu" && !step_figure) add("cuda_bench: no GPT step figure in the record");
  // Note [Tensor-core attention]: on a GPU our tensor-core kernel must beat
  // the scalar one it replaces at every shape cuda_bench times (else the
  // automatic choice made attention slower).
  if (record.value("mode", "") == "gpu") {
    std::map<std::string, double> scalar, tensor_core;
    for (const json& f : record.value("figures", json::array())) {
      if (f.value("bench", "") != "cuda_bench") continue;
      const std::string name = f.value("name", "");
      for (const char* pass : {"fwd", "bwd"}) {
        const std::string ours = std::string("attention ") + pass + " ours ";
        const std::string tc = std::string("attention ") + pass + " tensor-core ";
        if (StartsWith(name, ours)) scalar[std::string(pass) + " " + name.substr(ours.size())] = f.value("value", 0.0);
        if (StartsWith(name, tc)) tensor_core[std::string(pass) + " " + name.substr(tc.size())] = f.value("value", 0.0);
      }
    }
    for (const auto& [shape, rate] : tensor_core) {
      const auto it = scalar.find(shape);
      if (it != scalar.end() && !(rate > it->second)) {
        add("cuda_bench: our tensor-core attention " + shape + " ran at " + std::to_string(rate) +
            " TFLOP/s, not above the scalar kernel's " + std::to_string(it->second));
      }
    }
  }
  return problems;
}

// ---------------------------------------------------------------- summary.md

std::string Fmt(double v) {
  char buf[64];
  if (v != 0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-2)) {
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  } else if (std::fabs(v) < 10) {  // fractions and ratios (MFU 0.257, 0.956x): three digits
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f", v);
  }
  return buf;
}

std::string Summary(const json& record, const json& problems) {
  std::ostringstream md;
  const json& env = record["env"];
  md << "# GPU record: " << record["card"].value("name", record.value("mode", "") == "sim" ? "cuda_sim" : "?")
     << "\n\n";
  md << "- date " << record.value("date", "") << ", commit " << record.value("commit", "") << ", mode "
     << record.value("mode", "") << "\n";
  md << "- driver " << record["card"].value("driver", "-") << " (CUDA " << env.value("driver_cuda", "-")
     << "), " << env.value("nvcc", "no nvcc") << "\n";
  for (const auto& [lib, info] : env["libraries"].items()) {
    md << "- " << lib << ": " << info.value("file", info.value("dir", "")) << "\n";
  }
  if (env.contains("torch")) md << "- torch: " << env.value("torch", "") << "\n";
  const json& c = record["counts"];
  md << "\n| tests | passed | failed | skipped | crashed programs | sanitizer runs | figures |\n"
     << "| --- | --- | --- | --- | --- | --- | --- |\n"
     << "| " << c["tests"] << " | " << c["passed"] << " | " << c["failed"] << " | " << c["skipped"] << " | "
     << c["crashed_programs"] << " | " << c["sanitizer_runs"] << " | " << c["figures"] << " |\n\n";
  if (problems.empty()) {
    md << "**No problems.**\n\n";
  } else {
    md << "**" << problems.size() << " problem(s):**\n\n";
    for (const json& p : problems) md << "- " << p.get<std::string>() << "\n";
    md << "\n";
  }
  md << "## Sanitizer\n\n| tool | program | status | errors (ours) | seconds |\n| --- | --- | --- | --- | --- |\n";
  for (const json& s : record["sanitizer"]) {
    md << "| " << s.value("tool", "") << " | " << s.value("program", "") << " | " << s.value("status", "")
       << " | " << s.value("errors", 0) << " (" << s.value("errors_in_our_kernels", 0) << ") | "
       << Fmt(s.value("seconds", 0.0)) << " |\n";
  }
  md << "\n## Figures\n\n| bench | figure | value | unit | beside |\n| --- | --- | --- | --- | --- |\n";
  for (const json& f : record["figures"]) {
    std::string beside;
    for (const char* k : {"baseline", "of_baseline", "of_roofline", "us", "ms_per_step", "mfu", "of_best_gemm"}) {
      if (f.contains(k) && f[k].is_number()) beside += std::string(k) + " " + Fmt(f[k].get<double>()) + " ";
    }
    md << "| " << f.value("bench", "") << " | " << f.value("name", "") << " | "
       << (f["value"].is_number() ? Fmt(f["value"].get<double>()) : "-") << " | " << f.value("unit", "")
       << " | " << beside << "|\n";
  }
  // The main comparison: our GPT step beside PyTorch's, same shapes.
  double ours = 0, eager = 0, compiled = 0;
  for (const json& f : record["figures"]) {
    const std::string b = f.value("bench", ""), n = f.value("name", "");
    if (!f["value"].is_number()) continue;
    if (b == "cuda_bench" && StartsWith(n, "step tokens/s")) ours = f["value"];
    if (b == "torch" && n.find(" eager") != std::string::npos) eager = f["value"];
    if (b == "torch" && n.find(" compile") != std::string::npos) compiled = f["value"];
  }
  if (ours > 0 && (eager > 0 || compiled > 0)) {
    md << "\nGPT-2 124M step: ours " << Fmt(ours) << " tokens/s";
    if (eager > 0) md << ", " << Fmt(ours / eager) << "x PyTorch eager (" << Fmt(eager) << ")";
    if (compiled > 0) md << ", " << Fmt(ours / compiled) << "x torch.compile (" << Fmt(compiled) << ")";
    md << "\n";
  }
  if (!record["crashes"].empty()) {
    md << "\n## Crashes\n";
    for (const json& cr : record["crashes"]) {
      md << "\n### " << cr.value("program", "") << " (" << cr.value("status", "") << ")\n\n```\n"
         << cr.value("log_tail", "") << (cr.contains("backtrace") ? cr.value("backtrace", "") : "") << "```\n";
    }
  }
  return md.str();
}

int Usage() {
  std::fprintf(stderr,
               "usage: gpu_record --dir=OUTDIR [--record=FILE] [--summary=FILE]\n"
               "       gpu_record --check=RECORD.json\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, record_path, summary_path, check;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& flag) { return a.substr(flag.size()); };
    if (StartsWith(a, "--dir=")) {
      dir = value("--dir=");
    } else if (StartsWith(a, "--record=")) {
      record_path = value("--record=");
    } else if (StartsWith(a, "--summary=")) {
      summary_path = value("--summary=");
    } else if (StartsWith(a, "--check=")) {
      check = value("--check=");
    } else {
      return Usage();
    }
  }
  if (!check.empty()) {
    bool ok = false;
    const std::string text = ReadFile(check, &ok);
    if (!ok) {
      std::fprintf(stderr, "gpu-check: cannot read %s\n", check.c_str());
      return 2;
    }
    const json record = json::parse(text, nullptr, false);
    if (record.is_discarded() || record.value("schema", "") != "zeroshard.gpu_record/1") {
      std::fprintf(stderr, "gpu-check: %s is not a zeroshard GPU record (schema zeroshard.gpu_record/1)\n",
                   check.c_str());
      return 2;
    }
    const json problems = Problems(record);
    const json& c = record["counts"];
    std::printf("gpu-check %s: %s, %d tests (%d passed, %d failed, %d skipped), %d sanitizer runs, %d figures\n",
                check.c_str(), record["card"].value("name", record.value("mode", "")).c_str(),
                c.value("tests", 0), c.value("passed", 0), c.value("failed", 0), c.value("skipped", 0),
                c.value("sanitizer_runs", 0), c.value("figures", 0));
    for (const json& p : problems) std::printf("  PROBLEM: %s\n", p.get<std::string>().c_str());
    std::printf(problems.empty() ? "gpu-check: OK\n" : "gpu-check: FAILED (%zu problems)\n", problems.size());
    return problems.empty() ? 0 : 1;
  }
  if (dir.empty()) return Usage();
  if (record_path.empty()) record_path = dir + "/record.json";
  if (summary_path.empty()) summary_path = dir + "/summary.md";
  json record = Build(dir);
  const json problems = Problems(record);
  record["problems"] = problems;
  record["ok"] = problems.empty();
  std::ofstream(record_path) << record.dump(1) << "\n";
  std::ofstream(summary_path) << Summary(record, problems);
  std::printf("gpu_record: wrote %s and %s (%zu problems)\n", record_path.c_str(), summary_path.c_str(),
              problems.size());
  return problems.empty() ? 0 : 1;
}
