// The backend-independent collectives suite (collectives_suite.h). Kept in one file
// (issue 19): it is the one list of cases every backend instantiates and must pass.
#include "zeroshard/tests/collectives/collectives_suite.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <gmock/gmock.h>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::testing {

CommunicatorOptions CollectivesTest::DefaultOptions() {
  CommunicatorOptions options;
  options.timeout = absl::Seconds(60);  // fail, don't hang, on a bug
  return options;
}

Allocator* TensorAllocator(const Communicator& comm) {
  if (comm.device().is_cpu()) return nullptr;
  // One allocator per GPU for the whole test binary (test-only registry).
  static absl::Mutex mu(absl::kConstInit);
  static auto* allocators = new std::map<int, std::unique_ptr<Allocator>>();
  absl::MutexLock lock(&mu);
  std::unique_ptr<Allocator>& a = (*allocators)[comm.device().index];
  if (a == nullptr) a = std::make_unique<CudaAllocator>(comm.device().index);
  return a.get();
}

void CollectivesTest::SetUp() {
  if (GetParam().skip) {
    const std::string why = GetParam().skip();
    if (!why.empty()) GTEST_SKIP() << why;
  }
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
  }
}

namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------- values

// Rank r's element i: a small integer, exact in every dtype; sums over up to
// 8 ranks stay within bf16's exact integers (|sum| <= 256).
double Value(int rank, int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 15 - 4); }

// Element counts: empty, one, odd, and past the reduction chunk (2048).
constexpr int64_t kCounts[] = {0, 1, 7, 1001, 5003};

// Tensors live where the communicator works (device memory for NCCL).
absl::StatusOr<Tensor> MakeTensor(const Communicator& comm, DType dtype, int64_t n,
                                  const std::function<double(int64_t)>& f) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(f(i));
  return Tensor::FromVector<float>(v, {n}, dtype, TensorAllocator(comm));
}
absl::StatusOr<Tensor> Zeros(const Communicator& comm, absl::Span<const int64_t> shape,
                             DType dtype) {
  return Tensor::Zeros(shape, dtype, TensorAllocator(comm));
}
absl::StatusOr<Tensor> Full(const Communicator& comm, absl::Span<const int64_t> shape,
                            double value, DType dtype) {
  return Tensor::Full(shape, value, dtype, TensorAllocator(comm));
}

// `v` rounded to `dtype` (as a reduction's result is stored).
double StoredAs(DType dtype, float v) {
  return DispatchDType(dtype, [&]<typename T>() -> double {
    return static_cast<double>(ConvertElement<float>(ConvertElement<T>(v)));
  });
}

// The reduction of value(0..n-1), written out independently of the library:
// fp32 accumulation in rank order for floats, int64 for integers.
double Expected(DType dtype, ReduceOp op, int n, const std::function<double(int)>& value) {
  if (IsFloatingPoint(dtype)) {
    float acc = static_cast<float>(value(0));
    for (int r = 1; r < n; ++r) {
      const float v = static_cast<float>(value(r));
      acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
    }
    if (op == ReduceOp::kAvg) acc = acc / static_cast<float>(n);
    return StoredAs(dtype, acc);
  }
  int64_t acc = static_cast<int64_t>(value(0));
  for (int r = 1; r < n; ++r) {
    const int64_t v = static_cast<int64_t>(value(r));
    acc = op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::kAvg) acc /= n;
  return static_cast<double>(acc);
}

absl::Status CheckTensor(const Tensor& t, const std::function<double(int64_t)>& expected,
                         absl::string_view what) {
  ZS_ASSIGN_OR_RETURN(std::vector<double> got, t.ToVector<double>());
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = expected(static_cast<int64_t>(i));
    if (got[i] != want) {
      return absl::InternalError(
          absl::StrCat(what, ": element ", i, " is ", got[i], ", expected ", want));
    }
  }
  return absl::OkStatus();
}

std::string Case(DType dtype, int64_t count, bool in_place) {
  return absl::StrCat(DTypeName(dtype), " count=", count, in_place ? " in place" : "");
}

// ---------------------------------------------------------------- the ops

TEST_P(CollectivesTest, AllGather) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    for (DType dtype : kAllDTypes) {
      for (int64_t count : kCounts) {
        for (bool in_place : {false, true}) {
          ZS_ASSIGN_OR_RETURN(Tensor out, Full(comm, {n * count}, -99, dtype));
          Tensor in;
          if (in_place) {
            ZS_ASSIGN_OR_RETURN(in, out.Narrow(0, r * count, count));
            ZS_ASSIGN_OR_RETURN(Tensor values,
                                MakeTensor(comm, dtype, count, [&](int64_t i) { return Value(r, i); }));
            ZS_RETURN_IF_ERROR(in.CopyFrom(values));
          } else {
            ZS_ASSIGN_OR_RETURN(in, MakeTensor(comm, dtype, count, [&](int64_t i) { return Value(r, i); }));
          }
          ZS_RETURN_IF_ERROR(comm.AllGather(in, out));
          ZS_RETURN_IF_ERROR(CheckTensor(
              out, [&](int64_t j) { return Value(static_cast<int>(j / count), j % count); },
              absl::StrCat("AllGather ", Case(dtype, count, in_place))));
          ZS_RETURN_IF_ERROR(CheckTensor(in, [&](int64_t i) { return Value(r, i); },
                                         "AllGather input (must be unchanged)"));
        }
      }
    }
    return absl::OkStatus();
  }));
}

