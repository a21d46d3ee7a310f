// The main job's loop, a GPT's and a Llama's, on GPUs (backend nccl: one
// in-process rank per device, NCCL for the model, the in-process communicator
// for the run's numbers) against the same run on CPU ranks: per-step losses
// and the final validation loss; checkpoints and resume; init_from and save
// (safetensors files, the Llama's Hugging Face folders) against CPU runs; NVMe
// offload against CPU offload and no offload. Skips without a CUDA device; on
// the simulated device (`make sim-test`) it runs on the CPU simulator.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "zeroshard/checkpoint/hf_folder.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/collectives/local_communicator.h"
#include "zeroshard/collectives/nccl_communicator.h"
#include "zeroshard/train/trainer.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/tests/sharding/parity.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

TrainOptions Small() {
  TrainOptions o;
  o.model = nn::GptConfig{.vocab_size = 256, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
  o.data = "data/tinyshakespeare.txt";
  o.batch_size = 2;
  o.steps = 6;
  o.lr.lr = 3e-3;
  o.lr.warmup_steps = 2;
  o.lr.decay_steps = 6;
  o.log_every = 3;
  o.eval_every = 3;
  o.eval_iters = 2;
  o.sample_tokens = 8;
  o.sharding.wrap = WrapPolicy::ByType({"Block"});
  return o;
}

int Gpus() {
  absl::StatusOr<int> n = cuda::CudaDeviceCount();
  return n.ok() ? *n : 0;
}

TrainSummary TrainOnCpu(const TrainOptions& o, int world) {
  TrainSummary s;
  std::vector<absl::Status> st =
      RunRanks(world, [&](Communicator& comm) { return RunTraining(o, comm, &s); });
  for (const absl::Status& x : st) EXPECT_TRUE(x.ok()) << x;
  return s;
}

TrainSummary TrainOnGpus(const TrainOptions& o, int world) {
  TrainSummary s;
  std::vector<absl::Status> st = RunRanks(world, [&](Communicator& local) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::Create(local, Device::Cuda(local.rank())));
    return RunTraining(o, *nccl, &s, &local);
  });
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  return s;
}

// The run of `o` on `world` GPUs against the same run on CPU ranks.
void ExpectGpuRunMatchesCpu(const TrainOptions& o, int world) {
  const TrainSummary want = TrainOnCpu(o, world);
  const TrainSummary got = TrainOnGpus(o, world);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    // fp32 sums in another order (cuBLASLt, the kernels' reductions).
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-4 * std::fabs(want.losses[i])) << "step " << i;
  }
  EXPECT_NEAR(got.final_val_loss, want.final_val_loss, 1e-4 * std::fabs(want.final_val_loss));
  EXPECT_LT(got.losses.back(), got.losses.front());
  EXPECT_GT(got.peak_bytes, 0);
  // The caching allocator is warm after two steps: the steps after them (and
  // the validation between them) take no cudaMalloc.
  EXPECT_EQ(got.cuda_mallocs_per_step, 0.0);
  EXPECT_EQ(want.cuda_mallocs_per_step, -1.0);  // not measured on CPU ranks
}

