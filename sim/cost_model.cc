#include "zeroshard/sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "zeroshard/runtime/check.h"

namespace zeroshard::sim {

// ---------------------------------------------------------------------------
// Compute
// ---------------------------------------------------------------------------

double PeakFlops(const HardwareProfile& p, DType dtype, bool tf32) {
  switch (dtype) {
    case DType::kBF16: return p.peak_flops_bf16;
    case DType::kF16: return p.peak_flops_fp16;
    case DType::kF32: return tf32 ? p.peak_flops_tf32 : p.peak_flops_fp32;
    case DType::kI32:
    case DType::kI64:
    case DType::kI8: break;
  }
  ZS_CHECK(false, "PeakFlops: a GEMM's dtype is floating (f32, bf16, f16), found ", DTypeName(dtype));
  return 0;
}

double GemmFlops(int64_t batch, int64_t m, int64_t n, int64_t k) {
  ZS_CHECK(batch >= 0 && m >= 0 && n >= 0 && k >= 0, "GEMM dimensions must be >= 0, found batch ", batch,
           " m ", m, " n ", n, " k ", k);
  return 2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
         static_cast<double>(k);
}

namespace {

// gemm_latency_s + F / (peak * gemm_efficiency_max): Note [GEMM efficiency curve].
double GemmComputeSeconds(const HardwareProfile& p, double flops, DType dtype, bool tf32 = false) {
  return p.gemm_latency_s + flops / (PeakFlops(p, dtype, tf32) * p.gemm_efficiency_max);
}

double StreamBytesPerSecond(const HardwareProfile& p) { return p.hbm_bytes_per_s * p.memory_efficiency; }

}  // namespace

double GemmEfficiency(const HardwareProfile& p, double flops, DType dtype) {
  ZS_CHECK(flops >= 0, "GemmEfficiency: flops must be >= 0, found ", flops);
  if (flops == 0) return 0;
  return flops / (PeakFlops(p, dtype) * GemmComputeSeconds(p, flops, dtype));
}

double GemmSeconds(const HardwareProfile& p, int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype) {
  const double flops = GemmFlops(batch, m, n, k);
  if (flops == 0) return 0;
  const double b = static_cast<double>(batch);
  const double elements = b * (static_cast<double>(m) * static_cast<double>(k) +
                               static_cast<double>(k) * static_cast<double>(n) +
                               static_cast<double>(m) * static_cast<double>(n));
  const double memory_s = static_cast<double>(DTypeSize(dtype)) * elements / StreamBytesPerSecond(p);
  return std::max(GemmComputeSeconds(p, flops, dtype), memory_s);
}

double GemmSeconds(const HardwareProfile& p, int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype,
                   double bytes, bool tf32) {
  const double flops = GemmFlops(batch, m, n, k);
  if (flops == 0) return 0;
  return std::max(GemmComputeSeconds(p, flops, dtype, tf32), bytes / StreamBytesPerSecond(p));
}

OpKind OpKindOf(std::string_view op_name) {
  // The op entries' own names (kernels/attention.cc, cross_entropy.cc,
  // layernorm.cc, elementwise.cc's UnaryOpName / BinaryOpName, softmax.cc).
  static constexpr std::pair<std::string_view, OpKind> kNames[] = {
      {"AttentionForward", OpKind::kAttentionForward},
      {"AttentionBackward", OpKind::kAttentionBackward},
      {"CrossEntropyForward", OpKind::kCrossEntropyForward},
      {"CrossEntropyBackward", OpKind::kCrossEntropyBackward},
      {"LayerNormForward", OpKind::kLayerNormForward},
      {"LayerNormBackward", OpKind::kLayerNormBackward},
      {"Gelu", OpKind::kGeluForward},
      {"GeluBackward", OpKind::kGeluBackward},
      {"Softmax", OpKind::kSoftmaxForward},
      {"LogSoftmax", OpKind::kSoftmaxForward},
      {"SoftmaxBackward", OpKind::kSoftmaxBackward},
      {"LogSoftmaxBackward", OpKind::kSoftmaxBackward},
  };
  for (const auto& [name, kind] : kNames) {
    if (name == op_name) return kind;
  }
  return OpKind::kOther;
}

double MemoryEfficiency(const HardwareProfile& p, OpKind kind) {
  const std::optional<double>* own = nullptr;
  switch (kind) {
    case OpKind::kCrossEntropyForward: own = &p.cross_entropy_forward_efficiency; break;
    case OpKind::kCrossEntropyBackward: own = &p.cross_entropy_backward_efficiency; break;
    case OpKind::kLayerNormForward: own = &p.layernorm_forward_efficiency; break;
    case OpKind::kLayerNormBackward: own = &p.layernorm_backward_efficiency; break;
    case OpKind::kGeluForward: own = &p.gelu_forward_efficiency; break;
    case OpKind::kGeluBackward: own = &p.gelu_backward_efficiency; break;
    case OpKind::kSoftmaxForward: own = &p.softmax_forward_efficiency; break;
    case OpKind::kSoftmaxBackward: own = &p.softmax_backward_efficiency; break;
    case OpKind::kOther:
    case OpKind::kAttentionForward:
    case OpKind::kAttentionBackward: break;
  }
  return own != nullptr && own->has_value() ? **own : p.memory_efficiency;
}

double MemoryBoundSeconds(const HardwareProfile& p, double bytes, double flops, OpKind kind) {
  ZS_CHECK(bytes >= 0 && flops >= 0, "MemoryBoundSeconds: bytes and flops must be >= 0, found ", bytes, " and ",
           flops);
  return std::max(bytes / (p.hbm_bytes_per_s * MemoryEfficiency(p, kind)), flops / p.peak_flops_fp32);
}

namespace {

using PointIt = std::vector<AttentionPoint>::const_iterator;

double PassEfficiency(const AttentionPoint& a, bool backward) { return backward ? a.backward : a.forward; }

// The first point in [begin, end) whose head_dim is at least `head_dim` (points
// are in increasing head_dim: ParseProfile checks it).
PointIt FirstAtOrAbove(PointIt begin, PointIt end, int64_t head_dim) {
  return std::lower_bound(begin, end, head_dim, [](const AttentionPoint& a, int64_t d) { return a.head_dim < d; });
}

// The points of `first`'s head_dim: [first, the next head_dim's first point).
// `first` is the group's first point.
PointIt GroupEnd(PointIt first, PointIt end) {
  return std::find_if(first, end, [d = first->head_dim](const AttentionPoint& a) { return a.head_dim != d; });
}

// eff_attn of one head_dim's points [first, last) at sequence length `seq_len`
// (Note [Attention efficiency]): a point without seq_len (its head_dim's only
// one) at every T; else at a point its figure, between two linear in log2 T,
// below the first or above the last the nearest one's figure.
double GroupEfficiency(PointIt first, PointIt last, int64_t seq_len, bool backward) {
  if (!first->seq_len.has_value()) {
    ZS_CHECK(last - first == 1, "AttentionEfficiency: a point without seq_len must be its head_dim's only point, "
                                "found ", last - first, " points at head_dim ", first->head_dim);
    return PassEfficiency(*first, backward);
  }
  for (PointIt it = first; it != last; ++it) {
    ZS_CHECK(it->seq_len.has_value() && (it == first || *(it - 1)->seq_len < *it->seq_len),
             "AttentionEfficiency: the points of head_dim ", first->head_dim,
             " must all carry a seq_len, in increasing order (ParseProfile's rule)");
  }
  // The first point at or above seq_len.
  const PointIt hi = std::lower_bound(first, last, seq_len,
                                      [](const AttentionPoint& a, int64_t t) { return *a.seq_len < t; });
  if (hi == last) return PassEfficiency(*(last - 1), backward);  // above the longest: flat
  if (*hi->seq_len == seq_len || hi == first) return PassEfficiency(*hi, backward);  // at a point, or below the first
  const AttentionPoint& lo = *(hi - 1);
  const double log_lo = std::log2(static_cast<double>(*lo.seq_len));
  const double w = (std::log2(static_cast<double>(seq_len)) - log_lo) /
                   (std::log2(static_cast<double>(*hi->seq_len)) - log_lo);
  return PassEfficiency(lo, backward) + w * (PassEfficiency(*hi, backward) - PassEfficiency(lo, backward));
}

}  // namespace

double AttentionEfficiency(const HardwareProfile& p, int64_t head_dim, int64_t seq_len, bool backward) {
  ZS_CHECK(head_dim >= 1 && seq_len >= 1, "AttentionEfficiency: head_dim and seq_len must be >= 1, found ", head_dim,
           " and ", seq_len);
  const std::vector<AttentionPoint>& points = p.attention_efficiency;
  if (points.empty()) return p.gemm_efficiency_max;  // the GEMM curve's plateau, as before the key
  // The first point at or above head_dim: the first of its head_dim's points (grouped).
  const PointIt hi = FirstAtOrAbove(points.begin(), points.end(), head_dim);
  auto group = [&](PointIt first) { return GroupEfficiency(first, GroupEnd(first, points.end()), seq_len, backward); };
  if (hi == points.end()) {  // above the last head_dim: that group's figure at T
    return group(FirstAtOrAbove(points.begin(), points.end(), points.back().head_dim));
  }
  if (hi->head_dim == head_dim || hi == points.begin()) return group(hi);  // at a head_dim, or below the first
  const PointIt lo = FirstAtOrAbove(points.begin(), hi, (hi - 1)->head_dim);
  const double e_lo = group(lo);
  const double e_hi = group(hi);
  // The same operations as before seq_len existed, so a profile without it costs the same bits.
  const double w = static_cast<double>(head_dim - lo->head_dim) / static_cast<double>(hi->head_dim - lo->head_dim);
  return e_lo + w * (e_hi - e_lo);
}

double AttentionSeconds(const HardwareProfile& p, double flops, int64_t head_dim, int64_t seq_len, bool backward,
                        DType dtype, double bytes) {
  ZS_CHECK(flops >= 0 && bytes >= 0, "AttentionSeconds: flops and bytes must be >= 0, found ", flops, " and ",
           bytes);
  if (flops == 0) return 0;
  const double compute_s =
      p.gemm_latency_s + flops / (PeakFlops(p, dtype) * AttentionEfficiency(p, head_dim, seq_len, backward));
  return std::max(compute_s, bytes / StreamBytesPerSecond(p));
}

// ---------------------------------------------------------------------------
// Collectives
// ---------------------------------------------------------------------------

std::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kAllToAll: return "all_to_all";
  }
  return "?";
}

