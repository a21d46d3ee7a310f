// collectives_bench: bandwidth of one collective over a sweep of sizes, in the
// style of nccl-tests, with its baseline measured in the same run.
//
//   bazel build -c opt //bench:collectives_bench
//   bazel-bin/bench/collectives_bench --backend=local --world_size=2 --op=all_gather -b 4K -e 64M -f 2
//   mpirun -np 2 bazel-bin/bench/collectives_bench --backend=mpi --op=reduce_scatter
//   mpirun -np 2 bazel-bin/bench/collectives_bench --backend=nccl --op=all_reduce --dtype=bf16
//
// Each row: size = bytes per rank (all_gather: each rank's input; reduce_scatter:
// each rank's output; all_reduce, broadcast: the tensor), count = elements
// of that, time per collective, algbw = bytes of the whole buffer (size x n
// for all_gather / reduce_scatter, size otherwise) / time, busbw = algbw x
// (n-1)/n for all_gather and reduce_scatter, x 2(n-1)/n for all_reduce, x 1
// for broadcast (nccl-tests' definitions), and #wrong: elements that differ
// from the closed-form answer in a checked run before the timed ones (on by
// default, --check=false turns it off). Times are the best of --repeats
// rounds of --iters collectives (the slowest rank's time in each round).
//
// Baseline, same buffers and sizes:
//   local: memcpy of `size` bytes on one thread (others idle) - its GB/s is
//          what one core can move, which busbw is compared with; and, in a
//          last column, the same memcpy by every rank at once (GB/s per rank:
//          what each core moves while all share the memory bandwidth);
//   mpi:   the raw MPI call (MPI_Allgather, MPI_Reduce_scatter_block,
//          MPI_Allreduce, MPI_Bcast) on a duplicate of MPI_COMM_WORLD,
//          reported with the same busbw formula;
//   nccl:  none (the NCCL calls are the backend itself).
// `ratio` = busbw / baseline busbw.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/tensor.h"

ABSL_FLAG(std::string, backend, "local", "a registered backend: local | mpi | nccl (mpi and nccl under mpirun)");
ABSL_FLAG(int, world_size, 2, "ranks of the in-process backend");
ABSL_FLAG(std::string, op, "all_gather", "all_gather | reduce_scatter | all_reduce | broadcast");
ABSL_FLAG(std::string, dtype, "f32", "f32 | bf16 | f16 | i32 | i64");
ABSL_FLAG(std::string, redop, "sum", "sum | avg | max (reduce_scatter, all_reduce)");
ABSL_FLAG(std::string, b, "4K", "smallest size, bytes per rank (K, M, G suffixes)");
ABSL_FLAG(std::string, e, "64M", "largest size, bytes per rank");
ABSL_FLAG(int, f, 2, "size multiplication factor");
ABSL_FLAG(int, iters, 20, "timed iterations per size");
ABSL_FLAG(int, warmup, 5, "untimed iterations per size");
ABSL_FLAG(int, repeats, 3, "timed rounds per size; the best is reported (for ours and the baseline)");
ABSL_FLAG(bool, check, true, "check the data (closed-form answer) before timing");
ABSL_FLAG(bool, inplace, false, "in place (all_gather: input is the output's slice, ...)");
ABSL_FLAG(bool, baseline, true, "measure the baseline (memcpy / raw MPI) too");
ABSL_FLAG(int, root, 0, "broadcast root");
ABSL_FLAG(int, threads_per_rank, 1, "local: OpenMP threads per rank");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20, "mpi: pipeline chunk of the reductions");

