// Central finite differences in double, to check the analytic gradients of the
// double-precision references that the backward kernels are tested against.
//
//   auto loss = [&](const std::vector<double>& x) { return Dot(dy, RefForward(x)); };
//   std::vector<double> numeric = NumericGradient(loss, x);
//   ExpectClose(RefBackward(x, dy), numeric, 1e-6, 1e-6, "reference gradient");
#ifndef ZEROSHARD_TESTS_KERNELS_GRAD_CHECK_H_
#define ZEROSHARD_TESTS_KERNELS_GRAD_CHECK_H_

#include <functional>
#include <vector>

namespace zeroshard::testing {

// d f / d x_i ~ (f(x + h e_i) - f(x - h e_i)) / 2h, for every i. Error
// O(h^2 f''') + O(eps |f| / h): about 1e-9 relative for smooth f with h = 1e-5.
inline std::vector<double> NumericGradient(const std::function<double(const std::vector<double>&)>& f,
                                           std::vector<double> x, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_KERNELS_GRAD_CHECK_H_
