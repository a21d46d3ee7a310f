#include "zeroshard/runtime/nvme/aio_options.h"

#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::Status AioOptions::Validate() const {
  if (block_size < kDirectIoAlignment || block_size % kDirectIoAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("aio.block_size: expected a multiple of ", kDirectIoAlignment,
                                                   " bytes (O_DIRECT alignment), at least ", kDirectIoAlignment,
                                                   ", found ", block_size));
  }
  if (queue_depth < 1 || queue_depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("aio.queue_depth: expected 1..4096 requests in flight, found ", queue_depth));
  }
  if (thread_count < 1 || thread_count > 64) {
    return absl::InvalidArgumentError(absl::StrCat("aio.thread_count: expected 1..64 threads, found ", thread_count));
  }
  return absl::OkStatus();
}

std::string AioOptions::ToString() const {
  return absl::StrCat("aio{block_size=", block_size, ", queue_depth=", queue_depth, ", thread_count=", thread_count,
                      ", single_submit=", single_submit ? "true" : "false",
                      ", overlap_events=", overlap_events ? "true" : "false", "}");
}

}  // namespace zeroshard
