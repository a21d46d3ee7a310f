// Double-precision references of torch.optim.AdamW / Adam / SGD (PyTorch 1.13
// semantics), element by element, for the optimizer tests.
#ifndef ZEROSHARD_TESTS_OPTIM_OPTIM_REFERENCE_H_
#define ZEROSHARD_TESTS_OPTIM_OPTIM_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace zeroshard::testing {

struct AdamRef {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool decoupled = true;
  std::vector<double> p, m, v;
  int64_t step = 0;

  explicit AdamRef(std::vector<double> param) : p(std::move(param)), m(p.size()), v(p.size()) {}

  // One step over elements [begin, begin + n) with lr and wd; `grad` is indexed
  // like p (already multiplied by any grad scale). Call BeginStep() once first.
  void BeginStep() { ++step; }
  void Update(const std::vector<double>& grad, int64_t begin, int64_t n, double lr, double wd) {
    const double bc1 = 1 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1 - std::pow(beta2, static_cast<double>(step));
    for (int64_t i = begin; i < begin + n; ++i) {
      double g = grad[i];
      if (decoupled) {
        p[i] *= 1 - lr * wd;
      } else if (wd != 0) {
        g += wd * p[i];
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
  }
};

struct SgdRef {
  double momentum = 0, dampening = 0;
  bool nesterov = false;
  std::vector<double> p, buf;
  int64_t step = 0;

  explicit SgdRef(std::vector<double> param) : p(std::move(param)), buf(p.size()) {}

  void Update(const std::vector<double>& grad, int64_t begin, int64_t n, double lr, double wd) {
    for (int64_t i = begin; i < begin + n; ++i) {
      double g = grad[i];
      if (wd != 0) g += wd * p[i];
      if (momentum != 0) {
        buf[i] = step == 0 ? g : momentum * buf[i] + (1 - dampening) * g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
  void EndStep() { ++step; }
};

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_OPTIM_OPTIM_REFERENCE_H_
