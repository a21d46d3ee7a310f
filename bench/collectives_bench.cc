// collectives_bench: bandwidth of collectives over a sweep of sizes, in the
// style of nccl-tests, with its baseline measured in the same run.
//
//   bazel build -c opt //bench:collectives_bench
//   bazel-bin/bench/collectives_bench --backend=local --world_size=2 --op=all_gather -b 4K -e 64M -f 2
//   mpirun -np 2 bazel-bin/bench/collectives_bench --backend=mpi --op=reduce_scatter
//   mpirun -np 2 bazel-bin/bench/collectives_bench --backend=nccl --op=all_reduce --dtype=bf16
//   bazel-bin/bench/collectives_bench --op=all_gather,reduce_scatter --json_out=collectives.json
//   bazel-bin/bench/collectives_bench --nccl_tests_format --op=all_reduce --minbytes=8 --maxbytes=128M --stepfactor=2
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
// --op takes a comma-separated list: one table per op, one after the other.
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
//
// --json_out=<file>: the figures as data too (bench/bench_json.h), written by
// the process of rank 0; the printed table is unchanged. Names, one figure per
// row and round (the rounds are the repeats):
//   collectives/<backend>_w<n>/<op>[_<redop>]_<dtype>[_inplace]/<size>/busbw     GB/s
//   .../<size>/memcpy (local) or .../<size>/raw_mpi (mpi): the baseline, GB/s as its column
//   .../<size>/memcpy_all_ranks (local): the last column
// (redop for reduce_scatter and all_reduce; size in bytes as the row's first column);
// the nccl-tests table's rows: .../<size>/busbw_out_of_place and .../busbw_in_place,
// <size> being that table's (Note [nccl-tests format]).
//
// Note [nccl-tests format]
// --nccl_tests_format prints what an nccl-tests binary (all_reduce_perf, ...)
// prints, so that tools which parse nccl-tests output read it unchanged: the
// "# nThread ..." and "# Using devices" lines, the three header lines, one row
// per size with the out-of-place and in-place time, algbw, busbw and #wrong
// (N/A without --check), then "# Out of bounds values : N OK|FAILED" and
// "# Avg bus bandwidth    : X" (the mean busbw of every column), with
// nccl-tests' field widths (NVIDIA/nccl-tests src/common.cu, v2.13-2.16) and
// its size semantics: the sweep's size is max(send, receive) bytes of a rank
// (all_gather and reduce_scatter: the whole buffer, each rank's part count =
// size / n / element size rounded down to 16 bytes, at least one element),
// count is the elements of the collective's count argument, redop is "none"
// and root -1 where nccl-tests prints so. Its flag names work too:
// --minbytes, --maxbytes, --stepfactor, --iters, --warmup_iters, --check. The
// differences: time is the best of --repeats rounds (1 round: nccl-tests'
// figure), each round's time the mean over ranks of the time per collective
// (nccl-tests' -a 1); the data check runs before the timed rounds; out-of-place
// broadcast is the root's copy from send to receive buffer and the in-place
// broadcast (the Communicator's broadcast is in place); no baseline is measured.
// A wrong element exits 1, as nccl-tests does; so does NCCL_TESTS_MIN_BW when
// the average bus bandwidth is below 0.9 of it.
//
// alltoall (nccl-tests' alltoall_perf): count is the elements each rank sends
// to each peer, size a rank's whole buffer (count x ranks x element bytes),
// busbw = algbw (n-1)/n. The Communicator's AllToAll is never in place (a rank
// would overwrite blocks its peers still read), so "in place" (the result
// replaces the input) stages the input through a scratch buffer first, as an
// in-place all-to-all must, and its time includes that copy: the in-place
// columns say what an in-place caller pays.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "zeroshard/bench/bench_json.h"
#include "zeroshard/collectives/backend_registry.h"
#include "zeroshard/collectives/communicator.h"
#include "zeroshard/collectives/objects.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/runtime/dtype.h"
#include "zeroshard/runtime/status.h"
#include "zeroshard/runtime/tensor.h"

