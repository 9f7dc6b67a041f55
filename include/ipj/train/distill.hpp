// Knowledge distillation (seed 004 section 6): trains an ipj student model on the temperature-softened
// outputs of any teacher (a pixels -> logits function: checkpoint, TorchScript, int8...) plus the hard
// labels: loss = alpha * T^2 * KL(softmax(teacher / T) || softmax(student / T)) + (1 - alpha) *
// cross_entropy. alpha = 0 is plain training of the same student (the baseline the gain is measured against).
#pragma once

#include <cstdint>
#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/models/model_source.hpp"
#include "ipj/train/evaluate.hpp"

namespace ipj::train {

struct DistillOptions {
  models::ModelSource student = "mlp";  // a zoo name or a user's TorchScript file
  int epochs = 3;
  double learning_rate = 0.01;
  std::int64_t batch_size = 128;
  double temperature = 4.0;
  double alpha = 0.7;
  std::uint64_t seed = 0;
  // Only the first N training samples keep their labels (0 = all): the rest is an unlabeled transfer set that
  // the student learns from the teacher alone, the usual way a teacher's knowledge reaches more data.
  std::int64_t labeled_limit = 0;
  std::string data_dir;  // recorded in the student's checkpoint
  std::string out_dir;   // checkpoint.pt + results.json of the student ("" = not saved)
  bool show_progress = true;
};

// Trains the student on `dataset`; `teacher` sees raw pixels [B, C, H, W] in [0, 1]. Returns the report
// (student and teacher test accuracy, parameters, wall time). Throws ipj::Error(usage) for bad settings.
Json run_distillation(const DistillOptions& options, const data::Dataset& dataset,
                      const PixelForward& teacher);

}  // namespace ipj::train