// A step that neither logs, evaluates nor saves makes no host
// synchronisation on GPUs (issue 21): the ids are checked on the device, the
// loss, the clipping norm and scale stay there (docs/gpu.md), and the batch
// goes up through pinned slots as asynchronous copies (Note [Training batches
// without a host synchronisation] in train/trainer.cc).
TEST(TrainGptOnGpus, QuietStepsDoNotSynchroniseTheHost) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  TrainOptions o = Small();
  o.steps = 7;
  o.log_every = 100;  // logs at step 0 and the last only
  o.eval_every = 0;
  o.sample_tokens = 0;
  // A metrics file (as every run folder has) holds its rows until a loss is
  // read: the quiet steps still read nothing back.
  const std::string metrics = absl::StrCat(::testing::TempDir(), "/quiet_metrics.csv");
  std::filesystem::remove(metrics);
  o.metrics_csv = metrics;
  const TrainSummary got = TrainOnGpus(o, 1);
  EXPECT_EQ(got.cuda_mallocs_per_step, 0.0);
  ASSERT_EQ(got.quiet_steps_counted, 4);  // steps 2-5 (6 logs)
  EXPECT_EQ(got.host_syncs_per_step, 0.0);
  EXPECT_EQ(got.rate_limiter_waits_per_step, 0.0);  // a small model: the GPU keeps up
  // Every step's row, in order, with the loss the run read back.
  std::ifstream in(metrics);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << metrics;
  EXPECT_EQ(line.rfind("step,loss,", 0), 0u) << line;
  for (size_t i = 0; i < got.losses.size(); ++i) {
    ASSERT_TRUE(std::getline(in, line)) << "row of step " << i;
    const size_t comma = line.find(',');
    EXPECT_EQ(line.substr(0, comma), std::to_string(i));
    // The row prints the loss with 9 significant digits (%.9g): the float's
    // value exactly, so it reads back as the same float.
    EXPECT_EQ(static_cast<float>(std::stod(line.substr(comma + 1))), static_cast<float>(got.losses[i])) << line;
  }
  EXPECT_FALSE(std::getline(in, line)) << "one row per step";
  // Every linear's bias gradient in its weight-gradient GEMM (the simulator's
  // cuBLASLt takes the epilogue; a real one that refused would show here).
  EXPECT_GT(got.bias_grads_fused, 0);
  EXPECT_EQ(got.bias_grad_fallbacks, 0);
  // The MLPs' GELU in the fc GEMM and its gradient in the proj's dx GEMM
  // (Note [GELU in the GEMM]): hidden width 128, an aux ld cuBLASLt takes.
  EXPECT_GT(got.gelu_epilogues_fused, 0);
  EXPECT_EQ(got.gelu_epilogue_fallbacks, 0);
  ASSERT_EQ(got.losses.size(), 7u);
  for (double l : got.losses) EXPECT_TRUE(std::isfinite(l)) << "every loss is read by the end";
}

std::vector<int> Worlds() {
  std::vector<int> worlds = {1};
  if (Gpus() >= 2) worlds.push_back(2);
  return worlds;
}

TEST(TrainGptOnGpus, LossesMatchTheCpuRun) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  for (int world : Worlds()) {
    for (ShardingStrategy strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp}) {
      SCOPED_TRACE(::testing::Message() << world << " GPU(s), " << ShardingStrategyName(strategy));
      TrainOptions o = Small();
      o.sharding.strategy = strategy;
      ExpectGpuRunMatchesCpu(o, world);
    }
  }
}

// The job's Llama (model_type "llama": RMSNorm, rotary tables built on the
// device by the first step, grouped-query attention, SwiGLU; the decoder
// layer the unit), with the GPT's bounds: the same kinds of fp32 sums.
TEST(TrainGptOnGpus, LlamaLossesMatchTheCpuRun) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  for (int world : Worlds()) {
    SCOPED_TRACE(::testing::Message() << world << " GPU(s), FULL_SHARD");
    TrainOptions o = Small();
    o.model_type = "llama";
    o.model.n_head = 4;  // head_dim 8, on 2 kv heads
    o.llama.num_key_value_heads = 2;
    o.llama.intermediate_size = 64;
    o.sharding.wrap = WrapPolicy::ByType({"LlamaDecoderLayer"});
    ExpectGpuRunMatchesCpu(o, world);
  }
}

// ---------------------------------------------------------------- checkpoints