ABSL_FLAG(std::string, backend, "local", "a registered backend: local | mpi | nccl (mpi and nccl under mpirun)");
ABSL_FLAG(int, world_size, 2, "ranks of the in-process backend");
ABSL_FLAG(std::string, op, "all_gather",
          "all_gather | reduce_scatter | all_reduce | broadcast | alltoall, or a comma-separated list of them");
ABSL_FLAG(std::string, dtype, "f32", "f32 | bf16 | f16 | i32 | i64");
ABSL_FLAG(std::string, redop, "sum", "sum | avg | max (reduce_scatter, all_reduce)");
ABSL_FLAG(std::string, b, "4K", "smallest size, bytes per rank (K, M, G suffixes)");
ABSL_FLAG(std::string, e, "64M", "largest size, bytes per rank");
ABSL_FLAG(int, f, 2, "size multiplication factor");
ABSL_FLAG(std::string, minbytes, "", "nccl-tests' name of -b (wins over it when given)");
ABSL_FLAG(std::string, maxbytes, "", "nccl-tests' name of -e (wins over it when given)");
ABSL_FLAG(int, stepfactor, 0, "nccl-tests' name of -f (wins over it when given)");
ABSL_FLAG(int, iters, 20, "timed iterations per size");
ABSL_FLAG(int, warmup, 5, "untimed iterations per size");
ABSL_FLAG(int, warmup_iters, -1, "nccl-tests' name of --warmup (wins over it when given)");
ABSL_FLAG(int, repeats, 3, "timed rounds per size; the best is reported (for ours and the baseline)");
ABSL_FLAG(bool, check, true, "check the data (closed-form answer) before timing");
ABSL_FLAG(bool, inplace, false, "in place (all_gather: input is the output's slice, ...)");
ABSL_FLAG(bool, baseline, true, "measure the baseline (memcpy / raw MPI) too");
ABSL_FLAG(bool, nccl_tests_format, false,
          "print the table as nccl-tests does, out-of-place and in-place columns (Note [nccl-tests format])");
ABSL_FLAG(int, root, 0, "broadcast root");
ABSL_FLAG(int, threads_per_rank, 1, "local: OpenMP threads per rank");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{1} << 20, "mpi: pipeline chunk of the reductions");

