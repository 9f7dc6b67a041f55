// Observers: running min/max, or a bounded subsample whose percentile clips rare outliers.
#include "ipj/quant/observer.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "ipj/core/error.hpp"

namespace ipj::quant {
namespace {
constexpr std::int64_t kMaxSamples = 1 << 21;  // values kept per percentile observer (8 MiB)
}

ObserverKind parse_observer_kind(const std::string& name) {
  if (name == "minmax") return ObserverKind::minmax;
  if (name == "percentile") return ObserverKind::percentile;
  fail(ErrorCategory::usage, "unknown observer '" + name + "': use minmax or percentile");
}

ActivationObserver::ActivationObserver(ObserverKind kind, double percentile)
    : kind_(kind), percentile_(percentile) {
  if (!(percentile > 50.0 && percentile <= 100.0))
    fail(ErrorCategory::usage, "percentile must be in (50, 100], got " + std::to_string(percentile));
}

void ActivationObserver::observe(const torch::Tensor& values) {
  const torch::Tensor flat = values.detach().to(torch::kFloat).reshape({-1});
  if (flat.numel() == 0) return;
  const double low = flat.min().item<double>();
  const double high = flat.max().item<double>();
  min_ = observed_ == 0 ? low : std::min(min_, low);
  max_ = observed_ == 0 ? high : std::max(max_, high);
  observed_ += flat.numel();
  if (kind_ == ObserverKind::percentile && sampled_ < kMaxSamples) {
    const std::int64_t room = kMaxSamples - sampled_;
    const std::int64_t step = std::max<std::int64_t>(1, flat.numel() / room);
    torch::Tensor kept = flat.slice(0, 0, flat.numel(), step).slice(0, 0, room).clone();
    sampled_ += kept.numel();
    samples_.push_back(std::move(kept));
  }
}

QuantParams ActivationObserver::quant_params() const {
  if (observed_ == 0) fail(ErrorCategory::internal, "observer queried before any calibration data");
  if (kind_ == ObserverKind::minmax || samples_.empty()) return affine_params(min_, max_);
  const torch::Tensor all = torch::cat(samples_);
  const double fraction = percentile_ / 100.0;
  const double high = torch::quantile(all, fraction).item<double>();
  const double low = torch::quantile(all, 1.0 - fraction).item<double>();
  return affine_params(low, high);
}

QuantParams affine_params(double low, double high) {
  low = std::min(low, 0.0);
  high = std::max(high, 0.0);
  QuantParams params;
  params.scale = std::max((high - low) / 255.0, 1e-8);
  params.zero_point =
      std::clamp<std::int64_t>(static_cast<std::int64_t>(std::lround(-low / params.scale)), 0, 255);
  return params;
}

torch::Tensor weight_scales(const torch::Tensor& weight) {
  const torch::Tensor max_abs = weight.detach().abs().reshape({weight.size(0), -1}).amax(1);  // [out]
  return torch::clamp_min(max_abs / 127.0, 1e-8).to(torch::kDouble);
}

}  // namespace ipj::quant
