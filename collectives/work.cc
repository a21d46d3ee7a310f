#include "zeroshard/collectives/work.h"

#include <utility>

namespace zeroshard {

// ================================================================ HostWork

std::shared_ptr<HostWork> HostWork::Done(absl::Status status) {
  auto w = std::make_shared<HostWork>();
  w->Complete(std::move(status));
  return w;
}

void HostWork::Complete(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

absl::Status HostWork::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return status_;
}

// ================================================================ CommThread

CommThread::CommThread(std::string name, std::function<void()> on_start)
    : name_(std::move(name)), on_start_(std::move(on_start)) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Work> CommThread::Enqueue(std::function<absl::Status()> task) {
  auto work = std::make_shared<HostWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(task), work});
    if (!started_) {
      started_ = true;
      thread_ = std::thread([this] { Loop(); });
    }
  }
  cv_.notify_all();
  return work;
}

absl::Status CommThread::Run(std::function<absl::Status()> task) {
  bool run_here = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty() && !busy_) busy_ = run_here = true;
  }
  if (!run_here) return Enqueue(std::move(task))->Wait();
  absl::Status s = task();
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
  cv_.notify_all();
  return s;
}

void CommThread::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void CommThread::Loop() {
  if (on_start_) on_start_();
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return (!queue_.empty() && !busy_) || (stop_ && queue_.empty() && !busy_); });
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    absl::Status s = item.task();
    // Drop the task (and the tensors it holds) before waking the waiter, so
    // that memory the caller frees after Wait() is really free by then.
    item.task = nullptr;
    item.work->Complete(std::move(s));
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace zeroshard
