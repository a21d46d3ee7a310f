#include "zeroshard/runtime/nvme/aio_engine.h"

#include <errno.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

// ================================================================ tickets

absl::Status IoTicket::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* pending) { return *pending == 0; }, &pending_));
  return status_;
}

bool IoTicket::Done() {
  absl::MutexLock lock(&mu_);
  return pending_ == 0;
}

std::shared_ptr<IoTicket> IoTicket::Completed(absl::Status status) {
  auto t = std::make_shared<IoTicket>();
  absl::MutexLock lock(&t->mu_);
  t->status_ = std::move(status);
  return t;
}

void IoTicket::Finish(const absl::Status& part_status) {
  absl::MutexLock lock(&mu_);
  if (status_.ok() && !part_status.ok()) status_ = part_status;
  --pending_;
}

namespace {

// Takes up to `want` bytes of the injected write budget (all of them when
// there is none); 0 means the "disk" is full. A cut-short write stops at a
// 4096-byte boundary, as a full disk's last block does (and as O_DIRECT needs);
// what is left under a block is lost, and the disk is full.
int64_t TakeWriteBudget(IoFaults* faults, int64_t want) {
  if (faults == nullptr) return want;
  int64_t have = faults->write_budget.load();
  while (have >= 0) {
    const int64_t take = have >= want ? want : have / kDirectIoAlignment * kDirectIoAlignment;
    const int64_t left = have >= want ? have - want : 0;
    if (faults->write_budget.compare_exchange_weak(have, left)) return take;
  }
  return want;
}

// The errno's status, except: a write that does not fit (ENOSPC, EDQUOT,
// EFBIG: a full disk or quota, RLIMIT_FSIZE) is ResourceExhausted, as the
// checkpoint writer says it (Note [Full disk] in checkpoint/atomic_file.h),
// and EIO (the device could not return or store the bytes) is DataLoss, the
// region being lost (absl has Unknown for it).
absl::Status IoError(int err, IoKind kind, const std::string& what, int64_t bytes, int64_t offset) {
  const absl::Status s = absl::ErrnoToStatus(
      err, absl::StrCat(what, ": ", kind == IoKind::kRead ? "reading " : "writing ", bytes, " bytes at offset ", offset));
  if (err == ENOSPC || err == EDQUOT || err == EFBIG) return absl::ResourceExhaustedError(s.message());
  if (err == EIO) return absl::DataLossError(s.message());
  return s;
}

absl::Status Truncated(const std::string& what, int64_t bytes, int64_t offset) {
  return absl::DataLossError(absl::StrCat(what, ": the file ends before the ", bytes, " bytes at offset ", offset,
                                          " (truncated underneath?)"));
}

}  // namespace

// ================================================================ workers

// One I/O thread's state: its io_uring ring (none with the threads backend).
class AioEngine::Worker {
 public:
  Worker(const AioOptions& options, IoFaults* faults) : options_(options), faults_(faults) {}
  ~Worker() {
    if (has_ring_) io_uring_queue_exit(&ring_);
  }

  // 0 or a negative errno.
  int InitRing() {
    if (faults_ != nullptr && faults_->refuse_io_uring.load()) return -ENOSYS;
    const int rc = io_uring_queue_init(static_cast<unsigned>(options_.queue_depth), &ring_, 0);
    has_ring_ = rc == 0;
    return rc;
  }

  absl::Status Run(const Part& p) {
    if (p.kind == IoKind::kRead && faults_ != nullptr) {
      if (const int err = faults_->read_errno.load(); err != 0) {
        return IoError(err, p.kind, absl::StrCat(p.what, " (injected)"), p.bytes, p.offset);
      }
    }
    return has_ring_ ? RunUring(p) : RunThreads(p);
  }

 private:
  // pread/pwrite, one block at a time.
  absl::Status RunThreads(const Part& p) {
    int64_t done = 0;
    while (done < p.bytes) {
      const int64_t want = std::min<int64_t>(options_.block_size, p.bytes - done);
      int64_t len = want;
      if (p.kind == IoKind::kWrite) {
        len = TakeWriteBudget(faults_, want);
        if (len == 0) return IoError(ENOSPC, p.kind, p.what, p.bytes - done, p.offset + done);
      }
      const ssize_t n = p.kind == IoKind::kRead ? ::pread(p.fd, p.buffer + done, len, p.offset + done)
                                                : ::pwrite(p.fd, p.buffer + done, len, p.offset + done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return IoError(errno, p.kind, p.what, len, p.offset + done);
      }
      if (n == 0) {
        if (p.kind == IoKind::kRead) return Truncated(p.what, p.bytes - done, p.offset + done);
        return IoError(ENOSPC, p.kind, p.what, len, p.offset + done);
      }
      done += n;  // a short transfer resumes where it stopped
    }
    return absl::OkStatus();
  }

  // Up to queue_depth requests in flight; each slot is one block-sized request.
  struct Slot {
    char* buffer = nullptr;
    int64_t offset = 0;
    int64_t length = 0;  // bytes still to move
  };

