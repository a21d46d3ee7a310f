// The op harness (as ggml's test-backend-ops): walks the op registry
// (kernels/op_registry.h) and checks every op on every backend this build and
// machine have (the CPU; CUDA on a GPU or on the simulator of
// --define=cuda_sim=1), for every dtype the op claims:
//   - forward against the op's double-precision reference, within the op's
//     bound plus one rounding of each result into its dtype;
//   - backward (when the op has a backward kernel) against central finite
//     differences of the reference in double, L = sum_k <dout_k, out_k>.
// One test per op and backend (Registry/OpHarness.Cpu/<op>, .Cuda/<op>), so
// the summary names every op checked. It also fails an op declared with zs_op
// in kernels/BUILD.bazel and never registered, a family with CUDA kernels and
// no op with a CUDA case, and any descriptor without its reference, gradient
// check or CUDA case (or the reasons it has none) -- checked on a deliberately
// incomplete descriptor below.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/kernels/op_families.h"
#include "zeroshard/kernels/op_registry.h"
#include "zeroshard/runtime/cuda/cuda_allocator.h"
#include "zeroshard/tests/kernels/grad_check.h"
#include "zeroshard/tests/kernels/kernel_testing.h"
#include "zeroshard/tests/testing.h"

namespace zeroshard::ops {
namespace {

using ::zeroshard::testing::Dot;
using ::zeroshard::testing::ExpectClose;
using ::zeroshard::testing::NumericGradient;
using ::zeroshard::testing::RandomValues;
using ::zeroshard::testing::RoundingRtol;
using ::zeroshard::testing::ToDoubles;

// The central difference's own error, besides the kernel's: h = 1e-5 gives
// O(h^2 f''') + O(1e-16 |L| / h), below 1e-8 for these sizes and smooth ops
// (tests/kernels/grad_check.h).
constexpr double kFiniteDifferenceAtol = 1e-7;

// A seed of the op's name (FNV-1a), so each op gets its own inputs.
uint64_t NameSeed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// The input's values on the CPU, in `dtype` (or the input's fixed dtype).
Tensor MakeInput(const OpInput& input, DType dtype, uint64_t seed) {
  const DType d = input.dtype.value_or(dtype);
  const int64_t n = NumElements(input.shape);
  std::vector<float> v = RandomValues(n, static_cast<float>(input.lo), static_cast<float>(input.hi), seed);
  if (input.distinct) {
    // Multiples of 1/32 around 0, shuffled by the random values' order:
    // distinct, and exact in bf16 (8 significand bits) for n <= 256.
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] < v[b]; });
    for (int64_t k = 0; k < n; ++k) v[order[k]] = static_cast<float>((k - n / 2) / 32.0);
  }
  if (!IsFloatingPoint(d)) {
    for (float& x : v) x = std::floor(x);
  }
  return Tensor::FromVector(v, input.shape, d).value();
}

std::string Name(const OpDescriptor& op, const char* backend, DType dtype) {
  return absl::StrCat(op.name, " on ", backend, ", ", DTypeName(dtype));
}