namespace zeroshard {
namespace {

enum class Op { kAllGather, kReduceScatter, kAllReduce, kBroadcast };

absl::StatusOr<Op> ParseOp(absl::string_view s) {
  if (s == "all_gather") return Op::kAllGather;
  if (s == "reduce_scatter") return Op::kReduceScatter;
  if (s == "all_reduce") return Op::kAllReduce;
  if (s == "broadcast") return Op::kBroadcast;
  return absl::InvalidArgumentError(absl::StrCat(
      "--op=", s, ": expected all_gather, reduce_scatter, all_reduce or broadcast"));
}

absl::StatusOr<int64_t> ParseBytes(absl::string_view s) {
  int64_t scale = 1;
  std::string t = absl::AsciiStrToUpper(s);
  if (!t.empty() && (t.back() == 'K' || t.back() == 'M' || t.back() == 'G')) {
    scale = t.back() == 'K' ? 1 << 10 : t.back() == 'M' ? 1 << 20 : int64_t{1} << 30;
    t.pop_back();
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(t, &v) || v <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad size \"", s, "\" (e.g. 4096, 4K, 64M)"));
  }
  return v * scale;
}

struct Config {
  std::string backend;
  Op op;
  std::string op_name;
  DType dtype;
  ReduceOp redop;
  int64_t min_bytes, max_bytes;
  int factor, iters, warmup, repeats, root;
  bool check, inplace, baseline;
};

// Seconds per baseline call on the same buffers, NaN when there is none.
using Baseline = std::function<absl::StatusOr<double>(const Tensor& in, const Tensor& out,
                                                      int64_t count, int iters, int warmup)>;

// The buffers of one size: `in` and `out` as the collective takes them.
struct Buffers {
  Tensor in, out;
};

absl::StatusOr<Buffers> MakeBuffers(const Config& c, int n, int rank, int64_t count,
                                    Allocator* alloc) {
  Buffers b;
  // The larger buffer; the smaller one is a view of it when in place.
  const bool gather = c.op == Op::kAllGather;
  const bool scatter = c.op == Op::kReduceScatter;
  ZS_ASSIGN_OR_RETURN(Tensor big, Tensor::Empty({(gather || scatter) ? n * count : count},
                                                c.dtype, alloc));
  Tensor small;
  if (c.inplace || c.op == Op::kBroadcast) {
    ZS_ASSIGN_OR_RETURN(small, (gather || scatter) ? big.Narrow(0, rank * count, count)
                                                   : absl::StatusOr<Tensor>(big));
  } else {
    ZS_ASSIGN_OR_RETURN(small, Tensor::Empty({count}, c.dtype, alloc));
  }
  b.in = gather ? small : big;
  b.out = gather ? big : small;
  return b;
}

absl::Status RunOnce(Communicator& comm, const Config& c, const Buffers& b) {
  switch (c.op) {
    case Op::kAllGather: return comm.AllGather(b.in, b.out);
    case Op::kReduceScatter: return comm.ReduceScatter(b.in, b.out, c.redop);
    case Op::kAllReduce: return comm.AllReduce(b.in, b.out, c.redop);
    case Op::kBroadcast: return comm.Broadcast(b.in, c.root);
  }
  return absl::InternalError("unknown op");
}

// Rank r's element i: small integers, exact in every dtype and in the sums.
double Value(int rank, int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 15 - 4); }

double Reduced(const Config& c, int n, const std::function<double(int)>& v) {
  if (IsFloatingPoint(c.dtype)) {
    float acc = static_cast<float>(v(0));
    for (int r = 1; r < n; ++r) {
      acc = c.redop == ReduceOp::kMax ? std::max(acc, static_cast<float>(v(r)))
                                      : acc + static_cast<float>(v(r));
    }
    if (c.redop == ReduceOp::kAvg) acc /= static_cast<float>(n);
    return DispatchDType(c.dtype, [&]<typename T>() {
      return static_cast<double>(ConvertElement<float>(ConvertElement<T>(acc)));
    });
  }
  int64_t acc = static_cast<int64_t>(v(0));
  for (int r = 1; r < n; ++r) {
    acc = c.redop == ReduceOp::kMax ? std::max(acc, static_cast<int64_t>(v(r)))
                                    : acc + static_cast<int64_t>(v(r));
  }
  if (c.redop == ReduceOp::kAvg) acc /= n;
  return static_cast<double>(acc);
}