std::string FreshDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Every file of checkpoint folder `dir`, by name.
std::map<std::string, std::string> FilesOf(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

// Save at step 3, resume from it to step 6: the resumed steps' losses and the
// final checkpoint's bytes (every parameter and AdamW moment, the schedule,
// the RNG offsets) equal the uninterrupted run's, for sharded and full
// checkpoints, written synchronously and in the background. The GPU path
// copies shards to the host to write them and reads them into device memory.
TEST(TrainGptOnGpus, CheckpointAndResumeAreBitwise) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const int world = Gpus() >= 2 ? 2 : 1;
  for (const char* type : {"sharded", "full"}) {
    for (bool async : {false, true}) {
      SCOPED_TRACE(::testing::Message() << world << " GPU(s), " << type << (async ? ", async" : ""));
      TrainOptions o = Small();
      o.eval_every = 0;
      o.sample_tokens = 0;
      o.save_every = 3;
      o.state_dict_type = type;
      o.async_save = async;
      const std::string whole_dir = FreshDir("uninterrupted"), cut_dir = FreshDir("interrupted");
      o.work_dir = whole_dir;
      const TrainSummary whole = TrainOnGpus(o, world);
      o.work_dir = cut_dir;
      o.steps = 3;
      (void)TrainOnGpus(o, world);
      o.steps = 6;
      o.resume = "auto";
      const TrainSummary resumed = TrainOnGpus(o, world);
      EXPECT_EQ(resumed.start_step, 3);
      ASSERT_EQ(whole.losses.size(), 6u);
      ASSERT_EQ(resumed.losses.size(), 3u);
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], whole.losses[3 + i]) << "step " << 3 + i;
      const auto a = FilesOf(whole_dir + "/step-000006");
      const auto b = FilesOf(cut_dir + "/step-000006");
      ASSERT_FALSE(a.empty());
      ASSERT_EQ(a.size(), b.size());
      for (const auto& [name, bytes] : a) {
        ASSERT_TRUE(b.count(name)) << name;
        EXPECT_TRUE(bytes == b.at(name)) << name << " differs";
      }
    }
  }
}

// A checkpoint a GPU run wrote loads in a CPU run at another world size, and
// the other way round: 2 GPUs and 2 CPU ranks each save at step 3; one CPU
// rank and one GPU resume from each and take step 3. The four losses are of
// one batch on parameters that agree within the GPU-vs-CPU bound of
// ExpectGpuRunMatchesCpu (fp32 sums in another order), so they agree within
// it too; a checkpoint read wrongly (a shard misplaced, the optimizer state
// or the schedule lost) moves them by far more.
TEST(TrainGptOnGpus, CheckpointsMoveBetweenGpuAndCpuRuns) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  TrainOptions o = Small();
  o.eval_every = 0;
  o.sample_tokens = 0;
  o.save_every = 3;
  o.steps = 3;
  const std::string by_gpus = FreshDir("written_by_gpus"), by_cpus = FreshDir("written_by_cpus");
  o.work_dir = by_gpus;
  (void)TrainOnGpus(o, 2);
  o.work_dir = by_cpus;
  (void)TrainOnCpu(o, 2);
  o.resume = "auto";
  o.steps = 4;
  o.save_every = 0;
  std::vector<double> losses;
  for (const std::string& dir : {by_gpus, by_cpus}) {
    for (bool gpu : {false, true}) {
      o.work_dir = dir;
      const TrainSummary r = gpu ? TrainOnGpus(o, 1) : TrainOnCpu(o, 1);
      EXPECT_EQ(r.start_step, 3) << dir;
      ASSERT_EQ(r.losses.size(), 1u) << dir;
      losses.push_back(r.losses[0]);
    }
  }
  for (size_t i = 1; i < losses.size(); ++i) {
    EXPECT_NEAR(losses[i], losses[0], 1e-4 * std::fabs(losses[0])) << "run " << i;
  }
}


// ---------------------------------------------------------------- init_from, save, NVMe offload

std::string BytesOf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The tensors of a safetensors file, as floats by name.
testing::ParamValues ValuesOf(const std::string& path) {
  testing::ParamValues out;
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return out;
  for (const SafetensorsEntry& e : f->entries()) {
    absl::StatusOr<Tensor> t = f->Read(e.name);
    EXPECT_TRUE(t.ok()) << e.name << ": " << t.status();
    absl::StatusOr<std::vector<float>> v = t.ok() ? t->ToVector<float>() : t.status();
    EXPECT_TRUE(v.ok()) << e.name << ": " << v.status();
    if (v.ok()) out[e.name] = *std::move(v);
  }
  return out;
}