std::string_view CollectiveAlgorithmName(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::kNone: return "none";
    case CollectiveAlgorithm::kRing: return "ring";
    case CollectiveAlgorithm::kTree: return "tree";
    case CollectiveAlgorithm::kDirect: return "direct";
  }
  return "?";
}

namespace {

// ceil(log2(x)) for x >= 1: the depth of a binary tree over x nodes.
int CeilLog2(int x) {
  int depth = 0;
  while ((int64_t{1} << depth) < x) ++depth;
  return depth;
}

}  // namespace

CollectiveCost EstimateCollective(const HardwareProfile& p, CollectiveKind kind, int64_t bytes, GroupShape g) {
  ZS_CHECK(g.size >= 1 && g.ranks_per_node >= 1, "GroupShape: size and ranks_per_node must be >= 1, found ",
           g.size, " and ", g.ranks_per_node);
  ZS_CHECK(bytes >= 0, "EstimateCollective: bytes must be >= 0, found ", bytes);
  CollectiveCost cost;
  const int n = g.size;
  if (n == 1) return cost;
  const int r = std::min(g.ranks_per_node, n);
  const int nodes = (n + r - 1) / r;
  cost.nodes = nodes;

  // B: the bottleneck per-rank bandwidth (Note [Collective model]).
  double bw = p.intra_node_bytes_per_s * p.collective_efficiency;
  if (nodes > 1) {
    const int rails = std::min(r, p.gpus_per_node);
    bw = std::min(bw, p.inter_node_bytes_per_s * p.inter_node_efficiency * rails / p.gpus_per_node);
  }
  cost.bus_bytes_per_s = bw;

  // One pass around the ring: n - 1 hops, N - 1 of them between nodes.
  const double ring_pass_s = (n - nodes) * p.intra_node_alpha_s + (nodes - 1) * p.inter_node_alpha_s;
  const double s = static_cast<double>(bytes);
  const double ring_fraction = static_cast<double>(n - 1) / n;  // (n-1)/n

  double latency = 0;
  double transfer = 0;
  cost.algorithm = CollectiveAlgorithm::kRing;
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      latency = ring_pass_s;
      transfer = ring_fraction * s / bw;
      break;
    case CollectiveKind::kBroadcast:
      latency = ring_pass_s;
      transfer = s / bw;
      break;
    case CollectiveKind::kAllToAll: {
      // Note [Collective model]: an alpha per message, the node-local and the
      // off-node bytes on their own links at once.
      cost.algorithm = CollectiveAlgorithm::kDirect;
      latency = (r - 1) * p.intra_node_alpha_s + (n - r) * p.inter_node_alpha_s;
      const double intra_bw = p.intra_node_bytes_per_s * p.collective_efficiency;
      const double rail_bw = p.inter_node_bytes_per_s * p.inter_node_efficiency *
                             std::min(r, p.gpus_per_node) / p.gpus_per_node / r;
      const double slowest = std::max((r - 1) / intra_bw, nodes > 1 ? (n - r) / rail_bw : 0.0);
      cost.bus_bytes_per_s = (n - 1) / slowest;  // B_a2a
      transfer = s / n * slowest;                 // (n-1)/n S / B_a2a
      break;
    }
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBarrier: {
      const double s_ar = kind == CollectiveKind::kBarrier ? 0.0 : s;
      const double ring_latency = 2 * ring_pass_s;
      const double ring_transfer = 2 * ring_fraction * s_ar / bw;
      const double tree_latency = 2 * ((r - 1) * p.intra_node_alpha_s + CeilLog2(nodes) * p.inter_node_alpha_s);
      const double tree_transfer = 2 * s_ar / bw;
      if (tree_latency + tree_transfer < ring_latency + ring_transfer) {
        cost.algorithm = CollectiveAlgorithm::kTree;
        latency = tree_latency;
        transfer = tree_transfer;
      } else {
        latency = ring_latency;
        transfer = ring_transfer;
      }
      break;
    }
  }
  cost.latency_s = p.collective_base_s + latency;
  cost.bandwidth_s = transfer;
  cost.seconds = cost.latency_s + cost.bandwidth_s;
  return cost;
}

