#include "zeroshard/optim/lr_schedule.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard::optim {

absl::string_view LrScheduleKindName(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kConstant: return "constant";
    case LrScheduleKind::kCosine: return "cosine";
    case LrScheduleKind::kLinear: return "linear";
  }
  return "unknown";
}

absl::StatusOr<LrScheduleKind> ParseLrScheduleKind(absl::string_view name) {
  for (LrScheduleKind k : {LrScheduleKind::kConstant, LrScheduleKind::kCosine,
                           LrScheduleKind::kLinear}) {
    if (name == LrScheduleKindName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown lr schedule \"", name, "\", expected constant, cosine or linear"));
}

absl::Status LrSchedule::Validate() const {
  if (!std::isfinite(lr) || lr < 0) {
    return absl::InvalidArgumentError(absl::StrCat("lr schedule: lr must be finite and >= 0, got ", lr));
  }
  if (warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lr schedule: warmup_steps must be >= 0, got ", warmup_steps));
  }
  if (kind != LrScheduleKind::kConstant) {
    if (!std::isfinite(min_lr) || min_lr < 0 || min_lr > lr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lr schedule: min_lr must be in [0, lr = ", lr, "], got ", min_lr));
    }
    if (decay_steps < warmup_steps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lr schedule: decay_steps (", decay_steps, ", the step at which decay ends) must be >= "
          "warmup_steps (", warmup_steps, ")"));
    }
  }
  return absl::OkStatus();
}

std::string LrSchedule::ToString() const {
  if (kind == LrScheduleKind::kConstant) {
    return absl::StrCat("constant(lr=", lr, ", warmup_steps=", warmup_steps, ")");
  }
  return absl::StrCat(LrScheduleKindName(kind), "(lr=", lr, ", min_lr=", min_lr,
                      ", warmup_steps=", warmup_steps, ", decay_steps=", decay_steps, ")");
}

double LrAt(const LrSchedule& s, int64_t it) {
  if (it < s.warmup_steps) {
    return s.lr * static_cast<double>(it + 1) / static_cast<double>(s.warmup_steps + 1);
  }
  if (s.kind == LrScheduleKind::kConstant) return s.lr;
  if (it > s.decay_steps || s.decay_steps == s.warmup_steps) return s.min_lr;
  const double ratio = static_cast<double>(it - s.warmup_steps) /
                       static_cast<double>(s.decay_steps - s.warmup_steps);
  const double coeff = s.kind == LrScheduleKind::kCosine ? 0.5 * (1.0 + std::cos(M_PI * ratio))
                                                         : 1.0 - ratio;
  return s.min_lr + coeff * (s.lr - s.min_lr);
}

std::map<std::string, std::string> LrScheduler::StateDict() const {
  return {
      {"kind", std::string(LrScheduleKindName(schedule_.kind))},
      {"lr", absl::StrFormat("%.17g", schedule_.lr)},
      {"min_lr", absl::StrFormat("%.17g", schedule_.min_lr)},
      {"warmup_steps", absl::StrCat(schedule_.warmup_steps)},
      {"decay_steps", absl::StrCat(schedule_.decay_steps)},
      {"step", absl::StrCat(step_)},
  };
}

absl::StatusOr<LrScheduler> LrScheduler::FromStateDict(
    const std::map<std::string, std::string>& state) {
  auto get = [&](absl::string_view key) -> absl::StatusOr<std::string> {
    auto it = state.find(std::string(key));
    if (it == state.end()) {
      return absl::InvalidArgumentError(absl::StrCat("lr scheduler state: missing key \"", key, "\""));
    }
    return it->second;
  };
  auto bad = [](absl::string_view key, absl::string_view value, absl::string_view expected) {
    return absl::InvalidArgumentError(absl::StrCat("lr scheduler state: ", key, " is \"", value,
                                                   "\", expected ", expected));
  };
  for (const auto& [key, value] : state) {
    if (key != "kind" && key != "lr" && key != "min_lr" && key != "warmup_steps" &&
        key != "decay_steps" && key != "step") {
      return absl::InvalidArgumentError(absl::StrCat("lr scheduler state: unknown key \"", key,
                                                     "\" (expected kind, lr, min_lr, "
                                                     "warmup_steps, decay_steps, step)"));
    }
  }
  LrSchedule s;
  int64_t step = 0;
  {
    absl::StatusOr<std::string> v = get("kind");
    if (!v.ok()) return v.status();
    absl::StatusOr<LrScheduleKind> kind = ParseLrScheduleKind(*v);
    if (!kind.ok()) return kind.status();
    s.kind = *kind;
  }
  for (auto [key, out] : {std::pair<absl::string_view, double*>{"lr", &s.lr},
                          std::pair<absl::string_view, double*>{"min_lr", &s.min_lr}}) {
    absl::StatusOr<std::string> v = get(key);
    if (!v.ok()) return v.status();
    if (!absl::SimpleAtod(*v, out)) return bad(key, *v, "a number");
  }
  for (auto [key, out] : {std::pair<absl::string_view, int64_t*>{"warmup_steps", &s.warmup_steps},
                          std::pair<absl::string_view, int64_t*>{"decay_steps", &s.decay_steps},
                          std::pair<absl::string_view, int64_t*>{"step", &step}}) {
    absl::StatusOr<std::string> v = get(key);
    if (!v.ok()) return v.status();
    if (!absl::SimpleAtoi(*v, out)) return bad(key, *v, "an integer");
  }
  if (step < 0) return bad("step", absl::StrCat(step), "an integer >= 0");
  absl::Status valid = s.Validate();
  if (!valid.ok()) return valid;
  return LrScheduler(s, step);
}

}  // namespace zeroshard::optim