TEST_P(CollectivesTest, ReduceScatter) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : kAllReduceOps) {
        for (int64_t m : kCounts) {
          for (bool in_place : {false, true}) {
            ZS_ASSIGN_OR_RETURN(Tensor in,
                                MakeTensor(comm, dtype, n * m, [&](int64_t j) { return Value(r, j); }));
            Tensor out;
            if (in_place) {
              ZS_ASSIGN_OR_RETURN(out, in.Narrow(0, r * m, m));
            } else {
              ZS_ASSIGN_OR_RETURN(out, Full(comm, {m}, -99, dtype));
            }
            ZS_RETURN_IF_ERROR(comm.ReduceScatter(in, out, op));
            ZS_RETURN_IF_ERROR(CheckTensor(
                out,
                [&](int64_t i) {
                  return Expected(dtype, op, n, [&](int s) { return Value(s, r * m + i); });
                },
                absl::StrCat("ReduceScatter ", ReduceOpName(op), " ",
                             Case(dtype, m, in_place))));
          }
        }
      }
    }
    return absl::OkStatus();
  }));
}

TEST_P(CollectivesTest, AllReduce) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : kAllReduceOps) {
        for (int64_t count : kCounts) {
          for (bool in_place : {false, true}) {
            ZS_ASSIGN_OR_RETURN(Tensor in,
                                MakeTensor(comm, dtype, count, [&](int64_t i) { return Value(r, i); }));
            Tensor out = in;
            if (!in_place) {
              ZS_ASSIGN_OR_RETURN(out, Full(comm, {count}, -99, dtype));
            }
            ZS_RETURN_IF_ERROR(comm.AllReduce(in, out, op));
            ZS_RETURN_IF_ERROR(CheckTensor(
                out,
                [&](int64_t i) {
                  return Expected(dtype, op, n, [&](int s) { return Value(s, i); });
                },
                absl::StrCat("AllReduce ", ReduceOpName(op), " ", Case(dtype, count, in_place))));
          }
        }
      }
    }
    return absl::OkStatus();
  }));
}

TEST_P(CollectivesTest, Broadcast) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    for (int root : {0, n - 1, n / 2}) {
      for (DType dtype : kAllDTypes) {
        for (int64_t count : kCounts) {
          ZS_ASSIGN_OR_RETURN(Tensor t, MakeTensor(comm, dtype, count, [&](int64_t i) {
                                return r == root ? Value(root, i) : -99.0;
                              }));
          ZS_RETURN_IF_ERROR(comm.Broadcast(t, root));
          ZS_RETURN_IF_ERROR(CheckTensor(t, [&](int64_t i) { return Value(root, i); },
                                         absl::StrCat("Broadcast root ", root, " ",
                                                      Case(dtype, count, true))));
        }
      }
    }
    return absl::OkStatus();
  }));
}

// Rank `src`'s element t of its block for rank `dst`: which (src, dst) pair
// it belongs to, unique for up to 8 ranks (the suite's largest world), plus
// t % 3 so that a block copied a few elements off shows. In [-64, 127]:
// exact in every dtype, int8 included.
double AllToAllValue(int src, int dst, int64_t t) {
  return static_cast<double>((src * 8 + dst) % 64 - 64 + 64 * (t % 3));
}

TEST_P(CollectivesTest, AllToAll) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    for (DType dtype : kAllDTypes) {
      for (int64_t m : kCounts) {
        for (bool async : {false, true}) {
          // Block j of my input is for rank j.
          ZS_ASSIGN_OR_RETURN(Tensor in, MakeTensor(comm, dtype, n * m, [&](int64_t k) {
                                return AllToAllValue(r, static_cast<int>(k / m), k % m);
                              }));
          ZS_ASSIGN_OR_RETURN(Tensor out, Full(comm, {n * m}, -99, dtype));
          if (async) {
            ZS_ASSIGN_OR_RETURN(std::shared_ptr<Work> work, comm.AllToAllAsync(in, out));
            ZS_RETURN_IF_ERROR(work->Wait());
          } else {
            ZS_RETURN_IF_ERROR(comm.AllToAll(in, out));
          }
          const std::string what =
              absl::StrCat("AllToAll", async ? "Async " : " ", Case(dtype, m, false));
          // Block j of my output came from rank j: its block for me.
          ZS_RETURN_IF_ERROR(CheckTensor(
              out, [&](int64_t k) { return AllToAllValue(static_cast<int>(k / m), r, k % m); },
              what));
          ZS_RETURN_IF_ERROR(CheckTensor(
              in, [&](int64_t k) { return AllToAllValue(r, static_cast<int>(k / m), k % m); },
              absl::StrCat(what, " input (must be unchanged)")));
        }
      }
    }
    return absl::OkStatus();
  }));
}

