#include "zeroshard/tests/train/trace_checks.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/trace.h"
#include "zeroshard/tools/trace_summary.h"

namespace zeroshard::testing {

namespace {

struct Ev {
  std::string name, cat;
  int tid;
  double ts, end;
};

// The file writes ts and dur with 3 decimals, each rounded by at most 0.0005
// us, so an end (ts + dur) is off by at most 0.001 and comparing two spans'
// times by at most 0.002.
constexpr double kPrintedSlackUs = 0.002;

}  // namespace

absl::Status CheckMergedJobTrace(const std::string& path, int world, int steps) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no trace at ", path));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("traceEvents")) return absl::DataLossError("the trace is not JSON");
  std::map<int, std::string> process_names;
  std::map<int, std::vector<Ev>> by_pid;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    const int pid = e.value("pid", -1);
    if (e["ph"] == "M" && e["name"] == "process_name") process_names[pid] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    const double ts = e["ts"].get<double>();
    by_pid[pid].push_back(Ev{e["name"], e["cat"], e["tid"].get<int>(), ts, ts + e["dur"].get<double>()});
  }
  std::set<int> want;
  for (int r = 0; r < world; ++r) want.insert(r);
  std::set<int> got;
  for (const auto& [pid, evs] : by_pid) got.insert(pid);
  if (got != want) {
    return absl::FailedPreconditionError(absl::StrCat("expected pids 0..", world - 1, ", found ", got.size(),
                                                      " pids, the first ", *got.begin()));
  }
  for (int r = 0; r < world; ++r) {
    if (process_names[r] != absl::StrCat("rank ", r)) {
      return absl::FailedPreconditionError(
          absl::StrCat("pid ", r, " is named \"", process_names[r], "\", expected \"rank ", r, "\""));
    }
    int step_spans = 0, compute = 0, waits = 0, comm_checked = 0;
    std::vector<const Ev*> issued, comm;
    for (const Ev& e : by_pid[r]) {
      if (e.cat == "step") ++step_spans;
      if (e.cat == "compute") ++compute;
      if (e.cat == "wait") ++waits;
      if (e.cat == "issued") {
        if (e.tid != TraceRow::kIssued) return absl::InternalError(absl::StrCat("issued span on row ", e.tid));
        issued.push_back(&e);
      }
      if (e.cat == "comm") {
        if (e.tid < TraceRow::kFirstStream) return absl::InternalError(absl::StrCat("comm span on row ", e.tid));
        comm.push_back(&e);
      }
    }
    if (step_spans != steps || compute == 0 || waits == 0 || issued.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, ": ", step_spans, " step spans (expected ", steps,
                                                        "), ", compute, " compute, ", waits, " wait, ",
                                                        issued.size(), " issued spans"));
    }
    // Note [Communication spans]: issue <= backend start <= backend end <= observed completion.
    std::set<std::string> issued_names;
    for (const Ev* i : issued) issued_names.insert(i->name);
    for (const Ev* c : comm) {
      if (!issued_names.count(c->name)) continue;  // the job's own collectives (the loss average)
      bool inside = false;
      for (const Ev* i : issued) {
        inside = inside || (i->name == c->name && c->ts >= i->ts - kPrintedSlackUs && c->end <= i->end + kPrintedSlackUs);
      }
      if (!inside) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "rank %d: comm span \"%s\" [%.3f, %.3f] lies inside no issued span of that name", r, c->name, c->ts,
            c->end));
      }
      ++comm_checked;
    }
    for (const Ev* i : issued) {
      bool holds = false;
      for (const Ev* c : comm) {
        holds = holds || (i->name == c->name && c->ts >= i->ts - kPrintedSlackUs && c->end <= i->end + kPrintedSlackUs);
      }
      if (!holds) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "rank %d: issued span \"%s\" [%.3f, %.3f] holds no comm span", r, i->name, i->ts, i->end));
      }
    }
    if (comm_checked < static_cast<int>(issued.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, ": ", comm_checked, " comm spans for ", issued.size(), " issued collectives"));
    }
  }
  absl::StatusOr<tools::TraceSummary> summary = tools::SummarizeTrace(text.str());
  if (!summary.ok()) return summary.status();
  if (static_cast<int>(summary->ranks.size()) != world || summary->exposed_comm_fraction < 0 ||
      summary->exposed_comm_fraction > 1) {
    return absl::FailedPreconditionError(absl::StrCat("trace_summary read ", summary->ranks.size(),
                                                      " ranks, exposed_comm_fraction ",
                                                      summary->exposed_comm_fraction));
  }
  for (const tools::RankSummary& rank : summary->ranks) {
    if (static_cast<int>(rank.steps.size()) != steps || rank.units.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("trace_summary: rank ", rank.pid, " has ", rank.steps.size(),
                                                        " steps and ", rank.units.size(), " units"));
    }
  }
  return absl::OkStatus();
}

