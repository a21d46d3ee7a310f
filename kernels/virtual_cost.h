// What an op entry charges on a virtual device (runtime/virtual_device.h):
// the arithmetic and the device-memory traffic of the kernel the GPU would
// run, counted from the shapes, so the simulator's cost model can turn them
// into seconds. One helper per pattern; each op entry's `case
// DeviceType::kVirtual` calls one.
//
//   case DeviceType::kVirtual:
//     return ChargeElementwise("Binary", out, {&a, &b}, /*flops_per_element=*/1);
#ifndef ZEROSHARD_KERNELS_VIRTUAL_COST_H_
#define ZEROSHARD_KERNELS_VIRTUAL_COST_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "zeroshard/runtime/tensor.h"
#include "zeroshard/runtime/virtual_device.h"

namespace zeroshard {

// Bytes a kernel reads or writes for `t`: its elements once each (a broadcast
// view reads its storage's elements; counting the view's is an upper bound the
// GPU's caches make small, kept for simplicity).
inline double TrafficBytes(const Tensor& t) {
  return t.defined() ? static_cast<double>(t.numel()) * static_cast<double>(t.itemsize()) : 0.0;
}

// A kernel that reads `inputs` and writes `outputs` once (undefined ones
// count nothing), doing `flops_per_element` operations per element of the
// first defined output, on that output's device.
inline absl::Status ChargeMemoryBound(absl::string_view op, std::initializer_list<const Tensor*> outputs,
                                      std::initializer_list<const Tensor*> inputs,
                                      double flops_per_element) {
  double bytes = 0;
  for (const Tensor* t : outputs) bytes += TrafficBytes(*t);
  for (const Tensor* t : inputs) bytes += TrafficBytes(*t);
  const Tensor* first_defined = *outputs.begin();
  for (const Tensor* t : outputs) {
    if (t->defined()) {
      first_defined = t;
      break;
    }
  }
  const Tensor& first = *first_defined;
  return ChargeVirtual(first.device(),
                       OpCost{.op = op,
                              .flops = flops_per_element * static_cast<double>(first.numel()),
                              .bytes = bytes,
                              .dtype = first.dtype()});
}

// An elementwise kernel writing `out` from `inputs`.
inline absl::Status ChargeElementwise(absl::string_view op, const Tensor& out,
                                      std::initializer_list<const Tensor*> inputs,
                                      double flops_per_element = 1) {
  double bytes = TrafficBytes(out);
  for (const Tensor* t : inputs) bytes += TrafficBytes(*t);
  return ChargeVirtual(out.device(), OpCost{.op = op,
                                            .flops = flops_per_element * static_cast<double>(out.numel()),
                                            .bytes = bytes,
                                            .dtype = out.dtype()});
}

// batch x [m, k] x [k, n] in `dtype`, reading the operands and writing the result once.
inline absl::Status ChargeGemm(absl::string_view op, Device device, int64_t batch, int64_t m,
                               int64_t n, int64_t k, DType dtype, double bytes, bool tf32 = false) {
  return ChargeVirtual(device, OpCost{.op = op,
                                      .flops = 2.0 * static_cast<double>(batch) * static_cast<double>(m) *
                                               static_cast<double>(n) * static_cast<double>(k),
                                      .bytes = bytes,
                                      .gemm_batch = batch,
                                      .gemm_m = m,
                                      .gemm_n = n,
                                      .gemm_k = k,
                                      .dtype = dtype,
                                      .tf32 = tf32});
}

}  // namespace zeroshard

#endif  // ZEROSHARD_KERNELS_VIRTUAL_COST_H_
