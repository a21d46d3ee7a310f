// Status helpers: every boundary a user can reach returns absl::Status or
// absl::StatusOr<T>; these macros propagate them (Debian's Abseil 20220623 has
// none of its own).
//
//   absl::StatusOr<Tensor> Flat(const Tensor& t) {
//     ZS_ASSIGN_OR_RETURN(Tensor c, t.Contiguous());
//     ZS_RETURN_IF_ERROR(CheckFloat(c, "input"));
//     return c.View({-1});
//   }
//
// Error text says what was expected and what was found:
//   "MatMul: inner dimensions differ: a is [3, 4], b is [5, 2] (expected b.size(0) == 4)".
#ifndef ZEROSHARD_RUNTIME_STATUS_H_
#define ZEROSHARD_RUNTIME_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ZS_STATUS_CONCAT_INNER_(a, b) a##b
#define ZS_STATUS_CONCAT_(a, b) ZS_STATUS_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define ZS_RETURN_IF_ERROR(expr)                          \
  do {                                                    \
    ::absl::Status zs_status_ = (expr);                   \
    if (!zs_status_.ok()) [[unlikely]] return zs_status_; \
  } while (0)

// `ZS_ASSIGN_OR_RETURN(lhs, expr)`: evaluates `expr` (an absl::StatusOr<T>);
// on error returns its status, otherwise moves the value into `lhs`, which may
// be a declaration (`Tensor t`, `auto t`) or an existing variable. It expands
// to several statements: inside an `if` or a loop, put it in braces.
#define ZS_ASSIGN_OR_RETURN(lhs, expr) \
  ZS_ASSIGN_OR_RETURN_IMPL_(ZS_STATUS_CONCAT_(zs_statusor_, __LINE__), lhs, expr)

#define ZS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)           \
  auto statusor = (expr);                                        \
  if (!statusor.ok()) [[unlikely]] return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // ZEROSHARD_RUNTIME_STATUS_H_