// A run that takes one step at learning rate 0, from `init_from`, saving `save`.
// AdamW then leaves every parameter bitwise as it was: p * (1 - 0 * wd) = p and
// p + ((-0 / (1 - b1^t)) * m) / denom = p (denom >= eps > 0), so the saved file
// holds the run's initial parameters.
TrainOptions StillRun(const std::string& init_from, const std::string& save) {
  TrainOptions o = Small();
  o.steps = 1;
  o.lr.lr = 0;
  o.lr.min_lr = 0;
  o.eval_every = 0;
  o.sample_tokens = 0;
  o.init_from = init_from;
  o.save = save;
  return o;
}

// `save` and `init_from` (a safetensors file) on GPUs, against CPU runs of the
// same world size (the same batches on each rank).
// 1. Saved at learning rate 0, a run's file is its initial parameters, drawn
//    on the host by (seed, name, element) whatever the device (nn::FillInit):
//    the GPU run copies them into its device shards and save copies them back,
//    so its file is the CPU run's byte for byte (the writer is deterministic).
// 2. A CPU run trains 3 steps and saves. A GPU run with init_from that file, at
//    learning rate 0, saves it back byte for byte: the host values reached the
//    device shards and came back unchanged. Its first loss, of the same batch on
//    the same parameters, agrees with the CPU run's from that file within the
//    bound of ExpectGpuRunMatchesCpu (fp32 sums in another order).
// 3. A GPU run trains the same 3 steps and saves: its file holds the CPU run's
//    tensors (names, dtypes, shapes), with values within Note [Parity bounds]
//    (tests/sharding/parity.h): Adam's envelope / 1024 plus rounding; the
//    attention key bias, whose true gradient is 0, within the envelope of its
//    initial value. The envelope is taken at the schedule's peak learning rate
//    (warmup and cosine decay only lower it). A CPU run loads the GPU's file:
//    at learning rate 0 it saves it back byte for byte.
TEST(TrainGptOnGpus, InitFromAndSaveMoveWeightsBetweenGpuAndCpuRuns) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const int world = Gpus() >= 2 ? 2 : 1;
  const std::string dir = FreshDir("init_from_save");
  // 1.
  (void)TrainOnCpu(StillRun("", dir + "/cpu_init.safetensors"), world);
  (void)TrainOnGpus(StillRun("", dir + "/gpu_init.safetensors"), world);
  const std::string init = BytesOf(dir + "/cpu_init.safetensors");
  ASSERT_FALSE(init.empty());
  EXPECT_TRUE(BytesOf(dir + "/gpu_init.safetensors") == init) << "the GPU run saved other initial parameters";
  // 2.
  TrainOptions trained = Small();
  trained.steps = 3;
  trained.eval_every = 0;
  trained.sample_tokens = 0;
  trained.save = dir + "/cpu_trained.safetensors";
  const TrainSummary cpu_trained = TrainOnCpu(trained, world);
  const std::string cpu_file = BytesOf(trained.save);
  ASSERT_FALSE(cpu_file.empty());
  ASSERT_FALSE(cpu_file == init);
  const TrainSummary gpu_from_cpu = TrainOnGpus(StillRun(trained.save, dir + "/gpu_from_cpu.safetensors"), world);
  EXPECT_TRUE(BytesOf(dir + "/gpu_from_cpu.safetensors") == cpu_file)
      << "init_from on GPUs did not load the file's values into the shards unchanged";
  const TrainSummary cpu_from_cpu = TrainOnCpu(StillRun(trained.save, ""), world);
  ASSERT_EQ(gpu_from_cpu.losses.size(), 1u);
  ASSERT_EQ(cpu_from_cpu.losses.size(), 1u);
  EXPECT_NEAR(gpu_from_cpu.losses[0], cpu_from_cpu.losses[0], 1e-4 * std::fabs(cpu_from_cpu.losses[0]));
  // 3.
  trained.save = dir + "/gpu_trained.safetensors";
  const TrainSummary gpu_trained = TrainOnGpus(trained, world);
  ASSERT_EQ(gpu_trained.losses.size(), cpu_trained.losses.size());
  const testing::ParamValues want = ValuesOf(dir + "/cpu_trained.safetensors");
  const testing::ParamValues got = ValuesOf(trained.save);
  ASSERT_FALSE(want.empty());
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile cpu_header, SafetensorsFile::Open(dir + "/cpu_trained.safetensors"));
  ZS_ASSERT_OK_AND_ASSIGN(SafetensorsFile gpu_header, SafetensorsFile::Open(trained.save));
  ASSERT_EQ(gpu_header.entries().size(), cpu_header.entries().size());
  for (size_t i = 0; i < cpu_header.entries().size(); ++i) {
    EXPECT_EQ(gpu_header.entries()[i].DebugString(), cpu_header.entries()[i].DebugString());
  }
  const testing::ParamValues initial = ValuesOf(dir + "/cpu_init.safetensors");
  testing::ExpectParamsMatch(got, want, {.lr = trained.lr.lr, .steps = static_cast<int>(trained.steps)},
                             testing::GptKeyBias(trained.model.n_embd), &initial, "GPU-saved vs CPU-saved");
  (void)TrainOnCpu(StillRun(trained.save, dir + "/cpu_from_gpu.safetensors"), world);
  EXPECT_TRUE(BytesOf(dir + "/cpu_from_gpu.safetensors") == BytesOf(trained.save))
      << "a CPU run did not load the GPU run's file unchanged";
}

