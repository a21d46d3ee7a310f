#include "zeroshard/tools/trace_summary.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace zeroshard::tools {

using Json = nlohmann::json;

// ================================================================ intervals

Intervals Union(std::vector<Interval> spans) {
  std::sort(spans.begin(), spans.end(), [](const Interval& a, const Interval& b) { return a.lo < b.lo; });
  Intervals out;
  for (const Interval& s : spans) {
    if (!(s.hi > s.lo)) continue;
    if (!out.empty() && s.lo <= out.back().hi) {
      out.back().hi = std::max(out.back().hi, s.hi);
    } else {
      out.push_back(s);
    }
  }
  return out;
}

Intervals Subtract(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t j = 0;
  for (const Interval& x : a) {
    double lo = x.lo;
    while (j < b.size() && b[j].hi <= lo) ++j;
    for (size_t k = j; k < b.size() && b[k].lo < x.hi; ++k) {
      if (b[k].lo > lo) out.push_back({lo, b[k].lo});
      lo = std::max(lo, b[k].hi);
    }
    if (lo < x.hi) out.push_back({lo, x.hi});
  }
  return out;
}

Intervals Intersect(const Intervals& a, const Intervals& b) {
  Intervals out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].lo, b[j].lo), hi = std::min(a[i].hi, b[j].hi);
    if (lo < hi) out.push_back({lo, hi});
    if (a[i].hi < b[j].hi) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

double Length(const Intervals& a) {
  double n = 0;
  for (const Interval& x : a) n += x.hi - x.lo;
  return n;
}

// ================================================================ reading