// Note [Bytes sent]: (W-1)/W of the input, exactly; nothing for a call that
// failed its argument check.
TEST_P(CollectivesTest, AllToAllBytesSent) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size();
    for (auto [dtype, m] : {std::pair{DType::kF32, int64_t{5}}, std::pair{DType::kI8, int64_t{3}},
                            std::pair{DType::kBF16, int64_t{0}}}) {
      ZS_ASSIGN_OR_RETURN(Tensor in, Zeros(comm, {n * m}, dtype));
      ZS_ASSIGN_OR_RETURN(Tensor out, Zeros(comm, {n * m}, dtype));
      const int64_t before = comm.bytes_sent();
      ZS_RETURN_IF_ERROR(comm.AllToAll(in, out));
      const int64_t want = (n - 1) * m * static_cast<int64_t>(DTypeSize(dtype));
      if (comm.bytes_sent() - before != want) {
        return absl::InternalError(absl::StrCat("AllToAll ", Case(dtype, m, false), " counted ",
                                                comm.bytes_sent() - before,
                                                " bytes sent, expected (W-1) m itemsize = ", want));
      }
    }
    ZS_ASSIGN_OR_RETURN(Tensor t, Zeros(comm, {4 * n}, DType::kF32));
    const int64_t before = comm.bytes_sent();
    if (comm.AllToAll(t, t).ok()) return absl::InternalError("AllToAll in place was accepted");
    if (comm.bytes_sent() != before) {
      return absl::InternalError(absl::StrCat("a refused AllToAll counted ",
                                              comm.bytes_sent() - before, " bytes sent"));
    }
    return absl::OkStatus();
  }));
}

TEST_P(CollectivesTest, Barrier) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    for (int i = 0; i < 5; ++i) ZS_RETURN_IF_ERROR(comm.Barrier());
    return absl::OkStatus();
  }));
}

// Per-step rounding to bf16 would leave 256 + 1 + 1 + ... at 256; fp32
// accumulation with one rounding gives 256 + (n - 1), rounded once.
TEST_P(CollectivesTest, HalfSumsAccumulateInFp32) {
  if (world_size() < 3) GTEST_SKIP() << "needs 3 ranks to tell the roundings apart";
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    for (auto [dtype, big] : {std::pair{DType::kBF16, 256.0}, std::pair{DType::kF16, 2048.0}}) {
      const double mine = r == 0 ? big : 1.0;
      const double want = StoredAs(dtype, static_cast<float>(big + (n - 1)));
      ZS_ASSIGN_OR_RETURN(Tensor t, MakeTensor(comm, dtype, 33, [&](int64_t) { return mine; }));
      ZS_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum));
      ZS_RETURN_IF_ERROR(CheckTensor(t, [&](int64_t) { return want; },
                                     absl::StrCat("AllReduce sum ", DTypeName(dtype))));
      ZS_ASSIGN_OR_RETURN(Tensor in, MakeTensor(comm, dtype, 3 * n, [&](int64_t) { return mine; }));
      ZS_ASSIGN_OR_RETURN(Tensor out, Zeros(comm, {3}, dtype));
      ZS_RETURN_IF_ERROR(comm.ReduceScatter(in, out, ReduceOp::kSum));
      ZS_RETURN_IF_ERROR(CheckTensor(out, [&](int64_t) { return want; },
                                     absl::StrCat("ReduceScatter sum ", DTypeName(dtype))));
    }
    return absl::OkStatus();
  }));
}

TEST_P(CollectivesTest, MaxPropagatesNaN) {
  if (!GetParam().max_propagates_nan) GTEST_SKIP() << "this backend's MAX ignores NaN";
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    ZS_ASSIGN_OR_RETURN(Tensor t, MakeTensor(comm, DType::kF32, 4, [&](int64_t i) {
                          return (i == 1 && r == n - 1) ? std::nan("") : static_cast<double>(r);
                        }));
    ZS_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kMax));
    ZS_ASSIGN_OR_RETURN(std::vector<float> v, t.ToVector<float>());
    if (!std::isnan(v[1]) || v[0] != n - 1) {
      return absl::InternalError(absl::StrCat("MAX gave ", v[0], ", ", v[1],
                                              "; expected ", n - 1, ", nan"));
    }
    return absl::OkStatus();
  }));
}

// ---------------------------------------------------------------- async

