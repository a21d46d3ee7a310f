// HardwareProfile: the figures of one GPU (or CPU) node type that the simulator's
// cost model (sim/cost_model.h) turns into seconds and bytes, read from a JSON
// data file in sim/profiles/.
//
//   ZS_ASSIGN_OR_RETURN(HardwareProfile p, LoadProfile("h100_dgx"));  // sim/profiles/h100_dgx.json
//   ZS_ASSIGN_OR_RETURN(HardwareProfile q, LoadProfile("my_cluster.json"));  // any file
//   p.peak_flops_bf16;             // 9.89e14
//   p.sources.at("memory.hbm_bytes_per_s");  // where that figure comes from
//   ProfileNames();                // {"a100_80g", "cpu", "h100_dgx", "h200"}
//
// A profile file (docs/simulator.md, "Hardware profiles and the cost model",
// lists every key, its unit and meaning):
//
//   {
//     "name": "h100_dgx",
//     "description": "what it is and where its figures come from",
//     "compute":   {"peak_flops_bf16": 9.89e14, ..., "gemm_efficiency_max": 0.76, ...,
//                   "attention_efficiency": [{"head_dim": 64, "forward": 0.21, "backward": 0.21},
//                                            {"head_dim": 128, "seq_len": 2048, "forward": 0.445, ...}, ...]},
//     "memory":    {"hbm_bytes_per_s": 3.35e12, "memory_efficiency": 0.88, "memory_bytes": ...,
//                   "cross_entropy_forward_efficiency": 0.26, ...},
//     "allocator": {"caching": true, "round_bytes": 512, ...},
//     "network":   {"gpus_per_node": 8, "intra_node_bytes_per_s": 4.5e11, ...},
//     "host":      {"host_link_bytes_per_s": 5.0e10, "host_adam_bytes_per_s": 3.0e10, "nvme_read_bytes_per_s": ...},
//     "sources":   {"compute.peak_flops_bf16": "NVIDIA H100 datasheet, SXM, dense", ...}
//   }
//
// Every key of the five groups is required (no silent defaults: a profile says
// each figure once) except the per-op efficiencies, whose absence is the old
// model: compute.attention_efficiency (attention's products at the GEMM curve)
// and memory.<op>_efficiency (the op streams at memory.memory_efficiency); see
// Note [Attention efficiency] and Note [Per-op memory efficiency] in
// cost_model.h. Unknown keys are errors (a typo would otherwise be ignored).
// "sources" is optional for a user's file; each shipped file has a note for every
// figure it holds (tests/sim/cost_model_test.cc checks it). Errors name the file, the key
// and what was expected and found:
//   "profile /tmp/x.json: key 'compute.peak_flops_bf16': expected a number > 0, found "fast" (a string)"
//
// Where LoadProfile finds the shipped files: see Note [Finding sim/profiles] in
// profile.cc (ZEROSHARD_SIM_PROFILES, the Bazel runfiles of the binary or test,
// then sim/profiles under the workspace or the current directory).
#ifndef ZEROSHARD_SIM_PROFILE_H_
#define ZEROSHARD_SIM_PROFILE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace zeroshard::sim {

// One point of a fused attention kernel's efficiency curve (Note [Attention
// efficiency] in cost_model.h): at `head_dim` (and, when it has one, at the
// sequence length `seq_len`), its forward and its backward products reach
// these fractions of the dtype's dense peak. A point without seq_len holds at
// every sequence length and is its head_dim's only point.
struct AttentionPoint {
  int64_t head_dim = 0;            // >= 1
  std::optional<int64_t> seq_len;  // >= 1 when set: T, the query and key length
  double forward = 0;              // (0, 1]
  double backward = 0;             // (0, 1]
  bool operator==(const AttentionPoint&) const = default;
};

// Units: seconds, bytes, bytes per second, FLOP per second. "Bytes per second"
// is 10^9 per GB/s (link and memory figures are quoted in decimal units).
struct HardwareProfile {
  std::string name;         // "h100_dgx"
  std::string description;  // what it is and where its figures come from

