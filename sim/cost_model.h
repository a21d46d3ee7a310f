// The simulator's cost model: pure functions that turn an op, a copy or a
// collective into device seconds, and an allocation request into reserved
// bytes, from a HardwareProfile (sim/profile.h). No state, no clocks: the
// virtual device and communicator call these and advance their own streams.
//
//   ZS_ASSIGN_OR_RETURN(HardwareProfile h100, LoadProfile("h100_dgx"));
//   GemmSeconds(h100, 1, 8192, 8192, 8192, DType::kBF16);   // ~1.47e-3: 1.1 PFLOP at ~750 TFLOP/s
//   MemoryBoundSeconds(h100, 2.0 * 512e6, 128e6);           // scale 512 MB of f32 in place: ~3.5e-4
//   MemoryBoundSeconds(h100, 1.65e9, 0, OpKindOf("CrossEntropyBackward"));  // at 0.454 x HBM: ~1.08e-3
//   AttentionSeconds(h100, 12.9e9, 64, 1024, /*backward=*/false, DType::kBF16, 0);  // ~6.5e-5: 0.21 of peak at D 64
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
// Note [Attention efficiency]
// Fused attention (cuDNN's flash-attention SDPA on a GPU) is charged as its
// products (kernels/attention.cc, ChargeAttention): per batch and head 2
// (forward) or 5 (backward) T x T x D products, the causal mask halving the
// rows, F FLOPs in all, and the kernel's own traffic `bytes` (q, k, v, out,
// lse and the gradients; the scores stay on chip). On tensor cores it runs
// below the GEMM curve: it reaches eff_attn(D, T, pass) of peak(dtype),
//     t_compute      = gemm_latency_s + F / (peak(dtype) * eff_attn(D, T, pass))
//     AttentionSeconds = max(t_compute, bytes / (hbm_bytes_per_s * memory_efficiency))
// eff_attn comes from the profile's compute.attention_efficiency points
// {head_dim, seq_len (optional), forward, backward}. The points are grouped by
// head_dim, in increasing head_dim, and within one head_dim in increasing
// seq_len; a point without seq_len holds at every T and is its head_dim's only
// point; no two points are alike (ParseProfile rejects anything else). For a
// query (D, T):
//   - in one head_dim's group, e_D(T): at a point's seq_len its figure for the
//     pass; between two points linear in log2 T,
//         e_D(T) = e_lo + w (e_hi - e_lo),  w = (log2 T - log2 T_lo) / (log2 T_hi - log2 T_lo)
//     (a doubling of T moves it by the same amount anywhere between them);
//     below the shortest or above the longest the nearest point's figure (no
//     extrapolation); a point without seq_len: its figure at every T;
//   - across head_dims: at a group's head_dim e_D(T); between two groups
//     D_lo < D < D_hi linear in D, e_lo(T) + (D - D_lo) / (D_hi - D_lo) (e_hi(T) - e_lo(T));
//     below the first or above the last group that group's e(T).
// With no seq_len anywhere every group is one point and this is the curve in D
// alone that came before seq_len, the same operations, so such a profile costs
// the same bits. Without points, eff_attn = gemm_efficiency_max: then
// AttentionSeconds is exactly GemmSeconds of the products with their traffic,
// the model before the key existed (attention at the GEMM curve's plateau plus
// its fixed part).
// T is the key length: ChargeAttention's gemm_n (the products are [rows, D] x
// [D, T]; gemm_m is the query rows, (T + 1) / 2 under the causal mask, a FLOP
// count, not a length). In this runtime q and k have one length, so it is also
// the query length; for causal attention the key length is the one that says
// how long the kernel's inner loop over key blocks runs, and the length the
// bench rows the points are fit to are named by (B 2, H 32, T 4096).
// The H100 points (sim/profiles/h100_dgx.json, docs/simulator.md "Fused
// attention"), each t less the 3 us fixed part, F as ChargeAttention counts it:
//   D 64 (no seq_len: one measured length, flat in T): the GPT-2 step of
//          docs/gpu_records/2026-11-27_h100_b (B 8, H 12, T 1024): attention
//          forward + backward 2.6815 ms for 12 layers, 223.5 us a layer for
//          12.88 + 32.21 GFLOP. cuda_bench's forward row (65.0 us) leaves the
//          backward 158.4 us: 207.7 and 207.2 TFLOP/s, 0.210 of 989 for both passes.
//   D 128, T 2048: cuda_bench's B 4, H 16 rows of the same record: forward
//          159.0 us for 68.72 GFLOP, 440.4 TFLOP/s, 0.445; backward 639.4 us less
//          103.5 us for 171.80 GFLOP, 322.4 TFLOP/s, 0.326.
//   D 128, T 4096: the B 2, H 32 rows (the longest measured): forward 489.5 us
//          for 274.9 GFLOP, 565.1 TFLOP/s, 0.571; backward 1662.2 us less 103.5 us
//          for 687.2 GFLOP, 441.7 TFLOP/s, 0.447.
//          The bench rows up to 94c38bb timed a cudaMalloc and a synchronising
//          cudaFree of cuDNN's workspace with every call (fixed in b0addda): at D
//          64 its rows (65.0 + 261.9 us) exceed the step's 223.5 us by 103.5 us,
//          taken here as that cost for the backward (whose workspace holds the
//          dQ accumulator) and charged back at D 128, where the workspace is
//          2.7x (T 2048) and 5.3x (T 4096) larger: a floor, so 0.326 and 0.447
//          are if anything low. Uncorrected: 0.273 and 0.418.
// So at D 128 the forward rose 1.28x and the backward 1.37x per FLOP from T
// 2048 to 4096: the causal kernel's short rows (the diagonal blocks, half
// masked, are a larger share of a shorter sequence) and, in the backward, the
// allocation, which the correction takes only in part. Above T 4096 the model
// stays at the T 4096 figures (FlashAttention-3's paper shows causal D 128
// rates still rising up to 16k tokens, so it is a little pessimistic there);
// below T 2048 at the T 2048 figures (optimistic there).
// Not modelled: grouped-query heads (charged as the query heads' products),
// different query and key lengths (the runtime has none), and f32 attention
// (the runtime's own kernel, about 3 TFLOP/s on an H100, not cuDNN: the points
// are for bf16/f16).
//
// Note [Per-op memory efficiency]
// A memory-bound op moving `bytes` (its op entry's count, kernels/virtual_cost.h:
// each operand read and written once) and doing `flops` takes
//     MemoryBoundSeconds = max(bytes / (hbm_bytes_per_s * eff(op)), flops / peak_flops_fp32)
// eff(op) is the profile's memory.<kind>_efficiency for these op kinds (by the
// op entry's name, OpKindOf) and memory_efficiency - the copy-class figure - for
// every other op, and for a kind whose key the profile leaves unset:
//     cross_entropy_forward   CrossEntropyForward
//     cross_entropy_backward  CrossEntropyBackward
//     layernorm_forward       LayerNormForward
//     layernorm_backward      LayerNormBackward
//     gelu_forward            Gelu
//     gelu_backward           GeluBackward
//     softmax_forward         Softmax, LogSoftmax
//     softmax_backward        SoftmaxBackward, LogSoftmaxBackward
// The runtime's row kernels run below the copy rate: their exp, tanh and
// divisions are this project's correctly rounded software functions (the CPU
// twin's bits), so they are partly compute-bound. eff(op) multiplies the bytes
// the op entry charges, so it is a measured time's rate over those bytes, not
// over the kernel's true traffic (LayerNorm's backward also writes and reads
// back per-block partial sums the entry does not count). The H100 figures
// (sim/profiles/h100_dgx.json's sources, docs/simulator.md) are the kernels'
// cuda_bench rows at GPT-2's shapes where the record has one, and the GPT-2
// step's per-op breakdown where it has not.
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