TEST_P(CollectivesTest, AsyncCollectivesCompleteInAnyWaitOrder) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    const int64_t count = 3001;
    ZS_ASSIGN_OR_RETURN(Tensor shard,
                        MakeTensor(comm, DType::kF32, count, [&](int64_t i) { return Value(r, i); }));
    ZS_ASSIGN_OR_RETURN(Tensor full, Zeros(comm, {n * count}, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor grads,
                        MakeTensor(comm, DType::kBF16, n * 5, [&](int64_t j) { return Value(r, j); }));
    ZS_ASSIGN_OR_RETURN(Tensor grad_shard, Zeros(comm, {5}, DType::kBF16));
    ZS_ASSIGN_OR_RETURN(Tensor b, MakeTensor(comm, DType::kI64, 9, [&](int64_t i) {
                          return r == 0 ? Value(0, i) : 0.0;
                        }));
    ZS_ASSIGN_OR_RETURN(auto w1, comm.AllGatherAsync(shard, full));
    ZS_ASSIGN_OR_RETURN(auto w2, comm.ReduceScatterAsync(grads, grad_shard, ReduceOp::kSum));
    ZS_ASSIGN_OR_RETURN(auto w3, comm.BroadcastAsync(b, 0));
    ZS_ASSIGN_OR_RETURN(auto w4, comm.BarrierAsync());
    // A blocking collective issued behind them runs after them.
    ZS_ASSIGN_OR_RETURN(Tensor x, MakeTensor(comm, DType::kI32, 3, [&](int64_t) { return 1.0; }));
    ZS_RETURN_IF_ERROR(comm.AllReduce(x, ReduceOp::kSum));
    ZS_RETURN_IF_ERROR(w4->Wait());
    ZS_RETURN_IF_ERROR(w3->Wait());
    ZS_RETURN_IF_ERROR(w2->Wait());
    ZS_RETURN_IF_ERROR(w1->Wait());
    ZS_RETURN_IF_ERROR(w1->Wait());  // twice is fine
    for (const auto& w : {w1, w2, w3, w4}) {
      if (!w->IsCompleted()) return absl::InternalError("IsCompleted() false after Wait()");
    }
    ZS_RETURN_IF_ERROR(CheckTensor(
        full, [&](int64_t j) { return Value(static_cast<int>(j / count), j % count); },
        "async AllGather"));
    ZS_RETURN_IF_ERROR(CheckTensor(
        grad_shard,
        [&](int64_t i) {
          return Expected(DType::kBF16, ReduceOp::kSum, n, [&](int s) { return Value(s, r * 5 + i); });
        },
        "async ReduceScatter"));
    ZS_RETURN_IF_ERROR(CheckTensor(b, [&](int64_t i) { return Value(0, i); }, "async Broadcast"));
    ZS_RETURN_IF_ERROR(CheckTensor(x, [&](int64_t) { return n; }, "AllReduce after async"));
    return absl::OkStatus();
  }));
}

TEST_P(CollectivesTest, ManyAsyncInFlight) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 20; ++k) {
      ZS_ASSIGN_OR_RETURN(Tensor t, MakeTensor(comm, DType::kF32, 17 + k, [&](int64_t i) {
                            return Value(r, i + k);
                          }));
      ZS_ASSIGN_OR_RETURN(auto w, comm.AllReduceAsync(t, t, ReduceOp::kSum));
      tensors.push_back(t);
      works.push_back(w);
    }
    for (int k = 0; k < 20; ++k) {
      ZS_RETURN_IF_ERROR(works[k]->Wait());
      ZS_RETURN_IF_ERROR(CheckTensor(
          tensors[k],
          [&](int64_t i) {
            return Expected(DType::kF32, ReduceOp::kSum, n, [&](int s) { return Value(s, i + k); });
          },
          absl::StrCat("async AllReduce #", k)));
    }
    return absl::OkStatus();
  }));
}

// ---------------------------------------------------------------- groups

TEST_P(CollectivesTest, SplitByParityReversedKeys) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    // Key -rank: the sub-group is ordered by descending world rank.
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split(r % 2, -r));
    if (sub == nullptr) return absl::InternalError("Split returned no communicator");
    std::vector<int> members;
    for (int s = n - 1; s >= 0; --s) {
      if (s % 2 == r % 2) members.push_back(s);
    }
    const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), r) -
                                           members.begin());
    if (sub->size() != static_cast<int>(members.size()) || sub->rank() != want_rank) {
      return absl::InternalError(absl::StrCat("sub-communicator is rank ", sub->rank(), " of ",
                                              sub->size(), ", expected ", want_rank, " of ",
                                              members.size()));
    }
    ZS_ASSIGN_OR_RETURN(Tensor t, MakeTensor(comm, DType::kI64, 3, [&](int64_t) { return r; }));
    ZS_RETURN_IF_ERROR(sub->AllReduce(t, ReduceOp::kSum));
    int64_t sum = 0;
    for (int s : members) sum += s;
    ZS_RETURN_IF_ERROR(CheckTensor(t, [&](int64_t) { return sum; }, "AllReduce in sub-group"));
    // AllGather in the sub-group follows sub-group rank order.
    ZS_ASSIGN_OR_RETURN(Tensor one, MakeTensor(comm, DType::kI32, 1, [&](int64_t) { return r; }));
    ZS_ASSIGN_OR_RETURN(Tensor all, Zeros(comm, {sub->size()}, DType::kI32));
    ZS_RETURN_IF_ERROR(sub->AllGather(one, all));
    ZS_RETURN_IF_ERROR(CheckTensor(all, [&](int64_t j) { return members[j]; },
                                   "AllGather in sub-group"));
    // The parent still works after the split.
    return comm.Barrier();
  }));
}

