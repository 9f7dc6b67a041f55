// The distillation loop: normalised batches for the student, the same images as raw pixels for the teacher.
#include "ipj/train/distill.hpp"

#include <torch/torch.h>

#include <chrono>
#include <filesystem>

#include "ipj/core/error.hpp"
#include "ipj/core/progress.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/model_setup.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::train {

Json run_distillation(const DistillOptions& options, const data::Dataset& dataset,
                      const PixelForward& teacher) {
  if (options.epochs < 1) fail(ErrorCategory::usage, "--epochs must be >= 1");
  if (!(options.temperature > 0.0 && options.temperature <= 1000.0))  // NaN fails too
    fail(ErrorCategory::usage, "--temperature must be in (0, 1000]");
  if (!(options.learning_rate > 0.0 && options.learning_rate <= 100.0))
    fail(ErrorCategory::usage, "--lr must be a positive number up to 100");
  if (options.batch_size < 1) fail(ErrorCategory::usage, "--batch must be at least 1");
  if (!(options.alpha >= 0.0 && options.alpha <= 1.0))
    fail(ErrorCategory::usage, "--alpha must be in [0, 1]");
  const auto start = std::chrono::steady_clock::now();
  torch::manual_seed(options.seed);
  const models::InputShape shape = image_shape(dataset);
  models::ClassifierPtr student = models::build_classifier(options.student, shape, dataset.num_classes);
  TrainConfig config;
  config.model = options.student;
  config.epochs = options.epochs;
  config.batch_size = options.batch_size;
  config.learning_rate = options.learning_rate;
  config.seed = options.seed;
  config.data_dir = options.data_dir.empty() ? dataset.directory : options.data_dir;
  torch::optim::SGD optimizer(student->parameters(),
                              torch::optim::SGDOptions(options.learning_rate).momentum(0.9));
  const torch::Tensor mean = torch::tensor(dataset.normalization.mean).view({1, -1, 1, 1});
  const torch::Tensor std = torch::tensor(dataset.normalization.std).view({1, -1, 1, 1});
  const double temperature = options.temperature;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    student->train();
    data::LoaderOptions loader_options;
    loader_options.batch_size = options.batch_size;
    loader_options.seed = options.seed;
    loader_options.epoch = static_cast<std::uint64_t>(epoch);
    data::BatchLoader loader(dataset.train, dataset.normalization, loader_options);
    const std::vector<std::int64_t> order = data::epoch_order(dataset.train.count, loader_options.seed,
                                                              loader_options.epoch, loader_options.shuffle);
    ProgressBar progress("distill " + std::to_string(epoch + 1) + "/" + std::to_string(options.epochs),
                         loader.batch_count(), options.show_progress);
    std::int64_t done = 0;
    while (auto batch = loader.next()) {
      torch::Tensor soft_targets;  // [B, classes]
      if (options.alpha > 0.0) {
        torch::NoGradGuard no_grad;
        const torch::Tensor pixels = batch->images * std + mean;  // back to [0, 1] for the teacher
        soft_targets = torch::softmax(teacher(pixels).to(torch::kFloat) / temperature, 1);
      }
      const torch::Tensor logits = student->forward(batch->images);  // [B, classes]
      torch::Tensor per_sample = torch::nn::functional::cross_entropy(
          logits, batch->labels,
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));  // [B]
      if (options.labeled_limit > 0) {
        // samples of this batch, in loader order: order[index * B ...]; labeled iff dataset index <
        // labeled_limit
        const std::int64_t first = batch->index * options.batch_size;
        std::vector<float> labeled(static_cast<std::size_t>(per_sample.size(0)));
        for (std::size_t row = 0; row < labeled.size(); ++row)
          labeled[row] = order[static_cast<std::size_t>(first) + row] < options.labeled_limit ? 1.0f : 0.0f;
        per_sample = per_sample * torch::tensor(labeled);
      }
      torch::Tensor loss = per_sample.mean() * (1.0 - options.alpha);
      if (options.alpha > 0.0) {
        const torch::Tensor log_student = torch::log_softmax(logits / temperature, 1);
        const torch::Tensor divergence = torch::nn::functional::kl_div(
            log_student, soft_targets,
            torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
        loss = loss + divergence * (options.alpha * temperature * temperature);
      }
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      progress.update(++done);
    }
    progress.finish();
  }
  student->eval();
  const EvalResult student_eval = evaluate(*student, dataset.test, dataset.normalization, 1000);
  const double teacher_acc = pixel_accuracy(teacher, dataset.test, 256);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Json report = {
      {"schema_version", kResultsSchemaVersion},
      {"kind", "distill"},
      {"student", options.student.label()},
      {"student_params", models::count_parameters(*student)},
      {"student_acc", student_eval.accuracy},
      {"teacher_acc", teacher_acc},
      {"acc_gap_pt", (teacher_acc - student_eval.accuracy) * 100.0},
      {"temperature", temperature},
      {"alpha", options.alpha},
      {"epochs", options.epochs},
      {"train_samples", dataset.train.count},
      {"labeled_samples", options.labeled_limit > 0 ? std::min(options.labeled_limit, dataset.train.count)
                                                    : dataset.train.count},
      {"wall_s", wall_s},
      {"out", options.out_dir.empty() ? Json(nullptr) : Json(options.out_dir)}};
  if (!options.out_dir.empty()) {
    CheckpointState state;
    state.completed_epochs = options.epochs;
    state.config = to_json(config);
    state.epoch_metrics = Json::array();
    state.model_info = describe_model_source(options.student, dataset);
    save_checkpoint((std::filesystem::path(options.out_dir) / kCheckpointFileName).string(), *student,
                    optimizer, state);
    write_trained_torchscript(options.out_dir, *student, state.model_info);  // a student from a file
    write_json_file((std::filesystem::path(options.out_dir) / "results.json").string(), report);
  }
  return report;
}

}  // namespace ipj::train
