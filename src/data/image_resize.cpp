// Pillow-compatible bilinear resampling (see the header): coefficients per output position, then a
// horizontal and a vertical pass over each plane with 22-bit fixed-point weights.
#include "ipj/data/image_resize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace ipj::data {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS

double triangle(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// For each output position: the first input index, the number of inputs and their fixed-point weights
// (`kernel_size` per position), exactly as Pillow's precompute_coeffs + normalize_coeffs_8bpc.
struct Coefficients {
  int kernel_size = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<std::int32_t> weights;  // [output size, kernel_size]
};

Coefficients precompute(int input_size, int output_size) {
  const double scale = static_cast<double>(input_size) / output_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the triangle's support is 1
  Coefficients result;
  result.kernel_size = static_cast<int>(std::ceil(support)) * 2 + 1;
  result.first.resize(static_cast<size_t>(output_size));
  result.count.resize(static_cast<size_t>(output_size));
  result.weights.assign(static_cast<size_t>(output_size) * result.kernel_size, 0);
  std::vector<double> weights(static_cast<size_t>(result.kernel_size));
  for (int position = 0; position < output_size; ++position) {
    const double center = (position + 0.5) * scale;
    const int first = std::max(static_cast<int>(center - support + 0.5), 0);
    const int last = std::min(static_cast<int>(center + support + 0.5), input_size);
    const int count = last - first;
    double total = 0.0;
    for (int index = 0; index < count; ++index) {
      weights[static_cast<size_t>(index)] = triangle((index + first - center + 0.5) / filter_scale);
      total += weights[static_cast<size_t>(index)];
    }
    std::int32_t* fixed = result.weights.data() + static_cast<size_t>(position) * result.kernel_size;
    for (int index = 0; index < count; ++index) {
      const double weight = total != 0.0 ? weights[static_cast<size_t>(index)] / total : 0.0;
      fixed[index] = static_cast<std::int32_t>(weight < 0 ? -0.5 + weight * (1 << kPrecisionBits)
                                                          : 0.5 + weight * (1 << kPrecisionBits));
    }
    result.first[static_cast<size_t>(position)] = first;
    result.count[static_cast<size_t>(position)] = count;
  }
  return result;
}

std::uint8_t clip(std::int32_t sum) {
  return static_cast<std::uint8_t>(std::clamp(sum >> kPrecisionBits, 0, 255));
}

}  // namespace

void resize_bilinear(const std::uint8_t* source, int channels, int height, int width, std::uint8_t* target,
                     int target_height, int target_width) {
  const std::int64_t source_plane = static_cast<std::int64_t>(height) * width;
  const std::int64_t target_plane = static_cast<std::int64_t>(target_height) * target_width;
  if (height == target_height && width == target_width) {
    std::memcpy(target, source, static_cast<size_t>(channels * source_plane));
    return;
  }
  const bool horizontal = width != target_width, vertical = height != target_height;
  const Coefficients columns = precompute(width, target_width);
  const Coefficients rows = precompute(height, target_height);
  std::vector<std::uint8_t> temporary(static_cast<size_t>(height) * target_width);
  for (int channel = 0; channel < channels; ++channel) {
    const std::uint8_t* input = source + channel * source_plane;
    std::uint8_t* output = target + channel * target_plane;
    // Horizontal pass: [height, width] -> [height, target_width] (every row: rounding is per row anyway).
    const std::uint8_t* after_horizontal = input;
    if (horizontal) {
      for (int y = 0; y < height; ++y) {
        for (int x = 0; x < target_width; ++x) {
          const std::int32_t* weights = columns.weights.data() + static_cast<size_t>(x) * columns.kernel_size;
          const std::uint8_t* row = input + static_cast<std::int64_t>(y) * width + columns.first[x];
          std::int32_t sum = 1 << (kPrecisionBits - 1);
          for (int index = 0; index < columns.count[x]; ++index)
            sum += row[index] * weights[index];
          temporary[static_cast<size_t>(y) * target_width + x] = clip(sum);
        }
      }
      after_horizontal = temporary.data();
    }
    if (!vertical) {
      std::memcpy(output, after_horizontal, static_cast<size_t>(target_plane));
      continue;
    }
    // Vertical pass: [height, target_width] -> [target_height, target_width].
    for (int y = 0; y < target_height; ++y) {
      const std::int32_t* weights = rows.weights.data() + static_cast<size_t>(y) * rows.kernel_size;
      for (int x = 0; x < target_width; ++x) {
        std::int32_t sum = 1 << (kPrecisionBits - 1);
        for (int index = 0; index < rows.count[y]; ++index)
          sum += after_horizontal[static_cast<std::int64_t>(rows.first[y] + index) * target_width + x] *
                 weights[index];
        output[static_cast<std::int64_t>(y) * target_width + x] = clip(sum);
      }
    }
  }
}

}  // namespace ipj::data
