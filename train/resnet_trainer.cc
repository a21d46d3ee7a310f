#include "zeroshard/train/resnet_trainer.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/checkpoint/safetensors.h"
#include "zeroshard/train/log_sink.h"
#include "zeroshard/train/tensorboard.h"
#include "zeroshard/train/train_step.h"
#include "zeroshard/kernels/reduce.h"
#include "zeroshard/runtime/cuda/caching_allocator.h"
#include "zeroshard/runtime/cuda/device_api.h"
#include "zeroshard/sharding/sharded_model.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {

using autograd::Variable;

std::string ResNetTrainOptions::ToString() const {
  return absl::StrCat(model.ToString(), "; ", data.ToString(), "; batch ", batch_size, " per rank, ",
                      steps, " steps, ", optim::OptimizerName(optimizer), " lr ", lr.lr,
                      " (", optim::LrScheduleKindName(lr.kind), ", warmup ", lr.warmup_steps,
                      ", min ", lr.min_lr, "), weight decay ", optimizer.weight_decay,
                      ", seed ", seed, average_bn_stats ? ", BN statistics averaged before eval/save" : "",
                      "; ", sharding.ToString());
}

namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sum of a value over the world (`host`: a communicator of host tensors).
absl::StatusOr<double> WorldSum(Communicator& host, double v) {
  ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({1}, v, DType::kF32));
  ZS_RETURN_IF_ERROR(host.AllReduce(t, ReduceOp::kSum));
  return t.Item();
}

// A batch's images and labels copied to `device` when it is a GPU (a no-op on the CPU).
absl::Status OnDevice(ImageBatch& b, Allocator& device) {
  if (!device.device().is_cuda()) return absl::OkStatus();
  ZS_ASSIGN_OR_RETURN(b.images, b.images.To(&device));
  ZS_ASSIGN_OR_RETURN(b.labels, b.labels.To(&device));
  return absl::OkStatus();
}

struct Eval {
  double loss = 0, accuracy = 0;
};

// Eval mode over the validation set: forward number i on rank r takes samples
// [(i R + r) E, + E); every rank runs the same number of forwards (the
// gathers are collectives), rows past the end wrap around and are not counted.
absl::StatusOr<Eval> Evaluate(nn::ResNet& net, ShardedModel& sharded, const ShapesData& data,
                              const ResNetTrainOptions& o, Communicator& comm, Communicator& host,
                              Allocator& device) {
  const int64_t v = data.size(ShapesSplit::kVal);
  if (v == 0) return Eval{};
  if (o.average_bn_stats) ZS_RETURN_IF_ERROR(sharded.AverageBuffers());
  net.Eval();
  autograd::NoGradGuard no_grad;
  const int64_t e = o.eval_batch, r = comm.rank(), world = comm.size();
  const int64_t rounds = (v + e * world - 1) / (e * world);
  double correct = 0, loss_sum = 0;
  for (int64_t i = 0; i < rounds; ++i) {
    const int64_t start = (i * world + r) * e;
    std::vector<int64_t> idx(e);
    for (int64_t k = 0; k < e; ++k) idx[k] = (start + k) % v;
    ZS_ASSIGN_OR_RETURN(ImageBatch b, data.Samples(ShapesSplit::kVal, idx));
    ZS_RETURN_IF_ERROR(OnDevice(b, device));
    ZS_ASSIGN_OR_RETURN(Variable logits, net(Variable(b.images)));
    const int64_t valid = std::max<int64_t>(0, std::min(e, v - start));
    if (valid == 0) continue;
    ZS_ASSIGN_OR_RETURN(Tensor lv, logits.value().Narrow(0, 0, valid));
    ZS_ASSIGN_OR_RETURN(Tensor labels, b.labels.Narrow(0, 0, valid));
    ZS_ASSIGN_OR_RETURN(Tensor pred, ArgMax(lv, -1));
    const std::vector<int64_t> p = pred.ToVector<int64_t>().value(), l = labels.ToVector<int64_t>().value();
    for (int64_t k = 0; k < valid; ++k) correct += p[k] == l[k];
    ZS_ASSIGN_OR_RETURN(Variable loss, ops::CrossEntropy(Variable(lv), labels));
    ZS_ASSIGN_OR_RETURN(double lval, loss.value().Item());
    loss_sum += lval * valid;
  }
  net.Train();
  ZS_ASSIGN_OR_RETURN(const double total_correct, WorldSum(host, correct));
  ZS_ASSIGN_OR_RETURN(const double total_loss, WorldSum(host, loss_sum));
  return Eval{total_loss / v, total_correct / v};
}

absl::Status Save(nn::ResNet& net, ShardedModel& sharded, const ResNetTrainOptions& o, Communicator& comm,
                  int64_t step) {
  if (o.average_bn_stats) ZS_RETURN_IF_ERROR(sharded.AverageBuffers());
  return sharded.SummonFullParams(
      [&]() -> absl::Status {
        if (comm.rank() != 0) return absl::OkStatus();
        SafetensorsTensors tensors;
        for (auto& [name, t] : net.StateDict()) tensors.emplace_back(name, t);
        return WriteSafetensors(o.save, tensors,
                                {{"format", "torchvision-resnet"}, {"config", o.model.ToString()},
                                 {"step", absl::StrCat(step)}});
      },
      /*writeback=*/false, /*rank0_only=*/true);
}