// NVMe offload (strategy.nvme_offload: parameter shards and optimizer state in
// swap files, through host buffers, every unit on NVMe and fewer buffers than
// units) on GPUs moves bytes, not math, so its losses are bitwise those of:
// - host offload (params, grads and optimizer state in host memory): the same
//   AdamW on the host, the same gradient-norm sum over host shards, the same
//   copies to and from the device; only where the host bytes rest differs;
// - no offload, with gradient clipping off: then the one difference is where
//   AdamW runs, the GPU or the host, and both run optim/adamw_math.h's
//   per-element float operations in one order without FMA contraction
//   (--fmad=false), so they round alike. (With clipping on, the norm is summed
//   on the device in one run and on the host in the other: the clip factor
//   may differ in its last bits.)
// So are the weights each run saves. And a run resumed from an NVMe-offloaded
// run's sharded or full checkpoint continues bitwise.
TEST(TrainGptOnGpus, NvmeOffloadMovesBytesNotMath) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  const int world = Gpus() >= 2 ? 2 : 1;
  const std::string swap = FreshDir("gpu_nvme_swap");
  auto with_nvme = [&](TrainOptions o) {
    OffloadPolicy& off = o.sharding.offload;
    off.nvme_optimizer = off.nvme_params = true;
    off.optimizer_nvme = {.path = swap, .buffer_count = 2};
    off.param_nvme = {.path = swap, .buffer_count = 2};
    return o;
  };
  for (double clip : {1.0, 0.0}) {
    SCOPED_TRACE(::testing::Message() << world << " GPU(s), grad_clip " << clip);
    TrainOptions o = Small();
    o.grad_clip = clip;
    o.sample_tokens = 0;
    // Each run saves its final weights (`save`, gathered through the hooks).
    auto saving = [&](TrainOptions r, const std::string& name) {
      r.save = absl::StrCat(swap, "/", name, ".safetensors");
      return r;
    };
    TrainOptions host = saving(o, "host");
    host.sharding.offload = {.params = true, .grads = true, .optimizer = true};
    const TrainSummary on_host = TrainOnGpus(host, world);
    const TrainSummary on_nvme = TrainOnGpus(saving(with_nvme(o), "nvme"), world);
    ASSERT_EQ(on_host.losses.size(), 6u);
    EXPECT_EQ(on_nvme.losses, on_host.losses);
    EXPECT_EQ(on_nvme.final_val_loss, on_host.final_val_loss);
    const std::string nvme_file = BytesOf(swap + "/nvme.safetensors");
    ASSERT_FALSE(nvme_file.empty());
    EXPECT_TRUE(nvme_file == BytesOf(swap + "/host.safetensors")) << "the saved weights differ";
    if (clip == 0) {
      const TrainSummary none = TrainOnGpus(saving(o, "none"), world);
      EXPECT_EQ(on_nvme.losses, none.losses);
      EXPECT_EQ(on_nvme.final_val_loss, none.final_val_loss);
      EXPECT_TRUE(nvme_file == BytesOf(swap + "/none.safetensors")) << "the saved weights differ";
    } else {
      // A sharded checkpoint of the NVMe-offloaded run (read through its swap
      // buffers) and a full one written in the background (gathered on the
      // device), and a resume into the run from each.
      for (const auto& [type, async] : {std::pair<const char*, bool>{"sharded", false}, {"full", true}}) {
        SCOPED_TRACE(type);
        TrainOptions first = with_nvme(o);
        first.eval_every = 0;
        first.state_dict_type = type;
        first.async_save = async;
        first.work_dir = FreshDir("gpu_nvme_resume");
        first.steps = 3;
        first.save_every = 3;
        const TrainSummary a = TrainOnGpus(first, world);
        TrainOptions second = first;
        second.steps = 6;
        second.save_every = 0;
        second.resume = "auto";
        const TrainSummary b = TrainOnGpus(second, world);
        EXPECT_EQ(b.start_step, 3);
        std::vector<double> joined = a.losses;
        joined.insert(joined.end(), b.losses.begin(), b.losses.end());
        EXPECT_EQ(joined, on_nvme.losses);
      }
    }
  }
}

