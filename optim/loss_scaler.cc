#include "zeroshard/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard::optim {

absl::Status LossScalerOptions::Validate() const {
  if (initial_scale_power < 0 || initial_scale_power > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler: initial_scale_power must be in [0, 64], got ", initial_scale_power));
  }
  if (!(scale_factor > 1) || !std::isfinite(scale_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: scale_factor must be finite and > 1, got ", scale_factor));
  }
  if (scale_window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: scale_window must be >= 1, got ", scale_window));
  }
  if (hysteresis < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss scaler: hysteresis must be >= 1, got ", hysteresis));
  }
  if (!(min_scale > 0) || !std::isfinite(min_scale) || min_scale > std::ldexp(1.0, initial_scale_power)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler: min_scale must be in (0, 2^initial_scale_power = ",
        std::ldexp(1.0, initial_scale_power), "], got ", min_scale));
  }
  return absl::OkStatus();
}

std::string LossScalerOptions::ToString() const {
  return absl::StrCat("DynamicLossScaler(initial_scale_power=", initial_scale_power,
                      ", scale_factor=", scale_factor, ", scale_window=", scale_window,
                      ", hysteresis=", hysteresis,
                      ", consecutive_hysteresis=", consecutive_hysteresis ? "true" : "false",
                      ", min_scale=", min_scale, ")");
}

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options)
    : options_(options),
      scale_(std::ldexp(1.0, options.initial_scale_power)),
      hysteresis_left_(options.hysteresis) {}

absl::StatusOr<DynamicLossScaler> DynamicLossScaler::Create(const LossScalerOptions& options) {
  absl::Status valid = options.Validate();
  if (!valid.ok()) return valid;
  return DynamicLossScaler(options);
}

absl::Status DynamicLossScaler::Update(bool overflow) {
  if (overflow) {
    if (options_.hysteresis == 1 || hysteresis_left_ == 1) {
      if (scale_ == options_.min_scale && options_.raise_error_at_min_scale) {
        return absl::FailedPreconditionError(absl::StrCat(
            "loss scale already at its minimum ", options_.min_scale,
            " and the gradients still overflow (", skipped_steps_ + 1, " of ", iteration_ + 1,
            " steps skipped); the run cannot continue in fp16"));
      }
      scale_ = std::max(scale_ / options_.scale_factor, options_.min_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_iteration_ = iteration_;
    ++skipped_steps_;
  } else {
    if (options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
    if ((iteration_ - last_overflow_iteration_) % options_.scale_window == 0) {
      if (!options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
      scale_ *= options_.scale_factor;
    }
  }
  ++iteration_;
  return absl::OkStatus();
}

std::string DynamicLossScaler::ToString() const {
  return absl::StrCat("loss scale ", scale_, ", hysteresis left ", hysteresis_left_, ", ",
                      skipped_steps_, " of ", iteration_, " steps skipped");
}

std::map<std::string, std::string> DynamicLossScaler::StateDict() const {
  return {{"scale", absl::StrFormat("%.17g", scale_)},
          {"iteration", absl::StrCat(iteration_)},
          {"last_overflow_iteration", absl::StrCat(last_overflow_iteration_)},
          {"hysteresis_left", absl::StrCat(hysteresis_left_)},
          {"skipped_steps", absl::StrCat(skipped_steps_)}};
}

absl::Status DynamicLossScaler::LoadStateDict(const std::map<std::string, std::string>& state) {
  for (const auto& [key, value] : state) {
    if (key != "scale" && key != "iteration" && key != "last_overflow_iteration" &&
        key != "hysteresis_left" && key != "skipped_steps") {
      return absl::InvalidArgumentError(absl::StrCat("loss scaler state: unknown key \"", key, "\""));
    }
  }
  auto find = [&](const char* key) -> const std::string* {
    auto it = state.find(key);
    return it == state.end() ? nullptr : &it->second;
  };
  double scale = 0;
  int64_t iteration = 0, last = 0, hysteresis = 0, skipped = 0;
  const std::string* v = find("scale");
  if (v == nullptr || !absl::SimpleAtod(*v, &scale) || !(scale > 0) || !std::isfinite(scale)) {
    return absl::InvalidArgumentError(absl::StrCat("loss scaler state: scale is ",
                                                   v ? absl::StrCat("\"", *v, "\"") : "missing",
                                                   ", expected a finite number > 0"));
  }
  for (auto [key, out] : {std::pair<const char*, int64_t*>{"iteration", &iteration},
                          std::pair<const char*, int64_t*>{"last_overflow_iteration", &last},
                          std::pair<const char*, int64_t*>{"hysteresis_left", &hysteresis},
                          std::pair<const char*, int64_t*>{"skipped_steps", &skipped}}) {
    const std::string* s = find(key);
    if (s == nullptr || !absl::SimpleAtoi(*s, out)) {
      return absl::InvalidArgumentError(absl::StrCat("loss scaler state: ", key, " is ",
                                                     s ? absl::StrCat("\"", *s, "\"") : "missing",
                                                     ", expected an integer"));
    }
  }
  if (iteration < 0 || last < -1 || last >= iteration ||
      hysteresis < 1 || hysteresis > options_.hysteresis || skipped < 0 || skipped > iteration) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loss scaler state is inconsistent: iteration ", iteration, ", last_overflow_iteration ",
        last, ", hysteresis_left ", hysteresis, " (configured hysteresis ", options_.hysteresis,
        "), skipped_steps ", skipped));
  }
  scale_ = scale;
  iteration_ = iteration;
  last_overflow_iteration_ = last;
  hysteresis_left_ = static_cast<int>(hysteresis);
  skipped_steps_ = skipped;
  return absl::OkStatus();
}

}  // namespace zeroshard::optim