// Rank 0's per-step figures: the metrics CSV (its own columns, not
// train/metrics.h's: images/s, and the validation accuracy) and the same as
// TensorBoard scalars.
class StepRows {
 public:
  ~StepRows() {
    if (csv_ != nullptr) std::fclose(csv_);
  }
  absl::Status Open(const ResNetTrainOptions& o, bool rank0) {
    if (!rank0) return absl::OkStatus();
    if (!o.metrics_csv.empty()) {
      if ((csv_ = std::fopen(o.metrics_csv.c_str(), "w")) == nullptr) {
        return absl::NotFoundError(absl::StrCat("cannot write the metrics ", o.metrics_csv));
      }
      std::fputs("step,loss,lr,images_per_s,ms_per_step,val_loss,val_accuracy\n", csv_);
      std::fflush(csv_);
    }
    if (!o.tensorboard_dir.empty()) {
      ZS_ASSIGN_OR_RETURN(TensorBoardWriter w, TensorBoardWriter::Open(o.tensorboard_dir));
      tb_.emplace(std::move(w));
    }
    return absl::OkStatus();
  }
  // One step: its metrics.csv row and its scalars (the same values).
  absl::Status Write(int64_t step, const std::string& row,
                     const std::vector<std::pair<std::string, double>>& scalars) {
    if (csv_ != nullptr) {
      std::fputs(row.c_str(), csv_);
      std::fflush(csv_);
    }
    return tb_.has_value() ? tb_->AddScalars(step, scalars) : absl::OkStatus();
  }

 private:
  std::FILE* csv_ = nullptr;
  std::optional<TensorBoardWriter> tb_;
};

}  // namespace

