// Conv2d benchmark: forward, input-gradient (dgrad) and weight-gradient
// (wgrad) GFLOP/s of ResNet-18's convolution shapes on the CPU, each beside
// the Eigen GEMM of the same M x K x N measured in the same run (im2col +
// GEMM can at best reach it: it is the roofline of this algorithm), and the
// images/s of ResNet training steps (forward, backward, SGD) beside their
// FLOP rate. Every figure is checked: outputs at random positions against a
// direct double-precision sum, the training loss against ln(10) at the start.
//
//   bazel run -c opt //bench:conv_bench                          # batch 8 at 224x224, 1 and 2 threads
//   bazel-bin/bench/conv_bench --batch=4 --threads=1 --layers=layer1,layer4
//
// FLOPs are 2 x multiply-adds: forward N O OH OW C/g KH KW; dgrad and wgrad as
// many each. The GEMM baseline runs cpu::Gemm on [O, K] x [K, N OH OW] (the
// whole batch in one product, K = C KH KW), with the operands the forward
// uses. The peer (Debian's libtorch 1.13, oneDNN/MKL-DNN) is
// tools/peers/torch_conv_bench.py with the same shapes.
//
// --json_out=<file>: the figures as data too (bench/bench_json.h; the table is
// unchanged). Each timing's 3 rounds are its repeats (the table prints the best,
// the file's value is their median). Names, with <run> = b<batch>_<image>_threads<t>:
//   conv/eigen_gemm_1024/threads<t>/gflops            the roofline line
//   conv/<layer>/<run>/{fwd,dgrad,wgrad}             GFLOP/s, beside conv/<layer>/<run>/gemm
//   conv/{resnet_default,resnet18_cifar}/b<batch>_32_threads<t>/images_per_s
// where <layer> is the row's name with "_" for spaces and "s" for "/" (layer2.0.conv1_3x3s2).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "zeroshard/bench/bench_json.h"
#include "zeroshard/bench/load_average.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/nn/resnet.h"
#include "zeroshard/autograd/ops.h"
#include "zeroshard/bench/eigen_baseline.h"
#include "zeroshard/data/shapes_data.h"
#include "zeroshard/kernels/conv2d.h"
#include "zeroshard/kernels/cpu/gemm.h"
#include "zeroshard/optim/sgd.h"
#include "zeroshard/runtime/status.h"

ABSL_FLAG(int64_t, batch, 8, "images per convolution call");
ABSL_FLAG(int64_t, image, 224, "input size of ResNet-18 (layer shapes scale with it)");
ABSL_FLAG(std::string, threads, "1,2", "OpenMP thread counts to measure");
ABSL_FLAG(std::string, layers, "", "comma-separated name prefixes to run (default: all)");
ABSL_FLAG(double, min_time, 0.3, "seconds per measurement (the best of 3 is reported)");
ABSL_FLAG(bool, step, true, "also time ResNet training steps");