  // --- compute ("compute" group) ---
  // Dense peaks by the dtype class of a GEMM's inputs (tensor cores for bf16,
  // fp16 and tf32; fp32 is the CUDA-core figure, what an f32 GEMM gets while the
  // runtime leaves TF32 off, as it does: kernels/cuda/gemm_cublaslt.h).
  double peak_flops_bf16 = 0;
  double peak_flops_fp16 = 0;
  double peak_flops_tf32 = 0;
  double peak_flops_fp32 = 0;
  // GEMM efficiency curve (Note [GEMM efficiency curve] in cost_model.h): a GEMM
  // of F FLOPs reaches the fraction
  //     eff(F) = gemm_efficiency_max * F / (F + F_half),
  //     F_half = gemm_latency_s * peak * gemm_efficiency_max
  // of the dtype's peak, i.e. it takes gemm_latency_s + F / (peak * gemm_efficiency_max).
  double gemm_efficiency_max = 0;  // (0, 1]: the large-GEMM plateau over peak
  double gemm_latency_s = 0;       // >= 0: fixed device time of one GEMM
  double launch_overhead_s = 0;    // >= 0: host cost of one kernel launch
  // Optional, compute.attention_efficiency: fused attention's efficiency by head
  // dimension and sequence length, points in increasing head_dim and, within
  // one head_dim, increasing seq_len (Note [Attention efficiency] in
  // cost_model.h). Empty (the key absent): attention's products are charged at
  // the GEMM curve, as GEMMs of their shapes.
  std::vector<AttentionPoint> attention_efficiency;
  // The device is the host (a CPU): every op runs on the issuing thread, which
  // waits for it, and collectives are waited for on the host (the CPU schedule).
  bool synchronous = false;

  // --- memory ("memory" group) ---
  double hbm_bytes_per_s = 0;    // device memory bandwidth (datasheet)
  double memory_efficiency = 0;  // (0, 1]: fraction of it a streaming kernel reaches
  int64_t memory_bytes = 0;      // device memory capacity (what the driver reports)
  // Optional, memory.<op>_efficiency: the fraction of hbm_bytes_per_s at which
  // these ops' charged bytes stream (Note [Per-op memory efficiency] in
  // cost_model.h); unset (the key absent), the op streams at memory_efficiency.
  std::optional<double> cross_entropy_forward_efficiency;  // (0, 1]
  std::optional<double> cross_entropy_backward_efficiency;
  std::optional<double> layernorm_forward_efficiency;
  std::optional<double> layernorm_backward_efficiency;
  std::optional<double> gelu_forward_efficiency;
  std::optional<double> gelu_backward_efficiency;
  std::optional<double> softmax_forward_efficiency;   // softmax and log-softmax
  std::optional<double> softmax_backward_efficiency;

  // --- allocator ("allocator" group): how a request becomes reserved bytes ---
  // This runtime's CachingAllocator (runtime/cuda/caching_allocator.h, Note
  // [Caching allocator]) takes PyTorch's CUDACachingAllocator defaults: every
  // request is rounded up to a multiple of 512 B; requests up to 1 MiB come
  // from the small pool, carved from 2 MiB segments; larger ones from the large
  // pool: 20 MiB segments below 10 MiB, else a segment of the request rounded
  // up to 2 MiB. A large-pool block is split only when more than 1 MiB would
  // remain. The CPU allocator (runtime/allocator.h) counts the bytes requested
  // and caches nothing: caching false, round_bytes 1, the pool sizes unused (0).
  bool alloc_caching = false;             // freed blocks stay reserved for reuse
  int64_t alloc_round_bytes = 1;          // >= 1: a request is rounded up to a multiple
  int64_t alloc_small_request_bytes = 0;  // requests <= this use the small pool
  int64_t alloc_small_segment_bytes = 0;  // segment size of the small pool
  int64_t alloc_large_segment_bytes = 0;  // segment for large requests below alloc_min_large_bytes
  int64_t alloc_min_large_bytes = 0;      // from here a request gets its own segment (= large_segment_bytes / 2, checked) ...
  int64_t alloc_large_round_bytes = 0;    // ... rounded up to a multiple of this

