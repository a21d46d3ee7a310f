#include "zeroshard/runtime/nvme/swap_space.h"

#include <sys/mman.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "zeroshard/runtime/nvme/virtual_swap_store.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

namespace {

// A virtual store's buffers have no bytes behind their addresses.
void Zero(const SwapStore& store, char* data, int64_t bytes) {
  if (store.holds_bytes()) std::memset(data, 0, static_cast<size_t>(bytes));
}

}  // namespace

std::string SwapStats::ToString() const {
  return absl::StrFormat("%d reads (%s, %d by prefetch), %d writes (%s), %d hits, %.3f s waiting for I/O", reads,
                         FormatBytes(bytes_read), prefetches, writes, FormatBytes(bytes_written), hits,
                         wait_seconds);
}

absl::StatusOr<std::unique_ptr<SwapSpace>> SwapSpace::Create(const SwapSpaceOptions& options,
                                                             const std::vector<int64_t>& region_bytes,
                                                             std::vector<std::string> region_names,
                                                             Allocator* host) {
  if (options.buffer_count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("NVMe swap of ", options.name,
                                                   ": buffer_count must be at least 1, found ", options.buffer_count));
  }
  std::unique_ptr<SwapSpace> s(new SwapSpace());
  s->options_ = options;
  s->host_ = host != nullptr ? host : DefaultCpuAllocator();
  const Device where = s->host_->device();
  VirtualDevice* simulated = where.is_virtual() ? VirtualDevice::Find(where.index) : nullptr;
  std::vector<std::string> notes;
  if (simulated != nullptr && simulated->IsHostSide(where)) {
    ZS_ASSIGN_OR_RETURN(s->file_, VirtualSwapStore::Create(simulated, options.name, region_bytes,
                                                           std::move(region_names)));
  } else {
    ZS_ASSIGN_OR_RETURN(s->engine_, AioEngine::Create(options.aio, options.file.faults));
    ZS_ASSIGN_OR_RETURN(s->file_,
                        SwapFile::Create(options.file, region_bytes, std::move(region_names), s->engine_.get()));
    if (!s->engine_->fallback_note().empty()) notes.push_back(s->engine_->fallback_note());
  }
  if (!s->file_->note().empty()) notes.push_back(s->file_->note());
  s->region_buffer_.assign(region_bytes.size(), -1);
  s->buffer_bytes_ = s->file_->max_region_bytes();
  // Never more buffers than regions: the extra ones could hold nothing.
  const int count = std::max(1, std::min<int>(options.buffer_count, std::max<int>(1, s->num_regions())));
  s->buffers_.resize(static_cast<size_t>(count));
  s->raw_bytes_ = s->buffer_bytes_ + kDirectIoAlignment;
  s->pinned_ = options.pin_memory && s->file_->holds_bytes();
  for (Buffer& b : s->buffers_) {
    ZS_ASSIGN_OR_RETURN(b.raw, s->host_->Allocate(static_cast<size_t>(s->raw_bytes_)));
    const uintptr_t p = reinterpret_cast<uintptr_t>(b.raw);
    b.data = reinterpret_cast<char*>(AlignUp(static_cast<int64_t>(p), kDirectIoAlignment));
    if (s->pinned_ && s->buffer_bytes_ > 0 && ::mlock(b.data, static_cast<size_t>(s->buffer_bytes_)) != 0) {
      notes.push_back(absl::StrCat("pin_memory: mlock refused (", std::strerror(errno),
                                   "; raise RLIMIT_MEMLOCK): the buffers are pageable"));
      for (Buffer& p2 : s->buffers_) {
        if (&p2 == &b) break;
        ::munlock(p2.data, static_cast<size_t>(s->buffer_bytes_));
      }
      s->pinned_ = false;
    }
  }
  s->note_ = absl::StrJoin(notes, "; ");
  return s;
}

SwapSpace::~SwapSpace() {
  for (Buffer& b : buffers_) {
    if (b.ticket != nullptr) (void)b.ticket->Wait();
  }
  file_.reset();   // removes the file
  engine_.reset();
  for (Buffer& b : buffers_) {
    if (b.raw == nullptr) continue;
    if (pinned_) ::munlock(b.data, static_cast<size_t>(buffer_bytes_));
    host_->Deallocate(b.raw, static_cast<size_t>(raw_bytes_));
  }
}

std::string SwapSpace::ToString() const {
  return absl::StrFormat("%s: %d regions, %s in %s, %d x %s buffers%s", options_.name, num_regions(),
                         FormatBytes(file_->file_bytes()), file_->Describe(), buffer_count(),
                         FormatBytes(buffer_bytes_), pinned_ ? " (pinned)" : "");
}

absl::Status SwapSpace::Fail(absl::Status s) {
  if (error_.ok() && !s.ok()) {
    error_ = absl::Status(s.code(), absl::StrCat("NVMe swap of ", options_.name, ": ", s.message()));
  }
  return error_;
}