namespace {

enum class Kind { kStep, kWait, kIgnored, kPeers, kComm, kCompute };

// A span of a GPU row (Note [GPU spans] in runtime/gpu_timeline.h): category "gpu ...".
bool IsGpuRow(const std::string& lower_cat) { return absl::StartsWith(lower_cat, "gpu "); }

// Note [Exposed communication]: the kind of a complete event (a GPU row's
// category without its "gpu " prefix reads as the host's).
Kind KindOf(const std::string& name, const std::string& cat) {
  std::string c = absl::AsciiStrToLower(cat);
  if (IsGpuRow(c)) c = c.substr(4);
  if (c == "step" || absl::StartsWith(name, "ProfilerStep#")) return Kind::kStep;
  if (c == "wait") return Kind::kWait;
  if (c == "issued") return Kind::kIgnored;
  if (c == "peers") return Kind::kPeers;
  if (absl::StrContains(c, "comm") || absl::StrContains(c, "nccl") ||
      absl::StrContains(absl::AsciiStrToLower(name), "nccl")) {
    return Kind::kComm;
  }
  return Kind::kCompute;
}

struct Event {
  std::string name;
  Kind kind;
  double ts, dur;
  bool gpu = false;  // of a GPU row
  bool op = false;   // category "op" / "gpu op" (Note [Per-op breakdown])
};

bool IsOpCategory(const std::string& cat) {
  std::string c = absl::AsciiStrToLower(cat);
  if (IsGpuRow(c)) c = c.substr(4);
  return c == "op";
}

struct Rank {
  std::string name;
  std::vector<Event> events;
};

std::string Describe(const Json& j) {
  std::string s = j.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// A pid as text: numbers as integers ("3"), strings as they are.
bool PidText(const Json& pid, std::string* out) {
  if (pid.is_number_integer()) {
    *out = std::to_string(pid.get<int64_t>());
    return true;
  }
  if (pid.is_number()) {
    *out = absl::StrFormat("%g", pid.get<double>());
    return true;
  }
  if (pid.is_string()) {
    *out = pid.get<std::string>();
    return true;
  }
  return false;
}

// Numeric pids in numeric order, then the others by text.
bool PidLess(const std::string& a, const std::string& b) {
  char* end_a = nullptr;
  char* end_b = nullptr;
  const long long x = std::strtoll(a.c_str(), &end_a, 10);
  const long long y = std::strtoll(b.c_str(), &end_b, 10);
  const bool na = !a.empty() && *end_a == '\0', nb = !b.empty() && *end_b == '\0';
  if (na != nb) return na;
  if (na) return x < y;
  return a < b;
}

// The innermost unit span (latest start, then earliest end) covering [lo, hi).
struct UnitSpan {
  size_t unit;
  double lo, hi;
};

RankSummary Summarize(const std::string& pid, const Rank& all) {
  // A rank with GPU rows is measured on them; its host spans give the steps.
  Rank rank{.name = all.name};
  const bool gpu = std::any_of(all.events.begin(), all.events.end(), [](const Event& e) { return e.gpu; });
  for (const Event& e : all.events) {
    if (e.kind == Kind::kStep || e.gpu == gpu) rank.events.push_back(e);
  }
  RankSummary r{.pid = pid, .name = rank.name, .gpu_rows = gpu};
  std::vector<Interval> compute, wait, comm, peers, steps;
  std::vector<std::pair<std::string, Interval>> step_spans;
  double first = 0, last = 0;
  bool any = false;
  for (const Event& e : rank.events) {
    const Interval x{e.ts, e.ts + e.dur};
    if (!any || x.lo < first) first = x.lo;
    if (!any || x.hi > last) last = x.hi;
    any = true;
    switch (e.kind) {
      case Kind::kStep: step_spans.emplace_back(e.name, x); break;
      case Kind::kWait: wait.push_back(x); break;
      case Kind::kComm: comm.push_back(x); break;
      case Kind::kPeers: peers.push_back(x); break;
      case Kind::kCompute: compute.push_back(x); break;
      case Kind::kIgnored: break;
    }
  }
  if (step_spans.empty()) step_spans.emplace_back("(whole trace)", Interval{first, last});
  std::stable_sort(step_spans.begin(), step_spans.end(),
                   [](const auto& a, const auto& b) { return a.second.lo < b.second.lo; });
  const Intervals busy = Subtract(Union(compute), Union(wait));
  const Intervals comm_all = Union(comm);
  const Intervals exposed = Subtract(comm_all, busy);
  const Intervals peer_wait = Subtract(Subtract(Union(peers), busy), comm_all);
  std::vector<Interval> window_list;
  for (const auto& [name, w] : step_spans) {
    const Intervals win = Union({w});
    WindowFigures f{.name = name, .start_us = w.lo, .dur_us = w.hi - w.lo};
    f.compute_us = Length(Intersect(busy, win));
    f.comm_us = Length(Intersect(comm_all, win));
    f.exposed_us = Length(Intersect(exposed, win));
    f.peer_wait_us = Length(Intersect(peer_wait, win));
    std::vector<Interval> active = busy;
    active.insert(active.end(), comm_all.begin(), comm_all.end());
    f.idle_us = f.dur_us - Length(Intersect(Union(active), win));
    r.total.dur_us += f.dur_us;
    r.total.compute_us += f.compute_us;
    r.total.comm_us += f.comm_us;
    r.total.exposed_us += f.exposed_us;
    r.total.idle_us += f.idle_us;
    r.total.peer_wait_us += f.peer_wait_us;
    r.steps.push_back(std::move(f));
    window_list.push_back(w);
  }
  r.total.name = step_spans.size() == 1 ? "total" : absl::StrCat("total (", step_spans.size(), " steps)");
  const Intervals windows = Union(window_list);

  // ---------------------------------------------------------------- units
  std::map<std::string, size_t> index;
  std::vector<UnitSpan> unit_spans;
  std::vector<std::pair<double, std::string>> first_seen;
  for (const Event& e : rank.events) {
    if (e.kind != Kind::kCompute) continue;
    std::string unit;
    if (absl::StartsWith(e.name, "forward ")) unit = e.name.substr(8);
    if (absl::StartsWith(e.name, "backward ")) unit = e.name.substr(9);
    if (unit.empty()) continue;
    auto [it, added] = index.emplace(unit, r.units.size());
    if (added) r.units.push_back(UnitFigures{.unit = unit});
    unit_spans.push_back(UnitSpan{it->second, e.ts, e.ts + e.dur});
  }
  // Compute: each piece of busy time to its innermost unit span.
  std::vector<double> bounds;
  for (const UnitSpan& s : unit_spans) {
    bounds.push_back(s.lo);
    bounds.push_back(s.hi);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  const Intervals busy_in_windows = Intersect(busy, windows);
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const double lo = bounds[i], hi = bounds[i + 1];
    const UnitSpan* inner = nullptr;
    for (const UnitSpan& s : unit_spans) {
      if (s.lo > lo || s.hi < hi) continue;
      if (inner == nullptr || s.lo > inner->lo || (s.lo == inner->lo && s.hi < inner->hi)) inner = &s;
    }
    if (inner != nullptr) r.units[inner->unit].compute_us += Length(Intersect(busy_in_windows, {{lo, hi}}));
  }
  // Communication: each comm span to the unit its name ends with.
  std::vector<std::vector<Interval>> unit_comm(r.units.size() + 1);  // last: (no unit)
  for (const Event& e : rank.events) {
    if (e.kind != Kind::kComm) continue;
    size_t u = r.units.size();
    const size_t space = e.name.rfind(' ');
    if (space != std::string::npos) {
      auto it = index.find(e.name.substr(space + 1));
      if (it != index.end()) u = it->second;
    }
    unit_comm[u].push_back({e.ts, e.ts + e.dur});
  }
  r.units.push_back(UnitFigures{.unit = "(no unit)"});
  for (size_t u = 0; u < r.units.size(); ++u) {
    const Intervals c = Intersect(Union(unit_comm[u]), windows);
    r.units[u].comm_us = Length(c);
    r.units[u].exposed_us = Length(Subtract(c, busy));
  }
  if (r.units.back().comm_us == 0) r.units.pop_back();

  // ---------------------------------------------------------------- ops
  std::map<std::string, size_t> op_index;
  for (const Event& e : rank.events) {
    if (!e.op) continue;
    const double inside = Length(Intersect(windows, {{e.ts, e.ts + e.dur}}));
    if (inside <= 0 && e.dur > 0) continue;
    auto [it, added] = op_index.emplace(e.name, r.ops.size());
    if (added) r.ops.push_back(OpFigures{.name = e.name});
    r.ops[it->second].count += 1;
    r.ops[it->second].total_us += inside;
  }
  for (OpFigures& o : r.ops) o.fraction = r.total.dur_us > 0 ? o.total_us / r.total.dur_us : 0;
  std::stable_sort(r.ops.begin(), r.ops.end(),
                   [](const OpFigures& a, const OpFigures& b) { return a.total_us > b.total_us; });
  return r;
}

}  // namespace

absl::StatusOr<TraceSummary> SummarizeTrace(absl::string_view json_text) {
  const Json doc = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return absl::InvalidArgumentError("trace_summary: expected JSON (a Chrome trace), found text that does not parse");
  }
  const Json* events = &doc;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it == doc.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace_summary: expected an object with a \"traceEvents\" array or a bare array of "
                       "events, found an object without one: ",
                       Describe(doc)));
    }
    events = &*it;
  } else if (!doc.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trace_summary: expected {\"traceEvents\": [...]} or an array of events, found ", Describe(doc)));
  }
  std::map<std::string, Rank, decltype(&PidLess)> ranks(&PidLess);
  TraceSummary summary;
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& e = (*events)[i];
    if (!e.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace_summary: event ", i, ": expected an object, found ", Describe(e)));
    }
    const auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string()) continue;
    std::string pid = "0";
    if (auto p = e.find("pid"); p != e.end() && !PidText(*p, &pid)) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace_summary: event ", i, ": expected a number or string pid, found ", Describe(e)));
    }
    const std::string name = e.value("name", std::string());
    if (*ph == "M") {
      if (name == "process_name") {
        auto args = e.find("args");
        if (args != e.end() && args->is_object() && args->contains("name") && (*args)["name"].is_string()) {
          ranks[pid].name = (*args)["name"].get<std::string>();
        }
      }
      continue;
    }
    if (*ph != "X") continue;  // B/E pairs, counters, instants: not read
    const auto ts = e.find("ts");
    const auto dur = e.find("dur");
    if (ts == e.end() || !ts->is_number() || dur == e.end() || !dur->is_number() || dur->get<double>() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trace_summary: event ", i, ": a complete (\"X\") event needs numbers ts and dur >= 0, found ",
          Describe(e)));
    }
    std::string cat;
    if (auto c = e.find("cat"); c != e.end() && c->is_string()) cat = c->get<std::string>();
    ranks[pid].events.push_back(Event{name, KindOf(name, cat), ts->get<double>(), dur->get<double>(),
                                      IsGpuRow(absl::AsciiStrToLower(cat)), IsOpCategory(cat)});
    ++summary.events;
  }
  bool any_peers = false;
  for (const auto& [pid, rank] : ranks) {
    if (rank.events.empty()) continue;
    summary.ranks.push_back(Summarize(pid, rank));
    summary.exposed_us += summary.ranks.back().total.exposed_us;
    summary.window_us += summary.ranks.back().total.dur_us;
    summary.peer_wait_us += summary.ranks.back().total.peer_wait_us;
    any_peers = any_peers || std::any_of(rank.events.begin(), rank.events.end(),
                                         [](const Event& e) { return e.kind == Kind::kPeers; });
  }
  if (summary.ranks.empty()) {
    return absl::InvalidArgumentError("trace_summary: expected complete (\"X\") events, found none");
  }
  summary.exposed_comm_fraction = summary.window_us > 0 ? summary.exposed_us / summary.window_us : 0;
  summary.peer_wait_fraction = summary.window_us > 0 ? summary.peer_wait_us / summary.window_us : 0;
  summary.has_peer_spans = any_peers;
  return summary;
}

