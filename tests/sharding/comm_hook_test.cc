// Communication hooks (sharding/comm_hook.h): each ZeRO++ hook called
// directly on random shards and gradients against the exact collective, with
// the error bound of Note [Quantization error]; the bytes each sends against
// their closed forms; hpZ training bitwise equal to the plain one; qwZ and
// qgZ training next to it; SummonFullParams never quantized; the registry.
#include "zeroshard/sharding/comm_hook.h"

#include <gtest/gtest.h>

#include <cmath>
#include <atomic>
#include <mutex>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/kernels/quantize.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::BlockOptions;
using ::zeroshard::testing::HasSubstr;
using ::zeroshard::testing::Result;
using ::zeroshard::testing::StatusIs;
using ::zeroshard::testing::TrainSharded;

// Rank r's values of a tensor of n elements, the same on every rank that asks:
// magnitudes over 8 binades so the blocks differ in scale.
std::vector<float> Values(int r, int64_t n, int salt) {
  std::mt19937 gen(1000 * salt + r);
  std::uniform_real_distribution<float> u(-1, 1), e(-4, 4);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen) * std::exp2(e(gen));
  return v;
}

std::unique_ptr<CommHook> MakeHook(const CommHookOptions& o) {
  return CommHookRegistry::Global().Create(o).value();
}

// The largest |x| of the block holding element i of a chunk of length m.
double BlockMax(const std::vector<float>& v, int64_t chunk_start, int64_t m, int64_t block, int64_t i) {
  const int64_t lo = i / block * block, hi = std::min(m, lo + block);
  double mx = 0;
  for (int64_t k = lo; k < hi; ++k) mx = std::max(mx, std::fabs(double{v[chunk_start + k]}));
  return mx;
}

// Note [Quantization error]: half a step plus 2^-22 of the block's max.
double HalfStep(double block_max, int qmax) { return block_max / qmax / 2 + std::ldexp(block_max, -22); }

TEST(CommHook, QwzGathersEveryShardWithinHalfAStepAndTheSameOnEveryRank) {
  constexpr int kWorld = 4;
  constexpr int64_t kShard = 1000;  // blocks of 256: a short last block
  for (int bits : {8, 4}) {
    std::mutex mu;
    std::vector<std::vector<float>> gathered(kWorld);
    std::vector<int64_t> bytes(kWorld);
    const auto statuses = RunRanks(kWorld, [&](Communicator& comm) -> absl::Status {
      auto hook = MakeHook({.name = "qwz", .block_size = 256, .param_bits = bits});
      ZS_RETURN_IF_ERROR(hook->Setup(comm, DefaultCpuAllocator()));
      ZS_ASSIGN_OR_RETURN(Tensor full, Tensor::Zeros({kWorld * kShard}, DType::kF32));
      ZS_ASSIGN_OR_RETURN(Tensor mine, full.Narrow(0, comm.rank() * kShard, kShard));
      ZS_RETURN_IF_ERROR(mine.CopyFrom(Tensor::FromVector(Values(comm.rank(), kShard, 1), {kShard}).value()));
      const int64_t before = comm.bytes_sent();
      ZS_ASSIGN_OR_RETURN(auto work, hook->AllGather(comm, {.unit = 0, .mine = mine, .full = full}));
      ZS_RETURN_IF_ERROR(work->Wait());
      std::lock_guard<std::mutex> lock(mu);
      bytes[comm.rank()] = comm.bytes_sent() - before;
      gathered[comm.rank()] = full.ToVector<float>().value();
      return absl::OkStatus();
    });
    for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
    const QuantSpec spec{.bits = bits, .block = 256};
    for (int r = 1; r < kWorld; ++r) EXPECT_EQ(gathered[r], gathered[0]) << "rank " << r << " differs from rank 0";
    for (int i = 0; i < kWorld; ++i) {
      const std::vector<float> v = Values(i, kShard, 1);
      for (int64_t k = 0; k < kShard; ++k) {
        const double err = std::fabs(double{gathered[0][i * kShard + k]} - v[k]);
        ASSERT_LE(err, HalfStep(BlockMax(v, 0, kShard, 256, k), spec.qmax())) << "bits " << bits << " shard " << i << " element " << k;
      }
    }
    // Note [Bytes sent]: (W - 1) / W of the gathered packed bytes, W chunks of PackedBytes(1000).
    const int64_t packed = PackedBytes(kShard, spec);
    EXPECT_EQ(packed, bits == 8 ? 1000 + 4 * 4 : 500 + 4 * 4);
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(bytes[r], (kWorld - 1) * packed) << "rank " << r;
    std::printf("qwz int%d: %lld bytes sent per rank, f32 would send %lld, bf16 %lld\n", bits,
                static_cast<long long>(bytes[0]), static_cast<long long>((kWorld - 1) * kShard * 4),
                static_cast<long long>((kWorld - 1) * kShard * 2));
  }
}