double CollectiveSeconds(const HardwareProfile& p, CollectiveKind kind, int64_t bytes, GroupShape g) {
  return EstimateCollective(p, kind, bytes, g).seconds;
}

double CollectiveBytesSent(CollectiveKind kind, int64_t bytes, int group_size) {
  ZS_CHECK(group_size >= 1 && bytes >= 0, "CollectiveBytesSent: group_size >= 1 and bytes >= 0, found ",
           group_size, " and ", bytes);
  const double n = group_size;
  const double s = static_cast<double>(bytes);
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kAllToAll: return s * (n - 1) / n;
    case CollectiveKind::kAllReduce: return 2 * s * (n - 1) / n;
    case CollectiveKind::kBarrier: return 0;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Host
// ---------------------------------------------------------------------------

double HostCopySeconds(const HardwareProfile& p, int64_t bytes) {
  ZS_CHECK(bytes >= 0, "HostCopySeconds: bytes must be >= 0, found ", bytes);
  return static_cast<double>(bytes) / p.host_link_bytes_per_s;
}

double HostAdamSeconds(const HardwareProfile& p, double state_bytes) {
  ZS_CHECK(state_bytes >= 0, "HostAdamSeconds: state_bytes must be >= 0, found ", state_bytes);
  return state_bytes / p.host_adam_bytes_per_s;
}

double NvmeSeconds(const HardwareProfile& p, bool write, int64_t bytes) {
  ZS_CHECK(bytes >= 0, "NvmeSeconds: bytes must be >= 0, found ", bytes);
  return p.nvme_latency_s + static_cast<double>(bytes) / (write ? p.nvme_write_bytes_per_s : p.nvme_read_bytes_per_s);
}

// ---------------------------------------------------------------------------
// Allocator
// ---------------------------------------------------------------------------

// The allocator rules are the runtime CachingAllocator's own (its size
// functions), on the options the profile describes.
CachingAllocatorOptions AllocatorOptions(const HardwareProfile& p) {
  CachingAllocatorOptions o;
  o.round_bytes = static_cast<size_t>(std::max<int64_t>(p.alloc_round_bytes, 1));
  if (p.alloc_caching) {
    o.small_request_bytes = static_cast<size_t>(p.alloc_small_request_bytes);
    o.small_segment_bytes = static_cast<size_t>(p.alloc_small_segment_bytes);
    o.large_segment_bytes = static_cast<size_t>(p.alloc_large_segment_bytes);
    o.large_round_bytes = static_cast<size_t>(p.alloc_large_round_bytes);
  }
  return o;
}

int64_t RoundAllocation(const HardwareProfile& p, int64_t bytes) {
  ZS_CHECK(bytes >= 0, "RoundAllocation: bytes must be >= 0, found ", bytes);
  if (bytes == 0) return 0;  // both allocators hand out nullptr
  return static_cast<int64_t>(CachingRoundSize(AllocatorOptions(p), static_cast<size_t>(bytes)));
}

bool IsSmallPoolAllocation(const HardwareProfile& p, int64_t bytes) {
  return p.alloc_caching && bytes > 0 &&
         CachingIsSmall(AllocatorOptions(p), static_cast<size_t>(RoundAllocation(p, bytes)));
}

int64_t SegmentBytes(const HardwareProfile& p, int64_t bytes) {
  const int64_t rounded = RoundAllocation(p, bytes);
  if (!p.alloc_caching || bytes == 0) return rounded;
  return static_cast<int64_t>(CachingSegmentSize(AllocatorOptions(p), static_cast<size_t>(rounded)));
}

bool ShouldSplitBlock(const HardwareProfile& p, int64_t block_bytes, int64_t bytes) {
  const int64_t rounded = RoundAllocation(p, bytes);
  ZS_CHECK(block_bytes >= rounded, "ShouldSplitBlock: the block (", block_bytes, " B) must hold the request (",
           rounded, " B rounded)");
  if (!p.alloc_caching) return false;
  return CachingShouldSplit(AllocatorOptions(p), IsSmallPoolAllocation(p, bytes), static_cast<size_t>(block_bytes),
                            static_cast<size_t>(rounded));
}

}  // namespace zeroshard::sim
