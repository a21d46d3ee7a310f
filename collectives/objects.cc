#include "zeroshard/collectives/objects.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

absl::Status BroadcastString(Communicator& comm, std::string* value, int root) {
  if (root < 0 || root >= comm.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("BroadcastString: root ", root, " is not a rank of a communicator of size ", comm.size()));
  }
  // The length first, then the bytes packed into i64 words.
  ZS_ASSIGN_OR_RETURN(Tensor length, Tensor::Full({1}, static_cast<double>(value->size()), DType::kI64));
  ZS_RETURN_IF_ERROR(comm.Broadcast(length, root));
  ZS_ASSIGN_OR_RETURN(const double n, length.Item());
  const size_t bytes = static_cast<size_t>(n);
  const int64_t words = static_cast<int64_t>((bytes + 7) / 8);
  if (words == 0) {
    value->clear();
    return absl::OkStatus();
  }
  ZS_ASSIGN_OR_RETURN(Tensor data, Tensor::Zeros({words}, DType::kI64));
  if (comm.rank() == root) std::memcpy(data.raw_data(), value->data(), bytes);
  ZS_RETURN_IF_ERROR(comm.Broadcast(data, root));
  value->assign(static_cast<const char*>(data.raw_data()), bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> AllGatherStrings(Communicator& comm, const std::string& mine,
                                                          Allocator* allocator) {
  // Every rank's length, then every rank's bytes packed into as many i64 words
  // as the longest needs (zero padded).
  const int n = comm.size();
  ZS_ASSIGN_OR_RETURN(Tensor length, Tensor::FromVector(std::vector<int64_t>{static_cast<int64_t>(mine.size())}, {1},
                                                        DType::kI64, allocator));
  ZS_ASSIGN_OR_RETURN(Tensor lengths, Tensor::Empty({n}, DType::kI64, allocator));
  ZS_RETURN_IF_ERROR(comm.AllGather(length, lengths));
  ZS_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, lengths.ToVector<int64_t>());
  const int64_t words = (*std::max_element(sizes.begin(), sizes.end()) + 7) / 8;
  std::vector<std::string> all(static_cast<size_t>(n));
  if (words == 0) return all;
  std::vector<int64_t> packed(static_cast<size_t>(words), 0);
  std::memcpy(packed.data(), mine.data(), mine.size());
  ZS_ASSIGN_OR_RETURN(Tensor data, Tensor::FromVector(packed, {words}, DType::kI64, allocator));
  ZS_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({n * words}, DType::kI64, allocator));
  ZS_RETURN_IF_ERROR(comm.AllGather(data, gathered));
  ZS_ASSIGN_OR_RETURN(const std::vector<int64_t> bytes, gathered.ToVector<int64_t>());
  for (int r = 0; r < n; ++r) {
    all[r].assign(reinterpret_cast<const char*>(bytes.data() + static_cast<size_t>(r) * words),
                  static_cast<size_t>(sizes[r]));
  }
  return all;
}

absl::StatusOr<double> ReduceValue(Communicator& comm, double value, ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg && op != ReduceOp::kMax) {
    return absl::InvalidArgumentError("ReduceValue: expected kSum, kAvg or kMax");
  }
  ZS_ASSIGN_OR_RETURN(Tensor mine, Tensor::Zeros({1}, DType::kI64));
  std::memcpy(mine.raw_data(), &value, sizeof(double));
  ZS_ASSIGN_OR_RETURN(Tensor all, Tensor::Zeros({comm.size()}, DType::kI64));
  ZS_RETURN_IF_ERROR(comm.AllGather(mine, all));
  std::vector<double> v(static_cast<size_t>(comm.size()));
  std::memcpy(v.data(), all.raw_data(), v.size() * sizeof(double));
  if (op == ReduceOp::kMax) return *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  return op == ReduceOp::kAvg ? sum / comm.size() : sum;
}

}  // namespace zeroshard
