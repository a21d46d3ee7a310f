// The simulator's cost model: pure functions that turn an op, a copy or a
// collective into device seconds, and an allocation request into reserved
// bytes, from a HardwareProfile (sim/profile.h). No state, no clocks: the
// virtual device and communicator call these and advance their own streams.
//
//   ZS_ASSIGN_OR_RETURN(HardwareProfile h100, LoadProfile("h100_dgx"));
//   GemmSeconds(h100, 1, 8192, 8192, 8192, DType::kBF16);   // ~1.47e-3: 1.1 PFLOP at ~750 TFLOP/s
//   MemoryBoundSeconds(h100, 2.0 * 512e6, 128e6);           // scale 512 MB of f32 in place: ~3.5e-4
//   CollectiveSeconds(h100, CollectiveKind::kAllGather, 1 << 30, {.size = 8, .ranks_per_node = 8});
//   CollectiveSeconds(h100, CollectiveKind::kAllReduce, 1 << 30, {.size = 64, .ranks_per_node = 8});
//   CollectiveBytesSent(CollectiveKind::kAllReduce, 1 << 30, 8);  // 2 * 7/8 GiB
//   RoundAllocation(h100, 1);                               // 512 (the CUDA caching allocator)
//
// Units: seconds, bytes, FLOPs. Every function returns 0 for an empty op (a zero
// dimension, 0 bytes, a group of one rank). Negative sizes are programmer errors
// (ZS_CHECK). The notes below give each formula; docs/simulator.md ("Hardware
// profiles and the cost model") gives them with the figures they come from.
//
// Note [GEMM efficiency curve]
// C[b, m, n] = A[b, m, k] B[b, k, n], all three in `dtype`, F = 2 b m n k FLOPs.
// Compute time is a fixed part plus the work at the plateau rate:
//     t_compute = gemm_latency_s + F / (peak(dtype) * gemm_efficiency_max)
// so the fraction of peak reached is the saturating curve
//     eff(F) = F / (peak * t_compute) = gemm_efficiency_max * F / (F + F_half),
//     F_half = gemm_latency_s * peak * gemm_efficiency_max   (half the plateau)
// It captures what shrinks small GEMMs' efficiency on a GPU (the fixed prologue
// and epilogue, the last partial wave of tiles) with one figure per profile, fit
// to measured GEMMs (docs/simulator.md). A skinny GEMM is held back by memory
// instead: the time is the roofline maximum
//     GemmSeconds = max(t_compute, bytes / (hbm_bytes_per_s * memory_efficiency)),
//     bytes = DTypeSize(dtype) * b * (m k + k n + m n)
// Both terms grow with every dimension, so the time is monotone in each, and
// F / GemmSeconds <= peak * gemm_efficiency_max * F / (F + F_half) <= peak.
// peak(dtype): bf16 -> peak_flops_bf16, f16 -> peak_flops_fp16, f32 -> peak_flops_fp32
// (the runtime runs f32 GEMMs without TF32; peak_flops_tf32 is there for when it may).
//
// Note [Collective model]
// n = group size, r = min(ranks_per_node, n) ranks of the group per node,
// N = ceil(n / r) nodes, S = `bytes` (the full buffer: all-gather output,
// reduce-scatter input, all-reduce buffer, broadcast buffer).
// Bandwidth each rank sees (the slowest link a ring step crosses, busbw):
//     N == 1: B = intra_node_bytes_per_s * collective_efficiency
//     N  > 1: B = min(intra_node_bytes_per_s * collective_efficiency,
//                     inter_node_bytes_per_s * inter_node_efficiency * min(r, g) / g)
//             with g = gpus_per_node: the node's NICs (one rail per GPU on a DGX) are
//             shared by all g GPUs of the node, each running the same collective on
//             its own group at the same time (SPMD), so a group with r ranks on a
//             node gets r rails' worth. A HYBRID_SHARD replica group (r = 1) gets one
//             rail; a full-node group (r = g) gets the whole node's NICs.
// Ring (NCCL's, pipelined; latency as NCCL's tuning model counts it: one alpha per
// hop, an inter-node alpha for each of the N - 1 hops between nodes):
//     all-gather, reduce-scatter: base + (n - N) a_intra + (N - 1) a_inter + (n-1)/n S / B
//     all-reduce (RS then AG):    base + 2 (n - N) a_intra + 2 (N - 1) a_inter + 2 (n-1)/n S / B
//     broadcast:                  base + (n - N) a_intra + (N - 1) a_inter + S / B
// Tree (all-reduce only; NCCL's double binary tree across nodes, a chain in a node):
//     base + 2 ((r - 1) a_intra + ceil(log2 N) a_inter) + 2 S / B
// All-reduce takes the faster of the two, as NCCL's tuner does (ring on a tie);
// a barrier is a zero-byte all-reduce. base = collective_base_s.
// All-to-all (S = the input; no ring: NCCL's grouped send/recv, each rank
// sends its n - 1 blocks of S/n straight to their ranks): the pairwise-exchange
// model of Thakur, Rabenseifner and Gropp (2005), (n-1) alpha + (n-1)/n S beta,
// with an alpha per message as the ring has one per hop - r - 1 of them to
// ranks on the node, n - r to other nodes - and the bytes on the links they
// take, both kinds at once:
//     base + (r - 1) a_intra + (n - r) a_inter + (n-1)/n S / B_a2a
//     B_a2a = (n - 1) / max((r - 1) / B_intra, (n - r) / B_rail)
//     B_intra = intra_node_bytes_per_s * collective_efficiency
//     B_rail  = inter_node_bytes_per_s * inter_node_efficiency * min(r, g) / g / r
// B_rail is one rank's share of the rails its group has on the node (the
// group's r ranks there send r (n-r)/n S off the node at once; with r <= g
// that is one rail each), so (n-1)/n S / B_a2a = max((r-1)/n S / B_intra,
// (n-r)/n S / B_rail): the slower of the node-local and the off-node part. In
// one node (r = n) it is all-gather's bandwidth term; across nodes a rank gets
// one rail, not the ring's whole node of them, as nccl-tests' alltoall shows.
// bus_bytes_per_s reports B_a2a.
// Not modelled: NVLink SHARP (NVLS: in-switch all-reduce, ~480 GB/s busbw on
// DGX H100 against the ring's ~370), NCCL's protocol switch (LL / LL128 /
// Simple), per-size efficiency below the plateau, and congestion between
// concurrent collectives of one rank (the caller serialises them on a stream).
#ifndef ZEROSHARD_SIM_COST_MODEL_H_
#define ZEROSHARD_SIM_COST_MODEL_H_