  absl::Status RunUring(const Part& p) {
    std::vector<Slot> slots(static_cast<size_t>(options_.queue_depth));
    std::vector<Slot*> free_slots;
    for (Slot& s : slots) free_slots.push_back(&s);
    int64_t next = 0;
    int in_flight = 0;
    absl::Status error;
    // Queues the request of `s`; false (and `error` set) when nothing could be issued.
    auto prepare = [&](Slot* s) -> bool {
      int64_t len = s->length;
      if (p.kind == IoKind::kWrite) {
        len = TakeWriteBudget(faults_, len);
        if (len == 0) {
          error = IoError(ENOSPC, p.kind, p.what, s->length, s->offset);
          return false;
        }
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {  // cannot happen: the ring has queue_depth entries
        error = absl::InternalError(absl::StrCat(p.what, ": io_uring submission queue full"));
        return false;
      }
      if (p.kind == IoKind::kRead) {
        io_uring_prep_read(sqe, p.fd, s->buffer, static_cast<unsigned>(len), static_cast<uint64_t>(s->offset));
      } else {
        io_uring_prep_write(sqe, p.fd, s->buffer, static_cast<unsigned>(len), static_cast<uint64_t>(s->offset));
      }
      io_uring_sqe_set_data(sqe, s);
      if (options_.single_submit) io_uring_submit(&ring_);
      return true;
    };
    for (;;) {
      if (error.ok() && (options_.overlap_events || in_flight == 0)) {
        int queued = 0;
        while (error.ok() && !free_slots.empty() && next < p.bytes) {
          Slot* s = free_slots.back();
          free_slots.pop_back();
          s->buffer = p.buffer + next;
          s->offset = p.offset + next;
          s->length = std::min<int64_t>(options_.block_size, p.bytes - next);
          next += s->length;
          if (prepare(s)) {
            ++in_flight;
            ++queued;
          } else {
            free_slots.push_back(s);
          }
        }
        if (queued > 0 && !options_.single_submit) io_uring_submit(&ring_);
      }
      if (in_flight == 0) break;
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc < 0) {
        // The ring itself failed: nothing more can be reaped safely.
        return IoError(-rc, p.kind, p.what, p.bytes, p.offset);
      }
      Slot* s = static_cast<Slot*>(io_uring_cqe_get_data(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      bool finished = true;
      if (res < 0) {
        if (error.ok()) error = IoError(-res, p.kind, p.what, s->length, s->offset);
      } else if (res == 0) {
        if (error.ok()) {
          error = p.kind == IoKind::kRead ? Truncated(p.what, s->length, s->offset)
                                          : IoError(ENOSPC, p.kind, p.what, s->length, s->offset);
        }
      } else if (res < s->length) {
        // Short: resume the rest of this request (it stays in flight).
        s->buffer += res;
        s->offset += res;
        s->length -= res;
        if (error.ok() && prepare(s)) {
          finished = false;
          if (!options_.single_submit) io_uring_submit(&ring_);
        }
      }
      if (finished) {
        --in_flight;
        free_slots.push_back(s);
      }
    }
    return error;
  }

  const AioOptions options_;
  IoFaults* const faults_;
  io_uring ring_{};
  bool has_ring_ = false;
};

// ================================================================ engine

AioEngine::AioEngine(const AioOptions& options, std::shared_ptr<IoFaults> faults)
    : options_(options), faults_(std::move(faults)) {}

absl::StatusOr<std::unique_ptr<AioEngine>> AioEngine::Create(const AioOptions& options,
                                                            std::shared_ptr<IoFaults> faults) {
  ZS_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<AioEngine> e(new AioEngine(options, std::move(faults)));
  for (int i = 0; i < options.thread_count; ++i) {
    e->workers_.push_back(std::make_unique<Worker>(options, e->faults_.get()));
  }
  // io_uring for every thread, or for none.
  for (auto& w : e->workers_) {
    const int rc = w->InitRing();
    if (rc != 0) {
      e->backend_ = Backend::kThreads;
      e->fallback_note_ = absl::StrCat("io_uring unavailable (io_uring_queue_init: ", std::strerror(-rc),
                                       "): using pread/pwrite on ", options.thread_count, " thread(s)");
      for (auto& w2 : e->workers_) w2 = std::make_unique<Worker>(options, e->faults_.get());
      break;
    }
  }
  for (auto& w : e->workers_) {
    Worker* raw = w.get();
    AioEngine* self = e.get();
    e->threads_.emplace_back([self, raw] { self->WorkerLoop(raw); });
  }
  return e;
}

AioEngine::~AioEngine() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

std::string AioEngine::backend_name() const {
  return backend_ == Backend::kIoUring ? "io_uring" : "pread/pwrite threads";
}

std::shared_ptr<IoTicket> AioEngine::Submit(IoKind kind, int fd, void* buffer, int64_t bytes, int64_t offset,
                                            std::string what) {
  auto ticket = std::make_shared<IoTicket>();
  const int64_t blocks = (bytes + options_.block_size - 1) / options_.block_size;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(options_.thread_count, blocks));
  const int64_t per_part = (blocks + parts - 1) / parts * options_.block_size;
  std::vector<Part> out;
  int64_t start = 0;
  do {  // an empty transfer is one empty part
    const int64_t len = std::min(per_part, bytes - start);
    out.push_back(Part{kind, fd, static_cast<char*>(buffer) + start, len, offset + start, what, ticket});
    start += len;
  } while (start < bytes);
  {
    absl::MutexLock lock(&ticket->mu_);
    ticket->pending_ = static_cast<int>(out.size());
  }
  absl::MutexLock lock(&mu_);
  for (Part& p : out) queue_.push_back(std::move(p));
  return ticket;
}

void AioEngine::WorkerLoop(Worker* worker) {
  for (;;) {
    Part part;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](AioEngine* e) ABSL_NO_THREAD_SAFETY_ANALYSIS { return e->stopping_ || !e->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping, and everything submitted is done
      part = std::move(queue_.front());
      queue_.pop_front();
    }
    const absl::Status s = part.bytes == 0 ? absl::OkStatus() : worker->Run(part);
    part.ticket->Finish(s);
  }
}

}  // namespace zeroshard
