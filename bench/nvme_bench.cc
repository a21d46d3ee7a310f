// nvme_bench: NVMe offload's I/O and what it costs a training step, each
// beside its baseline measured in the same run.
//
// 1. Swap throughput (GB/s) for state sizes from --min_mb to --max_mb (x4
//    apart): the state is cut into regions of --region_mb (a unit each) and
//      swap-out   every region written from the swap buffers (Acquire to fill, Release dirty, Flush)
//      swap-in    every region read back, --buffer_count buffers reading ahead (Release clean)
//      in+out     the optimizer's pattern: read, change, write back (reads ahead, writes behind);
//                 GB/s of the bytes read plus written
//    with checksums off and on (check mode: CRC-32C of each region as it is
//    written and after it is read), beside a plain sequential pwrite / pread
//    loop of the same bytes with the same flags (O_DIRECT, block_size
//    requests, one thread: what `dd oflag=direct bs=1M` does). Every region
//    read is checked (a stamp in its first and last 8 bytes; all bytes with
//    checksums on). The sweep stops below half the free space of --dir.
// 2. Step time of the step_bench GPT (n_layer 4, n_embd 256, block 128,
//    batch 8, vocab 256, AdamW; world --step_world) with host offload (the
//    baseline: params, grads and optimizer state in host memory), with the
//    optimizer state on NVMe, and with parameters and optimizer state on NVMe,
//    each with read-ahead and write-behind on and off (--step_buffer_count
//    buffers, fewer than the 5 units so that regions really are re-read):
//    ms/step, the bytes moved per step, the time per step the step waited for
//    I/O, and how much of the no-overlap wait the overlap hides. Every
//    configuration's losses must equal host offload's bit for bit. The rows
//    run interleaved --repeats times; step times are the best run and the
//    median (the machines here are shared: run with OMP_NUM_THREADS=1
//    OMP_WAIT_POLICY=PASSIVE so that OpenMP barriers do not collapse under
//    other load), I/O figures the medians.
//
//   bazel build -c opt //bench:nvme_bench
//   OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE bazel-bin/bench/nvme_bench --dir=/local_nvme --max_mb=4096
//
// --json_out=<file>: the figures as data too (bench/bench_json.h; the tables are
// unchanged):
//   nvme/swap/<MiB>mib/{plain_write,plain_read}                      GB/s, one run each
//   nvme/swap/<MiB>mib/{swap_out,swap_out_crc}, {swap_in,swap_in_crc}  beside plain write / read
//   nvme/swap/<MiB>mib/{in_out,in_out_crc}
//   nvme/step/<row>_world<N>/{ms_per_step,io_wait_ms,mib_per_step}   one value per repeat;
//     ms_per_step beside host_offload's; <row>: host_offload, nvme_optimizer[_no_overlap],
//     nvme_params_opt[_no_overlap]
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "zeroshard/bench/bench_json.h"
#include "zeroshard/bench/load_average.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/data/token_data.h"
#include "zeroshard/optim/sharded_optimizer.h"
#include "zeroshard/runtime/nvme/swap_space.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/runtime/status.h"

ABSL_FLAG(std::string, dir, "/tmp", "directory on the drive to measure (an NVMe mount)");
ABSL_FLAG(int64_t, min_mb, 64, "smallest state size (MiB)");
ABSL_FLAG(int64_t, max_mb, 4096, "largest state size (MiB); the sweep goes x4 from min_mb");
ABSL_FLAG(int64_t, region_mb, 64, "region (unit) size (MiB)");
ABSL_FLAG(int, buffer_count, 4, "swap buffers (throughput)");
ABSL_FLAG(int64_t, block_size, 1 << 20, "aio.block_size: bytes per request");
ABSL_FLAG(int, queue_depth, 8, "aio.queue_depth");
ABSL_FLAG(int, thread_count, 1, "aio.thread_count");
ABSL_FLAG(bool, skip_throughput, false, "only the step part");
ABSL_FLAG(bool, skip_step, false, "only the throughput part");
ABSL_FLAG(int, step_world, 1, "ranks of the step part");
ABSL_FLAG(int, step_buffer_count, 3, "swap buffers of each kind in the step part");
ABSL_FLAG(int, steps, 6, "timed steps");
ABSL_FLAG(int, warmup, 2, "untimed steps");
ABSL_FLAG(bool, verbose, false, "print every run of the step part");
ABSL_FLAG(int, repeats, 5, "runs of every step configuration (interleaved; best and median reported)");
ABSL_FLAG(std::string, data, "data/tinyshakespeare.txt", "");

