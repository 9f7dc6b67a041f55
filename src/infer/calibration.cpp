// The calibration step of static int8 variants: one folder rule and one loader for every model format.
#include "ipj/infer/calibration.hpp"

#include <utility>

#include "ipj/quant/source_model.hpp"

namespace ipj::infer {

std::string calibration_folder(const CalibrationSource& source, const std::string& recorded_folder) {
  if (!source.data.empty()) return source.data;
  if (!recorded_folder.empty()) return recorded_folder;
  return data::kDefaultDataDirectory;
}

CalibrationImages load_calibration_images(const CalibrationSource& source, const std::string& recorded_folder,
                                          const data::DataOptions& recorded_options,
                                          const std::vector<std::int64_t>& sample_shape) {
  CalibrationImages result;
  result.folder = calibration_folder(source, recorded_folder);
  data::Dataset dataset = data::load_dataset(result.folder, source.samples, 1,
                                             data::merge_data_options(recorded_options, source.data_options));
  quant::check_data_shape(sample_shape, dataset.train, result.folder);
  result.images = std::move(dataset.train);
  return result;
}

}  // namespace ipj::infer