TEST_P(CollectivesTest, SplitWithNegativeColorGivesNoCommunicator) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    const bool joins = r % 2 == 0;
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, comm.Split(joins ? 0 : -1, r));
    if (joins != (sub != nullptr)) {
      return absl::InternalError(absl::StrCat("rank ", r, (sub ? " got" : " did not get"),
                                              " a communicator"));
    }
    if (sub) ZS_RETURN_IF_ERROR(sub->Barrier());
    return comm.Barrier();
  }));
}

// Hybrid sharding: shard groups of consecutive ranks, replica groups across
// them; collectives on both run concurrently (each has its own thread).
TEST_P(CollectivesTest, HybridShardAndReplicaGroupsOverlap) {
  if (world_size() % 2 != 0) GTEST_SKIP() << "needs an even world size";
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    const int shard_size = n >= 4 ? 2 : 1;  // world = replicas x shard_size
    ZS_ASSIGN_OR_RETURN(auto shard_group, comm.Split(r / shard_size, r));
    ZS_ASSIGN_OR_RETURN(auto replica_group, comm.Split(r % shard_size, r));
    ZS_ASSIGN_OR_RETURN(Tensor full, Zeros(comm, {shard_size * 4}, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor mine, MakeTensor(comm, DType::kF32, 4, [&](int64_t i) { return r + i; }));
    ZS_ASSIGN_OR_RETURN(Tensor grad, MakeTensor(comm, DType::kF32, 6, [&](int64_t) { return r; }));
    ZS_ASSIGN_OR_RETURN(auto gather, shard_group->AllGatherAsync(mine, full));
    ZS_ASSIGN_OR_RETURN(auto reduce, replica_group->AllReduceAsync(grad, grad, ReduceOp::kSum));
    ZS_RETURN_IF_ERROR(reduce->Wait());
    ZS_RETURN_IF_ERROR(gather->Wait());
    const int base = r / shard_size * shard_size;
    ZS_RETURN_IF_ERROR(CheckTensor(
        full, [&](int64_t j) { return base + j / 4 + j % 4; }, "shard-group AllGather"));
    double sum = 0;
    for (int s = r % shard_size; s < n; s += shard_size) sum += s;
    return CheckTensor(grad, [&](int64_t) { return sum; }, "replica-group AllReduce");
  }));
}

// ---------------------------------------------------------------- errors