namespace zeroshard {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds of the calling thread.
double ThreadCpu() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

using bench::LoadAverage;

AioOptions Aio() {
  return AioOptions{.block_size = absl::GetFlag(FLAGS_block_size), .queue_depth = absl::GetFlag(FLAGS_queue_depth),
                    .thread_count = absl::GetFlag(FLAGS_thread_count)};
}

// ================================================================ throughput

// Region r's stamp for `pass`: its first and last 8 bytes.
uint64_t Stamp(int r, int pass) { return (static_cast<uint64_t>(r) << 32) | static_cast<uint64_t>(pass) | 0x5a00000000000000ull; }
void Put(char* p, int64_t bytes, uint64_t v) {
  std::memcpy(p, &v, 8);
  std::memcpy(p + bytes - 8, &v, 8);
}
bool Has(const char* p, int64_t bytes, uint64_t v) {
  uint64_t a, b;
  std::memcpy(&a, p, 8);
  std::memcpy(&b, p + bytes - 8, 8);
  return a == v && b == v;
}

struct Throughput {
  double plain_write = 0, plain_read = 0;  // GB/s
  double out[2] = {0, 0}, in[2] = {0, 0}, cycle[2] = {0, 0};  // [checksums off, on]
};

// The baseline: one thread, O_DIRECT, block_size pwrite then pread of `bytes`.
absl::Status Plain(const std::string& dir, int64_t bytes, Throughput* t) {
  const std::string path = absl::StrCat(dir, "/zeroshard-nvme-bench-plain-", ::getpid());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("creating ", path));
  const int64_t block = absl::GetFlag(FLAGS_block_size);
  void* buf = nullptr;
  if (::posix_memalign(&buf, kDirectIoAlignment, block) != 0) return absl::ResourceExhaustedError("posix_memalign");
  std::memset(buf, 0x33, block);
  absl::Status s;
  // Preallocated like the swap file (not timed).
  if (::fallocate(fd, 0, 0, bytes) != 0) s = absl::ErrnoToStatus(errno, "fallocate");
  double t0 = Now();
  for (int64_t off = 0; off < bytes && s.ok(); off += block) {
    if (::pwrite(fd, buf, block, off) != block) s = absl::ErrnoToStatus(errno, "plain pwrite");
  }
  t->plain_write = bytes / (Now() - t0) / 1e9;
  t0 = Now();
  for (int64_t off = 0; off < bytes && s.ok(); off += block) {
    if (::pread(fd, buf, block, off) != block) s = absl::ErrnoToStatus(errno, "plain pread");
    if (s.ok() && static_cast<unsigned char*>(buf)[block - 1] != 0x33) s = absl::DataLossError("plain read: wrong bytes");
  }
  t->plain_read = bytes / (Now() - t0) / 1e9;
  std::free(buf);
  ::close(fd);
  ::unlink(path.c_str());
  return s;
}