#include <cstdint>
#include <string_view>

#include "zeroshard/runtime/cuda/caching_allocator.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/sim/profile.h"

namespace zeroshard::sim {

// ---------------------------------------------------------------------------
// Compute
// ---------------------------------------------------------------------------

// The dense peak for a GEMM with `dtype` inputs (Note [GEMM efficiency curve]).
// Floating dtypes only.
// f32 with `tf32`: the TF32 tensor-core peak (SetMatMulAllowTf32).
double PeakFlops(const HardwareProfile& p, DType dtype, bool tf32 = false);

// 2 * batch * m * n * k.
double GemmFlops(int64_t batch, int64_t m, int64_t n, int64_t k);

// The fraction of PeakFlops(dtype) a compute-bound GEMM of `flops` reaches:
// gemm_efficiency_max * F / (F + F_half). 0 for F == 0.
double GemmEfficiency(const HardwareProfile& p, double flops, DType dtype);

// Device seconds of C[b, m, n] = A[b, m, k] B[b, k, n] (Note [GEMM efficiency curve]).
double GemmSeconds(const HardwareProfile& p, int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype);
// The same products with the kernel's own device-memory traffic `bytes` (the
// op entries count it with the operands' real dtypes; a fused kernel such as
// flash attention keeps its T x T scores on chip, so they are not in it):
// max(compute time of the products, bytes / streaming bandwidth).
double GemmSeconds(const HardwareProfile& p, int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype,
                   double bytes, bool tf32 = false);  // tf32: an f32 GEMM at the TF32 peak

// A memory-bound op that moves `bytes` (reads + writes) and does `flops` (on the
// CUDA cores, fp32): max(bytes / (hbm_bytes_per_s * memory_efficiency),
// flops / peak_flops_fp32).
double MemoryBoundSeconds(const HardwareProfile& p, double bytes, double flops);

// ---------------------------------------------------------------------------
// Collectives (Note [Collective model])
// ---------------------------------------------------------------------------

// A communication group as the cluster lays it out: nodes = ceil(size / ranks_per_node).
// ranks_per_node larger than size is read as size (a group within one node).
struct GroupShape {
  int size = 1;
  int ranks_per_node = 1;
};

enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kBarrier, kAllToAll };
std::string_view CollectiveKindName(CollectiveKind kind);  // "all_gather", ..., "all_to_all

