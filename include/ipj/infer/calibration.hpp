// Calibration, a step of its own: which images a static int8 variant is calibrated on, chosen and loaded in
// one place for every model format (ipj checkpoints, program and graph files, TorchScript files). Loading
// reads up to `samples` images of the training split; their shape is checked against the model's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/data/data_options.hpp"
#include "ipj/data/dataset.hpp"

namespace ipj::infer {

struct CalibrationSource {
  std::string data;                // folder (default: the data set the model records, else Fashion-MNIST)
  data::DataOptions data_options;  // --resize/--channels/... on top of the model's recorded data options
  std::int64_t samples = 1000;
};

struct CalibrationImages {
  std::string folder;     // where they came from (for messages)
  data::ImageSet images;  // [N, C, H, W] uint8 pixels, N <= samples
};

// The folder `source` names, else `recorded_folder` (the model's training data), else Fashion-MNIST.
std::string calibration_folder(const CalibrationSource& source, const std::string& recorded_folder);

// Loads the calibration images with the recorded data options overridden by source.data_options, and checks
// them against the model's sample shape (ipj::Error invalid_input naming the folder when they differ).
CalibrationImages load_calibration_images(const CalibrationSource& source, const std::string& recorded_folder,
                                          const data::DataOptions& recorded_options,
                                          const std::vector<std::int64_t>& sample_shape);

}  // namespace ipj::infer
