// The one-file consumer (make consumer-test): built with a plain compiler line,
//
//   g++ -O2 pkgconfig_main.cc $(pkg-config --cflags --libs zeroshard)
//
// (PKG_CONFIG_PATH=<prefix>/lib/pkgconfig). It checks values it can compute by
// hand, through the umbrella header only:
//   1. an all-reduce (sum) over 4 in-process ranks of rank-dependent vectors
//      equals the closed form sum_r (r + 1) * (i + 1) = 10 (i + 1), exactly
//      (small integers are exact in fp32 whatever the order);
//   2. nn::Linear's forward and gradients on values chosen to be exact in
//      fp32: y = x W^T + b, dL/dW = dy^T x, dL/db = sum of dy, dL/dx = dy W
//      for L = sum(y), dy = 1.
// Exits non-zero on any difference.
#include <cstdio>
#include <vector>

#include "zeroshard/zeroshard.h"

using namespace zeroshard;
using autograd::Variable;

int failures = 0;

void Check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  failures += ok ? 0 : 1;
}

absl::Status AllReduceClosedForm() {
  constexpr int kWorld = 4;
  constexpr int64_t kN = 6;
  std::vector<std::vector<float>> out(kWorld);
  std::vector<absl::Status> statuses = RunRanks(kWorld, [&](Communicator& comm) -> absl::Status {
    std::vector<float> v(kN);
    for (int64_t i = 0; i < kN; ++i) v[i] = static_cast<float>((comm.rank() + 1) * (i + 1));
    ZS_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector(v, {kN}));
    ZS_RETURN_IF_ERROR(comm.AllReduce(t, ReduceOp::kSum));
    ZS_ASSIGN_OR_RETURN(out[comm.rank()], t.ToVector<float>());
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) ZS_RETURN_IF_ERROR(s);
  bool ok = true;
  for (int r = 0; r < kWorld; ++r) {
    for (int64_t i = 0; i < kN; ++i) ok = ok && out[r][i] == 10.0f * static_cast<float>(i + 1);
  }
  Check(ok, "all-reduce over 4 in-process ranks equals 10 (i + 1) on every rank");
  return absl::OkStatus();
}

absl::Status LinearClosedForm() {
  nn::Linear linear(/*in=*/3, /*out=*/2);
  ZS_RETURN_IF_ERROR(linear.Materialize(/*seed=*/7));
  // W = [[1, 2, 3], [-1, 0.5, 0.25]], b = [0.5, -2]: exact in fp32.
  ZS_ASSIGN_OR_RETURN(Tensor w, Tensor::FromVector(std::vector<float>{1, 2, 3, -1, 0.5f, 0.25f}, {2, 3}));
  ZS_ASSIGN_OR_RETURN(Tensor b, Tensor::FromVector(std::vector<float>{0.5f, -2}, {2}));
  ZS_ASSIGN_OR_RETURN(nn::LoadStateDictResult loaded, linear.LoadStateDict({{"weight", w}, {"bias", b}}));
  (void)loaded;
  // x = [[1, 2, 4], [0.5, -1, 2]]
  ZS_ASSIGN_OR_RETURN(Tensor xt, Tensor::FromVector(std::vector<float>{1, 2, 4, 0.5f, -1, 2}, {2, 3}));
  Variable x(xt, /*requires_grad=*/true);
  ZS_ASSIGN_OR_RETURN(Variable y, linear(x));
  ZS_ASSIGN_OR_RETURN(std::vector<float> yv, y.value().ToVector<float>());
  // y = x W^T + b: [1+4+12+0.5, -1+1+1-2; 0.5-2+6+0.5, -0.5-0.5+0.5-2]
  Check(yv == std::vector<float>{17.5f, -1, 5, -2.5f}, "Linear forward equals x W^T + b");
  ZS_ASSIGN_OR_RETURN(Variable loss, ops::SumAll(y));
  ZS_RETURN_IF_ERROR(autograd::Backward(loss));
  ZS_ASSIGN_OR_RETURN(std::vector<float> gw, linear.FindParameter("weight")->var.grad().ToVector<float>());
  ZS_ASSIGN_OR_RETURN(std::vector<float> gb, linear.FindParameter("bias")->var.grad().ToVector<float>());
  ZS_ASSIGN_OR_RETURN(std::vector<float> gx, x.grad().ToVector<float>());
  // dW[o][i] = sum_n x[n][i] = [1.5, 1, 6] for each o; db = [2, 2]; dx[n][i] = sum_o W[o][i] = [0, 2.5, 3.25].
  Check(gw == std::vector<float>{1.5f, 1, 6, 1.5f, 1, 6}, "dL/dW = dy^T x");
  Check(gb == std::vector<float>{2, 2}, "dL/db = sum of dy");
  Check(gx == std::vector<float>{0, 2.5f, 3.25f, 0, 2.5f, 3.25f}, "dL/dx = dy W");
  return absl::OkStatus();
}

int main() {
  for (absl::Status s : {AllReduceClosedForm(), LinearClosedForm()}) {
    if (!s.ok()) {
      std::printf("FAIL %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::printf("pkg-config consumer: %s\n", failures == 0 ? "all checks passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