absl::StatusOr<ResNetTrainResult> RunResNetTraining(const ResNetTrainOptions& o, Communicator& comm,
                                                    Communicator* host_comm) {
  ZS_RETURN_IF_ERROR(o.model.Validate());
  const bool on_gpu = comm.device().is_cuda();
  // Host-side numbers go through a communicator of host tensors.
  if (on_gpu && host_comm == nullptr) {
    return absl::InvalidArgumentError(
        "RunResNetTraining on GPUs: expected a host communicator for the run's numbers, found none");
  }
  Communicator& host = host_comm != nullptr ? *host_comm : comm;
  if (o.threads_per_rank > 0) omp_set_num_threads(o.threads_per_rank);
  ZS_ASSIGN_OR_RETURN(const LogSink out,
                      LogSink::Open({.lead = comm.rank() == 0, .log_file = o.log_file, .to_stdout = !o.quiet,
                                     .writer = o.output}));
  const bool print = out.active();
  StepRows rows;
  ZS_RETURN_IF_ERROR(rows.Open(o, comm.rank() == 0));
  ZS_ASSIGN_OR_RETURN(ShapesData data, ShapesData::Create(o.data));
  // On a GPU, a caching allocator (as PyTorch's; RunTraining's): a warm step
  // takes no cudaMalloc. Declared before the tensors that use it, so it outlives them.
  std::unique_ptr<CudaBacking> backing;
  std::unique_ptr<CachingAllocator> cache;
  std::unique_ptr<Allocator> device_allocator;
  if (on_gpu) {
    backing = std::make_unique<CudaBacking>(comm.device().index);
    cache = std::make_unique<CachingAllocator>(
        backing.get(), CachingAllocatorOptions{.name = absl::StrCat("rank", comm.rank()), .device = comm.device()});
    device_allocator = std::make_unique<CachingStreamAllocator>(cache.get(), /*stream=*/nullptr, "compute");
  }
  Allocator& device = on_gpu ? *device_allocator : *DefaultCpuAllocator();
  auto net = std::make_shared<nn::ResNet>(o.model);  // shapes only: each rank fills its shard
  ShardingOptions sharding = o.sharding;
  sharding.init_seed = o.seed;
  if (sharding.wrap.kind == WrapPolicy::Kind::kNone) sharding.wrap = WrapPolicy::ByType({"BasicBlock"});
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<ShardedModel> sharded,
                      ShardedModel::Create(net, comm, sharding, on_gpu ? &device : nullptr));
  // Plain SGD/AdamW steps: one micro-batch, no clipping, no loss scaling.
  ZS_ASSIGN_OR_RETURN(TrainStep train_step,
                      TrainStep::Create(*sharded, {.optimizer = o.optimizer, .lr = o.lr}, &host));
  if (print) {
    out.Line(absl::StrFormat("train_resnet: %s\n%d ranks (%s, collective timeout %s), %lld parameters, %zu units, "
                             "%.1f MFLOP per image (forward)\n",
                             o.ToString(), comm.size(), comm.backend(), absl::FormatDuration(comm.options().timeout),
                             static_cast<long long>(net->NumParameters()),
                             sharded->units().size(),
                             2e-6 * nn::ResNetForwardMacs(o.model, o.data.image_size, o.data.image_size)));
    // HYBRID_SHARD's groups, with their nodes when they follow them (Note [Hybrid shard groups]).
    if (sharding.strategy == ShardingStrategy::kHybridShard) out.Line(absl::StrCat(sharded->GroupMapping(), "\n"));
  }
  ResNetTrainResult result;
  net->Train();
  double timed_s = 0;
  int64_t timed_steps = 0;
  const int64_t global_batch = o.batch_size * comm.size();
  // cudaMalloc and host synchronisations of the training steps after the
  // first two (the allocator's and cuDNN's plans' warm-up), evaluations left out.
  constexpr int64_t kFirstCounted = 2;
  cuda::CudaCallCounts counted;
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const cuda::CudaCallCounts before = cuda::ThreadCudaCallCounts();
    ZS_ASSIGN_OR_RETURN(const StepResult r, train_step.Run([&](int64_t) -> absl::StatusOr<Variable> {
      ZS_ASSIGN_OR_RETURN(ImageBatch b, data.TrainBatch({.step = step, .rank = comm.rank(),
                                                         .world_size = comm.size(), .batch_size = o.batch_size}));
      ZS_RETURN_IF_ERROR(OnDevice(b, device));
      ZS_ASSIGN_OR_RETURN(Variable logits, (*net)(Variable(b.images)));
      return ops::CrossEntropy(logits, b.labels);
    }));
    if (step >= kFirstCounted) {
      const cuda::CudaCallCounts after = cuda::ThreadCudaCallCounts();
      counted.mallocs += after.mallocs - before.mallocs;
      counted.host_syncs += after.host_syncs - before.host_syncs;
    }
    const double lr = r.lr;
    const double mean_loss = r.loss;
    result.losses.push_back(mean_loss);
    const double dt = Seconds(t0, std::chrono::steady_clock::now());
    if (step > 0) {
      timed_s += dt;
      ++timed_steps;
    }
    if (print && (step % o.log_every == 0 || step + 1 == o.steps)) {
      out.Line(absl::StrFormat("step %4lld loss %.4f lr %.4f %7.1f ms/step %7.1f images/s\n",
                               static_cast<long long>(step), mean_loss, lr, 1e3 * dt, global_batch / dt));
    }
    std::string row = absl::StrCat(step, ",", mean_loss, ",", lr, ",", global_batch / dt, ",", 1e3 * dt, ",");
    std::vector<std::pair<std::string, double>> scalars = {
        {"train/loss", mean_loss}, {"train/lr", lr}, {"train/images_per_s", global_batch / dt},
        {"train/ms_per_step", 1e3 * dt}};
    const bool last = step + 1 == o.steps;
    if (last || (o.eval_every > 0 && (step + 1) % o.eval_every == 0)) {
      ZS_ASSIGN_OR_RETURN(Eval ev, Evaluate(*net, *sharded, data, o, comm, host, device));
      result.val_loss = ev.loss;
      result.val_accuracy = ev.accuracy;
      absl::StrAppend(&row, ev.loss, ",", ev.accuracy);
      scalars.push_back({"val/loss", ev.loss});
      scalars.push_back({"val/accuracy", ev.accuracy});
      if (print) {
        out.Line(absl::StrFormat("eval step %4lld val loss %.4f val accuracy %.2f%% (chance %.0f%%, %lld images)\n",
                                 static_cast<long long>(step + 1), ev.loss, 100 * ev.accuracy,
                                 100.0 / ShapesData::kNumClasses, static_cast<long long>(data.size(ShapesSplit::kVal))));
      }
    } else {
      row += ",";
    }
    ZS_RETURN_IF_ERROR(rows.Write(step, row + "\n", scalars));
  }
  result.images_per_s = timed_steps > 0 ? global_batch * timed_steps / timed_s : 0;
  if (on_gpu && o.steps > kFirstCounted) {
    const double n = static_cast<double>(o.steps - kFirstCounted);
    result.cuda_mallocs_per_step = static_cast<double>(counted.mallocs) / n;
    result.host_syncs_per_step = static_cast<double>(counted.host_syncs) / n;
    if (print) {
      out.Line(absl::StrFormat("GPU: training steps %d-%d made %.1f cudaMalloc and %.1f host synchronisations "
                               "per step (caching allocator: %s)\n",
                               kFirstCounted, o.steps - 1, result.cuda_mallocs_per_step, result.host_syncs_per_step,
                               cache->stats().ToString()));
    }
  }
  if (!o.save.empty()) {
    ZS_RETURN_IF_ERROR(Save(*net, *sharded, o, comm, o.steps));
    if (print) out.Line(absl::StrCat("saved ", o.save, " (torchvision names, parameters and BatchNorm buffers)\n"));
  }
  if (print) {
    out.Line(absl::StrFormat("done: final loss %.4f, val accuracy %.2f%%, %.1f images/s\n",
                             result.losses.empty() ? 0.0 : result.losses.back(), 100 * result.val_accuracy,
                             result.images_per_s));
  }
  return result;
}

}  // namespace zeroshard