absl::StatusOr<TraceSummary> SummarizeTraceFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("trace_summary: cannot open \"", path, "\""));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<TraceSummary> s = SummarizeTrace(text.str());
  if (!s.ok()) return absl::Status(s.status().code(), absl::StrCat(path, ": ", s.status().message()));
  return s;
}

bool IsGemmOp(absl::string_view name) {
  // "AttentionForward" / "AttentionBackward": the op entries' names, as a
  // simulated trace (zs_simulate --trace) has them.
  // "GeluMlp": two linears with GELU in their epilogues (Note [GELU in the GEMM]).
  return name == "Linear" || name == "GeluMlp" || name == "MatMul" || name == "Attention" ||
         name == "AttentionForward" || name == "AttentionBackward" || name == "Conv2d";
}

std::string FormatSummary(const TraceSummary& summary, bool ops) {
  auto ms = [](double us) { return us / 1000.0; };
  std::string out = absl::StrFormat("%d complete events, %d ranks; times in ms (Note [Exposed communication] in "
                                    "tools/trace_summary.h)\n",
                                    summary.events, summary.ranks.size());
  for (const RankSummary& r : summary.ranks) {
    absl::StrAppendFormat(&out, "\nrank pid %s%s%s\n", r.pid, r.name.empty() ? "" : absl::StrCat(" (", r.name, ")"),
                          r.gpu_rows ? " on its GPU rows" : "");
    absl::StrAppendFormat(&out, "  %-24s %12s %10s %10s %10s %10s %10s %8s\n", "step", "start", "length", "compute",
                          "comm", "exposed", "idle", "exposed%");
    std::vector<const WindowFigures*> rows;
    for (const WindowFigures& w : r.steps) rows.push_back(&w);
    if (r.steps.size() > 1) rows.push_back(&r.total);
    for (const WindowFigures* w : rows) {
      absl::StrAppendFormat(&out, "  %-24s %12s %10.3f %10.3f %10.3f %10.3f %10.3f %7.1f%%\n", w->name,
                            w == &r.total ? "" : absl::StrFormat("%.3f", ms(w->start_us)), ms(w->dur_us),
                            ms(w->compute_us), ms(w->comm_us), ms(w->exposed_us), ms(w->idle_us),
                            w->dur_us > 0 ? 100.0 * w->exposed_us / w->dur_us : 0.0);
    }
    if (!r.units.empty()) {
      absl::StrAppendFormat(&out, "  %-24s %12s %10s %10s %10s\n", "unit", "", "compute", "comm", "exposed");
      for (const UnitFigures& u : r.units) {
        absl::StrAppendFormat(&out, "  %-24s %12s %10.3f %10.3f %10.3f\n", u.unit, "", ms(u.compute_us),
                              ms(u.comm_us), ms(u.exposed_us));
      }
    }
    if (ops && !r.ops.empty()) {
      absl::StrAppendFormat(&out, "  %-24s %12s %10s %10s %8s\n", "op (forward + backward)", "", "count", "total",
                            "of steps");
      const OpFigures* largest = nullptr;
      for (const OpFigures& o : r.ops) {
        absl::StrAppendFormat(&out, "  %-24s %12s %10d %10.3f %7.1f%%%s\n", o.name, "", o.count, ms(o.total_us),
                              100.0 * o.fraction, IsGemmOp(o.name) ? "  GEMM" : "");
        if (!IsGemmOp(o.name) && largest == nullptr) largest = &o;
      }
      if (largest != nullptr) {
        absl::StrAppendFormat(&out, "  largest_non_gemm_op %s %.6f\n", largest->name, largest->fraction);
      }
    }
  }
  absl::StrAppendFormat(&out, "\nexposed_comm_ms %.3f of %.3f ms of steps over %d ranks\n", ms(summary.exposed_us),
                        ms(summary.window_us), summary.ranks.size());
  absl::StrAppendFormat(&out, "exposed_comm_fraction %.6f\n", summary.exposed_comm_fraction);
  if (summary.has_peer_spans) {
    absl::StrAppendFormat(&out, "peer_wait_ms %.3f (collectives waiting for late peers: skew, not transfer)\n",
                          ms(summary.peer_wait_us));
    absl::StrAppendFormat(&out, "peer_wait_fraction %.6f\n", summary.peer_wait_fraction);
  }
  return out;
}

}  // namespace zeroshard::tools