namespace zeroshard {
namespace {

enum class Op { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kAllToAll };

absl::StatusOr<Op> ParseOp(absl::string_view s) {
  if (s == "all_gather") return Op::kAllGather;
  if (s == "reduce_scatter") return Op::kReduceScatter;
  if (s == "all_reduce") return Op::kAllReduce;
  if (s == "broadcast") return Op::kBroadcast;
  if (s == "alltoall" || s == "all_to_all") return Op::kAllToAll;
  return absl::InvalidArgumentError(absl::StrCat(
      "--op=", s, ": expected all_gather, reduce_scatter, all_reduce, broadcast or alltoall"));
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
  std::vector<Op> ops;  // --op, in order
  std::vector<std::string> op_names;
  Op op;                // the one RunSweep measures
  std::string op_name;
  DType dtype;
  ReduceOp redop;
  int64_t min_bytes, max_bytes;
  int factor, iters, warmup, repeats, root;
  bool check, inplace, baseline, nccl_format;
};

// Seconds per baseline call on the same buffers, NaN when there is none.
using Baseline = std::function<absl::StatusOr<double>(const Tensor& in, const Tensor& out,
                                                      int64_t count, int iters, int warmup)>;

// The buffers of one size: `in` and `out` as the collective takes them.
struct Buffers {
  Tensor in, out;
  Tensor stage;  // alltoall in place: the input's copy the collective reads
};

// `count`: the elements of the collective's count (all_gather: each rank's
// input; reduce_scatter: each rank's output).
absl::StatusOr<Buffers> MakeBuffers(const Config& c, int n, int rank, int64_t count, bool inplace,
                                    Allocator* alloc) {
  Buffers b;
  if (c.op == Op::kAllToAll) {
    // count elements to each of n peers; in place: one buffer, staged (the header).
    ZS_ASSIGN_OR_RETURN(b.in, Tensor::Empty({n * count}, c.dtype, alloc));
    if (inplace) {
      b.out = b.in;
      ZS_ASSIGN_OR_RETURN(b.stage, Tensor::Empty({n * count}, c.dtype, alloc));
    } else {
      ZS_ASSIGN_OR_RETURN(b.out, Tensor::Empty({n * count}, c.dtype, alloc));
    }
    return b;
  }
  // The larger buffer; the smaller one is a view of it when in place.
  const bool gather = c.op == Op::kAllGather;
  const bool scatter = c.op == Op::kReduceScatter;
  ZS_ASSIGN_OR_RETURN(Tensor big, Tensor::Empty({(gather || scatter) ? n * count : count},
                                                c.dtype, alloc));
  Tensor small;
  // Broadcast is in place in the default table; out of place only in the
  // nccl-tests table (Note [nccl-tests format]).
  if (inplace || (c.op == Op::kBroadcast && !c.nccl_format)) {
    ZS_ASSIGN_OR_RETURN(small, (gather || scatter) ? big.Narrow(0, rank * count, count)
                                                   : absl::StatusOr<Tensor>(big));
  } else {
    ZS_ASSIGN_OR_RETURN(small, Tensor::Empty({count}, c.dtype, alloc));
  }
  b.in = gather ? small : big;
  b.out = gather ? big : small;
  return b;
}

bool Distinct(const Buffers& b) { return b.in.raw_data() != b.out.raw_data(); }

absl::Status RunOnce(Communicator& comm, const Config& c, const Buffers& b) {
  switch (c.op) {
    case Op::kAllGather: return comm.AllGather(b.in, b.out);
    case Op::kReduceScatter: return comm.ReduceScatter(b.in, b.out, c.redop);
    case Op::kAllReduce: return comm.AllReduce(b.in, b.out, c.redop);
    case Op::kBroadcast:
      // Out of place: the root's send buffer into its receive buffer, then the broadcast.
      if (Distinct(b) && comm.rank() == c.root) ZS_RETURN_IF_ERROR(b.out.CopyFrom(b.in));
      return comm.Broadcast(b.out, c.root);
    case Op::kAllToAll:
      if (!Distinct(b)) {
        ZS_RETURN_IF_ERROR(b.stage.CopyFrom(b.in));
        return comm.AllToAll(b.stage, b.out);
      }
      return comm.AllToAll(b.in, b.out);
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
      if (Distinct(b)) ZS_RETURN_IF_ERROR(Fill(b.out, [](int64_t) { return -99.0; }));
      ZS_RETURN_IF_ERROR(Fill(b.in, [&](int64_t i) { return r == c.root ? Value(r, i) : -99.0; }));
      want = [&](int64_t i) { return Value(c.root, i); };
      break;
    case Op::kAllToAll:
      // Block j of rank s's input goes to rank j: my block s is rank s's block r.
      ZS_RETURN_IF_ERROR(Fill(b.in, [&](int64_t j) { return Value(r, j); }));
      want = [&](int64_t j) { return Value(static_cast<int>(j / count), r * count + j % count); };
      break;
  }
  ZS_RETURN_IF_ERROR(RunOnce(comm, c, b));
  ZS_ASSIGN_OR_RETURN(std::vector<double> got, b.out.ToVector<double>());
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want(static_cast<int64_t>(i));
  return wrong;
}

// `v` reduced over the ranks (max: the slowest rank sets the pace; sum).
absl::StatusOr<int64_t> OverRanks(Communicator& comm, int64_t v, ReduceOp op, Allocator* alloc) {
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({1}, static_cast<double>(v), DType::kI64, alloc));
  ZS_RETURN_IF_ERROR(comm.AllReduce(t, op));
  ZS_ASSIGN_OR_RETURN(std::vector<int64_t> out, t.ToVector<int64_t>());
  return out[0];
}

absl::StatusOr<int64_t> MaxOverRanks(Communicator& comm, int64_t v, Allocator* alloc) {
  return OverRanks(comm, v, ReduceOp::kMax, alloc);
}

double BusFactor(Op op, int n) {
  switch (op) {
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAllToAll: return static_cast<double>(n - 1) / n;
    case Op::kAllReduce: return 2.0 * (n - 1) / n;
    case Op::kBroadcast: return 1.0;
  }
  return 1.0;
}

// A rank's buffer holds n parts of `count` elements (the table's size is all of it).
bool Gathers(Op op) { return op == Op::kAllGather || op == Op::kReduceScatter || op == Op::kAllToAll; }

// Seconds per collective in one timed round of --iters: the slowest rank's
// (the default table) or the mean over the ranks (nccl-tests' -a 1).
absl::StatusOr<double> TimeRound(Communicator& comm, const Config& c, const Buffers& b, bool mean,
                                 Allocator* alloc) {
  ZS_RETURN_IF_ERROR(comm.Barrier());
  const absl::Time start = absl::Now();
  for (int i = 0; i < c.iters; ++i) ZS_RETURN_IF_ERROR(RunOnce(comm, c, b));
  ZS_RETURN_IF_ERROR(comm.Barrier());
  const int64_t mine_ns = absl::ToInt64Nanoseconds(absl::Now() - start);
  ZS_ASSIGN_OR_RETURN(const int64_t ns,
                      OverRanks(comm, mine_ns, mean ? ReduceOp::kSum : ReduceOp::kMax, alloc));
  return static_cast<double>(ns) * 1e-9 / c.iters / (mean ? comm.size() : 1);
}

// The start of a row's figure names in our JSON schema (--json_out; the file
// header): "collectives/local_w2/all_reduce_sum_f32_inplace/65536/".
std::string JsonPrefix(const Config& c, int n, bool inplace, int64_t size) {
  const bool reduces = c.op == Op::kReduceScatter || c.op == Op::kAllReduce;
  return absl::StrCat("collectives/", c.backend, "_w", n, "/", c.op_name,
                      reduces ? absl::StrCat("_", ReduceOpName(c.redop)) : "", "_", DTypeName(c.dtype),
                      inplace ? "_inplace" : "", "/", size, "/");
}

std::vector<double> GbPerSecond(double bytes, const std::vector<double>& seconds) {
  std::vector<double> v;
  for (double s : seconds) v.push_back(bytes / s * 1e-9);
  return v;
}

absl::Status RunSweep(Communicator& comm, const Config& c, const Baseline& baseline,
                      const Baseline& all_ranks_memcpy, Allocator* alloc, bench::JsonReport* report) {
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
    // alltoall: `bytes` is a rank's buffer, n blocks of count.
    const int64_t count = std::max<int64_t>(1, bytes / esize / (c.op == Op::kAllToAll ? n : 1));
    ZS_ASSIGN_OR_RETURN(Buffers b, MakeBuffers(c, n, r, count, c.inplace, alloc));
    int64_t wrong = 0;
    if (c.check) {
      ZS_ASSIGN_OR_RETURN(int64_t mine, Check(comm, c, b, count));
      ZS_ASSIGN_OR_RETURN(wrong, MaxOverRanks(comm, mine, alloc));
    }
    for (int i = 0; i < c.warmup; ++i) ZS_RETURN_IF_ERROR(RunOnce(comm, c, b));
    // Best of `repeats` timed rounds, the baseline's rounds interleaved with
    // ours, so that both see the same machine (it is shared, and noisy).
    std::vector<double> rounds, base_rounds, par_rounds;
    for (int rep = 0; rep < c.repeats; ++rep) {
      ZS_ASSIGN_OR_RETURN(const double t, TimeRound(comm, c, b, /*mean=*/false, alloc));
      rounds.push_back(t);
      if (c.baseline && baseline) {
        ZS_ASSIGN_OR_RETURN(const double t,
                            baseline(b.in, b.out, count, c.iters, rep == 0 ? c.warmup : 0));
        if (!std::isnan(t)) base_rounds.push_back(t);
      }
      if (c.baseline && all_ranks_memcpy) {
        ZS_ASSIGN_OR_RETURN(const double t, all_ranks_memcpy(b.in, b.out, count, c.iters,
                                                             rep == 0 ? c.warmup : 0));
        if (!std::isnan(t)) par_rounds.push_back(t);
      }
    }
    if (r == 0) {
      const double seconds = *std::min_element(rounds.begin(), rounds.end());
      const double base_seconds =
          base_rounds.empty() ? std::nan("") : *std::min_element(base_rounds.begin(), base_rounds.end());
      const double par_seconds =
          par_rounds.empty() ? std::nan("") : *std::min_element(par_rounds.begin(), par_rounds.end());
      const double size = static_cast<double>(count * esize);
      // The row's size: bytes per rank (alltoall: its whole buffer, n blocks).
      const int64_t row_size = (c.op == Op::kAllToAll ? n : 1) * count * esize;
      const double total = Gathers(c.op) ? size * n : size;
      const double algbw = total / seconds * 1e-9;
      const double busbw = algbw * BusFactor(c.op, n);
      // The baseline's bytes per call as its busbw column counts them.
      const double base_bytes = c.backend == "local" ? size : total * BusFactor(c.op, n);
      std::string base = absl::StrFormat("%14s %11s %7s", "n/a", "n/a", "");
      if (!std::isnan(base_seconds)) {
        const double base_busbw = base_bytes / base_seconds * 1e-9;
        base = absl::StrFormat("%14.2f %11.2f %7.2f", base_seconds * 1e6, base_busbw,
                               busbw / base_busbw);
      }
      std::string par;
      if (!std::isnan(par_seconds)) par = absl::StrFormat(" %18.2f", size / par_seconds * 1e-9);
      std::printf("%12lld %11lld %11.2f %11.2f %11.2f %8lld %s%s\n",
                  static_cast<long long>(row_size), static_cast<long long>(count),
                  seconds * 1e6, algbw, busbw, static_cast<long long>(wrong), base.c_str(),
                  par.c_str());
      std::fflush(stdout);
      if (report != nullptr) {
        const std::string prefix = JsonPrefix(c, n, c.inplace, row_size);
        const std::string base_name =
            prefix + (c.backend == "local" ? "memcpy" : c.backend == "mpi" ? "raw_mpi" : "baseline");
        if (!base_rounds.empty()) {
          report->Add(base_name, "GB/s", /*higher_is_better=*/true, GbPerSecond(base_bytes, base_rounds));
        }
        report->Add(prefix + "busbw", "GB/s", true, GbPerSecond(total * BusFactor(c.op, n), rounds),
                    base_rounds.empty() ? "" : base_name);
        if (!par_rounds.empty()) {
          report->Add(prefix + "memcpy_all_ranks", "GB/s", true, GbPerSecond(size, par_rounds));
        }
      }
    }
    if (bytes > c.max_bytes / c.factor) break;  // no overflow past the end
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- nccl-tests table

// nccl-tests' names (src/common.cu test_typenames, test_opnames).
const char* NcclTypeName(DType d) {
  switch (d) {
    case DType::kF32: return "float";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "half";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
    case DType::kI8: return "int8";
  }
  return "unknown";
}

// nccl-tests' time column: fewer decimals as the time grows (src/common.cu BenchTime).
std::string NcclTime(double us) {
  if (us >= 10000.0) return absl::StrFormat("%7.0f", us);
  if (us >= 100.0) return absl::StrFormat("%7.1f", us);
  return absl::StrFormat("%7.2f", us);
}

// What every rank of the job runs on, rank 0 printing: the lines nccl-tests
// prints before its table ("# Using devices": a line per rank with its pid
// and host, exchanged through the communicator).
absl::Status PrintNcclPreamble(Communicator& comm, const Config& c, int ranks_per_process,
                               Allocator* alloc) {
  // Every rank's "pid host" (collectives/objects.h), through the device when the backend's is one.
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  ZS_ASSIGN_OR_RETURN(const std::vector<std::string> ranks,
                      AllGatherStrings(comm, absl::StrCat(getpid(), " ", host), alloc));
  if (comm.rank() != 0) return absl::OkStatus();
  std::printf("# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d "
              "agg iters: %d validation: %d graph: %d\n",
              ranks_per_process, 1, static_cast<long>(c.min_bytes), static_cast<long>(c.max_bytes),
              static_cast<long>(c.factor), "factor", c.warmup, c.iters, 1, c.check ? 1 : 0, 0);
  std::printf("#\n");
  std::printf("# Using devices\n");
  const Device d = comm.device();
  const std::string what = d.is_cuda() ? absl::StrCat("cuda device of the ", c.backend, " backend")
                                       : absl::StrCat("CPU (zeroshard ", c.backend, " backend)");
  for (int r = 0; r < comm.size(); ++r) {
    const size_t space = ranks[r].find(' ');
    std::printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s\n", r, 0,
                std::atoi(ranks[r].substr(0, space).c_str()), ranks[r].substr(space + 1).c_str(),
                d.is_cuda() ? d.index : -1, 0, what.c_str());
  }
  std::printf("#\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
              "", "", "", "", "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type",
              "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "",
              "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
  return absl::OkStatus();
}

// The nccl-tests table (Note [nccl-tests format]). Returns the columns whose
// data check found a wrong element ("Out of bounds values").
absl::StatusOr<int> RunNcclSweep(Communicator& comm, const Config& c, int ranks_per_process,
                                 Allocator* alloc, bench::JsonReport* report) {
  const int n = comm.size(), r = comm.rank();
  const int64_t esize = static_cast<int64_t>(DTypeSize(c.dtype));
  ZS_RETURN_IF_ERROR(PrintNcclPreamble(comm, c, ranks_per_process, alloc));
  int errors = 0;
  double bw_sum = 0;
  int bw_count = 0;
  for (int64_t size = c.min_bytes; size <= c.max_bytes; size *= c.factor) {
    // The collective's count argument: each rank's part for all_gather and
    // reduce_scatter, rounded down to 16 bytes as nccl-tests does.
    // alltoall: count / n per peer, not rounded (nccl-tests' alltoall.cu).
    int64_t count = size / esize;
    if (c.op == Op::kAllToAll) {
      count /= n;
    } else if (Gathers(c.op)) {
      count = (count / n) & -(16 / esize);
    }
    count = std::max<int64_t>(1, count);
    const int64_t row_bytes = (Gathers(c.op) ? count * n : count) * esize;
    std::string row = absl::StrFormat(
        "%12li  %12li  %8s  %6s  %6i", static_cast<long>(row_bytes), static_cast<long>(count),
        NcclTypeName(c.dtype),
        c.op == Op::kReduceScatter || c.op == Op::kAllReduce ? std::string(ReduceOpName(c.redop)) : "none",
        c.op == Op::kBroadcast ? c.root : -1);
    for (const bool inplace : {false, true}) {
      ZS_ASSIGN_OR_RETURN(Buffers b, MakeBuffers(c, n, r, count, inplace, alloc));
      int64_t wrong = 0;
      if (c.check) {
        ZS_ASSIGN_OR_RETURN(int64_t mine, Check(comm, c, b, count));
        ZS_ASSIGN_OR_RETURN(wrong, OverRanks(comm, mine, ReduceOp::kSum, alloc));
      }
      for (int i = 0; i < c.warmup; ++i) ZS_RETURN_IF_ERROR(RunOnce(comm, c, b));
      std::vector<double> rounds;
      for (int rep = 0; rep < c.repeats; ++rep) {
        ZS_ASSIGN_OR_RETURN(const double t, TimeRound(comm, c, b, /*mean=*/true, alloc));
        rounds.push_back(t);
      }
      const double seconds = *std::min_element(rounds.begin(), rounds.end());
      const double algbw = static_cast<double>(row_bytes) / seconds * 1e-9;
      const double busbw = algbw * BusFactor(c.op, n);
      bw_sum += busbw;
      ++bw_count;
      if (wrong != 0) ++errors;
      row += c.check ? absl::StrFormat("  %7s  %6.2f  %6.2f  %5g", NcclTime(seconds * 1e6), algbw, busbw,
                                       static_cast<double>(wrong))
                     : absl::StrFormat("  %7s  %6.2f  %6.2f  %5s", NcclTime(seconds * 1e6), algbw, busbw, "N/A");
      if (report != nullptr && r == 0) {
        report->Add(absl::StrCat(JsonPrefix(c, n, /*inplace=*/false, row_bytes),
                                 inplace ? "busbw_in_place" : "busbw_out_of_place"),
                    "GB/s", /*higher_is_better=*/true, GbPerSecond(row_bytes * BusFactor(c.op, n), rounds));
      }
    }
    if (r == 0) {
      std::printf("%s\n", row.c_str());
      std::fflush(stdout);
    }
    if (size > c.max_bytes / c.factor) break;  // no overflow past the end
  }
  if (r == 0) {
    const char* min_bw = std::getenv("NCCL_TESTS_MIN_BW");
    const double check_avg_bw = min_bw != nullptr ? std::atof(min_bw) : -1;
    const double avg = bw_count > 0 ? bw_sum / bw_count : 0;
    std::printf("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g %s\n", avg,
                check_avg_bw == -1 ? "" : (avg < check_avg_bw * 0.9 ? "FAILED" : "OK"));
    std::printf("#\n");
    std::printf("\n");  // nccl-tests prints ncclGetLastError(), empty after a good run
    std::fflush(stdout);
    if (check_avg_bw != -1 && avg < check_avg_bw * 0.9) ++errors;
  }
  return errors;
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
        case Op::kAllToAll:
          return MPI_Alltoall(c.inplace ? MPI_IN_PLACE : in.raw_data(), n, type, out.raw_data(), n, type, world);
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
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_op), ',')) {
    ZS_ASSIGN_OR_RETURN(const Op op, ParseOp(name));
    c.ops.push_back(op);
    c.op_names.emplace_back(name);
  }
  c.op = c.ops.front();
  c.op_name = c.op_names.front();
  ZS_ASSIGN_OR_RETURN(c.dtype, ParseDType(absl::GetFlag(FLAGS_dtype)));
  ZS_ASSIGN_OR_RETURN(c.redop, ParseReduceOp(absl::GetFlag(FLAGS_redop)));
  // nccl-tests' flag names win over ours when given.
  const std::string minbytes = absl::GetFlag(FLAGS_minbytes), maxbytes = absl::GetFlag(FLAGS_maxbytes);
  ZS_ASSIGN_OR_RETURN(c.min_bytes, ParseBytes(minbytes.empty() ? absl::GetFlag(FLAGS_b) : minbytes));
  ZS_ASSIGN_OR_RETURN(c.max_bytes, ParseBytes(maxbytes.empty() ? absl::GetFlag(FLAGS_e) : maxbytes));
  c.factor = absl::GetFlag(FLAGS_stepfactor) != 0 ? absl::GetFlag(FLAGS_stepfactor) : absl::GetFlag(FLAGS_f);
  c.iters = absl::GetFlag(FLAGS_iters);
  c.warmup = absl::GetFlag(FLAGS_warmup_iters) >= 0 ? absl::GetFlag(FLAGS_warmup_iters) : absl::GetFlag(FLAGS_warmup);
  c.repeats = absl::GetFlag(FLAGS_repeats);
  c.root = absl::GetFlag(FLAGS_root);
  c.check = absl::GetFlag(FLAGS_check);
  c.inplace = absl::GetFlag(FLAGS_inplace);
  c.baseline = absl::GetFlag(FLAGS_baseline);
  c.nccl_format = absl::GetFlag(FLAGS_nccl_tests_format);
  if (c.factor < 2 || c.iters < 1 || c.warmup < 0 || c.repeats < 1 || c.min_bytes > c.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need -f (--stepfactor) >= 2, --iters >= 1, --warmup >= 0, --repeats >= 1, -b <= -e; found -f ", c.factor,
        ", --iters ", c.iters, ", --warmup ", c.warmup, ", --repeats ", c.repeats, ", -b ", c.min_bytes, ", -e ",
        c.max_bytes));
  }
  if (c.nccl_format && c.ops.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nccl_tests_format: one --op at a time, as an nccl-tests binary measures one collective; found ",
        c.ops.size(), " (", absl::GetFlag(FLAGS_op), ")"));
  }
  if (c.nccl_format && c.inplace) {
    return absl::InvalidArgumentError(
        "--nccl_tests_format prints the out-of-place and the in-place columns; --inplace does not apply");
  }
  return c;
}