// qgZ: rank j's result is the average over ranks of their chunk j. One step:
// each contribution quantized once, so the error is at most the mean of the
// contributions' half steps. Two steps (groups of L): the group's partial sum
// is quantized again, adding half a step of the partial's block per group.
TEST(CommHook, QgzAveragesWithinTheQuantizationBoundOneStepAndTwo) {
  constexpr int kWorld = 4;
  constexpr int64_t kShard = 700;
  constexpr int64_t kBlock = 128;
  for (int group : {0, 2}) {  // 0: every rank on this host, one all-to-all; 2: two steps
    for (int bits : {8, 4}) {
      const QuantSpec spec{.bits = bits, .block = kBlock};
      std::mutex mu;
      std::vector<std::vector<float>> got(kWorld);
      std::vector<int64_t> bytes(kWorld);
      const auto statuses = RunRanks(kWorld, [&](Communicator& comm) -> absl::Status {
        auto hook = MakeHook({.name = "qgz", .block_size = kBlock, .grad_bits = bits, .group_size = group});
        ZS_RETURN_IF_ERROR(hook->Setup(comm, DefaultCpuAllocator()));
        ZS_ASSIGN_OR_RETURN(Tensor grad, Tensor::FromVector(Values(comm.rank(), kWorld * kShard, 2), {kWorld * kShard}));
        ZS_ASSIGN_OR_RETURN(Tensor mine, grad.Narrow(0, comm.rank() * kShard, kShard));
        const int64_t before = comm.bytes_sent();
        ZS_ASSIGN_OR_RETURN(auto work, hook->ReduceScatter(comm, {.unit = 0, .full_grad = grad, .mine = mine}));
        ZS_RETURN_IF_ERROR(work->Wait());
        std::lock_guard<std::mutex> lock(mu);
        bytes[comm.rank()] = comm.bytes_sent() - before;
        got[comm.rank()] = mine.ToVector<float>().value();
        return absl::OkStatus();
      });
      for (const absl::Status& s : statuses) ASSERT_TRUE(s.ok()) << s;
      std::vector<std::vector<float>> in(kWorld);
      for (int r = 0; r < kWorld; ++r) in[r] = Values(r, kWorld * kShard, 2);
      double worst = 0;
      for (int j = 0; j < kWorld; ++j) {
        for (int64_t k = 0; k < kShard; ++k) {
          double exact = 0, bound = 0;
          for (int r = 0; r < kWorld; ++r) {
            exact += in[r][j * kShard + k];
            bound += HalfStep(BlockMax(in[r], j * kShard, kShard, kBlock, k), spec.qmax());
          }
          if (group == 2) {
            // The partial of each group of 2 is requantized: its block max is
            // at most the sum of its members' block maxima (plus their error).
            for (int g = 0; g < 2; ++g) {
              double pmax = 0;
              for (int r = 2 * g; r < 2 * g + 2; ++r) {
                pmax += BlockMax(in[r], j * kShard, kShard, kBlock, k) * (1 + 1.0 / spec.qmax());
              }
              bound += HalfStep(pmax, spec.qmax());
            }
          }
          // f32 sums of 4 terms and the division: 4 roundings of a value at most the sum of |terms|.
          double abs_sum = 0;
          for (int r = 0; r < kWorld; ++r) abs_sum += std::fabs(double{in[r][j * kShard + k]});
          bound = (bound + 8 * std::ldexp(abs_sum, -24)) / kWorld;
          const double err = std::fabs(got[j][k] - exact / kWorld);
          ASSERT_LE(err, bound) << "group " << group << " bits " << bits << " rank " << j << " element " << k;
          worst = std::max(worst, err / bound);
        }
      }
      const int64_t c = PackedBytes(kShard, spec);
      // One step: (W-1)/W of W chunks. Two steps: inside the group (L-1)/L of
      // L x N chunks, then across (N-1)/N of N chunks (L = N = 2).
      const int64_t want = group == 0 ? (kWorld - 1) * c : (1 * 2 * c) + (1 * c);
      for (int r = 0; r < kWorld; ++r) EXPECT_EQ(bytes[r], want) << "rank " << r;
      std::printf("qgz group %d int%d: worst error %.2f of its bound; %lld bytes sent per rank (f32 reduce-scatter "
                  "%lld)\n",
                  group, bits, worst, static_cast<long long>(bytes[0]),
                  static_cast<long long>((kWorld - 1) * kShard * 4));
    }
  }
}