// The Llama on GPUs from and to Hugging Face folders: init_from reads each
// rank's byte ranges into host memory and copies them into its device shards,
// save gathers the device shards and writes them from the host. At learning
// rate 0 (AdamW changes nothing, as StillRun says) the saved folder holds the
// very tensors read, in several files with an index; the first loss, of one
// batch on the folder's parameters, agrees with the CPU run's from the folder
// within the bound of ExpectGpuRunMatchesCpu.
TEST(TrainGptOnGpus, LlamaHuggingFaceFolderRoundTrip) {
  if (!testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  constexpr char kHfDir[] = "tests/testdata/llama_hf_gqa";
  const int world = Gpus() >= 2 ? 2 : 1;
  const std::string dir = FreshDir("gpu_llama_hf");
  // The folder's vocabulary is 32: a token file of a sequence over it.
  std::vector<uint16_t> tokens(4096);
  uint16_t t = 0;
  for (uint16_t& x : tokens) {
    x = t;
    t = static_cast<uint16_t>((7 * t + 3) % 32);
  }
  {
    std::ofstream out(dir + "/tokens.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  TrainOptions o = StillRun(kHfDir, dir + "/saved");
  o.model_type = "llama";
  o.data = dir + "/tokens.bin";
  o.sharding.wrap = WrapPolicy::ByType({"LlamaDecoderLayer"});
  o.save_shard_bytes = 8000;  // the folder's 25920 bytes in several files, with an index
  const TrainSummary gpu = TrainOnGpus(o, world);
  EXPECT_TRUE(std::filesystem::exists(o.save + "/model.safetensors.index.json"));
  ZS_ASSERT_OK_AND_ASSIGN(nn::NamedTensors want, ReadHfStateDict(kHfDir));
  ZS_ASSERT_OK_AND_ASSIGN(nn::NamedTensors got, ReadHfStateDict(o.save));
  ASSERT_EQ(got.size(), want.size());
  std::map<std::string, Tensor> by_name(got.begin(), got.end());
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(by_name.count(name)) << name;
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> a, w.ToVector<float>());
    ZS_ASSERT_OK_AND_ASSIGN(std::vector<float> b, by_name[name].ToVector<float>());
    EXPECT_EQ(a, b) << name;
  }
  EXPECT_FALSE(BytesOf(o.save + "/config.json").empty());
  o.save = "";
  const TrainSummary cpu = TrainOnCpu(o, world);
  ASSERT_EQ(gpu.losses.size(), 1u);
  ASSERT_EQ(cpu.losses.size(), 1u);
  EXPECT_NEAR(gpu.losses[0], cpu.losses[0], 1e-4 * std::fabs(cpu.losses[0]));
}

}  // namespace
}  // namespace zeroshard