absl::Status Fill(const Tensor& t, const std::function<double(int64_t)>& f) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<float>(f(i));
  return t.CopyFrom(Tensor::Wrap(v.data(), {t.numel()}, DType::kF32));
}

// Runs the collective once on rank-valued data; returns the wrong elements.
absl::StatusOr<int64_t> Check(Communicator& comm, const Config& c, const Buffers& b,
                              int64_t count) {
  const int n = comm.size(), r = comm.rank();
  std::function<double(int64_t)> want;
  switch (c.op) {
    case Op::kAllGather:
      ZS_RETURN_IF_ERROR(Fill(b.in, [&](int64_t i) { return Value(r, i); }));
      want = [&](int64_t j) { return Value(static_cast<int>(j / count), j % count); };
      break;
    case Op::kReduceScatter:
      ZS_RETURN_IF_ERROR(Fill(b.in, [&](int64_t j) { return Value(r, j); }));
      want = [&](int64_t i) {
        return Reduced(c, n, [&](int s) { return Value(s, r * count + i); });
      };
      break;
    case Op::kAllReduce:
      ZS_RETURN_IF_ERROR(Fill(b.in, [&](int64_t i) { return Value(r, i); }));
      want = [&](int64_t i) { return Reduced(c, n, [&](int s) { return Value(s, i); }); };
      break;
    case Op::kBroadcast:
      ZS_RETURN_IF_ERROR(Fill(b.in, [&](int64_t i) { return r == c.root ? Value(r, i) : -99.0; }));
      want = [&](int64_t i) { return Value(c.root, i); };
      break;
  }
  ZS_RETURN_IF_ERROR(RunOnce(comm, c, b));
  ZS_ASSIGN_OR_RETURN(std::vector<double> got, b.out.ToVector<double>());
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want(static_cast<int64_t>(i));
  return wrong;
}

// The largest value over the ranks (times: the slowest rank sets the pace).
absl::StatusOr<int64_t> MaxOverRanks(Communicator& comm, int64_t v, Allocator* alloc) {
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({1}, static_cast<double>(v), DType::kI64, alloc));
  ZS_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kMax));
  ZS_ASSIGN_OR_RETURN(std::vector<int64_t> out, t.ToVector<int64_t>());
  return out[0];
}

double BusFactor(Op op, int n) {
  switch (op) {
    case Op::kAllGather:
    case Op::kReduceScatter: return static_cast<double>(n - 1) / n;
    case Op::kAllReduce: return 2.0 * (n - 1) / n;
    case Op::kBroadcast: return 1.0;
  }
  return 1.0;
}

