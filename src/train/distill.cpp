// Distillation through the training loop: a loss hook that gives the student normalised batches and the
// teacher the same images as raw pixels.
#include "ipj/train/distill.hpp"

#include <torch/torch.h>

#include <chrono>
#include <filesystem>

#include "ipj/core/error.hpp"
#include "ipj/core/progress.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/model_setup.hpp"
#include "ipj/train/train_config.hpp"
#include "ipj/train/training_loop.hpp"

namespace ipj::train {

namespace {

// The distillation loss of one batch: the student against the teacher's softened outputs and the labels
// that are kept (the first labeled_limit samples of the data set).
class DistillationLoss {
 public:
  DistillationLoss(const DistillOptions& options, const data::Dataset& dataset, const PixelForward& teacher,
                   models::Classifier& student)
      : options_(options),
        dataset_(dataset),
        teacher_(teacher),
        student_(student),
        mean_(torch::tensor(dataset.normalization.mean).view({1, -1, 1, 1})),
        std_(torch::tensor(dataset.normalization.std).view({1, -1, 1, 1})) {}

  // The epoch's sample order: which samples of a batch have labels.
  void begin_epoch(const data::LoaderOptions& loader) {
    if (options_.labeled_limit > 0)
      order_ = data::epoch_order(dataset_.train.count, loader.seed, loader.epoch, loader.shuffle);
  }

  StepLoss operator()(const data::Batch& batch) const {
    const double temperature = options_.temperature;
    torch::Tensor soft_targets;  // [B, classes]
    if (options_.alpha > 0.0) {
      torch::NoGradGuard no_grad;
      const torch::Tensor pixels = batch.images * std_ + mean_;  // back to [0, 1] for the teacher
      soft_targets = torch::softmax(teacher_(pixels).to(torch::kFloat) / temperature, 1);
    }
    const torch::Tensor logits = student_.forward(batch.images);  // [B, classes]
    torch::Tensor per_sample = torch::nn::functional::cross_entropy(
        logits, batch.labels,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));  // [B]
    if (options_.labeled_limit > 0) per_sample = per_sample * labeled_mask(batch);
    torch::Tensor loss = per_sample.mean() * (1.0 - options_.alpha);
    if (options_.alpha > 0.0) {
      const torch::Tensor log_student = torch::log_softmax(logits / temperature, 1);
      const torch::Tensor divergence = torch::nn::functional::kl_div(
          log_student, soft_targets, torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
      loss = loss + divergence * (options_.alpha * temperature * temperature);
    }
    return {loss, logits};
  }

 private:
  // [B]: 1 for samples with a label (data set index < labeled_limit), in loader order order[index * B ...].
  torch::Tensor labeled_mask(const data::Batch& batch) const {
    const std::int64_t first = batch.index * options_.batch_size;
    std::vector<float> labeled(static_cast<std::size_t>(batch.labels.size(0)));
    for (std::size_t row = 0; row < labeled.size(); ++row)
      labeled[row] = order_[static_cast<std::size_t>(first) + row] < options_.labeled_limit ? 1.0f : 0.0f;
    return torch::tensor(labeled);
  }

  const DistillOptions& options_;
  const data::Dataset& dataset_;
  const PixelForward& teacher_;
  models::Classifier& student_;
  torch::Tensor mean_, std_;  // [1, C, 1, 1]
  std::vector<std::int64_t> order_;
};

}  // namespace

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
  config.data_options = dataset.options;
  torch::optim::SGD optimizer(student->parameters(),
                              torch::optim::SGDOptions(options.learning_rate).momentum(0.9));
  DistillationLoss distillation(options, dataset, teacher, *student);
  const std::unique_ptr<TrainingStep> step = make_torch_optimizer_step(
      optimizer, [&](const data::Batch& batch, const StepContext&) { return distillation(batch); });
  EpochLoopOptions loop;
  loop.images = &dataset.train;
  loop.normalization = &dataset.normalization;
  loop.loader = [&](int epoch) {
    data::LoaderOptions loader;
    loader.batch_size = options.batch_size;
    loader.seed = options.seed;
    loader.epoch = static_cast<std::uint64_t>(epoch);
    return loader;
  };
  loop.epochs = options.epochs;
  loop.schedule.base_lr = options.learning_rate;
  loop.label = "distill";
  loop.show_progress = options.show_progress;
  EpochHooks hooks;
  hooks.before_epoch = [&](int epoch) {
    student->train();
    distillation.begin_epoch(loop.loader(epoch));
  };
  run_epochs(*step, loop, hooks);
  const double temperature = options.temperature;
  student->eval();
  const EvalResult student_eval = evaluate(*student, dataset.test, dataset.normalization, 1000);
  const double teacher_acc = pixel_accuracy(teacher, dataset.test, 256);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Json report = {
      {"schema_version", kResultsSchemaVersion},
      {"kind", "distill"},
      {"threads", device::unplanned_threads_json()},
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