absl::Status Swap(const std::string& dir, int64_t bytes, bool verify, int k, Throughput* t) {
  const int64_t region = std::min(bytes, absl::GetFlag(FLAGS_region_mb) << 20);
  const int regions = static_cast<int>(bytes / region);
  std::vector<int64_t> sizes(regions, region);
  std::vector<std::string> names;
  for (int r = 0; r < regions; ++r) names.push_back(absl::StrCat("region ", r));
  SwapSpaceOptions o{.name = "bench state",
                     .file = {.dir = dir, .tag = "bench", .verify_checksums = verify},
                     .aio = Aio(),
                     .buffer_count = absl::GetFlag(FLAGS_buffer_count),
                     .pin_memory = true};
  ZS_ASSIGN_OR_RETURN(auto space, SwapSpace::Create(o, sizes, names));
  if (!space->note().empty()) std::printf("  note: %s\n", space->note().c_str());
  const int ahead = std::max(1, space->buffer_count() - 2);
  // swap-out
  double t0 = Now();
  for (int r = 0; r < regions; ++r) {
    ZS_ASSIGN_OR_RETURN(char* p, space->Acquire(r, /*overwrite=*/true));
    Put(p, region, Stamp(r, 0));
    ZS_RETURN_IF_ERROR(space->Release(r, /*dirty=*/true));
  }
  ZS_RETURN_IF_ERROR(space->Flush());
  t->out[k] = bytes / (Now() - t0) / 1e9;
  auto read_pass = [&](int pass, bool write) -> absl::Status {
    for (int r = 0; r < regions; ++r) {
      for (int j = r + 1; j < regions && j <= r + ahead; ++j) {
        if (!space->Prefetch(j)) break;
      }
      ZS_ASSIGN_OR_RETURN(char* p, space->Acquire(r));
      if (!Has(p, region, Stamp(r, pass))) {
        return absl::DataLossError(absl::StrCat("region ", r, " does not hold pass ", pass, "'s stamp"));
      }
      if (write) Put(p, region, Stamp(r, pass + 1));
      ZS_RETURN_IF_ERROR(space->Release(r, write));
    }
    return space->Flush();
  };
  ZS_RETURN_IF_ERROR(space->DropCache());
  space->ResetStats();
  t0 = Now();
  ZS_RETURN_IF_ERROR(read_pass(0, false));
  const double in_s = Now() - t0;
  t->in[k] = space->stats().bytes_read / in_s / 1e9;
  ZS_RETURN_IF_ERROR(space->DropCache());
  space->ResetStats();
  t0 = Now();
  ZS_RETURN_IF_ERROR(read_pass(0, true));
  const double cycle_s = Now() - t0;
  t->cycle[k] = (space->stats().bytes_read + space->stats().bytes_written) / cycle_s / 1e9;
  ZS_RETURN_IF_ERROR(read_pass(1, false));  // the cycle's writes landed
  return absl::OkStatus();
}