namespace zeroshard {
namespace {

using autograd::Variable;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of fn in 3 rounds, each repeated for at least min_time / 3.
struct Timing {
  std::vector<double> rounds;  // seconds per call
  double best() const { return *std::min_element(rounds.begin(), rounds.end()); }
  // `work` per second in each round (the JSON repeats).
  std::vector<double> Rates(double work) const {
    std::vector<double> v;
    for (double t : rounds) v.push_back(work / t);
    return v;
  }
};

Timing TimeIt(const std::function<void()>& fn, double min_time) {
  fn();  // warm up
  Timing timing;
  for (int round = 0; round < 3; ++round) {
    int reps = 0;
    const double t0 = Now();
    double t = t0;
    do {
      fn();
      ++reps;
      t = Now();
    } while (t - t0 < min_time / 3);
    timing.rounds.push_back((t - t0) / reps);
  }
  return timing;
}

Tensor Random(const Shape& shape, uint64_t seed) {
  std::vector<float> v(NumElements(shape));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(s >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
  return Tensor::FromVector(v, shape).value();
}

struct Layer {
  std::string name;
  int64_t c, o, k, stride, pad, in;  // in: input height = width
};

// ResNet-18's distinct convolution shapes at image size s (224: ImageNet).
std::vector<Layer> Resnet18Layers(int64_t s) {
  const int64_t s1 = s / 4, s2 = s / 8, s3 = s / 16;
  return {
      {"conv1 7x7/2", 3, 64, 7, 2, 3, s},
      {"layer1 3x3", 64, 64, 3, 1, 1, s1},
      {"layer2.0.conv1 3x3/2", 64, 128, 3, 2, 1, s1},
      {"layer2.0.downsample 1x1/2", 64, 128, 1, 2, 0, s1},
      {"layer2 3x3", 128, 128, 3, 1, 1, s2},
      {"layer3.0.conv1 3x3/2", 128, 256, 3, 2, 1, s2},
      {"layer3.0.downsample 1x1/2", 128, 256, 1, 2, 0, s2},
      {"layer3 3x3", 256, 256, 3, 1, 1, s3},
      {"layer4.0.conv1 3x3/2", 256, 512, 3, 2, 1, s3},
      {"layer4.0.downsample 1x1/2", 256, 512, 1, 2, 0, s3},
      {"layer4 3x3", 512, 512, 3, 1, 1, s3 / 2},
  };
}

// Direct double sums at a few random positions of y, dx and dw; false on a mismatch.
bool CheckLayer(const Layer& l, int64_t n, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                const Tensor& dx, const Tensor& dw) {
  const int64_t oh = y.size(2), s = l.in;
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  const float* yp = y.data<float>();
  const float* gp = dy.data<float>();
  const float* dxp = dx.data<float>();
  const float* dwp = dw.data<float>();
  uint64_t r = 12345;
  auto pick = [&](int64_t m) { r = r * 6364136223846793005ull + 1; return static_cast<int64_t>((r >> 33) % m); };
  auto in_at = [&](int64_t b, int64_t c, int64_t i, int64_t j) {
    return (i < 0 || i >= s || j < 0 || j >= s) ? 0.0 : static_cast<double>(xp[((b * l.c + c) * s + i) * s + j]);
  };
  for (int t = 0; t < 16; ++t) {
    // y[b, o, i, j]
    const int64_t b = pick(n), o = pick(l.o), i = pick(oh), j = pick(oh);
    double want = 0;
    for (int64_t c = 0; c < l.c; ++c)
      for (int64_t p = 0; p < l.k; ++p)
        for (int64_t q = 0; q < l.k; ++q)
          want += in_at(b, c, i * l.stride - l.pad + p, j * l.stride - l.pad + q) * wp[((o * l.c + c) * l.k + p) * l.k + q];
    if (std::fabs(yp[((b * l.o + o) * oh + i) * oh + j] - want) > 1e-4 * (1 + std::sqrt(l.c * l.k * l.k))) return false;
    // dw[o, c, p, q]
    const int64_t c = pick(l.c), p = pick(l.k), q = pick(l.k);
    double gw = 0;
    for (int64_t bb = 0; bb < n; ++bb)
      for (int64_t ii = 0; ii < oh; ++ii)
        for (int64_t jj = 0; jj < oh; ++jj)
          gw += gp[((bb * l.o + o) * oh + ii) * oh + jj] * in_at(bb, c, ii * l.stride - l.pad + p, jj * l.stride - l.pad + q);
    if (std::fabs(dwp[((o * l.c + c) * l.k + p) * l.k + q] - gw) > 1e-4 * (1 + std::sqrt(n * oh * oh))) return false;
    // dx[b, c, i, j]
    const int64_t xi = pick(s), xj = pick(s);
    double gx = 0;
    for (int64_t oo = 0; oo < l.o; ++oo)
      for (int64_t pp = 0; pp < l.k; ++pp)
        for (int64_t qq = 0; qq < l.k; ++qq) {
          const int64_t a = xi + l.pad - pp, e = xj + l.pad - qq;
          if (a < 0 || e < 0 || a % l.stride || e % l.stride || a / l.stride >= oh || e / l.stride >= oh) continue;
          gx += gp[((b * l.o + oo) * oh + a / l.stride) * oh + e / l.stride] * wp[((oo * l.c + c) * l.k + pp) * l.k + qq];
        }
    if (std::fabs(dxp[((b * l.c + c) * s + xi) * s + xj] - gx) > 1e-4 * (1 + std::sqrt(l.o * l.k * l.k))) return false;
  }
  return true;
}

absl::Status ConvTable(int64_t n, int64_t image, int threads, const std::string& filter, double min_time,
                       bench::JsonReport* report) {
  std::printf("%-28s %-22s %9s %9s %9s | %9s %6s\n", "layer (ResNet-18)", "N x C x H -> O x OH", "fwd", "dgrad",
              "wgrad", "GEMM", "fwd/GEMM");
  std::printf("%-28s %-22s %9s %9s %9s | %9s %6s\n", "", "", "GFLOP/s", "GFLOP/s", "GFLOP/s", "GFLOP/s", "");
  for (const Layer& l : Resnet18Layers(image)) {
    if (!filter.empty()) {
      bool match = false;
      for (absl::string_view f : absl::StrSplit(filter, ',')) match = match || absl::StartsWith(l.name, f);
      if (!match) continue;
    }
    const Conv2dOptions o{.stride = {l.stride, l.stride}, .padding = {l.pad, l.pad}};
    Tensor x = Random({n, l.c, l.in, l.in}, 1), w = Random({l.o, l.c, l.k, l.k}, 2);
    ZS_ASSIGN_OR_RETURN(Tensor y, Conv2dForward(x, w, Tensor(), o));
    const int64_t oh = y.size(2);
    Tensor dy = Random(y.shape(), 3);
    ZS_ASSIGN_OR_RETURN(Tensor dx, Tensor::Empty(x.shape(), DType::kF32));
    ZS_ASSIGN_OR_RETURN(Tensor dw, Tensor::Empty(w.shape(), DType::kF32));
    ZS_RETURN_IF_ERROR(Conv2dBackward(dy, x, w, o, dx, dw, Tensor(), GradMode::kOverwrite));
    if (!CheckLayer(l, n, x, w, y, dy, dx, dw)) {
      return absl::InternalError(absl::StrCat(l.name, ": result check failed"));
    }
    const double flops = 2.0 * n * l.o * oh * oh * l.c * l.k * l.k;
    absl::Status st;
    const Timing fwd = TimeIt([&] { st.Update(Conv2dForward(x, w, Tensor(), o, y)); }, min_time);
    const Timing dgrad = TimeIt([&] { st.Update(Conv2dBackward(dy, x, w, o, dx, Tensor(), Tensor(), GradMode::kOverwrite)); }, min_time);
    const Timing wgrad = TimeIt([&] { st.Update(Conv2dBackward(dy, x, w, o, Tensor(), dw, Tensor(), GradMode::kOverwrite)); }, min_time);
    const double t_fwd = fwd.best(), t_dx = dgrad.best(), t_dw = wgrad.best();
    ZS_RETURN_IF_ERROR(st);
    // The GEMM of the forward over the whole batch: [O, K] x [K, N OH OW].
    const int64_t k = l.c * l.k * l.k, cols = n * oh * oh;
    Tensor a = Random({l.o, k}, 4), b = Random({k, cols}, 5);
    ZS_ASSIGN_OR_RETURN(Tensor c, Tensor::Empty({l.o, cols}, DType::kF32));
    const Timing gemm = TimeIt([&] {
      cpu::Gemm({a.data<float>(), l.o, k, k, 1}, {b.data<float>(), k, cols, cols, 1},
                {c.data<float>(), l.o, cols, cols, 1}, 1.0f, 0.0f);
    }, min_time);
    const double t_gemm = gemm.best();
    std::printf("%-28s %-22s %9.1f %9.1f %9.1f | %9.1f %5.0f%%\n", l.name.c_str(),
                absl::StrCat(n, "x", l.c, "x", l.in, " -> ", l.o, "x", oh).c_str(), flops / t_fwd * 1e-9,
                flops / t_dx * 1e-9, flops / t_dw * 1e-9, flops / t_gemm * 1e-9, 100 * t_gemm / t_fwd);
    std::fflush(stdout);
    if (report != nullptr) {
      const std::string prefix = absl::StrCat("conv/", absl::StrReplaceAll(l.name, {{" ", "_"}, {"/", "s"}}), "/b",
                                              n, "_", image, "_threads", threads, "/");
      report->Add(prefix + "gemm", "GFLOP/s", /*higher_is_better=*/true, gemm.Rates(flops * 1e-9));
      report->Add(prefix + "fwd", "GFLOP/s", true, fwd.Rates(flops * 1e-9), prefix + "gemm");
      report->Add(prefix + "dgrad", "GFLOP/s", true, dgrad.Rates(flops * 1e-9), prefix + "gemm");
      report->Add(prefix + "wgrad", "GFLOP/s", true, wgrad.Rates(flops * 1e-9), prefix + "gemm");
    }
  }
  return absl::OkStatus();
}

// A training step of `config` at `image` x `image`: images/s and model GFLOP/s (3 x forward FLOPs).
absl::Status StepRow(const std::string& name, const std::string& json_name, const nn::ResNetConfig& config,
                     int64_t image, int64_t batch, int threads, double min_time, bench::JsonReport* report) {
  auto net = std::make_shared<nn::ResNet>(config);
  ZS_RETURN_IF_ERROR(net->Materialize(1));
  ZS_ASSIGN_OR_RETURN(ShapesData data, ShapesData::Create({.image_size = image, .train_size = 4096}));
  auto params = net->NamedParameters();
  const optim::SgdOptions sgd{.momentum = 0.9};
  std::vector<optim::SgdState> states;
  for (auto& [pn, v] : params) {
    ZS_ASSIGN_OR_RETURN(optim::SgdState s, optim::SgdState::Create(v.numel(), sgd));
    states.push_back(std::move(s));
  }
  // Batches made up front: the step timed is the model's (the peer reuses one batch too).
  std::vector<ImageBatch> batches;
  for (int64_t i = 0; i < 4; ++i) {
    ZS_ASSIGN_OR_RETURN(ImageBatch b, data.TrainBatch({.step = i, .batch_size = batch}));
    batches.push_back(std::move(b));
  }
  int64_t step = 0;
  double first_loss = 0;
  absl::Status st;
  auto one = [&]() -> absl::Status {
    const ImageBatch& b = batches[step % batches.size()];
    ZS_ASSIGN_OR_RETURN(Variable logits, (*net)(Variable(b.images)));
    ZS_ASSIGN_OR_RETURN(Variable loss, ops::CrossEntropy(logits, b.labels));
    if (step == 0) first_loss = loss.value().Item().value();
    ZS_RETURN_IF_ERROR(autograd::Backward(loss));
    for (size_t i = 0; i < params.size(); ++i) {
      Variable& v = params[i].second;
      ZS_ASSIGN_OR_RETURN(Tensor p, v.value().Reshape({-1}));
      ZS_ASSIGN_OR_RETURN(Tensor g, v.grad().Reshape({-1}));
      ZS_RETURN_IF_ERROR(optim::SgdStep(sgd, {optim::ParamGroup::Whole(v.numel(), 0.01, 0.0)}, p, g, states[i]));
      v.reset_grad();
    }
    ++step;
    return absl::OkStatus();
  };
  const Timing timing = TimeIt([&] { st.Update(one()); }, min_time);
  const double t = timing.best();
  ZS_RETURN_IF_ERROR(st);
  if (!(std::fabs(first_loss - std::log(10.0)) < 1.5)) {
    return absl::InternalError(absl::StrCat(name, ": first loss ", first_loss, ", expected about ln 10 = 2.30"));
  }
  const double flops = 3.0 * 2.0 * nn::ResNetForwardMacs(config, image, image) * batch;
  std::printf("%-44s batch %3lld %8.1f images/s %7.1f model GFLOP/s (3 x forward)\n", name.c_str(),
              static_cast<long long>(batch), batch / t, flops / t * 1e-9);
  std::fflush(stdout);
  if (report != nullptr) {
    report->Add(absl::StrCat("conv/", json_name, "/b", batch, "_", image, "_threads", threads, "/images_per_s"),
                "images/s", /*higher_is_better=*/true, timing.Rates(static_cast<double>(batch)));
  }
  return absl::OkStatus();
}

using bench::LoadAverage;

absl::Status Main(const std::string& json_out) {
  bench::JsonReport report("conv_bench");
  bench::JsonReport* const json = json_out.empty() ? nullptr : &report;
  const int64_t n = absl::GetFlag(FLAGS_batch), image = absl::GetFlag(FLAGS_image);
  const double min_time = absl::GetFlag(FLAGS_min_time);
  for (absl::string_view ts : absl::StrSplit(absl::GetFlag(FLAGS_threads), ',')) {
    int threads = 0;
    if (!absl::SimpleAtoi(ts, &threads) || threads < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--threads: ", ts, " is not a thread count"));
    }
    omp_set_num_threads(threads);
    // The machine's GEMM roofline: Eigen at its best (-march=native), n = 1024.
    const int64_t g = 1024;
    Tensor a = Random({g, g}, 7), b = Random({g, g}, 8);
    ZS_ASSIGN_OR_RETURN(Tensor c, Tensor::Empty({g, g}, DType::kF32));
    const Timing roofline =
        TimeIt([&] { bench::EigenGemmNative(a.data<float>(), b.data<float>(), c.data<float>(), g, 1); }, min_time);
    const double t = roofline.best();
    std::printf("\n== %d thread(s); load average %s; Eigen GEMM 1024^3 (-march=native): %.1f GFLOP/s\n", threads,
                LoadAverage().c_str(), 2.0 * g * g * g / t * 1e-9);
    if (json != nullptr) {
      json->Add(absl::StrCat("conv/eigen_gemm_1024/threads", threads, "/gflops"), "GFLOP/s", true,
                roofline.Rates(2.0 * g * g * g * 1e-9));
    }
    ZS_RETURN_IF_ERROR(ConvTable(n, image, threads, absl::GetFlag(FLAGS_layers), min_time, json));
    if (absl::GetFlag(FLAGS_step)) {
      std::printf("ResNet training steps (forward, backward, SGD; one rank, fp32; ShapesData images made beforehand):\n");
      nn::ResNetConfig small{.widths = {16, 32, 64, 128}, .depths = {1, 1, 1, 1}, .num_classes = 10,
                             .stem = nn::ResNetStem::kCifar};
      ZS_RETURN_IF_ERROR(StepRow("resnet.json default (16-128 wide, 32x32)", "resnet_default", small, 32, 32,
                                 threads, 2 * min_time, json));
      nn::ResNetConfig r18{.num_classes = 10, .stem = nn::ResNetStem::kCifar};
      ZS_RETURN_IF_ERROR(StepRow("ResNet-18 layout, CIFAR stem, 32x32", "resnet18_cifar", r18, 32, 16, threads,
                                 2 * min_time, json));
    }
  }
  if (json != nullptr) ZS_RETURN_IF_ERROR(report.Write(json_out));
  return absl::OkStatus();
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  const std::string json_out = zeroshard::bench::TakeJsonOutFlag(&argc, argv);  // before flag parsing
  absl::ParseCommandLine(argc, argv);
  absl::Status s = zeroshard::Main(json_out);
  if (!s.ok()) {
    std::fprintf(stderr, "conv_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
