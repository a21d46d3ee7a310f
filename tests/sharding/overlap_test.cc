// Communication overlaps computation. A communicator that adds a fixed
// latency to every collective, and units whose forward and backward take a
// fixed time (sleeps, so the test does not depend on the machine's speed):
// with forward and backward prefetch a step takes clearly less than the same
// step without prefetch, which pays compute and communication in sequence.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "absl/time/clock.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/work.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

using ::zeroshard::testing::BlockOptions;
using ::zeroshard::testing::TinyConfig;
using ::zeroshard::testing::TinyData;

// Runs every collective of `inner` on its own thread after sleeping `delay`.
class DelayedCommunicator final : public Communicator {
 public:
  DelayedCommunicator(std::unique_ptr<Communicator> inner, absl::Duration delay)
      : Communicator(inner->rank(), inner->size(), inner->device(), inner->options()),
        inner_(std::move(inner)), delay_(delay), thread_("delayed") {}
  absl::string_view backend() const override { return "delayed"; }

 protected:
  absl::StatusOr<std::shared_ptr<Work>> Launch(CollectiveCall call) override {
    auto task = [this, call]() -> absl::Status {
      absl::SleepFor(delay_);
      switch (call.desc.op) {
        case CollectiveOp::kAllGather: return inner_->AllGather(call.input, call.output);
        case CollectiveOp::kReduceScatter: return inner_->ReduceScatter(call.input, call.output, call.desc.reduce_op);
        case CollectiveOp::kAllReduce: return inner_->AllReduce(call.input, call.output, call.desc.reduce_op);
        case CollectiveOp::kAllToAll: return inner_->AllToAll(call.input, call.output);
        case CollectiveOp::kBroadcast: return inner_->Broadcast(call.output, call.desc.root);
        case CollectiveOp::kBarrier: return inner_->Barrier();
        case CollectiveOp::kSplit: break;
      }
      return absl::InternalError("unexpected collective");
    };
    if (call.blocking) return std::shared_ptr<Work>(HostWork::Done(thread_.Run(task)));
    return thread_.Enqueue(task);
  }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(const CollectiveDesc& desc) override {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, inner_->Split(desc.color, desc.key));
    if (sub == nullptr) return std::unique_ptr<Communicator>();
    return std::unique_ptr<Communicator>(new DelayedCommunicator(std::move(sub), delay_));
  }

 private:
  std::unique_ptr<Communicator> inner_;
  absl::Duration delay_;
  CommThread thread_;
};

constexpr auto kLatency = std::chrono::milliseconds(25);
constexpr auto kCompute = std::chrono::milliseconds(25);

// Seconds per step (the slowest rank), after one warm-up step.
double StepSeconds(bool prefetch) {
  std::vector<double> seconds(2);
  std::vector<absl::Status> st = RunRanks(2, [&](Communicator& world) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> copy, world.Split(0, world.rank()));
    DelayedCommunicator comm(std::move(copy), absl::FromChrono(kLatency));
    nn::GptConfig c = TinyConfig();
    c.n_layer = 4;
    auto gpt = std::make_shared<nn::Gpt>(c);
    ShardingOptions o = BlockOptions(ShardingStrategy::kFullShard,
                                     prefetch ? BackwardPrefetch::kBackwardPre : BackwardPrefetch::kNone,
                                     /*forward_prefetch=*/prefetch);
    o.limit_all_gathers = 2;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o));
    // After Create, so that these run after the sharding hooks (the gather).
    for (auto& [name, m] : gpt->NamedModules()) {
      if (m->type_name() != "Block") continue;
      // Simulated compute: each block's forward, and its backward (a hook on
      // its output's gradient, registered after the sharding hooks), take kCompute.
      m->AddPreForwardHook([](nn::Module&) {
        std::this_thread::sleep_for(kCompute);
        return absl::OkStatus();
      });
      m->AddPostForwardHook([](nn::Module&, std::vector<autograd::Variable>& out) {
        if (autograd::InBackward()) return absl::OkStatus();
        out[0].AddGradHook([](const Tensor& g) -> absl::StatusOr<Tensor> {
          std::this_thread::sleep_for(kCompute);
          return g;
        });
        return absl::OkStatus();
      });
    }
    const TokenData data = TinyData();
    auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < 2; ++step) {
      if (step == 1) start = std::chrono::steady_clock::now();
      ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .rank = comm.rank(), .world_size = 2,
                                                  .batch_size = 2, .block_size = 8}));
      ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(b.inputs, b.targets));
      ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
    }
    seconds[comm.rank()] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  return std::max(seconds[0], seconds[1]);
}

TEST(Overlap, PrefetchHidesCommunicationBehindCompute) {
  const double sequential = StepSeconds(false);
  const double overlapped = StepSeconds(true);
  // Without prefetch each block pays latency + compute in forward and in
  // backward: at least 4 x 2 x (25 + 25) ms = 400 ms. With prefetch the next
  // block's gather runs during this block's compute.
  std::printf("step without prefetch %.0f ms, with prefetch %.0f ms\n", sequential * 1e3, overlapped * 1e3);
  EXPECT_GE(sequential, 0.4);
  EXPECT_LT(overlapped, 0.85 * sequential);
}

}  // namespace
}  // namespace zeroshard
