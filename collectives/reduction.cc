#include "zeroshard/collectives/reduction.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "sum") return ReduceOp::kSum;
  if (n == "avg" || n == "mean") return ReduceOp::kAvg;
  if (n == "max") return ReduceOp::kMax;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op \"", name, "\": expected one of sum, avg, max"));
}

}  // namespace zeroshard