TEST_P(CollectivesTest, InvalidLayoutsAreRejectedWithWhatWasExpected) {
  std::vector<absl::Status> statuses = Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    ZS_ASSIGN_OR_RETURN(Tensor in, Zeros(comm, {10}, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor bad_out, Zeros(comm, {n * 10 + 1}, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor out_bf16, Zeros(comm, {n * 10}, DType::kBF16));
    ZS_ASSIGN_OR_RETURN(Tensor m, Zeros(comm, {4, 6}, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor mt, m.Transpose(0, 1));
    ZS_ASSIGN_OR_RETURN(Tensor buf, Zeros(comm, {20}, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor a, buf.Narrow(0, 0, 10));
    ZS_ASSIGN_OR_RETURN(Tensor b, buf.Narrow(0, 1, 10));
    ZS_ASSIGN_OR_RETURN(Tensor gathered, Zeros(comm, {n * 10}, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor wrong_slice, gathered.Narrow(0, ((r + 1) % n) * 10, 10));
    // Two blocks each of n elements, overlapping in [n, 2n).
    ZS_ASSIGN_OR_RETURN(Tensor wide, Zeros(comm, {3 * n}, DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor front, wide.Narrow(0, 0, 2 * n));
    ZS_ASSIGN_OR_RETURN(Tensor back, wide.Narrow(0, n, 2 * n));
    struct Expect {
      absl::Status status;
      std::string substring;
    };
    const std::vector<Expect> cases = {
        {comm.AllGather(in, bad_out), absl::StrCat("expected world_size (", n, ") x input (10)")},
        {comm.AllGather(in, out_bf16), "input is f32, output is bf16"},
        {comm.AllReduce(mt, mt), "must be contiguous"},
        {comm.AllReduce(a, b), "overlaps input"},
        {comm.ReduceScatter(bad_out, in), absl::StrCat("input has ", n * 10 + 1, " elements")},
        {comm.Broadcast(in, n), absl::StrCat("root ", n, " is not a rank")},
        {comm.AllToAll(gathered, gathered), "AllToAll is never in place"},
        {comm.AllToAll(front, back), "overlap output bytes"},
        {comm.AllToAll(gathered, bad_out),
         absl::StrCat("output has ", n * 10 + 1, " elements, expected the input's ", n * 10)},
        {comm.AllToAll(gathered, out_bf16), "input is f32, output is bf16"},
    };
    for (const Expect& e : cases) {
      if (e.status.code() != absl::StatusCode::kInvalidArgument ||
          !absl::StrContains(e.status.message(), e.substring)) {
        return absl::InternalError(absl::StrCat("expected InvalidArgument containing \"",
                                                e.substring, "\", got ", e.status.ToString()));
      }
    }
    if (n > 1) {
      absl::Status s = comm.AllGather(wrong_slice, gathered);
      if (!absl::StrContains(s.message(), "is not its slice")) {
        return absl::InternalError(absl::StrCat("wrong in-place slice: got ", s.ToString()));
      }
      // 10 * n + 1 elements cannot be cut into n blocks.
      s = comm.AllToAll(bad_out, bad_out);
      if (!absl::StrContains(s.message(), absl::StrCat("expected a multiple of world_size (", n,
                                                       ")"))) {
        return absl::InternalError(absl::StrCat("AllToAll of ", n * 10 + 1,
                                                " elements: got ", s.ToString()));
      }
    }
    // Every rank failed the same calls, so the communicator is still usable.
    return comm.Barrier();
  });
  ExpectAllOk(statuses);
}

TEST_P(CollectivesTest, ArgumentErrorOnOneRankFailsEveryRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  CommunicatorOptions options = DefaultOptions();
  options.check_mode = true;
  std::vector<absl::Status> statuses = Run(
      [](Communicator& comm) -> absl::Status {
        const int n = comm.size();
        ZS_ASSIGN_OR_RETURN(Tensor in, Zeros(comm, {10}, DType::kF32));
        ZS_ASSIGN_OR_RETURN(Tensor out,
                            Zeros(comm, {n * 10 + (comm.rank() == 1 ? 3 : 0)}, DType::kF32));
        absl::Status s;
        if (comm.rank() == 1) {
          s = comm.AllGather(in, out);
        } else {
          ZS_ASSIGN_OR_RETURN(auto work, comm.AllGatherAsync(in, out));
          s = work->Wait();
        }
        // The failure was shared: the next collective works everywhere.
        absl::Status next = comm.Barrier();
        if (!next.ok()) return next;
        return s;
      },
      options);
  ASSERT_EQ(statuses.size(), world_size());
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("AllGather #1 on rank 1")));
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("expected world_size")));
  for (int r = 0; r < world_size(); ++r) {
    if (r == 1) continue;
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("rank 1 has failed the argument check")))
        << "rank " << r;
  }
}

// Rank `odd` issues something else than the others; every rank learns who.
void ExpectMismatchNamed(const std::vector<absl::Status>& statuses, int odd,
                         const std::string& what) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr(absl::StrCat("rank ", odd, " issued ", what))))
        << "rank " << r;
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("collective mismatch at #2")))
        << "rank " << r;
  }
}

CommunicatorOptions CheckMode() {
  CommunicatorOptions options = CollectivesTest::DefaultOptions();
  options.check_mode = true;
  return options;
}

TEST_P(CollectivesTest, MismatchedCountNamesTheRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int odd = world_size() - 1;
  ExpectMismatchNamed(Run(
                          [odd](Communicator& comm) -> absl::Status {
                            ZS_RETURN_IF_ERROR(comm.Barrier());
                            const int64_t count = comm.rank() == odd ? 12 : 10;
                            ZS_ASSIGN_OR_RETURN(Tensor t, Zeros(comm, {count}, DType::kF32));
                            absl::Status s = comm.AllReduce(t, ReduceOp::kSum);
                            ZS_RETURN_IF_ERROR(comm.Barrier());  // still usable
                            return s;
                          },
                          CheckMode()),
                      odd, "AllReduce #2 (f32, 12 elements, sum");
}

TEST_P(CollectivesTest, MismatchedDTypeNamesTheRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int odd = world_size() - 1;
  ExpectMismatchNamed(Run(
                          [odd](Communicator& comm) -> absl::Status {
                            ZS_RETURN_IF_ERROR(comm.Barrier());
                            const DType dtype = comm.rank() == odd ? DType::kBF16 : DType::kF32;
                            ZS_ASSIGN_OR_RETURN(Tensor in, Zeros(comm, {4}, dtype));
                            ZS_ASSIGN_OR_RETURN(Tensor out,
                                                Zeros(comm, {4 * comm.size()}, dtype));
                            absl::Status s = comm.AllGather(in, out);
                            ZS_RETURN_IF_ERROR(comm.Barrier());
                            return s;
                          },
                          CheckMode()),
                      odd, "AllGather #2 (bf16");
}