// Forward and backward of `op` for inputs of `dtype`, on `device` (nullptr:
// the CPU).
void CheckOp(const OpDescriptor& op, DType dtype, Allocator* device, const char* backend) {
  const std::string what = Name(op, backend, dtype);
  const uint64_t seed = NameSeed(op.name) + static_cast<uint64_t>(dtype);
  Tensors host, in;
  Values values;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    host.push_back(MakeInput(op.inputs[i], dtype, seed + i));
    values.push_back(ToDoubles(host.back()));
    in.push_back(device != nullptr ? host.back().To(device).value() : host.back());
  }
  absl::StatusOr<Tensors> out = op.forward(in);
  ASSERT_TRUE(out.ok()) << what << ": forward: " << out.status();
  const Values want = op.reference(values);
  ASSERT_EQ(out->size(), want.size()) << what << ": outputs of the forward and of the reference";
  for (size_t k = 0; k < want.size(); ++k) {
    const Bound b = op.forward_bound(dtype, static_cast<int>(k));
    const double extra =
        device != nullptr && op.cuda_extra_atol ? op.cuda_extra_atol(values, dtype, static_cast<int>(k)) : 0.0;
    // One rounding of the fp32 result into the output's dtype on top.
    ExpectClose((*out)[k], want[k], b.atol + extra, b.rtol + RoundingRtol((*out)[k].dtype()),
                absl::StrCat(what, ": forward output ", k, " (", b.why, ")"));
  }
  if (!op.backward) {
    std::cout << "[ op ] " << what << ": forward; no backward (" << op.no_backward << ")\n";
    return;
  }
  if (!IsFloatingPoint(dtype)) {
    std::cout << "[ op ] " << what << ": forward; no gradient of integers\n";
    return;
  }
  // Cotangents in each graded output's dtype; their stored values define L.
  Tensors dout;
  Values dout_values;
  for (int k = 0; k < op.graded_outputs; ++k) {
    const Tensor& o = (*out)[k];
    Tensor d = Tensor::FromVector(RandomValues(o.numel(), -1, 1, seed + 100 + k), o.shape(), o.dtype()).value();
    dout_values.push_back(ToDoubles(d));
    dout.push_back(device != nullptr ? d.To(device).value() : d);
  }
  absl::StatusOr<Tensors> grads = op.backward(in, *out, dout);
  ASSERT_TRUE(grads.ok()) << what << ": backward: " << grads.status();
  size_t g = 0;
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (!op.inputs[i].differentiable) continue;
    ASSERT_LT(g, grads->size()) << what << ": the backward gave no gradient of " << op.inputs[i].name;
    auto loss = [&](const std::vector<double>& xi) {
      Values v = values;
      v[i] = xi;
      const Values o = op.reference(v);
      double l = 0;
      for (int k = 0; k < op.graded_outputs; ++k) l += Dot(dout_values[k], o[k]);
      return l;
    };
    const std::vector<double> numeric = NumericGradient(loss, values[i]);
    const Bound b = op.backward_bound(dtype, static_cast<int>(i));
    ExpectClose((*grads)[g], numeric, b.atol + kFiniteDifferenceAtol,
                b.rtol + RoundingRtol((*grads)[g].dtype()),
                absl::StrCat(what, ": d", op.inputs[i].name, " vs finite differences (", b.why, ")"));
    ++g;
  }
  EXPECT_EQ(g, grads->size()) << what << ": gradients of the backward and differentiable inputs";
  std::cout << "[ op ] " << what << ": forward, and backward vs finite differences\n";
}

// Fails (nonfatally, once) naming every part the descriptor lacks.
void ExpectComplete(const OpDescriptor& op) {
  const std::vector<std::string> missing = MissingParts(op);
  if (missing.empty()) return;
  ADD_FAILURE() << "op '" << op.name << "' (family '" << op.family << "') is registered with "
                << absl::StrJoin(missing, "; ") << "; see docs/adding_an_op.md";
}

// Every backend of the op that this build and machine can run, for every dtype.
void CheckOnCpu(const OpDescriptor& op) {
  ExpectComplete(op);
  if (!MissingParts(op).empty()) return;
  std::vector<DType> dtypes = op.dtypes;
  dtypes.insert(dtypes.end(), op.cpu_only_dtypes.begin(), op.cpu_only_dtypes.end());
  for (DType dtype : dtypes) {
    SCOPED_TRACE(Name(op, "cpu", dtype));
    CheckOp(op, dtype, nullptr, "cpu");
  }
}

class OpHarness : public ::testing::TestWithParam<const OpDescriptor*> {};

TEST_P(OpHarness, Cpu) { CheckOnCpu(*GetParam()); }

