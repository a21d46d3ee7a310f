// Test helpers shared by every suite.
//
//   ZS_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Zeros({2, 3}, DType::kF32));
//   ZS_ASSERT_OK(t.Fill(1.0));
//   EXPECT_THAT(t.Narrow(0, 2, 5).status(),
//               StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("outside dimension 0")));
//   if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
#ifndef ZEROSHARD_TESTS_TESTING_H_
#define ZEROSHARD_TESTS_TESTING_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace zeroshard::testing {

using ::testing::HasSubstr;

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// Matches a Status or StatusOr whose code is `code` and whose message matches `message`.
MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has status code ") + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  if (s.code() != code) {
    *result_listener << "whose status is " << s.ToString();
    return false;
  }
  return ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

// True when a CUDA device is usable (false in CPU-only builds and on machines
// without a GPU): CUDA tests GTEST_SKIP() otherwise.
bool HasCudaDevice();

// True when the CUDA device is the CPU simulator (a build with
// --define=cuda_sim=1, `make sim-test`; tools/cuda/sim): our kernels run, but
// cuBLAS(Lt), cuDNN and NCCL, which need a real device, do not.
bool OnCudaSimulator();

// Whether a GPU test should use its smaller problem sizes: on the simulator,
// or when ZEROSHARD_TEST_SHRINK=1 (gpu_bundle/run.sh sets it for the
// compute-sanitizer runs, which are 10-100x slower than the plain ones).
bool ShrinkGpuTests();

}  // namespace zeroshard::testing

#define ZS_ASSERT_OK(expr)                                            \
  do {                                                                \
    const ::absl::Status zs_test_status_ =                            \
        ::zeroshard::testing::GetStatus((expr));                      \
    ASSERT_TRUE(zs_test_status_.ok()) << zs_test_status_.ToString();  \
  } while (0)

#define ZS_EXPECT_OK(expr)                                            \
  do {                                                                \
    const ::absl::Status zs_test_status_ =                            \
        ::zeroshard::testing::GetStatus((expr));                      \
    EXPECT_TRUE(zs_test_status_.ok()) << zs_test_status_.ToString();  \
  } while (0)

#define ZS_TEST_CONCAT_INNER_(a, b) a##b
#define ZS_TEST_CONCAT_(a, b) ZS_TEST_CONCAT_INNER_(a, b)
#define ZS_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ZS_ASSERT_OK_AND_ASSIGN_IMPL_(ZS_TEST_CONCAT_(zs_test_statusor_, __LINE__), lhs, expr)
#define ZS_ASSERT_OK_AND_ASSIGN_IMPL_(var, lhs, expr)            \
  auto var = (expr);                                             \
  ASSERT_TRUE(var.ok()) << var.status().ToString();              \
  lhs = std::move(var).value()

// Skips a test that needs a vendor library on the simulated device.
#define ZS_SKIP_ON_CUDA_SIM(library)                                               \
  do {                                                                             \
    if (::zeroshard::testing::OnCudaSimulator()) {                                 \
      GTEST_SKIP() << "cuda_sim: " << (library) << " needs a real GPU";            \
    }                                                                              \
  } while (0)

#endif  // ZEROSHARD_TESTS_TESTING_H_