TEST_P(CollectivesTest, MismatchedOpNamesTheRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int odd = world_size() - 1;
  ExpectMismatchNamed(Run(
                          [odd](Communicator& comm) -> absl::Status {
                            ZS_RETURN_IF_ERROR(comm.Barrier());
                            ZS_ASSIGN_OR_RETURN(Tensor t, Zeros(comm, {6}, DType::kF32));
                            absl::Status s = comm.rank() == odd ? comm.Broadcast(t, 0)
                                                                : comm.AllReduce(t, ReduceOp::kMax);
                            ZS_RETURN_IF_ERROR(comm.Barrier());
                            return s;
                          },
                          CheckMode()),
                      odd, "Broadcast #2");
}

TEST_P(CollectivesTest, MismatchedAllToAllNamesTheRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int odd = world_size() - 1;
  const int n = world_size();
  // Each rank's own arguments are valid (n blocks); the ranks disagree.
  for (bool by_dtype : {false, true}) {
    ExpectMismatchNamed(
        Run(
            [odd, by_dtype](Communicator& comm) -> absl::Status {
              ZS_RETURN_IF_ERROR(comm.Barrier());
              const bool me = comm.rank() == odd;
              const int64_t m = me && !by_dtype ? 3 : 2;
              const DType dtype = me && by_dtype ? DType::kI8 : DType::kF32;
              ZS_ASSIGN_OR_RETURN(Tensor in, Zeros(comm, {comm.size() * m}, dtype));
              ZS_ASSIGN_OR_RETURN(Tensor out, Zeros(comm, {comm.size() * m}, dtype));
              absl::Status s = comm.AllToAll(in, out);
              ZS_RETURN_IF_ERROR(comm.Barrier());  // still usable
              return s;
            },
            CheckMode()),
        odd,
        by_dtype ? absl::StrCat("AllToAll #2 (i8, ", 2 * n, " elements")
                 : absl::StrCat("AllToAll #2 (f32, ", 3 * n, " elements"));
  }
}

// The last rank never arrives: the others fail after the timeout, naming it,
// and the communicator is aborted.
TEST_P(CollectivesTest, TimeoutNamesTheMissingRank) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (!GetParam().names_missing_rank) GTEST_SKIP() << "this backend cannot name the missing rank";
  const int missing = world_size() - 1;
  for (bool with_data : {false, true}) {
    CommunicatorOptions options = DefaultOptions();
    options.timeout = absl::Milliseconds(200);
    std::vector<absl::Status> statuses = Run(
        [missing, with_data](Communicator& comm) -> absl::Status {
          ZS_ASSIGN_OR_RETURN(Tensor t, Zeros(comm, {5}, DType::kF32));
          ZS_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum));
          if (comm.rank() == missing) return absl::OkStatus();
          const absl::Time start = absl::Now();
          absl::Status s = with_data ? comm.AllReduce(t, ReduceOp::kSum) : comm.Barrier();
          const absl::Duration waited = absl::Now() - start;
          if (waited > absl::Seconds(20)) {
            return absl::InternalError(absl::StrCat("timeout took ", absl::FormatDuration(waited)));
          }
          // Later collectives fail at once.
          absl::Status later = comm.Barrier();
          if (later.code() != absl::StatusCode::kAborted) {
            return absl::InternalError(
                absl::StrCat("after a timeout expected Aborted, got ", later.ToString()));
          }
          if (!absl::StrContains(comm.RecentCollectives(), "timed out")) {
            return absl::InternalError(absl::StrCat("the ring does not show the timeout:\n",
                                                    comm.RecentCollectives()));
          }
          return s;
        },
        options);
    ASSERT_EQ(statuses.size(), world_size());
    ZS_EXPECT_OK(statuses[missing]);
    for (int r = 0; r < missing; ++r) {
      EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                        HasSubstr(absl::StrCat("rank ", missing, " ("))))
          << "rank " << r << (with_data ? " (AllReduce)" : " (Barrier)");
    }
  }
}