TEST(CommHook, HpzTrainingIsBitwiseThePlainOneAndGathersBackwardInsideTheGroup) {
  constexpr int kSteps = 3, kBatch = 8;
  const Result plain = TrainSharded({.world = 4, .options = BlockOptions(ShardingStrategy::kFullShard)}, kSteps, kBatch);
  for (int group : {1, 2}) {
    ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
    o.comm_hook = {.name = "hpz", .group_size = group};
    const Result hpz = TrainSharded({.world = 4, .options = o}, kSteps, kBatch);
    EXPECT_EQ(hpz.losses, plain.losses) << "group " << group;
    EXPECT_EQ(hpz.params, plain.params) << "group " << group;
  }
}

TEST(CommHook, QwzAndQgzTrainNextToThePlainRun) {
  // Note [Mixed-precision bounds] in sharded_model_test.cc argues a loss moves
  // by at most a few times the relative perturbation of the values it is
  // computed from; int8 blocks perturb each value by at most 1/254 of its
  // block's largest (Note [Quantization error]), bf16's unit is 1/256: the
  // same 5-unit bound. int4 (1/14) is checked for finite, falling losses only.
  constexpr int kSteps = 4, kBatch = 8;
  const Result plain = TrainSharded({.world = 4, .options = BlockOptions(ShardingStrategy::kFullShard)}, kSteps, kBatch);
  for (const char* name : {"qwz", "qgz", "zeropp"}) {
    for (int bits : {8, 4}) {
      ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
      o.comm_hook = {.name = name, .block_size = 64, .param_bits = bits, .grad_bits = bits, .group_size = 2};
      const Result got = TrainSharded({.world = 4, .options = o}, kSteps, kBatch);
      ASSERT_EQ(got.losses.size(), plain.losses.size());
      for (size_t i = 0; i < got.losses.size(); ++i) {
        ASSERT_TRUE(std::isfinite(got.losses[i])) << name << " bits " << bits << " step " << i;
        if (bits == 8) {
          EXPECT_NEAR(got.losses[i], plain.losses[i], 5.0 / 254 * plain.losses[i]) << name << " step " << i;
        }
        std::printf("%s int%d step %zu: loss %.6f, plain %.6f\n", name, bits, i, got.losses[i], plain.losses[i]);
      }
      EXPECT_LT(got.losses.back(), got.losses.front()) << name << " bits " << bits << " does not learn";
    }
  }
}