absl::Status SwapSpace::Settle(int b) {
  Buffer& buf = buffers_[b];
  if (buf.ticket == nullptr) return absl::OkStatus();
  const double start = file_->Now();
  absl::Status s = buf.ticket->Wait();
  stats_.wait_seconds += file_->Now() - start;
  buf.ticket.reset();
  if (!s.ok()) return Fail(s);
  if (buf.state == BufferState::kReading) {
    ZS_RETURN_IF_ERROR(Fail(file_->Verify(buf.region, buf.data)));
    buf.state = BufferState::kResident;  // pins stay 0 until an Acquire takes it
  } else if (buf.state == BufferState::kWriting) {
    buf.state = BufferState::kClean;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SwapSpace::TakeBuffer(bool may_wait) {
  int pick = -1;
  // Free first; then the least recently used clean buffer (or finished write).
  for (size_t i = 0; i < buffers_.size() && pick < 0; ++i) {
    if (buffers_[i].state == BufferState::kFree) pick = static_cast<int>(i);
  }
  if (pick < 0) {
    for (size_t i = 0; i < buffers_.size(); ++i) {
      Buffer& b = buffers_[i];
      const bool clean = b.state == BufferState::kClean ||
                         (b.state == BufferState::kWriting && b.ticket != nullptr && b.ticket->Done());
      if (clean && (pick < 0 || b.last_use < buffers_[pick].last_use)) pick = static_cast<int>(i);
    }
  }
  if (pick < 0 && may_wait) {
    // The oldest write, then a prefetched region nobody has taken yet.
    for (BufferState want : {BufferState::kWriting, BufferState::kReading}) {
      for (size_t i = 0; i < buffers_.size(); ++i) {
        Buffer& b = buffers_[i];
        if (b.state == want && b.pins == 0 && (pick < 0 || b.last_use < buffers_[pick].last_use)) {
          pick = static_cast<int>(i);
        }
      }
      if (pick >= 0) break;
    }
    if (pick < 0) {
      return Fail(absl::ResourceExhaustedError(absl::StrCat(
          "all ", buffers_.size(), " buffers hold regions in use at once: buffer_count is too small for this access "
          "pattern (raise it)")));
    }
  }
  if (pick < 0) return -1;
  Buffer& b = buffers_[pick];
  ZS_RETURN_IF_ERROR(Settle(pick));
  if (b.region >= 0) region_buffer_[b.region] = -1;
  b.region = -1;
  b.state = BufferState::kFree;
  b.pins = 0;
  b.dirty = false;
  return pick;
}

absl::StatusOr<char*> SwapSpace::Acquire(int r, bool overwrite) {
  ZS_RETURN_IF_ERROR(error_);
  if (r < 0 || r >= num_regions()) {
    return absl::OutOfRangeError(absl::StrCat("NVMe swap of ", options_.name, ": region ", r, " of ", num_regions()));
  }
  int b = region_buffer_[r];
  if (b >= 0) {
    Buffer& buf = buffers_[b];
    if (buf.state == BufferState::kClean || buf.state == BufferState::kWriting) {
      ++stats_.hits;  // the bytes are still in memory: no read
    }
    ZS_RETURN_IF_ERROR(Settle(b));  // a read in flight finishes; a write must, before the bytes change
    buf.state = BufferState::kResident;
    if (overwrite && buf.pins == 0) Zero(*file_, buf.data, region_bytes(r));
  } else {
    ZS_ASSIGN_OR_RETURN(b, TakeBuffer(/*may_wait=*/true));
    Buffer& buf = buffers_[b];
    buf.region = r;
    region_buffer_[r] = b;
    if (overwrite) {
      Zero(*file_, buf.data, region_bytes(r));
      buf.state = BufferState::kResident;
    } else {
      buf.state = BufferState::kReading;
      buf.ticket = file_->Read(r, buf.data);
      ++stats_.reads;
      stats_.bytes_read += region_bytes(r);
      ZS_RETURN_IF_ERROR(Settle(b));
    }
  }
  Buffer& buf = buffers_[b];
  if (overwrite) buf.dirty = true;
  ++buf.pins;
  buf.last_use = ++clock_;
  return buf.data;
}

absl::Status SwapSpace::Release(int r, bool dirty) {
  if (r < 0 || r >= num_regions() || region_buffer_[r] < 0 || buffers_[region_buffer_[r]].pins == 0) {
    return absl::InternalError(absl::StrCat("NVMe swap of ", options_.name, ": release of region ", r,
                                            " that is not acquired"));
  }
  Buffer& buf = buffers_[region_buffer_[r]];
  buf.dirty = buf.dirty || dirty;
  if (--buf.pins > 0) return absl::OkStatus();
  buf.last_use = ++clock_;
  if (!buf.dirty) {
    buf.state = BufferState::kClean;
    return error_;
  }
  ZS_RETURN_IF_ERROR(error_);
  buf.dirty = false;
  buf.state = BufferState::kWriting;
  buf.ticket = file_->Write(r, buf.data);
  ++stats_.writes;
  stats_.bytes_written += region_bytes(r);
  if (!options_.write_behind) return Settle(region_buffer_[r]);
  return absl::OkStatus();
}

bool SwapSpace::Prefetch(int r) {
  if (!options_.read_ahead || !error_.ok() || r < 0 || r >= num_regions()) return false;
  if (region_buffer_[r] >= 0) return true;
  absl::StatusOr<int> b = TakeBuffer(/*may_wait=*/false);
  if (!b.ok() || *b < 0) return false;
  Buffer& buf = buffers_[*b];
  buf.region = r;
  region_buffer_[r] = *b;
  buf.state = BufferState::kReading;
  buf.last_use = ++clock_;
  buf.ticket = file_->Read(r, buf.data);
  ++stats_.reads;
  ++stats_.prefetches;
  stats_.bytes_read += region_bytes(r);
  return true;
}

absl::Status SwapSpace::Flush() {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].state == BufferState::kWriting) {
      ZS_RETURN_IF_ERROR(Settle(static_cast<int>(i)));
    }
  }
  return error_;
}

absl::Status SwapSpace::DropCache() {
  ZS_RETURN_IF_ERROR(Flush());
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Buffer& b = buffers_[i];
    if (b.pins > 0) continue;
    ZS_RETURN_IF_ERROR(Settle(static_cast<int>(i)));  // a read ahead finishes first
    if (b.region >= 0) region_buffer_[b.region] = -1;
    b = Buffer{.data = b.data, .raw = b.raw};
  }
  return error_;
}

}  // namespace zeroshard