TEST_P(OpHarness, Cuda) {
  const OpDescriptor& op = *GetParam();
  ExpectComplete(op);
  if (!MissingParts(op).empty()) return;
  if (!op.backends.cuda) GTEST_SKIP() << "CPU only: " << op.cpu_only;
  if (!::zeroshard::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  if (!op.backends.cuda_library.empty() && ::zeroshard::testing::OnCudaSimulator()) {
    GTEST_SKIP() << op.backends.cuda_library << " does not run on the CUDA simulator";
  }
  CudaAllocator gpu(0);
  for (DType dtype : op.dtypes) {
    SCOPED_TRACE(Name(op, "cuda", dtype));
    CheckOp(op, dtype, &gpu, "cuda");
  }
}

std::vector<const OpDescriptor*> AllOps() {
  std::vector<const OpDescriptor*> ops;
  for (const OpDescriptor& op : RegisteredOps()) ops.push_back(&op);
  return ops;
}

// Test names: the op's name with '/' as '_' ("unary/gelu" -> unary_gelu).
std::string ParamName(const ::testing::TestParamInfo<const OpDescriptor*>& info) {
  std::string s = info.param->name;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpHarness, ::testing::ValuesIn(AllOps()), ParamName);

// ---------------------------------------------------------------- the registry itself

TEST(OpRegistry, EveryDeclaredFamilyIsRegisteredWithItsCudaCase) {
  std::set<std::string> families;
  for (const DeclaredFamily& f : kDeclaredFamilies) {
    families.insert(f.name);
    bool registered = false, cuda = false;
    for (const OpDescriptor& op : RegisteredOps()) {
      if (op.family != f.name) continue;
      registered = true;
      cuda = cuda || op.backends.cuda;
    }
    EXPECT_TRUE(registered) << "op family '" << f.name << "' is declared with zs_op in "
                            << "kernels/BUILD.bazel and registers no op (kernels/" << f.name
                            << "_op.cc); see docs/adding_an_op.md";
    EXPECT_TRUE(!f.cuda_kernels || cuda)
        << "op family '" << f.name << "' has CUDA kernels and no op with a CUDA case";
  }
  std::set<std::string> names;
  for (const OpDescriptor& op : RegisteredOps()) {
    EXPECT_TRUE(families.count(op.family)) << "op '" << op.name << "' names family '" << op.family
                                           << "', which kernels/BUILD.bazel does not declare";
    EXPECT_TRUE(names.insert(op.name).second) << "op '" << op.name << "' is registered twice";
  }
  std::cout << "[ op ] " << RegisteredOps().size() << " ops in " << families.size()
            << " families: ";
  std::vector<std::string> all;
  for (const OpDescriptor& op : RegisteredOps()) all.push_back(op.name);
  std::cout << absl::StrJoin(all, ", ") << "\n";
}

// An op registered without a reference, without a gradient check (or a reason
// it has none) or without a CUDA case (or a CPU-only mark) fails the harness.
TEST(OpRegistry, AnIncompleteDescriptorFailsTheHarness) {
  const OpDescriptor complete{
      .name = "identity",
      .family = "elementwise",
      .cpu_only = "a test of the harness",
      .dtypes = {DType::kF32, DType::kBF16},
      .inputs = {{.name = "x", .shape = {3}}},
      .forward = [](const Tensors& in) -> absl::StatusOr<Tensors> { return in; },
      .reference = [](const Values& in) { return in; },
      .forward_bound = [](DType, int) { return Bound{0, 0, "exact"}; },
      .no_backward = "a test of the harness",
  };
  EXPECT_TRUE(MissingParts(complete).empty()) << absl::StrJoin(MissingParts(complete), "; ");
  CheckOnCpu(complete);

  OpDescriptor op = complete;
  op.reference = nullptr;
  EXPECT_NONFATAL_FAILURE(CheckOnCpu(op), "op 'identity' (family 'elementwise') is registered with no double-precision reference");
  op = complete;
  op.cpu_only.clear();
  EXPECT_NONFATAL_FAILURE(CheckOnCpu(op), "no CUDA case and no reason it is CPU only");
  op = complete;
  op.no_backward.clear();
  EXPECT_NONFATAL_FAILURE(CheckOnCpu(op), "no backward (gradient check) and no reason it has none");
  // A backward needs its bound.
  op.backward = [](const Tensors&, const Tensors&, const Tensors& dout) -> absl::StatusOr<Tensors> {
    return dout;
  };
  EXPECT_NONFATAL_FAILURE(CheckOnCpu(op), "a backward without a bound");
  // All three at once: one failure naming each.
  op = complete;
  op.reference = nullptr;
  op.cpu_only.clear();
  op.no_backward.clear();
  EXPECT_EQ(MissingParts(op).size(), 3u) << absl::StrJoin(MissingParts(op), "; ");
}

}  // namespace
}  // namespace zeroshard::ops