namespace {

struct Span {
  std::string name, cat;
  int tid;
  double ts, end;
  double err = -1;  // args.clock_error_us
};

// `spans` of one category by name, each name's in start order.
std::map<std::string, std::vector<const Span*>> ByName(const std::vector<Span>& spans, const std::string& cat) {
  std::map<std::string, std::vector<const Span*>> out;
  for (const Span& s : spans) {
    if (s.cat == cat) out[s.name].push_back(&s);
  }
  for (auto& [name, list] : out) {
    std::stable_sort(list.begin(), list.end(), [](const Span* a, const Span* b) { return a->ts < b->ts; });
  }
  return out;
}

std::string Where(int pid, const Span& s) {
  return absl::StrFormat("rank %d: %s \"%s\" [%.3f, %.3f] (row %d, clock error %.3f us)", pid, s.cat, s.name, s.ts,
                         s.end, s.tid, s.err);
}

// Spans of one stream, in start order, must not overlap beyond their bounds.
absl::Status NoOverlap(int pid, std::vector<const Span*> spans, const std::string& what) {
  std::stable_sort(spans.begin(), spans.end(), [](const Span* a, const Span* b) { return a->ts < b->ts; });
  for (size_t i = 1; i < spans.size(); ++i) {
    const Span& a = *spans[i - 1];
    const Span& b = *spans[i];
    if (b.ts < a.end - a.err - b.err - kPrintedSlackUs) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": ", Where(pid, b), " starts before ", Where(pid, a), " ends"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckGpuRows(const std::string& path, int world, bool inside_launch, bool all_ops) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no trace at ", path));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.contains("traceEvents")) return absl::DataLossError("the trace is not JSON");
  std::map<std::pair<int, int>, std::string> row_names;
  std::map<int, std::vector<Span>> host, gpu;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    const int pid = e.value("pid", -1);
    if (e["ph"] == "M" && e["name"] == "thread_name") row_names[{pid, e["tid"].get<int>()}] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    Span s{e["name"], e["cat"], e["tid"].get<int>(), e["ts"].get<double>(), 0};
    s.end = s.ts + e["dur"].get<double>();
    if (e.contains("args") && e["args"].contains("clock_error_us")) s.err = e["args"]["clock_error_us"].get<double>();
    (s.tid >= TraceRow::kGpuOffset ? gpu : host)[pid].push_back(std::move(s));
  }
  for (int r = 0; r < world; ++r) {
    const std::vector<Span>& g = gpu[r];
    const std::vector<Span>& h = host[r];
    std::map<std::string, int> count;
    std::vector<const Span*> ops;
    std::map<int, std::vector<const Span*>> comm_rows;
    for (const Span& s : g) {
      ++count[s.cat];
      if (s.err < 0) return absl::FailedPreconditionError(absl::StrCat(Where(r, s), " has no clock_error_us"));
      const bool compute_row = s.tid == TraceRow{r, TraceRow::kCompute}.Gpu().tid;
      const bool compute_cat = s.cat == "gpu op" || s.cat == "gpu compute" || s.cat == "gpu wait";
      if (compute_row != compute_cat || (!compute_cat && s.cat != "gpu comm")) {
        return absl::FailedPreconditionError(absl::StrCat(Where(r, s), ": expected the ops, units and waits on row ",
                                                          TraceRow::kGpuOffset, " and collectives (gpu comm) above it"));
      }
      if (s.cat == "gpu op") ops.push_back(&s);
      if (s.cat == "gpu comm") {
        const std::string& row_name = row_names[{r, s.tid}];
        if (s.tid - TraceRow::kGpuOffset < TraceRow::kFirstStream || row_name.rfind("gpu comm ", 0) != 0) {
          return absl::FailedPreconditionError(absl::StrCat(Where(r, s), ": expected a row named \"gpu comm ...\" "
                                                            "twinning a communicator's, found \"", row_name, "\""));
        }
        comm_rows[s.tid].push_back(&s);
      }
    }
    if (count["gpu op"] == 0 || count["gpu compute"] == 0 || (world > 1 && count["gpu comm"] == 0)) {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, ": ", count["gpu op"], " gpu op, ",
                                                        count["gpu compute"], " gpu compute, ", count["gpu comm"],
                                                        " gpu comm spans"));
    }
    if (row_names[{r, TraceRow::kGpuOffset}] != "gpu compute") {
      return absl::FailedPreconditionError(absl::StrCat("rank ", r, ": row ", TraceRow::kGpuOffset, " is named \"",
                                                        row_names[{r, TraceRow::kGpuOffset}], "\""));
    }
    // Twins: the k-th GPU span of a name and the k-th host span of that name.
    struct Twin {
      const char* gpu_cat;
      const char* start_cat;  // the host span it starts after
      const char* end_cat;    // the host span it ends in (inside_launch)
    };
    for (const Twin& t : {Twin{"gpu op", "op", "op"}, Twin{"gpu compute", "compute", "compute"},
                          Twin{"gpu wait", "wait", "wait"}, Twin{"gpu comm", "issued", "comm"}}) {
      const auto starts = ByName(h, t.start_cat);
      const auto ends = ByName(h, t.end_cat);
      for (const auto& [name, list] : ByName(g, t.gpu_cat)) {
        auto s = starts.find(name);
        // The job's own collectives (the loss average kept on the device) are
        // no sharding runtime's: no issued span, their launch (comm) starts them.
        if (s == starts.end() && t.gpu_cat == std::string("gpu comm")) s = ends.find(name);
        const auto e = ends.find(name);
        if (s == starts.end() || s->second.size() < list.size() || e == ends.end() || e->second.size() < list.size()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "rank ", r, ": ", list.size(), " ", t.gpu_cat, " spans \"", name, "\" but ",
              s == starts.end() ? 0 : s->second.size(), " host ", t.start_cat, " and ",
              e == ends.end() ? 0 : e->second.size(), " host ", t.end_cat, " spans of that name"));
        }
        if (all_ops && t.gpu_cat == std::string("gpu op") && s->second.size() != list.size()) {
          return absl::FailedPreconditionError(absl::StrCat("rank ", r, ": ", s->second.size(), " host ops \"", name,
                                                            "\" but ", list.size(), " GPU ones"));
        }
        for (size_t k = 0; k < list.size(); ++k) {
          const Span& x = *list[k];
          if (x.ts < s->second[k]->ts - x.err - kPrintedSlackUs) {
            return absl::FailedPreconditionError(
                absl::StrCat(Where(r, x), " starts before its launch ", Where(r, *s->second[k])));
          }
          if (inside_launch && x.end > e->second[k]->end + x.err + kPrintedSlackUs) {
            return absl::FailedPreconditionError(
                absl::StrCat(Where(r, x), " ends after its launch ", Where(r, *e->second[k]), " returned"));
          }
        }
      }
    }
    ZS_RETURN_IF_ERROR(NoOverlap(r, ops, "gpu ops of the compute stream"));
    for (const auto& [tid, row] : comm_rows) ZS_RETURN_IF_ERROR(NoOverlap(r, row, "collectives of one stream"));
    // Every GPU span in a step window (the step ends after the traced step's Resolve).
    for (const Span& x : g) {
      bool in_step = false;
      for (const Span& st : h) {
        in_step = in_step || (st.cat == "step" && x.ts >= st.ts - x.err - kPrintedSlackUs &&
                              x.end <= st.end + x.err + kPrintedSlackUs);
      }
      if (!in_step) return absl::FailedPreconditionError(absl::StrCat(Where(r, x), " lies in no step"));
    }
  }
  return absl::OkStatus();
}

TrainOptions TinyTracedJob(const std::string& trace) {
  TrainOptions o;
  o.model = nn::GptConfig{.vocab_size = 256, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 32};
  o.data = "data/tinyshakespeare.txt";
  o.batch_size = 4;
  o.steps = 4;
  o.eval_every = 0;
  o.eval_iters = 1;
  o.sample_tokens = 0;
  o.sharding.wrap = WrapPolicy::ByType({"Block"});
  o.trace = trace;
  o.trace_from = 1;
  o.trace_steps = 2;
  return o;
}

}  // namespace zeroshard::testing
