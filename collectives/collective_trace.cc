#include "zeroshard/collectives/collective_trace.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard {

absl::string_view CollectiveStateName(CollectiveState state) {
  switch (state) {
    case CollectiveState::kIssued: return "issued";
    case CollectiveState::kRunning: return "running";
    case CollectiveState::kCompleted: return "completed";
    case CollectiveState::kFailed: return "failed";
    case CollectiveState::kTimedOut: return "timed out";
  }
  return "invalid";
}

CollectiveTrace::CollectiveTrace(int capacity) : capacity_(std::max(1, capacity)) {
  ring_.resize(capacity_);
}

void CollectiveTrace::Issued(const CollectiveDesc& desc) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = ring_[next_ % capacity_];
  e = Entry{};
  e.desc = desc;
  e.issued = absl::Now();
  ++next_;
}

void CollectiveTrace::SetState(int64_t seq, CollectiveState state, absl::string_view note) {
  Set(seq, state, note, /*only_in_progress=*/false);
}

void CollectiveTrace::Finish(int64_t seq, CollectiveState state, absl::string_view note) {
  Set(seq, state, note, /*only_in_progress=*/true);
}

void CollectiveTrace::Set(int64_t seq, CollectiveState state, absl::string_view note,
                          bool only_in_progress) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t first = std::max<int64_t>(0, next_ - capacity_);
  for (int64_t i = next_ - 1; i >= first; --i) {
    Entry& e = ring_[i % capacity_];
    if (e.desc.seq != seq) continue;
    if (only_in_progress && e.state != CollectiveState::kIssued &&
        e.state != CollectiveState::kRunning) {
      return;
    }
    e.state = state;
    if (state == CollectiveState::kRunning) {
      e.started = absl::Now();
    } else if (state != CollectiveState::kIssued) {
      e.finished = absl::Now();
    }
    if (!note.empty()) e.note = std::string(note.substr(0, note.find('\n')));
    return;
  }
}

std::vector<CollectiveTrace::Entry> CollectiveTrace::Entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  for (int64_t i = std::max<int64_t>(0, next_ - capacity_); i < next_; ++i) {
    out.push_back(ring_[i % capacity_]);
  }
  return out;
}

std::string CollectiveTrace::ToString(absl::string_view who) const {
  const std::vector<Entry> entries = Entries();
  const absl::Time now = absl::Now();
  std::string s = absl::StrCat("last ", entries.size(), " collectives of ", who,
                               ", oldest first:\n");
  for (const Entry& e : entries) {
    // Time spent: finished - started once done; now - started while running.
    std::string time;
    if (e.state == CollectiveState::kIssued) {
      time = absl::StrFormat("queued for %.3f ms", absl::ToDoubleMilliseconds(now - e.issued));
    } else {
      const absl::Time end = e.state == CollectiveState::kRunning ? now : e.finished;
      time = absl::StrFormat("%.3f ms", absl::ToDoubleMilliseconds(end - e.started));
    }
    absl::StrAppend(&s, absl::StrFormat("  %-58s %-10s %s", e.desc.ToString(),
                                        CollectiveStateName(e.state), time));
    if (!e.note.empty()) absl::StrAppend(&s, "  (", e.note, ")");
    absl::StrAppend(&s, "\n");
  }
  return s;
}

}  // namespace zeroshard
