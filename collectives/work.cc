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

// ================================================================ ThenWork

namespace {

class ChainedWork final : public Work {
 public:
  ChainedWork(std::shared_ptr<Work> first, std::function<absl::Status()> then)
      : first_(std::move(first)), then_(std::move(then)) {}

  absl::Status Wait() override { return Finish(first_->Wait()); }
  absl::Status Block(const Stream& stream) override { return Finish(first_->Block(stream)); }
  bool IsCompleted() const override { return done_flag_.load(std::memory_order_acquire); }

 private:
  absl::Status Finish(absl::Status first) {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return status_;
    status_ = first.ok() ? then_() : std::move(first);
    then_ = nullptr;  // free what it captured (buffers) at once
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
    return status_;
  }

  const std::shared_ptr<Work> first_;
  std::mutex mu_;
  std::function<absl::Status()> then_;  // guarded by mu_
  bool done_ = false;                   // guarded by mu_
  absl::Status status_;                 // guarded by mu_
  std::atomic<bool> done_flag_{false};
};

}  // namespace

std::shared_ptr<Work> ThenWork(std::shared_ptr<Work> first, std::function<absl::Status()> then) {
  return std::make_shared<ChainedWork>(std::move(first), std::move(then));
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
