#include "collectives/work.h"

#include <utility>

namespace zeroshard {

// ================================================================ HostWork

std::shared_ptr<HostWork> HostWork::Done(absl::Status status) {
  auto w = std::make_shared<HostWork>();
  w->Complete(std::move(status));
  return w;
}

void HostWork::Complete(absl::Status status) {
  absl::MutexLock lock(&mu_);
  status_ = std::move(status);
  done_ = true;
  done_flag_.store(true, std::memory_order_release);
}

absl::Status HostWork::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

// ================================================================ CommThread

CommThread::CommThread(std::string name, std::function<void()> on_start)
    : name_(std::move(name)), on_start_(std::move(on_start)) {}

CommThread::~CommThread() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Work> CommThread::Enqueue(std::function<absl::Status()> task) {
  auto work = std::make_shared<HostWork>();
  absl::MutexLock lock(&mu_);
  queue_.push_back(Item{std::move(task), work});
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { Loop(); });
  }
  return work;
}

absl::Status CommThread::Run(std::function<absl::Status()> task) {
  bool run_here = false;
  {
    absl::MutexLock lock(&mu_);
    if (queue_.empty() && !busy_) busy_ = run_here = true;
  }
  if (!run_here) return Enqueue(std::move(task))->Wait();
  absl::Status s = task();
  absl::MutexLock lock(&mu_);
  busy_ = false;
  return s;
}

void CommThread::Drain() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; };
  mu_.Await(absl::Condition(&idle));
}

void CommThread::Loop() {
  if (on_start_) on_start_();
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return (!queue_.empty() && !busy_) || (stop_ && queue_.empty() && !busy_);
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    absl::Status s = item.task();
    item.work->Complete(std::move(s));
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

}  // namespace zeroshard