// Check mode compares every rank's descriptor before moving data; the data
// must come out the same.
TEST_P(CollectivesTest, EveryOpInCheckMode) {
  ExpectAllOk(Run(
      [](Communicator& comm) -> absl::Status {
        const int n = comm.size(), r = comm.rank();
        for (int64_t count : {int64_t{7}, int64_t{5003}}) {
          ZS_ASSIGN_OR_RETURN(Tensor in, MakeTensor(comm, DType::kBF16, n * count,
                                                    [&](int64_t j) { return Value(r, j); }));
          ZS_ASSIGN_OR_RETURN(Tensor block, Zeros(comm, {count}, DType::kBF16));
          ZS_RETURN_IF_ERROR(comm.ReduceScatter(in, block, ReduceOp::kSum));
          ZS_RETURN_IF_ERROR(CheckTensor(
              block,
              [&](int64_t i) {
                return Expected(DType::kBF16, ReduceOp::kSum, n,
                                [&](int s) { return Value(s, r * count + i); });
              },
              "ReduceScatter in check mode"));
          ZS_ASSIGN_OR_RETURN(Tensor all, Zeros(comm, {n * count}, DType::kBF16));
          ZS_RETURN_IF_ERROR(comm.AllGather(block, all));
          ZS_RETURN_IF_ERROR(CheckTensor(
              all,
              [&](int64_t j) {
                const int owner = static_cast<int>(j / count);
                return Expected(DType::kBF16, ReduceOp::kSum, n,
                                [&](int s) { return Value(s, owner * count + j % count); });
              },
              "AllGather in check mode"));
          ZS_RETURN_IF_ERROR(comm.AllReduce(in, ReduceOp::kMax));
          ZS_RETURN_IF_ERROR(CheckTensor(
              in,
              [&](int64_t j) {
                return Expected(DType::kBF16, ReduceOp::kMax, n, [&](int s) { return Value(s, j); });
              },
              "AllReduce in check mode"));
          ZS_RETURN_IF_ERROR(comm.Broadcast(all, n - 1));
          ZS_RETURN_IF_ERROR(comm.Barrier());
        }
        return absl::OkStatus();
      },
      CheckMode()));
}

// A bucket of collectives between GroupStart and GroupEnd (one NCCL launch;
// host backends run them one by one).
TEST_P(CollectivesTest, GroupedCollectives) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    const int n = comm.size(), r = comm.rank();
    std::vector<Tensor> bucket;
    std::vector<std::shared_ptr<Work>> works;
    ZS_RETURN_IF_ERROR(comm.GroupStart());
    for (int k = 0; k < 5; ++k) {
      ZS_ASSIGN_OR_RETURN(Tensor g, MakeTensor(comm, k % 2 ? DType::kBF16 : DType::kF32, 100 + k,
                                               [&](int64_t i) { return Value(r, i + k); }));
      ZS_ASSIGN_OR_RETURN(auto w, comm.AllReduceAsync(g, g, ReduceOp::kAvg));
      bucket.push_back(g);
      works.push_back(w);
    }
    // An all-to-all in the same group (NCCL: its own group nests in this one).
    const int64_t m = 6;
    ZS_ASSIGN_OR_RETURN(Tensor blocks, MakeTensor(comm, DType::kI8, n * m, [&](int64_t k) {
                          return AllToAllValue(r, static_cast<int>(k / m), k % m);
                        }));
    ZS_ASSIGN_OR_RETURN(Tensor got, Zeros(comm, {n * m}, DType::kI8));
    ZS_ASSIGN_OR_RETURN(auto a2a, comm.AllToAllAsync(blocks, got));
    ZS_RETURN_IF_ERROR(comm.GroupEnd());
    ZS_RETURN_IF_ERROR(a2a->Wait());
    ZS_RETURN_IF_ERROR(CheckTensor(
        got, [&](int64_t k) { return AllToAllValue(static_cast<int>(k / m), r, k % m); },
        "grouped AllToAll"));
    for (int k = 0; k < 5; ++k) {
      ZS_RETURN_IF_ERROR(works[k]->Wait());
      ZS_RETURN_IF_ERROR(CheckTensor(
          bucket[k],
          [&](int64_t i) {
            return Expected(bucket[k].dtype(), ReduceOp::kAvg, n,
                            [&](int s) { return Value(s, i + k); });
          },
          absl::StrCat("grouped AllReduce #", k)));
    }
    return absl::OkStatus();
  }));
}

TEST_P(CollectivesTest, RingOfRecentCollectives) {
  ExpectAllOk(Run([](Communicator& comm) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(Tensor t, Zeros(comm, {3}, DType::kBF16));
    ZS_ASSIGN_OR_RETURN(Tensor all, Zeros(comm, {3 * comm.size()}, DType::kBF16));
    ZS_RETURN_IF_ERROR(comm.AllGather(t, all));
    ZS_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kAvg));
    ZS_RETURN_IF_ERROR(comm.Barrier());
    ZS_ASSIGN_OR_RETURN(Tensor blocks, Zeros(comm, {3 * comm.size()}, DType::kBF16));
    ZS_RETURN_IF_ERROR(comm.AllToAll(all, blocks));
    const std::string ring = comm.RecentCollectives();
    for (const std::string& want :
         {std::string("AllGather #1 (bf16, 3 elements per rank)"),
          std::string("AllReduce #2 (bf16, 3 elements, avg, in place)"), std::string("Barrier #3"),
          absl::StrCat("AllToAll #4 (bf16, ", 3 * comm.size(), " elements)"),
          std::string("completed")}) {
      if (!absl::StrContains(ring, want)) {
        return absl::InternalError(absl::StrCat("ring lacks \"", want, "\":\n", ring));
      }
    }
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace zeroshard::testing