absl::Status RunSweep(Communicator& comm, const Config& c, const Baseline& baseline,
                      const Baseline& all_ranks_memcpy, Allocator* alloc) {
  const int n = comm.size(), r = comm.rank();
  const int64_t esize = static_cast<int64_t>(DTypeSize(c.dtype));
  if (r == 0) {
    std::printf("# zeroshard collectives_bench: backend=%s world_size=%d op=%s dtype=%s redop=%s "
                "inplace=%d iters=%d warmup=%d repeats=%d check=%d\n",
                c.backend.c_str(), n, c.op_name.c_str(), std::string(DTypeName(c.dtype)).c_str(),
                std::string(ReduceOpName(c.redop)).c_str(), c.inplace, c.iters, c.warmup, c.repeats,
                c.check);
    std::printf("# options: %s\n", comm.options().ToString().c_str());
    std::printf("# baseline: %s\n",
                c.backend == "local" ? "memcpy of size bytes, one thread (busbw column = its GB/s)"
                : c.backend == "mpi" ? "the raw MPI call on the same buffers"
                                     : "none");
    if (all_ranks_memcpy) {
      std::printf("# all-ranks memcpy: every rank copies size bytes at once (GB/s per rank)\n");
    }
    std::printf("#%11s %11s %11s %11s %11s %8s %14s %11s %7s%s\n", "size(B)", "count", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong", "base time(us)", "base busbw", "ratio",
                all_ranks_memcpy ? "  all-ranks memcpy" : "");
    std::fflush(stdout);
  }
  for (int64_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= c.factor) {
    const int64_t count = std::max<int64_t>(1, bytes / esize);
    ZS_ASSIGN_OR_RETURN(Buffers b, MakeBuffers(c, n, r, count, alloc));
    int64_t wrong = 0;
    if (c.check) {
      ZS_ASSIGN_OR_RETURN(int64_t mine, Check(comm, c, b, count));
      ZS_ASSIGN_OR_RETURN(wrong, MaxOverRanks(comm, mine, alloc));
    }
    for (int i = 0; i < c.warmup; ++i) ZS_RETURN_IF_ERROR(RunOnce(comm, c, b));
    // Best of `repeats` timed rounds, the baseline's rounds interleaved with
    // ours, so that both see the same machine (it is shared, and noisy).
    double seconds = std::numeric_limits<double>::infinity();
    double base_seconds = std::nan("");
    double par_seconds = std::nan("");
    for (int rep = 0; rep < c.repeats; ++rep) {
      ZS_RETURN_IF_ERROR(comm.Barrier());
      const absl::Time start = absl::Now();
      for (int i = 0; i < c.iters; ++i) ZS_RETURN_IF_ERROR(RunOnce(comm, c, b));
      ZS_RETURN_IF_ERROR(comm.Barrier());
      const int64_t mine_ns = absl::ToInt64Nanoseconds(absl::Now() - start);
      ZS_ASSIGN_OR_RETURN(const int64_t ns, MaxOverRanks(comm, mine_ns, alloc));
      seconds = std::min(seconds, static_cast<double>(ns) * 1e-9 / c.iters);
      if (c.baseline && baseline) {
        ZS_ASSIGN_OR_RETURN(const double t,
                            baseline(b.in, b.out, count, c.iters, rep == 0 ? c.warmup : 0));
        if (std::isnan(base_seconds) || t < base_seconds) base_seconds = t;
      }
      if (c.baseline && all_ranks_memcpy) {
        ZS_ASSIGN_OR_RETURN(const double t, all_ranks_memcpy(b.in, b.out, count, c.iters,
                                                             rep == 0 ? c.warmup : 0));
        if (std::isnan(par_seconds) || t < par_seconds) par_seconds = t;
      }
    }
    if (r == 0) {
      const double size = static_cast<double>(count * esize);
      const double total = (c.op == Op::kAllGather || c.op == Op::kReduceScatter) ? size * n : size;
      const double algbw = total / seconds * 1e-9;
      const double busbw = algbw * BusFactor(c.op, n);
      std::string base = absl::StrFormat("%14s %11s %7s", "n/a", "n/a", "");
      if (!std::isnan(base_seconds)) {
        const double base_busbw = c.backend == "local"
                                      ? size / base_seconds * 1e-9
                                      : total / base_seconds * 1e-9 * BusFactor(c.op, n);
        base = absl::StrFormat("%14.2f %11.2f %7.2f", base_seconds * 1e6, base_busbw,
                               busbw / base_busbw);
      }
      std::string par;
      if (!std::isnan(par_seconds)) par = absl::StrFormat(" %18.2f", size / par_seconds * 1e-9);
      std::printf("%12lld %11lld %11.2f %11.2f %11.2f %8lld %s%s\n",
                  static_cast<long long>(count * esize), static_cast<long long>(count),
                  seconds * 1e6, algbw, busbw, static_cast<long long>(wrong), base.c_str(),
                  par.c_str());
      std::fflush(stdout);
    }
    if (bytes > c.max_bytes / c.factor) break;  // no overflow past the end
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- baselines

// memcpy of `size` bytes (the in-process collectives' unit) between the
// collective's own buffers: by rank 0 alone while the others wait (what one
// core moves: the goal's unit), or by every rank at once (what the cores move
// together when they share the memory bandwidth: the ceiling of a collective
// in which every rank copies). The slowest rank's time.
Baseline MemcpyBaseline(Communicator& comm, bool all_ranks) {
  return [&comm, all_ranks](const Tensor& in, const Tensor& out, int64_t count, int iters,
                            int warmup) -> absl::StatusOr<double> {
    const size_t bytes = static_cast<size_t>(count) * in.itemsize();
    // Source and destination: two distinct buffers (a scratch one when the
    // collective's overlap).
    const bool same =
        in.raw_data() == out.raw_data() || static_cast<size_t>(out.nbytes()) < 2 * bytes;
    char* dst = static_cast<char*>(out.raw_data());
    const char* src = static_cast<const char*>(in.raw_data());
    std::vector<char> scratch;
    const bool copies = all_ranks || comm.rank() == 0;
    if (copies && same) {
      scratch.resize(bytes);
      dst = scratch.data();
    }
    if (copies) {
      for (int i = 0; i < warmup; ++i) std::memcpy(dst, src, bytes);
    }
    ZS_RETURN_IF_ERROR(comm.Barrier());
    int64_t ns = 0;
    if (copies) {
      const absl::Time start = absl::Now();
      for (int i = 0; i < iters; ++i) std::memcpy(dst, src, bytes);
      ns = absl::ToInt64Nanoseconds(absl::Now() - start);
    }
    ZS_ASSIGN_OR_RETURN(ns, MaxOverRanks(comm, ns, nullptr));
    return static_cast<double>(ns) * 1e-9 / iters;
  };
}

MPI_Datatype MpiType(DType d) {
  switch (d) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kI8: return MPI_INT8_T;
    default: return MPI_DATATYPE_NULL;  // MPI has no bf16 / f16
  }
}

Baseline MpiBaseline(const Config& c, MPI_Comm world) {
  return [c, world](const Tensor& in, const Tensor& out, int64_t count, int iters,
                    int warmup) -> absl::StatusOr<double> {
    MPI_Datatype type = MpiType(c.dtype);
    const bool reduces = c.op == Op::kReduceScatter || c.op == Op::kAllReduce;
    if (type == MPI_DATATYPE_NULL) {
      if (reduces) return std::nan("");
      type = DTypeSize(c.dtype) == 2 ? MPI_UINT16_T : MPI_BYTE;
    }
    if (reduces && c.redop == ReduceOp::kAvg) return std::nan("");  // no MPI_AVG
    const MPI_Op op = c.redop == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
    const int n = static_cast<int>(count);
    int rank = 0;
    MPI_Comm_rank(world, &rank);
    auto call = [&] {
      switch (c.op) {
        case Op::kAllGather:
          return MPI_Allgather(c.inplace ? MPI_IN_PLACE : in.raw_data(), n, type, out.raw_data(),
                               n, type, world);
        case Op::kReduceScatter:
          return MPI_Reduce_scatter_block(in.raw_data(), c.inplace ? in.raw_data() : out.raw_data(),
                                          n, type, op, world);
        case Op::kAllReduce:
          return MPI_Allreduce(c.inplace ? MPI_IN_PLACE : in.raw_data(), out.raw_data(), n, type,
                               op, world);
        case Op::kBroadcast: return MPI_Bcast(in.raw_data(), n, type, c.root, world);
      }
      return MPI_ERR_OTHER;
    };
    if (c.op == Op::kReduceScatter && c.inplace) {
      // MPI_IN_PLACE for reduce_scatter_block means "input is the receive
      // buffer", and the result lands at its start, not at block `rank`.
      auto in_place_call = [&] {
        return MPI_Reduce_scatter_block(MPI_IN_PLACE, in.raw_data(), n, type, op, world);
      };
      for (int i = 0; i < warmup; ++i) in_place_call();
      MPI_Barrier(world);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) in_place_call();
      MPI_Barrier(world);
      double dt = MPI_Wtime() - t0;
      MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, world);
      return dt / iters;
    }
    for (int i = 0; i < warmup; ++i) {
      if (int e = call(); e != MPI_SUCCESS) return absl::InternalError("baseline MPI call failed");
    }
    MPI_Barrier(world);
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) call();
    MPI_Barrier(world);
    double dt = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, world);
    return dt / iters;
  };
}