// The backend by name (collectives/backend_registry.h); the baseline is the
// one of its kind: memcpy for in-process ranks, the raw MPI call for mpi, none
// for nccl or a backend from outside. Each op of --op in turn. Returns the
// nccl-tests table's failed columns (0 in the default table).
absl::StatusOr<int> RunBackend(const Config& config, int* argc, char*** argv, const std::string& json_out) {
  BackendLaunch launch{.world_size = absl::GetFlag(FLAGS_world_size), .argc = argc, .argv = argv};
  launch.settings["threads_per_rank"] = absl::StrCat(absl::GetFlag(FLAGS_threads_per_rank));
  launch.settings["chunk_bytes"] = absl::StrCat(absl::GetFlag(FLAGS_chunk_bytes));
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<BackendProcess> process, BackendRegistry::Global().Start(config.backend, launch));
  // Ranks in this process: all of them (in-process backends) or one.
  const int ranks_per_process = process->process_rank() < 0 ? process->world_size() : 1;
  bench::JsonReport report("collectives_bench");
  bench::JsonReport* rank0_report = json_out.empty() ? nullptr : &report;  // only rank 0 adds
  int failed_columns = 0;
  std::vector<absl::Status> statuses = process->Run([&](Communicator& comm, Communicator*) -> absl::Status {
    bench::JsonReport* mine = comm.rank() == 0 ? rank0_report : nullptr;
    std::unique_ptr<CudaAllocator> gpu;
    if (comm.device().is_cuda()) gpu = std::make_unique<CudaAllocator>(comm.device().index);
    for (size_t i = 0; i < config.ops.size(); ++i) {
      Config c = config;
      c.op = config.ops[i];
      c.op_name = config.op_names[i];
      if (i > 0 && comm.rank() == 0) std::printf("\n");
      if (c.nccl_format) {
        ZS_ASSIGN_OR_RETURN(const int failed, RunNcclSweep(comm, c, ranks_per_process, gpu.get(), mine));
        if (comm.rank() == 0) failed_columns = failed;
        continue;
      }
      if (comm.backend() == "local") {
        ZS_RETURN_IF_ERROR(RunSweep(comm, c, MemcpyBaseline(comm, /*all_ranks=*/false),
                                    MemcpyBaseline(comm, /*all_ranks=*/true), nullptr, mine));
      } else if (comm.backend() == "mpi") {
        MPI_Comm raw;
        MPI_Comm_dup(MPI_COMM_WORLD, &raw);
        absl::Status s = RunSweep(comm, c, MpiBaseline(c, raw), Baseline(), nullptr, mine);
        MPI_Comm_free(&raw);
        ZS_RETURN_IF_ERROR(s);
      } else {
        ZS_RETURN_IF_ERROR(RunSweep(comm, c, Baseline(), Baseline(), gpu.get(), mine));
      }
    }
    return absl::OkStatus();
  });
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) return statuses[r];
  }
  if (rank0_report != nullptr && process->lead()) ZS_RETURN_IF_ERROR(report.Write(json_out));
  return failed_columns;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  const std::string json_out = zeroshard::bench::TakeJsonOutFlag(&argc, argv);  // before flag parsing
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<zeroshard::Config> config = zeroshard::ReadFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "collectives_bench: %s\n", config.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<int> failed = zeroshard::RunBackend(*config, &argc, &argv, json_out);
  if (!failed.ok()) {
    std::fprintf(stderr, "collectives_bench: %s\n", failed.status().ToString().c_str());
    return 1;
  }
  return *failed == 0 ? 0 : 1;  // the nccl-tests table's wrong columns, as nccl-tests exits
}
