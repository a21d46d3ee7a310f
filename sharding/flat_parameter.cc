#include "zeroshard/sharding/flat_parameter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace zeroshard {

FlatParameter::FlatParameter(std::vector<FlatParamSlot> params, int shard_group_size, int shard_rank)
    : params_(std::move(params)), shard_group_size_(shard_group_size), shard_rank_(shard_rank) {
  int64_t offset = 0;
  for (FlatParamSlot& p : params_) {
    p.numel = NumElements(p.shape);
    p.offset = offset;
    offset += p.numel;
  }
  numel_ = offset;
  const int64_t s = shard_group_size_;
  padded_numel_ = (numel_ + s - 1) / s * s;
  if (padded_numel_ == 0) padded_numel_ = s;  // an empty unit still has one element per rank
}

std::vector<FlatParameter::Piece> FlatParameter::PiecesOfShard(int rank) const {
  std::vector<Piece> pieces;
  const int64_t begin = shard_offset(rank), end = begin + shard_numel();
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t a = std::max(begin, params_[i].offset);
    const int64_t b = std::min(end, params_[i].offset + params_[i].numel);
    if (a >= b) continue;
    pieces.push_back(Piece{static_cast<int>(i), a - params_[i].offset, a - begin, b - a});
  }
  return pieces;
}

std::pair<int, int> FlatParameter::RanksHolding(int i) const {
  const FlatParamSlot& p = params_[i];
  const int64_t sn = shard_numel();
  if (p.numel == 0) return {-1, -1};
  return {static_cast<int>(p.offset / sn), static_cast<int>((p.offset + p.numel - 1) / sn)};
}

std::string FlatParameter::ToString() const {
  std::string out = absl::StrFormat(
      "flat %d elements + %d padding = %d, %d shards of %d\n", numel_, padding(), padded_numel_,
      shard_group_size_, shard_numel());
  for (size_t i = 0; i < params_.size(); ++i) {
    const FlatParamSlot& p = params_[i];
    const auto [first, last] = RanksHolding(static_cast<int>(i));
    absl::StrAppend(&out, absl::StrFormat("    %-40s %-14s [%d, %d) ranks %s%s%s\n", p.name,
                                          ShapeToString(p.shape), p.offset, p.offset + p.numel,
                                          first == last ? absl::StrCat(first)
                                                        : absl::StrCat(first, "-", last),
                                          p.requires_grad ? "" : " (frozen)",
                                          p.aliases.empty() ? ""
                                                            : absl::StrCat(" (also ", absl::StrJoin(p.aliases, ", "), ")")));
  }
  return out;
}

}  // namespace zeroshard