  // --- network ("network" group); Note [Collective model] in cost_model.h ---
  int gpus_per_node = 8;
  double intra_node_bytes_per_s = 0;  // per GPU, per direction (NVLink 450 GB/s on H100 SXM)
  double intra_node_alpha_s = 0;      // latency of one intra-node ring step
  double inter_node_bytes_per_s = 0;  // per node, per direction (8 x 400 Gb/s = 400 GB/s on DGX H100)
  double inter_node_alpha_s = 0;      // latency of one inter-node step
  double collective_base_s = 0;       // fixed cost of one collective call (NCCL's base latency)
  double collective_efficiency = 0;   // (0, 1]: NCCL busbw / intra-node link bandwidth
  double inter_node_efficiency = 0;   // (0, 1]: NCCL busbw / NIC bandwidth across nodes

  // --- host ("host" group) ---
  double host_link_bytes_per_s = 0;  // PCIe H2D/D2H per GPU (offload copies)
  double host_adam_bytes_per_s = 0;  // CPU-offloaded optimizer: state bytes touched per second, per GPU
  // NVMe offload (Note [Virtual NVMe] in runtime/nvme/virtual_swap_store.h):
  // one GPU's share of the node's local drives, sequential swap-region
  // transfers (1 MiB requests, O_DIRECT), and the fixed cost of one transfer.
  double nvme_read_bytes_per_s = 0;
  double nvme_write_bytes_per_s = 0;
  double nvme_latency_s = 0;

  // "group.key" of a figure (e.g. "memory.hbm_bytes_per_s") -> where that figure
  // comes from. Empty when the file has no "sources".
  std::map<std::string, std::string> sources;

  // One line per figure with its unit, for printing at start-up.
  std::string ToString() const;
};

// Parses the JSON text of a profile. `source_name` names it in errors (a path,
// or "<string>"). InvalidArgument naming the key on any missing, mistyped,
// out-of-range or unknown key.
absl::StatusOr<HardwareProfile> ParseProfile(std::string_view json_text, std::string_view source_name);

// `name_or_path`: a path to a JSON file (it ends in ".json" or contains '/'), or
// a shipped profile's name, read from <ProfileDirectory()>/<name>.json. NotFound
// names the file (or, for an unknown name, the shipped names and the directory).
absl::StatusOr<HardwareProfile> LoadProfile(std::string_view name_or_path);
// The profile as a file LoadProfile reads back to the same figures (doubles
// written exactly): e.g. the CPU profiles sim_validate calibrates.
std::string ProfileToJson(const HardwareProfile& p);

// The "group.key" of every figure a profile file may hold, in file order
// ("compute.peak_flops_bf16", ..., "host.nvme_latency_s"), the optional ones
// included.
std::vector<std::string> ProfileFigureKeys();
// The figures `p` holds: every required one and the optional ones it sets.
std::vector<std::string> ProfileFigureKeys(const HardwareProfile& p);

// Unsets every optional figure (the per-op efficiencies): the profile then
// costs attention at its GEMM curve and every memory-bound op at
// memory_efficiency, as a file without those keys does.
void ClearOpEfficiencies(HardwareProfile& p);

// The names of the shipped profiles (sim/profiles/<name>.json), sorted.
std::vector<std::string> ProfileNames();

// The directory holding the shipped profiles (Note [Finding sim/profiles] in
// profile.cc); NotFound listing every place tried.
absl::StatusOr<std::string> ProfileDirectory();

}  // namespace zeroshard::sim

#endif  // ZEROSHARD_SIM_PROFILE_H_
