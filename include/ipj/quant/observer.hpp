// Activation observers for static quantization: min-max and percentile (clips outliers), and the affine
// quint8 parameters they imply. Weights use symmetric per-channel qint8 scales (weight_scales).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ipj::quant {

struct QuantParams {
  double scale = 1.0;
  std::int64_t zero_point = 0;
};

enum class ObserverKind { minmax, percentile };
// "minmax" | "percentile"; throws ipj::Error(usage) naming the accepted values.
ObserverKind parse_observer_kind(const std::string& name);

class ActivationObserver {
 public:
  explicit ActivationObserver(ObserverKind kind = ObserverKind::minmax, double percentile = 99.99);
  void observe(const torch::Tensor& values);
  bool empty() const { return observed_ == 0; }
  // quint8 [0, 255] covering [min(observed, 0), max(observed, 0)] (percentile-clipped for percentile).
  QuantParams quant_params() const;
  double min_value() const { return min_; }
  double max_value() const { return max_; }

 private:
  ObserverKind kind_;
  double percentile_;
  double min_ = 0.0;
  double max_ = 0.0;
  std::int64_t observed_ = 0;
  std::vector<torch::Tensor> samples_;  // percentile: strided subsample of the values seen
  std::int64_t sampled_ = 0;
};

// Affine quint8 parameters for the range [low, high] (the range is widened to include 0).
QuantParams affine_params(double low, double high);
// Symmetric per-output-channel qint8 scales: max|w_c| / 127 (tiny channels get a floor). weight: [out, ...].
torch::Tensor weight_scales(const torch::Tensor& weight);

}  // namespace ipj::quant
