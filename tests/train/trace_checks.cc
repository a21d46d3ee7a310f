#include "zeroshard/tests/train/trace_checks.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
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
