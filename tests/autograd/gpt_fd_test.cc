// Finite differences of the full loss of a tiny GPT (2 blocks, untied biases on,
// weights perturbed well away from their initial values so every nonlinearity is
// exercised). The model runs in fp32, so the check is directional: for a unit
// direction v, the central difference (L(θ+hv) - L(θ-hv)) / 2h, Richardson-
// extrapolated over h and h/2, must equal the backward pass's
// <∇L, v>, accumulated in double. Directions:
//   - along the whole gradient (the derivative is |∇L|);
//   - per parameter tensor, along its own gradient (the derivative is |∇_p L|)
//     and along a random unit direction inside it (the sign and direction of
//     every tensor's gradient, not only its size).
// Every op is checked one by one in double in ops_test; this test catches what
// only the composition gets wrong (tying, views, residuals, head split).
// Step: h = 0.02 and 0.01. Sharpened attention makes larger steps leave the
// quadratic region (at h = 0.1 the difference is off by 0.4% for c_attn; it
// converges to the backward's value as h shrinks). Noise floor: fp32 loss
// rounding (~1e-6) over 2h is ~5e-5, ~1e-4 after extrapolation; the tolerances
// are 2e-4 absolute plus 1e-3 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "zeroshard/autograd/engine.h"
#include "zeroshard/autograd/grad_mode.h"
#include "zeroshard/autograd/nn/gpt.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard {
namespace {

class GptFd : public ::testing::Test {
 protected:
  void SetUp() override {
    nn::GptConfig c;
    c.vocab_size = 19;
    c.block_size = 8;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 12;
    gpt_ = std::make_shared<nn::Gpt>(c);
    ZS_ASSERT_OK(gpt_->Materialize(/*seed=*/7));
    params_ = gpt_->NamedParameters();
    std::mt19937 rng(11);
    std::normal_distribution<float> noise(0.f, 0.25f);
    for (auto& [name, v] : params_) {
      float* p = v.value().data<float>();
      for (int64_t i = 0; i < v.numel(); ++i) p[i] += noise(rng);
    }
    std::vector<int32_t> ids(2 * 7), targets(2 * 7);
    std::uniform_int_distribution<int32_t> token(0, 18);
    for (auto& t : ids) t = token(rng);
    for (auto& t : targets) t = token(rng);
    ZS_ASSERT_OK_AND_ASSIGN(ids_, Tensor::FromVector(ids, {2, 7}, DType::kI32));
    ZS_ASSERT_OK_AND_ASSIGN(targets_, Tensor::FromVector(targets, {2, 7}, DType::kI32));
  }

  double Loss() {
    autograd::NoGradGuard no_grad;
    absl::StatusOr<nn::GptOutput> out = gpt_->Forward(ids_, targets_);
    EXPECT_TRUE(out.ok()) << out.status();
    return out->loss.value().Item().value();
  }

  // Moves every parameter by t·v (v: one vector per parameter tensor).
  void Move(const std::vector<std::vector<double>>& v, double t) {
    for (size_t k = 0; k < params_.size(); ++k) {
      float* p = params_[k].second.value().data<float>();
      for (size_t i = 0; i < v[k].size(); ++i) p[i] = static_cast<float>(p[i] + t * v[k][i]);
    }
  }

  // Central difference along v, Richardson-extrapolated. Restores the parameters
  // exactly (they are saved and written back, not moved back).
  double DirectionalFd(const std::vector<std::vector<double>>& v) {
    std::vector<std::vector<float>> saved;
    for (auto& [name, p] : params_) {
      const float* d = p.value().data<float>();
      saved.emplace_back(d, d + p.numel());
    }
    auto restore = [&] {
      for (size_t k = 0; k < params_.size(); ++k) {
        std::copy(saved[k].begin(), saved[k].end(), params_[k].second.value().data<float>());
      }
    };
    auto central = [&](double h) {
      Move(v, h);
      const double plus = Loss();
      restore();
      Move(v, -h);
      const double minus = Loss();
      restore();
      return (plus - minus) / (2 * h);
    };
    const double h = 0.02;
    return (4 * central(h / 2) - central(h)) / 3;
  }

  std::vector<std::vector<double>> Gradients() {
    for (auto& [name, v] : params_) v.reset_grad();
    absl::StatusOr<nn::GptOutput> out = gpt_->Forward(ids_, targets_);
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(autograd::Backward(out->loss).ok());
    std::vector<std::vector<double>> g;
    for (auto& [name, v] : params_) {
      EXPECT_TRUE(v.grad().defined()) << name;
      g.push_back(*v.grad().ToVector<double>());
    }
    return g;
  }

  std::vector<std::vector<double>> ZerosLike() {
    std::vector<std::vector<double>> z;
    for (auto& [name, v] : params_) z.emplace_back(static_cast<size_t>(v.numel()), 0.0);
    return z;
  }

  std::shared_ptr<nn::Gpt> gpt_;
  std::vector<std::pair<std::string, autograd::Variable>> params_;
  Tensor ids_, targets_;
};

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

constexpr double kAbs = 2e-4, kRel = 1e-3;

TEST_F(GptFd, AlongTheWholeGradient) {
  std::vector<std::vector<double>> g = Gradients();
  double norm2 = 0;
  for (const auto& gk : g) norm2 += Dot(gk, gk);
  const double norm = std::sqrt(norm2);
  ASSERT_GT(norm, 0.1);  // the perturbed model is far from any stationary point
  for (auto& gk : g) {
    for (double& x : gk) x /= norm;
  }
  EXPECT_NEAR(DirectionalFd(g), norm, kAbs + kRel * norm);
}

TEST_F(GptFd, EveryParameterTensorAlongItsGradientAndARandomDirection) {
  const std::vector<std::vector<double>> g = Gradients();
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  for (size_t k = 0; k < params_.size(); ++k) {
    const std::string& name = params_[k].first;
    const double norm = std::sqrt(Dot(g[k], g[k]));
    std::vector<std::vector<double>> v = ZerosLike();
    if (norm > 0) {
      for (size_t i = 0; i < g[k].size(); ++i) v[k][i] = g[k][i] / norm;
      EXPECT_NEAR(DirectionalFd(v), norm, kAbs + kRel * norm) << name << " along its gradient";
    }
    double r2 = 0;
    for (double& x : v[k]) {
      x = normal(rng);
      r2 += x * x;
    }
    for (double& x : v[k]) x /= std::sqrt(r2);
    const double want = Dot(g[k], v[k]);
    EXPECT_NEAR(DirectionalFd(v), want, kAbs + kRel * norm) << name << " along a random direction";
  }
}

}  // namespace
}  // namespace zeroshard