// kDirect: every rank sends to every other at once (all-to-all).
enum class CollectiveAlgorithm { kNone, kRing, kTree, kDirect };
std::string_view CollectiveAlgorithmName(CollectiveAlgorithm algorithm);  // "none", "ring", "tree", "direct"

// One collective's time, split as the trace shows it.
struct CollectiveCost {
  double seconds = 0;      // latency_s + bandwidth_s
  double latency_s = 0;    // collective_base_s + the alpha terms
  double bandwidth_s = 0;  // the bytes term
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kNone;  // kNone for a group of one
  double bus_bytes_per_s = 0;  // B: the bottleneck bandwidth per rank (0 for a group of one)
  int nodes = 1;               // N
};

CollectiveCost EstimateCollective(const HardwareProfile& p, CollectiveKind kind, int64_t bytes, GroupShape g);

// EstimateCollective(...).seconds.
double CollectiveSeconds(const HardwareProfile& p, CollectiveKind kind, int64_t bytes, GroupShape g);

// Bytes one rank sends on the wire in a ring: (n-1)/n * bytes for all-gather,
// reduce-scatter and broadcast (the average over ranks: all but the ring's last
// forward the whole buffer), 2(n-1)/n * bytes for all-reduce, 0 for a barrier
// or a group of one. These are nccl-tests' busbw factors. All-to-all: (n-1)/n
// * bytes of the input, the n - 1 blocks that leave the rank.
double CollectiveBytesSent(CollectiveKind kind, int64_t bytes, int group_size);

// ---------------------------------------------------------------------------
// Host
// ---------------------------------------------------------------------------

// One H2D or D2H copy of `bytes` over the host link (pinned memory):
// bytes / host_link_bytes_per_s.
double HostCopySeconds(const HardwareProfile& p, int64_t bytes);

// A CPU-offloaded optimizer step touching `state_bytes` (parameters, gradients,
// moments: reads plus writes): state_bytes / host_adam_bytes_per_s. The
// simulator charges every other host kernel of CPU offload (the add of a
// reduced gradient into its host shard, fills, norms) the same way: its bytes
// at the host's streaming rate per GPU.
double HostAdamSeconds(const HardwareProfile& p, double state_bytes);

// One NVMe swap transfer of `bytes` (a region read into, or written from, a
// host swap buffer): nvme_latency_s + bytes / nvme_read_bytes_per_s (or
// nvme_write_bytes_per_s). Transfers queue on one track per rank (Note
// [Virtual NVMe] in runtime/nvme/virtual_swap_store.h).
double NvmeSeconds(const HardwareProfile& p, bool write, int64_t bytes);

// ---------------------------------------------------------------------------
// Allocator (the rules in HardwareProfile's allocator fields)
// ---------------------------------------------------------------------------

// The block size reserved for one request, as this runtime's CachingAllocator
// (runtime/cuda/caching_allocator.h) and PyTorch's CUDACachingAllocator round it:
// up to a multiple of alloc_round_bytes (512 B), so at least 512 B; with
// alloc_round_bytes 1 (the CPU allocator) the request itself. 0 for 0 bytes
// (both hand out nullptr). This is what allocated_bytes (torch's
// memory_allocated) counts for a block that was split to fit; see
// ShouldSplitBlock for when a block is handed out whole.
// The runtime CachingAllocator's options the profile's allocator figures describe
// (the virtual device runs that allocator with them; the functions below ask its rules).
CachingAllocatorOptions AllocatorOptions(const HardwareProfile& p);
int64_t RoundAllocation(const HardwareProfile& p, int64_t bytes);

// Whether the request is served from the small pool (rounded size <= alloc_small_request_bytes).
bool IsSmallPoolAllocation(const HardwareProfile& p, int64_t bytes);

// The segment (one cudaMalloc) a request that finds no cached block allocates:
// small pool -> alloc_small_segment_bytes; below alloc_min_large_bytes ->
// alloc_large_segment_bytes; else the rounded request rounded up to
// alloc_large_round_bytes. Without caching, RoundAllocation(bytes).
int64_t SegmentBytes(const HardwareProfile& p, int64_t bytes);

// Whether a free block of `block_bytes` serving this request is split (the rest
// stays free) or handed out whole: small pool when at least alloc_round_bytes
// remain, large pool when more than alloc_small_request_bytes remain. So an
// 11.5 MiB request in a fresh 12 MiB segment holds all 12 MiB. False without caching.
bool ShouldSplitBlock(const HardwareProfile& p, int64_t block_bytes, int64_t bytes);

}  // namespace zeroshard::sim

#endif  // ZEROSHARD_SIM_COST_MODEL_H_