// ---------------------------------------------------------------- main

absl::StatusOr<Config> ReadFlags() {
  Config c;
  c.backend = absl::GetFlag(FLAGS_backend);
  if (absl::Status s = BackendRegistry::Global().Find(c.backend).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--backend=", c.backend, ": ", s.message()));
  }
  c.op_name = absl::GetFlag(FLAGS_op);
  ZS_ASSIGN_OR_RETURN(c.op, ParseOp(c.op_name));
  ZS_ASSIGN_OR_RETURN(c.dtype, ParseDType(absl::GetFlag(FLAGS_dtype)));
  ZS_ASSIGN_OR_RETURN(c.redop, ParseReduceOp(absl::GetFlag(FLAGS_redop)));
  ZS_ASSIGN_OR_RETURN(c.min_bytes, ParseBytes(absl::GetFlag(FLAGS_b)));
  ZS_ASSIGN_OR_RETURN(c.max_bytes, ParseBytes(absl::GetFlag(FLAGS_e)));
  c.factor = absl::GetFlag(FLAGS_f);
  c.iters = absl::GetFlag(FLAGS_iters);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.repeats = absl::GetFlag(FLAGS_repeats);
  c.root = absl::GetFlag(FLAGS_root);
  c.check = absl::GetFlag(FLAGS_check);
  c.inplace = absl::GetFlag(FLAGS_inplace);
  c.baseline = absl::GetFlag(FLAGS_baseline);
  if (c.factor < 2 || c.iters < 1 || c.warmup < 0 || c.repeats < 1 || c.min_bytes > c.max_bytes) {
    return absl::InvalidArgumentError(
        "need -f >= 2, --iters >= 1, --warmup >= 0, --repeats >= 1, -b <= -e");
  }
  return c;
}