TEST(CommHook, SummonFullParamsReadsTheMastersNotTheirQuantizedImage) {
  // TrainSharded reads the final parameters through SummonFullParams: under
  // qwz they must be the f32 masters, so the same as an all-f32 gather of the
  // same run's shards. Check directly: one rank's gathered parameter equals
  // its master slice bit for bit.
  const auto statuses = RunRanks(2, [&](Communicator& comm) -> absl::Status {
    ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
    o.comm_hook = {.name = "qwz", .block_size = 32};
    o.init_seed = 3;
    auto gpt = std::make_shared<nn::Gpt>(testing::TinyConfig());
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
    for (ShardedUnit* u : sharded->units()) {
      const std::vector<float> master = u->shard.ToVector<float>().value();
      ZS_RETURN_IF_ERROR(sharded->SummonFullParams([&]() -> absl::Status {
        ZS_ASSIGN_OR_RETURN(Tensor mine, u->full.Narrow(0, u->flat.shard_offset(), u->flat.shard_numel()));
        if (mine.ToVector<float>().value() != master) {
          return absl::InternalError(absl::StrCat("unit ", u->name, ": summoned values differ from the master"));
        }
        return absl::OkStatus();
      }));
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

TEST(CommHook, HpzHoldsItsSecondarySlicesFromForwardToBackward) {
  const auto statuses = RunRanks(4, [&](Communicator& comm) -> absl::Status {
    ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
    o.comm_hook = {.name = "hpz", .group_size = 2};
    o.init_seed = 5;
    auto gpt = std::make_shared<nn::Gpt>(testing::TinyConfig());
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
    const std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8};
    ZS_ASSIGN_OR_RETURN(Tensor x, Tensor::FromVector(ids, {1, 8}, DType::kI64));
    const int64_t before = comm.bytes_sent();
    ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(x, x));
    // Every unit but the root was resharded after forward, keeping half of
    // its gathered f32 bytes (a secondary partition over 2 ranks).
    int64_t want = 0;
    for (ShardedUnit* u : sharded->units()) {
      if (!u->is_root) want += u->flat.padded_numel() / 2 * 4;
    }
    if (sharded->comm_hook().HeldBytes() != want) {
      return absl::InternalError(absl::StrCat("after forward: held ", sharded->comm_hook().HeldBytes(), ", expected ", want));
    }
    ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
    if (sharded->comm_hook().HeldBytes() != 0) {
      return absl::InternalError(absl::StrCat("after backward: held ", sharded->comm_hook().HeldBytes()));
    }
    // Note [Bytes sent], f32: forward gathers every unit over the 4 ranks
    // (3/4 of it); backward re-gathers every unit but the root (kept gathered)
    // over its group of 2 (1/2 of it), prefetched or not; every unit is
    // reduce-scattered over the 4 (3/4).
    int64_t bytes = 0;
    for (ShardedUnit* u : sharded->units()) {
      const int64_t b = u->flat.padded_numel() * 4;
      bytes += b * 3 / 4 + b * 3 / 4 + (u->is_root ? 0 : b / 2);
    }
    if (comm.bytes_sent() - before != bytes) {
      return absl::InternalError(
          absl::StrCat("bytes sent in one step: ", comm.bytes_sent() - before, ", expected ", bytes));
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

class CountingHook final : public CommHook {
 public:
  static inline std::atomic<int> gathers{0}, reductions{0};
  std::string name() const override { return "counting"; }
  absl::StatusOr<std::shared_ptr<Work>> AllGather(Communicator& g, const GatherCall& call) override {
    ++gathers;
    return CommHook::AllGather(g, call);
  }
  absl::StatusOr<std::shared_ptr<Work>> ReduceScatter(Communicator& g, const ReduceCall& call) override {
    ++reductions;
    return CommHook::ReduceScatter(g, call);
  }
};

ZS_REGISTER_COMM_HOOK(kCounting, "counting", "a test hook that counts its calls",
                      [](const CommHookOptions&) -> absl::StatusOr<std::unique_ptr<CommHook>> {
                        return std::unique_ptr<CommHook>(std::make_unique<CountingHook>());
                      });

TEST(CommHook, ARegisteredHookRunsByNameAndBadNamesSayWhatIsExpected) {
  ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard);
  o.comm_hook.name = "counting";
  ZS_ASSERT_OK(o.Validate(2));
  const Result plain = TrainSharded({.world = 2, .options = BlockOptions(ShardingStrategy::kFullShard)}, 2, 4);
  const Result counted = TrainSharded({.world = 2, .options = o}, 2, 4);
  EXPECT_EQ(counted.losses, plain.losses);
  EXPECT_GT(CountingHook::gathers.load(), 0);
  EXPECT_GT(CountingHook::reductions.load(), 0);

  o.comm_hook.name = "qwx";
  EXPECT_THAT(o.Validate(2), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("comm_hook \"qwx\": expected a registered hook (counting, hpz, none, "
                                                "qgz, qwz, zeropp)")));
  o.comm_hook = {.name = "qgz", .block_size = 7, .grad_bits = 4, .group_size = 3};
  const absl::Status bad = o.Validate(4);
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected an even block")));
  EXPECT_THAT(bad, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("divide the shard group size 4")));
  o = BlockOptions(ShardingStrategy::kShardOptimizer);
  o.comm_hook.name = "qgz";
  EXPECT_THAT(o.Validate(2), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("all-reduces them")));
  EXPECT_THAT(CommHookRegistry::Global().Register("counting", "", [](const CommHookOptions&) {
    return absl::StatusOr<std::unique_ptr<CommHook>>(nullptr);
  }), StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("already registered")));
  EXPECT_THAT(CommHookRegistry::Global().Register("Bad-Name", "", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lowercase identifier")));
}

}  // namespace
}  // namespace zeroshard
