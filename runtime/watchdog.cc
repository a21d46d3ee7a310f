#include "zeroshard/runtime/watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard {

namespace {

std::string Seconds(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "no limit";
  return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d));
}

void DefaultTerminate(int exit_code) {
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

}  // namespace

Watchdog& Watchdog::Process() {
  static Watchdog* const watchdog = new Watchdog();  // never destroyed: used at exit
  return *watchdog;
}

Watchdog::~Watchdog() { Stop(); }

absl::Status Watchdog::Start(WatchdogOptions options) {
  if (options.poll <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "watchdog: the poll interval must be positive, got ", absl::FormatDuration(options.poll)));
  }
  if (options.grace < absl::ZeroDuration() || options.wait_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "watchdog: grace must be >= 0 and wait_timeout > 0, got grace ",
        absl::FormatDuration(options.grace), " and wait_timeout ",
        absl::FormatDuration(options.wait_timeout)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) {
    return absl::FailedPreconditionError("watchdog: already running (Stop it first)");
  }
  options_ = std::move(options);
  stop_ = false;
  expirations_.store(0);  // armed again
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Watchdog::Stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  t.join();
}

bool Watchdog::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return thread_.joinable();
}

WatchdogOptions Watchdog::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

void Watchdog::Add(WatchdogClient* client) {
  std::lock_guard<std::mutex> lock(mu_);
  clients_.push_back(client);
}

void Watchdog::Remove(WatchdogClient* client) {
  std::lock_guard<std::mutex> lock(mu_);
  clients_.erase(std::remove(clients_.begin(), clients_.end(), client), clients_.end());
}

int64_t Watchdog::BeginWait(std::string what, absl::Duration deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t id = next_wait_++;
  waits_.emplace(id, Wait{std::move(what), absl::Now(), deadline});
  return id;
}

void Watchdog::EndWait(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  waits_.erase(id);
}

std::string Watchdog::DescribeWaits(absl::Time now) const {
  std::lock_guard<std::mutex> lock(mu_);
  return DescribeWaitsLocked(now);
}

std::string Watchdog::DescribeWaitsLocked(absl::Time now) const {
  std::string s;
  for (const auto& [id, w] : waits_) {
    absl::StrAppend(&s, "  ", w.what, ", ", Seconds(now - w.since), " of ", Seconds(w.deadline),
                    "\n");
  }
  return s;
}

absl::Duration Watchdog::wait_timeout() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_.wait_timeout;
}

std::string Watchdog::Overdue(absl::Time now) const {
  // mu_ held.
  for (const auto& [id, w] : waits_) {
    if (w.deadline != absl::InfiniteDuration() && now - w.since > w.deadline) {
      return absl::StrCat(w.what, " has waited ", Seconds(now - w.since),
                          ", past its deadline of ", Seconds(w.deadline));
    }
  }
  for (WatchdogClient* c : clients_) {
    std::optional<WatchdogClient::Pending> p = c->OldestPending();
    if (!p.has_value() || p->allowed == absl::InfiniteDuration()) continue;
    const absl::Duration limit = p->allowed + options_.grace;
    if (now - p->since > limit) {
      return absl::StrCat(p->what, " has been in progress for ", Seconds(now - p->since),
                          ", past its timeout of ", Seconds(p->allowed),
                          " and the watchdog's grace of ", Seconds(options_.grace));
    }
  }
  return "";
}

bool Watchdog::CheckNow(absl::Time now) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    why = Overdue(now);
  }
  if (why.empty() || expirations_.load() > 0) return false;
  Expire(why);
  return true;
}

void Watchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, absl::ToChronoNanoseconds(options_.poll));
    if (stop_) break;
    if (expirations_.load() > 0) continue;
    const std::string why = Overdue(absl::Now());
    if (why.empty()) continue;
    lock.unlock();
    Expire(why);
    lock.lock();
  }
}

void Watchdog::Expire(const std::string& why) {
  std::lock_guard<std::mutex> once(expire_mu_);
  if (expirations_.load() > 0) return;
  expirations_.fetch_add(1);
  const absl::Time now = absl::Now();
  const absl::Status status = absl::DeadlineExceededError(absl::StrCat("watchdog: ", why));
  std::function<void(int)> terminate;
  {
    std::lock_guard<std::mutex> lock(mu_);
    terminate = options_.terminate ? options_.terminate : DefaultTerminate;
    char host[256] = "?";
    ::gethostname(host, sizeof(host) - 1);
    const std::string header = absl::StrCat(
        "zeroshard watchdog expired: ", why, "\n", "host ", host, ", pid ", ::getpid(), ", at ",
        absl::FormatTime(now, absl::UTCTimeZone()), "\n");
    std::string waits = DescribeWaitsLocked(now);
    if (waits.empty()) waits = "  none\n";
    // One record per rank: every client reporting under it, the process's waits.
    std::map<int, std::string> records;
    for (WatchdogClient* c : clients_) {
      absl::StrAppend(&records[c->WatchdogRank()], c->FlightRecord());
    }
    if (records.empty() || options_.process_rank >= 0) {
      records.try_emplace(std::max(0, options_.process_rank));
    }
    std::string stderr_text = header;
    for (auto& [rank, text] : records) {
      // Waits are per process: with in-process ranks every rank's file has them.
      const bool has_waits = options_.process_rank < 0 || options_.process_rank == rank;
      const std::string body = absl::StrCat(header, "flight recorder of rank ", rank,
                                            "\nwaits in progress:\n",
                                            has_waits ? waits : "  (see the process's rank)\n", text);
      absl::StrAppend(&stderr_text, "---- flight recorder of rank ", rank, "\n", text);
      if (options_.dump_dir.empty()) continue;
      const std::string path =
          absl::StrCat(options_.dump_dir, "/flight_recorder.rank", rank, ".txt");
      if (std::FILE* f = std::fopen(path.c_str(), "w")) {
        std::fwrite(body.data(), 1, body.size(), f);
        std::fclose(f);
        absl::StrAppend(&stderr_text, "(written to ", path, ")\n");
      } else {
        absl::StrAppend(&stderr_text, "(could not write ", path, ": ", std::strerror(errno), ")\n");
      }
    }
    absl::StrAppend(&stderr_text, "waits in progress:\n", waits,
                    "aborting every communicator and ending the process (status ",
                    kWatchdogExitCode, ")\n");
    std::fputs(stderr_text.c_str(), stderr);
    std::fflush(stderr);
    for (WatchdogClient* c : clients_) c->AbortForWatchdog(status);
  }
  terminate(kWatchdogExitCode);
}

WatchdogWait::WatchdogWait(std::string what)
    : WatchdogWait(std::move(what), Watchdog::Process().wait_timeout()) {}

WatchdogWait::WatchdogWait(std::string what, absl::Duration deadline)
    : id_(Watchdog::Process().BeginWait(std::move(what), deadline)) {}

WatchdogWait::~WatchdogWait() { Watchdog::Process().EndWait(id_); }

}  // namespace zeroshard
