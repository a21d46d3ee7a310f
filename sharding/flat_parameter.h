// FlatParameter: the layout of one unit's parameters as one 1-D buffer, and
// who holds which part of it. Note [Shard layout]:
//
//   parameters, in registration order:  [ p0 | p1 | p2 | padding ]
//   padded_numel = numel rounded up to a multiple of the shard group size S
//   shard_numel  = padded_numel / S;  rank r of the group holds
//                  [r * shard_numel, (r + 1) * shard_numel)
//
// so the all-gather of the shards is the flat buffer, in place (rank r's
// shard is the r-th slice of the gathered buffer), and the reduce-scatter of
// the flat gradient leaves each rank the gradient of its shard. A tied
// parameter (one Variable under two names) lives once, under its first name.
//
//   FlatParameter flat(slots, /*shard_group_size=*/4, /*shard_rank=*/1);
//   flat.shard_offset();            // where rank 1's shard starts
//   flat.PiecesOfShard(1);          // which parts of which parameters rank 1 holds
//   std::cout << flat.ToString();   // every parameter's offset, size and ranks
#ifndef ZEROSHARD_SHARDING_FLAT_PARAMETER_H_
#define ZEROSHARD_SHARDING_FLAT_PARAMETER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/autograd/nn/init.h"
#include "zeroshard/autograd/variable.h"
#include "zeroshard/runtime/tensor.h"

namespace zeroshard {

struct FlatParamSlot {
  std::string name;                  // full dotted name (the first, for a tied parameter)
  std::vector<std::string> aliases;  // the tied parameter's other names
  autograd::Variable var;            // the module's leaf
  Shape shape;
  int64_t offset = 0;  // first element in the flat buffer
  int64_t numel = 0;
  bool requires_grad = true;
  nn::InitSpec init;
};

class FlatParameter {
 public:
  FlatParameter() = default;
  // Lays `params` out in order; offsets are assigned here.
  FlatParameter(std::vector<FlatParamSlot> params, int shard_group_size, int shard_rank);

  const std::vector<FlatParamSlot>& params() const { return params_; }
  std::vector<FlatParamSlot>& mutable_params() { return params_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_numel_; }
  int64_t padding() const { return padded_numel_ - numel_; }
  int shard_group_size() const { return shard_group_size_; }
  int shard_rank() const { return shard_rank_; }
  int64_t shard_numel() const { return padded_numel_ / shard_group_size_; }
  int64_t shard_offset(int rank) const { return rank * shard_numel(); }
  int64_t shard_offset() const { return shard_offset(shard_rank_); }

  // A contiguous run shared by one parameter and one rank's shard.
  struct Piece {
    int param = 0;             // index into params()
    int64_t param_offset = 0;  // first element within the parameter (row-major)
    int64_t shard_offset = 0;  // first element within the shard
    int64_t count = 0;
  };
  std::vector<Piece> PiecesOfShard(int rank) const;
  // The first and last rank whose shard holds part of parameter i.
  std::pair<int, int> RanksHolding(int i) const;

  std::string ToString() const;

 private:
  std::vector<FlatParamSlot> params_;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  int shard_group_size_ = 1;
  int shard_rank_ = 0;
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SHARDING_FLAT_PARAMETER_H_