int ThroughputPart(const std::string& dir, bench::JsonReport* report) {
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    std::fprintf(stderr, "nvme_bench: --dir=%s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  struct statfs fs;
  ::statfs(dir.c_str(), &fs);
  std::printf("swap throughput in %s (filesystem type 0x%lx, %s free), region %d MiB, %d buffers, %s\n", dir.c_str(),
              static_cast<long>(fs.f_type), FormatBytes(free_bytes).c_str(),
              static_cast<int>(absl::GetFlag(FLAGS_region_mb)), absl::GetFlag(FLAGS_buffer_count),
              Aio().ToString().c_str());
  std::printf("GB/s            %-7s %-9s %-9s %-9s | %-7s %-9s %-9s %-9s | %-9s %-9s\n", "plain", "swap-out",
              "(crc)", "vs plain", "plain", "swap-in", "(crc)", "vs plain", "in+out", "(crc)");
  std::printf("%-9s %11s %9s %9s %9s | %7s %9s %9s %9s | %9s %9s\n", "state", "write", "", "", "", "read", "", "",
              "", "", "");
  for (int64_t mb = absl::GetFlag(FLAGS_min_mb); mb <= absl::GetFlag(FLAGS_max_mb); mb *= 4) {
    const int64_t bytes = mb << 20;
    if (bytes > free_bytes / 2) {
      std::printf("%-9s skipped: more than half of the %s free\n", FormatBytes(bytes).c_str(),
                  FormatBytes(free_bytes).c_str());
      break;
    }
    Throughput t;
    absl::Status s = Plain(dir, bytes, &t);
    for (int k = 0; k < 2 && s.ok(); ++k) s = Swap(dir, bytes, /*verify=*/k == 1, k, &t);
    if (!s.ok()) {
      std::fprintf(stderr, "nvme_bench: %s: %s\n", FormatBytes(bytes).c_str(), s.ToString().c_str());
      return 1;
    }
    std::printf("%-9s %11.2f %9.2f %9.2f %8.2fx | %7.2f %9.2f %9.2f %8.2fx | %9.2f %9.2f\n",
                FormatBytes(bytes).c_str(), t.plain_write, t.out[0], t.out[1], t.out[0] / t.plain_write,
                t.plain_read, t.in[0], t.in[1], t.in[0] / t.plain_read, t.cycle[0], t.cycle[1]);
    std::fflush(stdout);
    if (report != nullptr) {
      const std::string p = absl::StrCat("nvme/swap/", mb, "mib/");
      report->Add(p + "plain_write", "GB/s", /*higher_is_better=*/true, {t.plain_write});
      report->Add(p + "swap_out", "GB/s", true, {t.out[0]}, p + "plain_write");
      report->Add(p + "swap_out_crc", "GB/s", true, {t.out[1]}, p + "plain_write");
      report->Add(p + "plain_read", "GB/s", true, {t.plain_read});
      report->Add(p + "swap_in", "GB/s", true, {t.in[0]}, p + "plain_read");
      report->Add(p + "swap_in_crc", "GB/s", true, {t.in[1]}, p + "plain_read");
      report->Add(p + "in_out", "GB/s", true, {t.cycle[0]});
      report->Add(p + "in_out_crc", "GB/s", true, {t.cycle[1]});
    }
  }
  return 0;
}

// ================================================================ step overhead

nn::GptConfig StepModel() {
  return nn::GptConfig{.vocab_size = 256, .block_size = 128, .n_layer = 4, .n_head = 4, .n_embd = 256};
}

struct StepFigures {
  double ms_per_step = 0;
  double cpu_ms = 0;               // per step, rank 0's thread (CPU time: barely moved by other load)
  double io_wait_ms = 0;           // per step, rank 0
  double mb_per_step = 0;          // read + written per step, rank 0
  std::vector<double> losses;      // rank 0
};

absl::StatusOr<StepFigures> Step(const TokenData& data, const OffloadPolicy& offload) {
  StepFigures f;
  std::mutex mu;
  const int world = absl::GetFlag(FLAGS_step_world);
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& comm) -> absl::Status {
    CpuAllocator device(CpuAllocator::Options{.name = absl::StrCat("rank", comm.rank())});
    CpuAllocator host(CpuAllocator::Options{.name = absl::StrCat("host", comm.rank())});
    auto gpt = std::make_shared<nn::Gpt>(StepModel());
    ShardingOptions o;
    o.wrap = WrapPolicy::ByType({"Block"});
    o.init_seed = 1;
    o.offload = offload;
    ZS_ASSIGN_OR_RETURN(auto sharded, ShardedModel::Create(gpt, comm, o, &device, &host));
    optim::OptimizerOptions oo{.lr = 6e-4, .weight_decay = 0.1};
    oo.adamw.beta2 = 0.95;
    ZS_ASSIGN_OR_RETURN(optim::ShardedOptimizer opt, optim::ShardedOptimizer::Create(*sharded, oo));
    std::vector<SwapSpace*> spaces;
    for (SwapSpace* s : {sharded->param_swap(), opt.swap()}) {
      if (s != nullptr) spaces.push_back(s);
    }
    double t0 = 0, cpu0 = 0;
    const int64_t per_rank = 8 / world;
    for (int step = 0; step < warmup + steps; ++step) {
      if (step == warmup) {
        for (SwapSpace* s : spaces) s->ResetStats();
        t0 = Now();
        cpu0 = ThreadCpu();
      }
      ZS_ASSIGN_OR_RETURN(Batch b, data.GetBatch({.step = step, .rank = comm.rank(), .world_size = world,
                                                  .batch_size = per_rank, .block_size = 128}, &device));
      ZS_ASSIGN_OR_RETURN(nn::GptOutput out, gpt->Forward(b.inputs, b.targets));
      ZS_RETURN_IF_ERROR(autograd::Backward(out.loss));
      ZS_RETURN_IF_ERROR(opt.Step(6e-4));
      ZS_RETURN_IF_ERROR(sharded->ZeroGrad());
      ZS_ASSIGN_OR_RETURN(Tensor l, Tensor::Full({1}, out.loss.value().Item().value(), DType::kF32));
      ZS_RETURN_IF_ERROR(comm.AllReduce(l, ReduceOp::kAvg));
      if (comm.rank() == 0) f.losses.push_back(l.Item().value());
    }
    const double cpu = ThreadCpu() - cpu0;
    ZS_RETURN_IF_ERROR(comm.Barrier());
    const double elapsed = Now() - t0;
    std::lock_guard<std::mutex> lock(mu);
    f.ms_per_step = std::max(f.ms_per_step, elapsed * 1000 / steps);
    if (comm.rank() == 0) {
      f.cpu_ms = cpu * 1000 / steps;
      for (SwapSpace* s : spaces) {
        f.io_wait_ms += s->stats().wait_seconds * 1000 / steps;
        f.mb_per_step += (s->stats().bytes_read + s->stats().bytes_written) / 1048576.0 / steps;
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) ZS_RETURN_IF_ERROR(s);
  return f;
}

int StepPart(const std::string& dir, bench::JsonReport* report) {
  absl::StatusOr<TokenData> data = TokenData::Load(absl::GetFlag(FLAGS_data));
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 1;
  }
  const int buffers = absl::GetFlag(FLAGS_step_buffer_count);
  std::printf("\nstep time: %s, world %d, batch 8 x 128, AdamW, %d timed steps after %d warmup, %d swap buffers "
              "per kind, %s\n",
              StepModel().ToString().c_str(), absl::GetFlag(FLAGS_step_world), absl::GetFlag(FLAGS_steps),
              absl::GetFlag(FLAGS_warmup), buffers, Aio().ToString().c_str());
  auto nvme = [&](bool params, bool overlap) {
    OffloadPolicy p;
    p.nvme_optimizer = true;
    p.nvme_params = params;
    p.optimizer_nvme = {.path = dir, .buffer_count = buffers, .pin_memory = true, .read_ahead = overlap,
                        .write_behind = overlap};
    p.param_nvme = {.path = dir, .buffer_count = buffers, .pin_memory = true, .read_ahead = overlap,
                    .write_behind = overlap};
    p.aio = Aio();
    return p;
  };
  struct Row {
    const char* name;
    OffloadPolicy policy;
    const char* json_name;
  };
  const std::vector<Row> rows = {
      {"host offload (baseline)", OffloadPolicy{.params = true, .grads = true, .optimizer = true}, "host_offload"},
      {"nvme optimizer, no overlap", nvme(false, false), "nvme_optimizer_no_overlap"},
      {"nvme optimizer", nvme(false, true), "nvme_optimizer"},
      {"nvme params+opt, no overlap", nvme(true, false), "nvme_params_opt_no_overlap"},
      {"nvme params+opt", nvme(true, true), "nvme_params_opt"},
  };
  // Rows interleaved, `repeats` times: a load that drifts over the run hits
  // every row alike; each figure is the median of its repeats.
  const int repeats = std::max(1, absl::GetFlag(FLAGS_repeats));
  std::vector<std::vector<StepFigures>> runs(rows.size());
  std::vector<double> base_losses;
  int bad = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    for (size_t i = 0; i < rows.size(); ++i) {
      absl::StatusOr<StepFigures> f = Step(*data, rows[i].policy);
      if (!f.ok()) {
        std::fprintf(stderr, "nvme_bench: %s: %s\n", rows[i].name, f.status().ToString().c_str());
        return 1;
      }
      if (rep == 0 && i == 0) base_losses = f->losses;
      if (f->losses != base_losses) {
        ++bad;
        std::printf("%s: LOSS MISMATCH against host offload\n", rows[i].name);
      }
      runs[i].push_back(*f);
      if (absl::GetFlag(FLAGS_verbose)) {
        std::printf("  run %d %-28s %9.1f ms/step, I/O wait %.1f ms/step\n", rep, rows[i].name, f->ms_per_step,
                    f->io_wait_ms);
      }
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // Step times: the fastest run (least disturbed by other load) and the
  // median; I/O figures: medians.
  std::vector<StepFigures> med(rows.size());
  std::vector<double> best(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> ms, wait, mb, cpu;
    for (const StepFigures& f : runs[i]) {
      ms.push_back(f.ms_per_step);
      wait.push_back(f.io_wait_ms);
      mb.push_back(f.mb_per_step);
      cpu.push_back(f.cpu_ms);
    }
    best[i] = *std::min_element(ms.begin(), ms.end());
    med[i] = StepFigures{.ms_per_step = median(ms), .cpu_ms = median(cpu), .io_wait_ms = median(wait),
                         .mb_per_step = median(mb)};
  }
  // cpu+wait: the step as an undisturbed machine would run it (the rank's
  // CPU time plus the time it waited for I/O), robust to other load.
  std::printf("%-28s %9s %9s %9s %9s %10s %9s %12s %11s %7s   (of %d runs)\n", "offload", "best ms", "vs host",
              "median", "CPU ms", "cpu+wait", "vs host", "MiB/step", "I/O wait ms", "hidden", repeats);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string hidden = "-";
    if (i == 2 || i == 4) {  // against the same configuration without overlap
      const double exposed_off = med[i - 1].io_wait_ms;
      hidden = exposed_off > 0 ? absl::StrFormat("%.0f%%", 100 * (1 - med[i].io_wait_ms / exposed_off)) : "-";
    }
    const double modelled = med[i].cpu_ms + med[i].io_wait_ms;
    const double modelled_host = med[0].cpu_ms + med[0].io_wait_ms;
    std::printf("%-28s %9.1f %8.2fx %9.1f %9.1f %10.1f %8.2fx %12.1f %12.1f %9s\n", rows[i].name, best[i],
                best[i] / best[0], med[i].ms_per_step, med[i].cpu_ms, modelled, modelled / modelled_host,
                med[i].mb_per_step, med[i].io_wait_ms, hidden.c_str());
  }
  if (report != nullptr) {
    const int world = absl::GetFlag(FLAGS_step_world);
    auto prefix = [&](size_t i) { return absl::StrCat("nvme/step/", rows[i].json_name, "_world", world, "/"); };
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<double> ms, wait, mb;
      for (const StepFigures& f : runs[i]) {
        ms.push_back(f.ms_per_step);
        wait.push_back(f.io_wait_ms);
        mb.push_back(f.mb_per_step);
      }
      report->Add(prefix(i) + "ms_per_step", "ms", /*higher_is_better=*/false, ms,
                  i == 0 ? "" : prefix(0) + "ms_per_step");
      report->Add(prefix(i) + "io_wait_ms", "ms", false, wait);
      report->Add(prefix(i) + "mib_per_step", "MiB", false, mb);
    }
  }
  std::printf("(hidden: 1 - I/O wait with read-ahead and write-behind / I/O wait without; cpu+wait: the rank "
              "thread's CPU time plus its I/O wait, medians; losses equal host offload's bit for bit in every row "
              "unless marked)\n");
  return bad == 0 ? 0 : 1;
}

int Main(const std::string& json_out) {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  bench::JsonReport report("nvme_bench");
  bench::JsonReport* const json = json_out.empty() ? nullptr : &report;
  std::printf("nvme_bench: load average %s (start)\n", LoadAverage().c_str());
  int rc = 0;
  if (!absl::GetFlag(FLAGS_skip_throughput)) rc |= ThroughputPart(dir, json);
  if (rc == 0 && !absl::GetFlag(FLAGS_skip_step)) rc |= StepPart(dir, json);
  std::printf("nvme_bench: load average %s (end)\n", LoadAverage().c_str());
  if (json != nullptr) {
    if (absl::Status s = report.Write(json_out); !s.ok()) {
      std::fprintf(stderr, "nvme_bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  return rc;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  const std::string json_out = zeroshard::bench::TakeJsonOutFlag(&argc, argv);  // before flag parsing
  absl::ParseCommandLine(argc, argv);
  return zeroshard::Main(json_out);
}
