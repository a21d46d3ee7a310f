// Communication hooks (comm_hook.h): the plain default, the registry, and the
// ZeRO++ hooks qwz, qgz, hpz and their combination zeropp.
//
// Note [ZeRO++ hooks]
// With S ranks in the shard group, this rank r, a unit's padded_numel P and
// n = P / S, and C = PackedBytes(n) (kernels/quantize.h, about n + 4 n / block
// bytes for int8):
//   qwZ gather: quantize mine (n values) into slot r of a [S C] byte buffer;
//     all-gather the slots (i8); dequantize all S slots into full. On the
//     wire (S - 1) C bytes instead of (S - 1) n 2 (bf16) or 4 (f32). Every
//     rank dequantizes the same bytes with the same kernel, so every rank's
//     full is bitwise the same, its own slice included.
//   qgZ, one step (group_size 1 or S): quantize full_grad as S chunks of n
//     (chunk j for rank j); all-to-all; dequantize the S chunks received and
//     sum them in f32 in rank order, divide by S (kAvg). One quantization per
//     contribution: the error of the sum is a sum of S independent rounding
//     errors, each at most half a step of its own block.
//   qgZ, two steps (1 < L = group_size < S, N = S / L groups of consecutive
//     ranks, rank r = g L + l): an all-to-all inside the group sends to
//     member l' the N chunks for ranks {g' L + l'}; each rank sums what it got
//     in f32 (N partial sums, one per group g'), requantizes them, and an
//     all-to-all across groups (ranks with the same l) delivers partial g' to
//     rank g' L + l, which sums the N partials in f32 and divides by S. Two
//     quantizations per value whatever S is, and the second crosses nodes
//     with 1 / L of the bytes a flat all-to-all would.
//   hpZ: after forward, keep full[l P / L, (l + 1) P / L) with l = r mod L;
//     backward's gather is an all-gather of those slices over the L ranks of
//     this rank's group: (L - 1) / L P elements moved inside the group
//     instead of (S - 1) / S P across the shard group. The same bytes as the
//     forward's gather, so the values are bitwise those without the hook.
// A hook's collectives use the shard group or groups split from it, so
// bytes_sent counts them. The two-step qgZ chain runs on the hook's own
// thread (its two groups are used by no other), so backward's compute goes
// on while it runs; the last dequantization runs where the reduction is
// awaited, as the plain reduce-scatter's consumption does.
#include "zeroshard/sharding/comm_hook.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/collectives/node_layout.h"
#include "zeroshard/collectives/work.h"
#include "zeroshard/kernels/flat_buffer.h"
#include "zeroshard/kernels/quantize.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/registry_name.h"
#include "zeroshard/runtime/status.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace zeroshard {

// ================================================================ the defaults

