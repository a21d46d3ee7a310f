// Parity with PyTorch: torch.optim.AdamW / Adam / SGD (1.13, for-loop
// implementations), with two param groups, clip_grad_norm_ and nanoGPT's
// cosine schedule, for 10 steps. The golden file is written by
// tools/golden/optim_golden.py; this test needs no torch.
//
// Tolerance: PyTorch's vector paths use FMA where ours round every product, so
// parameters agree to a few float ulp per step: |got - want| <= 1e-6 + 1e-6 |want|
// after each of the 10 steps (observed: <= 3e-8 for Adam/AdamW, <= 2.4e-7 for
// SGD; the test prints the maximum per case).
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "zeroshard/optim/adamw.h"
#include "zeroshard/optim/grad_clip.h"
#include "zeroshard/optim/lr_schedule.h"
#include "zeroshard/optim/param_group.h"
#include "zeroshard/optim/sgd.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::optim {
namespace {

using ::zeroshard::testing::ToDoubles;

constexpr char kGoldenPath[] = "tests/optim/testdata/optim_golden.txt";

struct GoldenCase {
  std::string name;
  std::string optimizer;
  std::map<std::string, double> hyper;
  double clip = 0;
  bool cosine = false;
  LrSchedule schedule;
  std::vector<ParamGroup> groups;
  std::vector<float> init;
  std::vector<std::vector<float>> grads;   // [step]
  std::vector<std::vector<float>> params;  // [step], after the step
  std::map<std::string, std::vector<float>> state;
};

std::vector<float> ReadFloats(std::istringstream& in) {
  std::vector<float> v;
  std::string tok;
  while (in >> tok) v.push_back(std::strtof(tok.c_str(), nullptr));
  return v;
}

std::vector<GoldenCase> ReadGolden() {
  std::ifstream file(kGoldenPath);
  EXPECT_TRUE(file.good()) << "cannot open " << kGoldenPath;
  std::vector<GoldenCase> cases;
  std::string line;
  GoldenCase c;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "case") {
      c = GoldenCase();
      in >> c.name;
    } else if (key == "optimizer") {
      in >> c.optimizer;
    } else if (key == "hyper") {
      std::string k;
      double v;
      while (in >> k >> v) c.hyper[k] = v;
    } else if (key == "clip") {
      in >> c.clip;
    } else if (key == "schedule") {
      std::string kind;
      in >> kind;
      if (kind == "cosine") {
        c.cosine = true;
        c.schedule.kind = LrScheduleKind::kCosine;
        in >> c.schedule.lr >> c.schedule.min_lr >> c.schedule.warmup_steps >> c.schedule.decay_steps;
      }
    } else if (key == "group") {
      ParamGroup g;
      FlatRange r;
      in >> r.offset >> r.numel >> g.lr >> g.weight_decay;
      g.ranges = {r};
      c.groups.push_back(g);
    } else if (key == "init") {
      c.init = ReadFloats(in);
    } else if (key == "grad" || key == "param") {
      int step;
      in >> step;
      auto& dst = key == "grad" ? c.grads : c.params;
      EXPECT_EQ(step, static_cast<int>(dst.size()));
      dst.push_back(ReadFloats(in));
    } else if (key == "state") {
      std::string name;
      in >> name;
      c.state[name] = ReadFloats(in);
    } else if (key == "end") {
      cases.push_back(c);
    } else {
      ADD_FAILURE() << "unknown golden record " << key;
    }
  }
  return cases;
}

// Max |got - want| and the check with the stated tolerance.
double CompareTo(const Tensor& got, const std::vector<float>& want, const std::string& what) {
  const std::vector<double> g = ToDoubles(got);
  EXPECT_EQ(g.size(), want.size()) << what;
  double max_diff = 0;
  for (size_t i = 0; i < g.size() && i < want.size(); ++i) {
    const double d = std::fabs(g[i] - want[i]);
    max_diff = std::max(max_diff, d);
    EXPECT_LE(d, 1e-6 + 1e-6 * std::fabs(want[i])) << what << " element " << i << " got " << g[i]
                                                   << " want " << want[i];
  }
  return max_diff;
}

TEST(OptimGoldenTest, MatchesPyTorch) {
  const std::vector<GoldenCase> cases = ReadGolden();
  ASSERT_EQ(cases.size(), 6u);
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t n = static_cast<int64_t>(c.init.size());
    Tensor param = Tensor::FromVector(c.init, {n}, DType::kF32).value();
    std::vector<ParamGroup> groups = c.groups;
    ZS_ASSERT_OK(ValidateParamGroups(groups, n));
    AdamWOptions adam;
    adam.beta1 = c.hyper.at("beta1");
    adam.beta2 = c.hyper.at("beta2");
    adam.eps = c.hyper.at("eps");
    adam.decoupled_weight_decay = c.optimizer == "adamw";
    SgdOptions sgd;
    sgd.momentum = c.hyper.at("momentum");
    sgd.dampening = c.hyper.at("dampening");
    sgd.nesterov = c.hyper.at("nesterov") != 0;
    ZS_ASSERT_OK_AND_ASSIGN(AdamWState adam_state, AdamWState::Create(n));
    ZS_ASSERT_OK_AND_ASSIGN(SgdState sgd_state, SgdState::Create(n, sgd));
    double max_diff = 0;
    for (size_t s = 0; s < c.grads.size(); ++s) {
      const Tensor grad = Tensor::FromVector(c.grads[s], {n}, DType::kF32).value();
      StepOptions step;
      if (c.clip > 0) {
        ZS_ASSERT_OK_AND_ASSIGN(GradClip clip, ClipGradNorm({grad}, c.clip));
        step.grad_scale = clip.grad_scale;
      }
      if (c.cosine) {
        for (ParamGroup& g : groups) g.lr = LrAt(c.schedule, static_cast<int64_t>(s));
      }
      if (c.optimizer == "sgd") {
        ZS_ASSERT_OK(SgdStep(sgd, groups, param, grad, sgd_state, step));
      } else {
        ZS_ASSERT_OK(AdamWStep(adam, groups, param, grad, adam_state, step));
      }
      max_diff = std::max(max_diff, CompareTo(param, c.params[s], "param after step " + std::to_string(s)));
    }
    for (const auto& [name, want] : c.state) {
      const Tensor& got = name == "exp_avg"      ? adam_state.exp_avg
                          : name == "exp_avg_sq" ? adam_state.exp_avg_sq
                                                 : sgd_state.momentum_buffer;
      CompareTo(got, want, "state " + name);
    }
    std::printf("%-18s max |param - torch| over %zu steps: %.3g\n", c.name.c_str(), c.grads.size(),
                max_diff);
  }
}

}  // namespace
}  // namespace zeroshard::optim