// The ops a profile may cost apart from the GEMM curve and memory_efficiency,
// by the op entry's name (OpCost::op: the kernels' own literals).
enum class OpKind {
  kOther,
  kAttentionForward,  // AttentionForward (Note [Attention efficiency])
  kAttentionBackward,  // AttentionBackward
  kCrossEntropyForward,  // the rest: Note [Per-op memory efficiency]
  kCrossEntropyBackward,
  kLayerNormForward,
  kLayerNormBackward,
  kGeluForward,
  kGeluBackward,
  kSoftmaxForward,
  kSoftmaxBackward,
};
// "CrossEntropyForward" -> kCrossEntropyForward, "Gelu" -> kGeluForward,
// "LogSoftmax" -> kSoftmaxForward, ...; kOther for every other name.
OpKind OpKindOf(std::string_view op_name);

// The fraction of hbm_bytes_per_s a memory-bound op of `kind` streams at: its
// memory.<kind>_efficiency when the profile sets it, else memory_efficiency
// (Note [Per-op memory efficiency]). kOther and the attention kinds: memory_efficiency.
double MemoryEfficiency(const HardwareProfile& p, OpKind kind);

// A memory-bound op that moves `bytes` (reads + writes) and does `flops` (on the
// CUDA cores, fp32): max(bytes / (hbm_bytes_per_s * MemoryEfficiency(kind)),
// flops / peak_flops_fp32). kOther: the copy-class memory_efficiency.
double MemoryBoundSeconds(const HardwareProfile& p, double bytes, double flops, OpKind kind = OpKind::kOther);

// eff_attn(D, T, pass) of Note [Attention efficiency]: the profile's points
// interpolated linearly in log2(seq_len) within a head_dim and linearly in
// head_dim across them (flat beyond the ends), or gemm_efficiency_max when the
// profile has none. head_dim >= 1, seq_len >= 1 (T, the key length).
double AttentionEfficiency(const HardwareProfile& p, int64_t head_dim, int64_t seq_len, bool backward);

// A fused attention pass of `flops` (its products, as ChargeAttention counts
// them) at `head_dim` and sequence length `seq_len` in `dtype` with its own
// traffic `bytes`: max(gemm_latency_s + flops / (peak(dtype) *
// AttentionEfficiency), bytes / (hbm_bytes_per_s * memory_efficiency)); 0 for
// flops == 0.
double AttentionSeconds(const HardwareProfile& p, double flops, int64_t head_dim, int64_t seq_len, bool backward,
                        DType dtype, double bytes);

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