// The backend by name (collectives/backend_registry.h); the baseline is the
// one of its kind: memcpy for in-process ranks, the raw MPI call for mpi, none
// for nccl or a backend from outside.
absl::Status RunBackend(const Config& c, int* argc, char*** argv) {
  BackendLaunch launch{.world_size = absl::GetFlag(FLAGS_world_size), .argc = argc, .argv = argv};
  launch.settings["threads_per_rank"] = absl::StrCat(absl::GetFlag(FLAGS_threads_per_rank));
  launch.settings["chunk_bytes"] = absl::StrCat(absl::GetFlag(FLAGS_chunk_bytes));
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<BackendProcess> process, BackendRegistry::Global().Start(c.backend, launch));
  std::vector<absl::Status> statuses = process->Run([&](Communicator& comm, Communicator*) -> absl::Status {
    if (comm.backend() == "local") {
      return RunSweep(comm, c, MemcpyBaseline(comm, /*all_ranks=*/false),
                      MemcpyBaseline(comm, /*all_ranks=*/true), nullptr);
    }
    if (comm.backend() == "mpi") {
      MPI_Comm raw;
      MPI_Comm_dup(MPI_COMM_WORLD, &raw);
      absl::Status s = RunSweep(comm, c, MpiBaseline(c, raw), Baseline(), nullptr);
      MPI_Comm_free(&raw);
      return s;
    }
    if (comm.device().is_cuda()) {
      CudaAllocator gpu(comm.device().index);
      return RunSweep(comm, c, Baseline(), Baseline(), &gpu);
    }
    return RunSweep(comm, c, Baseline(), Baseline(), nullptr);
  });
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) return statuses[r];
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<zeroshard::Config> config = zeroshard::ReadFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "collectives_bench: %s\n", config.status().ToString().c_str());
    return 2;
  }
  absl::Status s = zeroshard::RunBackend(*config, &argc, &argv);
  if (!s.ok()) {
    std::fprintf(stderr, "collectives_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