absl::Status CommHook::Setup(Communicator& shard_group, Allocator* allocator) {
  (void)shard_group;
  (void)allocator;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Work>> CommHook::AllGather(Communicator& shard_group, const GatherCall& call) {
  return shard_group.AllGatherAsync(call.mine, call.full, call.opts);
}

absl::Status CommHook::BeforeReshardAfterForward(int unit, const Tensor& full) {
  (void)unit;
  (void)full;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Work>> CommHook::ReduceScatter(Communicator& shard_group, const ReduceCall& call) {
  return shard_group.ReduceScatterAsync(call.full_grad, call.mine, call.op, call.opts);
}

namespace {

class PlainHook final : public CommHook {
 public:
  std::string name() const override { return "none"; }
};

// ================================================================ topology

// The number of consecutive shard-group ranks on each node
// (collectives/node_layout.h): every node must hold the same number of
// consecutive ranks.
absl::StatusOr<int> RanksPerHost(Communicator& group, Allocator* allocator) {
  ZS_ASSIGN_OR_RETURN(const NodeLayout nodes, GatherNodeLayout(group, allocator));
  const int per_node = nodes.ConsecutiveRanksPerNode();
  if (per_node == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "comm hook: group_size 0 (the ranks on a node) needs every node to hold the same number of consecutive "
        "ranks of the shard group; found ", nodes.ToString(), "; set strategy.comm_hook_options.group_size explicitly"));
  }
  return per_node;
}

// ================================================================ ZeRO++

class ZeroPlusPlusHook final : public CommHook {
 public:
  ZeroPlusPlusHook(std::string name, bool qw, bool qg, bool hp, const CommHookOptions& o)
      : name_(std::move(name)),
        qw_(qw),
        qg_(qg),
        hp_(hp),
        options_(o),
        wspec_{.bits = o.param_bits, .block = o.block_size},
        gspec_{.bits = o.grad_bits, .block = o.block_size} {}

  std::string name() const override { return name_; }

  absl::Status Setup(Communicator& group, Allocator* allocator) override {
    allocator_ = allocator;
    size_ = group.size();
    rank_ = group.rank();
    if (qw_) ZS_RETURN_IF_ERROR(wspec_.Validate());
    if (qg_) ZS_RETURN_IF_ERROR(gspec_.Validate());
    int l = options_.group_size;
    if (l == 0 && (hp_ || qg_)) {
      ZS_ASSIGN_OR_RETURN(l, RanksPerHost(group, allocator));
    }
    if (l < 0 || (l > 0 && size_ % l != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("comm hook ", name_, ": group_size ", l,
                                                     " must divide the shard group size ", size_));
    }
    group_size_ = l;
    if (hp_ && 1 < l && l < size_) {
      ZS_ASSIGN_OR_RETURN(hp_group_, group.Split(rank_ / l, rank_));
    }
    if (qg_ && 1 < l && l < size_) {
      ZS_ASSIGN_OR_RETURN(qg_intra_, group.Split(rank_ / l, rank_));
      ZS_ASSIGN_OR_RETURN(qg_inter_, group.Split(rank_ % l, rank_));
      // The chain's thread works on the rank's GPU (its kernels launch on the
      // current device) and with the rank's share of the cores.
      const int gpu = group.device().is_cuda() ? group.device().index : -1;
#ifdef _OPENMP
      const int threads = omp_get_max_threads();
#else
      const int threads = 0;
#endif
      thread_ = std::make_unique<CommThread>("qgz", [threads, gpu] {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        (void)threads;
        if (gpu >= 0) (void)cuda::CudaSetDevice(gpu);  // a failure shows at the chain's first kernel
      });
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Work>> AllGather(Communicator& group, const GatherCall& call) override {
    if (hp_ && call.backward) {
      auto it = secondary_.find(call.unit);
      if (it != secondary_.end()) {
        Tensor secondary = std::move(it->second);
        secondary_.erase(it);
        ZS_ASSIGN_OR_RETURN(std::shared_ptr<Work> work,
                            hp_group_->AllGatherAsync(secondary, call.full, call.opts));
        // The slice stays alive until the gather has read it.
        return ThenWork(std::move(work), [secondary]() { return absl::OkStatus(); });
      }
    }
    if (!qw_ || size_ == 1) return CommHook::AllGather(group, call);
    const int64_t c = PackedBytes(call.mine.numel(), wspec_);
    ZS_ASSIGN_OR_RETURN(Tensor packed, Tensor::Empty({size_ * c}, DType::kI8, allocator_));
    ZS_ASSIGN_OR_RETURN(Tensor slot, packed.Narrow(0, rank_ * c, c));
    ZS_RETURN_IF_ERROR(QuantizeChunks(call.mine, 1, wspec_, slot));
    ZS_ASSIGN_OR_RETURN(std::shared_ptr<Work> work, group.AllGatherAsync(slot, packed, call.opts));
    const Tensor full = call.full;
    const QuantSpec spec = wspec_;
    const int64_t s = size_;
    return ThenWork(std::move(work), [packed, full, spec, s]() {
      return DequantizeReduce(packed, s, 1, spec, full, 1.0f);
    });
  }

  absl::Status BeforeReshardAfterForward(int unit, const Tensor& full) override {
    if (hp_group_ == nullptr) return absl::OkStatus();
    const int64_t n = full.numel() / hp_group_->size();
    ZS_ASSIGN_OR_RETURN(Tensor slice, full.Narrow(0, hp_group_->rank() * n, n));
    ZS_ASSIGN_OR_RETURN(Tensor secondary, Tensor::Empty({n}, full.dtype(), allocator_));
    ZS_RETURN_IF_ERROR(secondary.CopyFrom(slice));
    secondary_[unit] = std::move(secondary);
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Work>> ReduceScatter(Communicator& group, const ReduceCall& call) override {
    // A quantized max means nothing; only sums and averages are compressed.
    if (!qg_ || size_ == 1 || call.op == ReduceOp::kMax) return CommHook::ReduceScatter(group, call);
    const int64_t m = call.mine.numel();
    const int64_t c = PackedBytes(m, gspec_);
    const float divisor = call.op == ReduceOp::kAvg ? static_cast<float>(size_) : 1.0f;
    const QuantSpec spec = gspec_;
    const Tensor mine = call.mine;
    ZS_ASSIGN_OR_RETURN(Tensor send, Tensor::Empty({size_ * c}, DType::kI8, allocator_));
    ZS_RETURN_IF_ERROR(QuantizeChunks(call.full_grad, size_, spec, send));
    if (qg_intra_ == nullptr) {
      ZS_ASSIGN_OR_RETURN(Tensor recv, Tensor::Empty({size_ * c}, DType::kI8, allocator_));
      ZS_ASSIGN_OR_RETURN(std::shared_ptr<Work> work, group.AllToAllAsync(send, recv, call.opts));
      const int64_t s = size_;
      return ThenWork(std::move(work), [send, recv, mine, spec, s, divisor]() {
        return DequantizeReduce(recv, 1, s, spec, mine, divisor);
      });
    }
    // Two steps (Note [ZeRO++ hooks]): member l' of the group gets the chunks
    // of ranks g' L + l', in g' order.
    const int64_t l = qg_intra_->size(), groups = qg_inter_->size();
    ZS_ASSIGN_OR_RETURN(Tensor send1, Tensor::Empty({size_ * c}, DType::kI8, allocator_));
    ZS_RETURN_IF_ERROR(PermuteChunks(send, send1, c, groups, l));
    ZS_ASSIGN_OR_RETURN(Tensor recv2, Tensor::Empty({groups * c}, DType::kI8, allocator_));
    Communicator* intra = qg_intra_.get();
    Communicator* inter = qg_inter_.get();
    Allocator* allocator = allocator_;
    // On a GPU the collectives wait for the compute stream (the kernels that
    // wrote their inputs, on this thread or the chain's) through call.opts.
    const CollectiveOptions opts = call.opts;
    std::shared_ptr<Work> chain = thread_->Enqueue([=]() -> absl::Status {
      ZS_ASSIGN_OR_RETURN(Tensor recv1, Tensor::Empty({l * groups * c}, DType::kI8, allocator));
      ZS_RETURN_IF_ERROR(intra->AllToAll(send1, recv1, opts));
      // recv1 holds, from each member l'', the chunks for g' = 0..N-1: group them by g'.
      ZS_ASSIGN_OR_RETURN(Tensor by_group, Tensor::Empty({l * groups * c}, DType::kI8, allocator));
      ZS_RETURN_IF_ERROR(PermuteChunks(recv1, by_group, c, l, groups));
      ZS_ASSIGN_OR_RETURN(Tensor partial, Tensor::Empty({groups * m}, DType::kF32, allocator));
      ZS_RETURN_IF_ERROR(DequantizeReduce(by_group, groups, l, spec, partial, 1.0f));
      ZS_ASSIGN_OR_RETURN(Tensor send2, Tensor::Empty({groups * c}, DType::kI8, allocator));
      ZS_RETURN_IF_ERROR(QuantizeChunks(partial, groups, spec, send2));
      return inter->AllToAll(send2, recv2, opts);
    });
    return ThenWork(std::move(chain), [recv2, mine, spec, groups, divisor]() {
      return DequantizeReduce(recv2, 1, groups, spec, mine, divisor);
    });
  }

  void EndBackward() override { secondary_.clear(); }

  int64_t HeldBytes() const override {
    int64_t bytes = 0;
    for (const auto& [unit, t] : secondary_) bytes += t.nbytes();
    return bytes;
  }

  std::string ToString() const override {
    std::vector<std::string> parts;
    if (qw_) parts.push_back(absl::StrCat("qwZ parameters as ", wspec_.ToString()));
    if (qg_) {
      parts.push_back(absl::StrCat("qgZ gradients as ", gspec_.ToString(),
                                   qg_intra_ ? absl::StrCat(", two steps (", qg_intra_->size(), " ranks, then ",
                                                            qg_inter_->size(), " groups)")
                                             : ", one all-to-all"));
    }
    if (hp_) {
      parts.push_back(hp_group_ ? absl::StrCat("hpZ secondary partition over ", hp_group_->size(), " ranks")
                                : absl::StrCat("hpZ: the secondary partition is the shard group (group_size ",
                                               group_size_, " of ", size_, "): nothing kept"));
    }
    return absl::StrCat(name_, " (", absl::StrJoin(parts, "; "), ")");
  }

 private:
  // dst chunk (j * rows + i) = src chunk (i * cols + j), for a [rows, cols]
  // grid of chunks of `bytes` each: the transpose of the chunk grid, one kernel.
  static absl::Status PermuteChunks(const Tensor& src, const Tensor& dst, int64_t bytes, int64_t rows,
                                    int64_t cols) {
    std::vector<Tensor> pieces;
    std::vector<int64_t> offsets;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        ZS_ASSIGN_OR_RETURN(Tensor piece, src.Narrow(0, (i * cols + j) * bytes, bytes));
        pieces.push_back(std::move(piece));
        offsets.push_back((j * rows + i) * bytes);
      }
    }
    return PackFlat(pieces, offsets, dst);
  }

  const std::string name_;
  const bool qw_, qg_, hp_;
  const CommHookOptions options_;
  QuantSpec wspec_, gspec_;
  Allocator* allocator_ = nullptr;
  int64_t size_ = 1;
  int64_t rank_ = 0;
  int group_size_ = 0;
  std::unique_ptr<Communicator> hp_group_;  // hpZ's secondary partition (nullptr: none)
  std::unique_ptr<Communicator> qg_intra_, qg_inter_;  // qgZ's two steps (nullptr: one step)
  std::unique_ptr<CommThread> thread_;      // runs the two-step chain; destroyed first
  std::map<int, Tensor> secondary_;         // hpZ: unit -> this rank's secondary slice
};

void RegisterBuiltinHooks(CommHookRegistry& r) {
#define ZS_CHECK_OK_REGISTER(call)                                   \
  do {                                                               \
    const absl::Status s = (call);                                   \
    ZS_CHECK(s.ok(), "registering a built-in comm hook: ", s.ToString()); \
  } while (0)
  auto zero_pp = [](const char* name, bool qw, bool qg, bool hp) {
    return [=](const CommHookOptions& o) -> absl::StatusOr<std::unique_ptr<CommHook>> {
      return std::unique_ptr<CommHook>(std::make_unique<ZeroPlusPlusHook>(name, qw, qg, hp, o));
    };
  };
  ZS_CHECK_OK_REGISTER(r.Register("none", "the plain collectives in the parameters' and gradients' dtypes",
                         [](const CommHookOptions&) -> absl::StatusOr<std::unique_ptr<CommHook>> {
                           return std::unique_ptr<CommHook>(std::make_unique<PlainHook>());
                         }));
  ZS_CHECK_OK_REGISTER(r.Register("qwz", "ZeRO++ qwZ: parameters all-gathered as int8/int4 blocks", zero_pp("qwz", true, false, false)));
  ZS_CHECK_OK_REGISTER(r.Register("qgz", "ZeRO++ qgZ: gradients reduced by quantized all-to-all", zero_pp("qgz", false, true, false)));
  ZS_CHECK_OK_REGISTER(r.Register("hpz", "ZeRO++ hpZ: backward gathers from a secondary partition in the node",
                         zero_pp("hpz", false, false, true)));
  ZS_CHECK_OK_REGISTER(r.Register("zeropp", "ZeRO++: qwZ, hpZ and qgZ together", zero_pp("zeropp", true, true, true)));
#undef ZS_CHECK_OK_REGISTER
}

}  // namespace

// ================================================================ registry

CommHookRegistry& CommHookRegistry::Global() {
  static CommHookRegistry* const registry = [] {
    auto* r = new CommHookRegistry;
    RegisterBuiltinHooks(*r);
    return r;
  }();
  return *registry;
}

absl::Status CommHookRegistry::Register(std::string name, std::string description, CommHookFactory factory) {
  ZS_RETURN_IF_ERROR(CheckRegistryName("comm hook", name));
  if (factory == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("comm hook ", name, ": expected a factory, found none"));
  }
  absl::MutexLock lock(&mu_);
  if (entries_.count(name) > 0) return absl::AlreadyExistsError(absl::StrCat("comm hook ", name, " is already registered"));
  entries_.emplace(std::move(name), Entry{std::move(description), std::move(factory)});
  return absl::OkStatus();
}

bool CommHookRegistry::Has(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  return entries_.find(name) != entries_.end();
}

std::string CommHookRegistry::NamesText() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<std::unique_ptr<CommHook>> CommHookRegistry::Create(const CommHookOptions& options) const {
  CommHookFactory factory;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(options.name);
    if (it != entries_.end()) factory = it->second.factory;
  }
  if (factory == nullptr) {
    return absl::NotFoundError(absl::StrCat("comm hook \"", options.name, "\": expected a registered hook (",
                                            NamesText(), ")"));
  }
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<CommHook> hook, factory(options));
  if (hook == nullptr) {
    return absl::InternalError(absl::StrCat("comm hook ", options.name, ": its factory returned no hook"));
  }
  return hook;
}

CommHookRegistrar::CommHookRegistrar(std::string name, std::string description, CommHookFactory factory) {
  const absl::Status s = CommHookRegistry::Global().Register(name, std::move(description), std::move(factory));
  ZS_CHECK(s.ok(), "registering comm hook ", name, ": ", s.ToString());
}

}  // namespace zeroshard
