// `ipj prune` (magnitude / structured pruning + fine-tuning) and `ipj distill` (knowledge distillation).
#include <cstdio>
#include <iostream>

#include "cli_support.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/quant/prune.hpp"
#include "ipj/train/distill.hpp"

namespace ipj::cli {
CLI::App* register_prune_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "prune",
      "Prune a trained model: --structured removes whole units/channels (fewer parameters and FLOPs) where\n"
      "no residual add or depthwise conv ties them, otherwise the smallest weights are zeroed; then "
      "fine-tunes.\n"
      "Writes a model bench/serve/quantize accept. TorchScript files: magnitude pruning works on any model\n"
      "and writes TorchScript; --structured needs ipj's graph importer (else it prunes by magnitude)\n"
      "Example: ipj prune --model runs/cnn --sparsity 0.5 --structured --epochs 1 --out cnn-pruned.pt\n"
      "Example: ipj prune --model net.pt --input-shape 1,28,28 --sparsity 0.5 --structured --out "
      "net-pruned.pt");
  static CommonOutputFlags flags;
  static quant::PruneOptions options;
  static DataFlags data_flags;
  static ModelInputFlags input_flags;
  add_output_flags(*command, flags);
  command
      ->add_option("--model", options.model_path,
                   "ipj checkpoint / run folder, ipj program or graph file, or TorchScript file")
      ->required();
  add_model_input_flags(*command, input_flags);
  command->add_option("--out", options.out_path, "Where to write the pruned model")->required();
  command->add_option("--sparsity", options.sparsity, "Fraction of units (structured) or weights to remove")
      ->check(finite_range(0.0, 0.99))
      ->capture_default_str();
  command->add_flag("--structured", options.structured, "Remove whole hidden units / channels");
  command->add_option("--epochs", options.epochs, "Fine-tuning epochs (0 = none)")
      ->check(non_negative_integer(1000000))
      ->capture_default_str();
  command->add_option("--lr", options.learning_rate, "Fine-tuning learning rate (SGD, momentum 0.9)")
      ->check(positive_number(100.0))
      ->capture_default_str();
  command->add_option("--data", options.data_dir, "Data set folder (default: the model's)");
  command
      ->add_option("--limit", options.train_limit, "Fine-tune on the first N training samples only (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command
      ->add_option("--test-limit", options.test_limit, "Evaluate on the first N test samples only (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  add_data_flags(*command, data_flags, false);
  command->callback([&runner] {
    runner = [] {
      require_writable_file(options.out_path, "--out");  // before any work
      options.show_progress = !flags.quiet && !flags.json;
      options.data_options = data_options(data_flags);
      parse_model_input_flags(input_flags, options.import.input_shape, options.import.mean,
                              options.import.std);
      const Json report = quant::run_prune(options);
      print_warnings(report);
      if (flags.json) {
        print_json(report);
        return 0;
      }
      TextTable table({"", "original", "pruned"});
      table.add_row({"test accuracy", format_number("%.4f", report["original_acc"].get<double>()),
                     format_number("%.4f", report["pruned_acc"].get<double>())});
      table.add_row({"parameters", std::to_string(report["original_params"].get<std::int64_t>()),
                     std::to_string(report["pruned_params"].get<std::int64_t>())});
      table.add_row({"MACs / sample", std::to_string(report["original_macs"].get<std::int64_t>()),
                     std::to_string(report["pruned_macs"].get<std::int64_t>())});
      table.add_row(
          {"zero weights", "-", format_number("%.1f%%", report["weight_sparsity"].get<double>() * 100.0)});
      table.add_row({"parameters removed", "-",
                     format_number("%.2f%%", report["removed_params_fraction"].get<double>() * 100.0)});
      std::cout << table.render();
      std::printf("%s pruning, accuracy drop %.2f pt; wrote %s\n",
                  report["method"].get<std::string>().c_str(), report["acc_drop_pt"].get<double>(),
                  options.out_path.c_str());
      return 0;
    };
  });
  return command;
}

namespace {

// What `ipj distill`'s flags fill in.
struct DistillFlags {
  CommonOutputFlags output;
  train::DistillOptions options;
  std::string teacher_path, data_dir = data::kDefaultDataDirectory;
  std::string student = "mlp", input_shape, teacher_input_shape;
  std::int64_t limit = 0, test_limit = 0;
  DataFlags data;
};

void add_distill_flags(CLI::App& app, DistillFlags& f) {
  CLI::App* command = &app;
  train::DistillOptions& options = f.options;
  add_output_flags(*command, f.output);
  command
      ->add_option("--teacher", f.teacher_path,
                   "Teacher: ipj checkpoint/run folder, int8/program file, TorchScript (takes normalised "
                   "images, as students do)")
      ->required();
  command
      ->add_option(
          "--student", f.student,
          "Student: a zoo model (see ipj models) or a TorchScript file; a file's trained weights go to "
          "OUT/model.pt")
      ->capture_default_str();
  command->add_option("--input-shape", f.input_shape, kInputShapeHelp);
  command->add_option("--teacher-input-shape", f.teacher_input_shape,
                      "TorchScript --teacher: what it takes per sample (default: the images, C,H,W)");
  command->add_option("--epochs", options.epochs, "Training epochs")
      ->check(positive_integer(1000000))
      ->capture_default_str();
  command->add_option("--lr", options.learning_rate, "Learning rate (SGD, momentum 0.9)")
      ->check(positive_number(100.0))
      ->capture_default_str();
  command->add_option("--batch", options.batch_size, "Mini-batch size")
      ->check(positive_integer(kMaxBatch))
      ->capture_default_str();
  command->add_option("--temperature", options.temperature, "Softmax temperature T")
      ->check(finite_range(1e-3, 1000.0))
      ->capture_default_str();
  command->add_option("--alpha", options.alpha, "Weight of the distillation term (0 = labels only)")
      ->check(probability())
      ->capture_default_str();
  command->add_option("--seed", options.seed, "Seed for initialisation and shuffling")
      ->check(seed_value())
      ->capture_default_str();
  command
      ->add_option(
          "--labeled", options.labeled_limit,
          "Keep labels for the first N training samples only; the rest is learnt from the teacher (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command
      ->add_option("--data", f.data_dir,
                   "Data set folder (IDX, CIFAR-10 binary or image folder; default: the teacher's training "
                   "data, else Fashion-MNIST)")
      ->capture_default_str();
  add_data_flags(*command, f.data, true);
  command->add_option("--limit", f.limit, "Use only the first N training samples (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command->add_option("--test-limit", f.test_limit, "Use only the first N test samples (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command->add_option("--out", options.out_dir,
                      "Run folder for the student's checkpoint.pt and results.json");
}

// The teacher (TorchScript teachers take normalised images, like students) and the data set: without --data,
// the data the teacher was trained on (its checkpoint or ipj.json records it).
std::pair<infer::InferenceModelPtr, data::Dataset> load_teacher_and_data(DistillFlags& f, bool data_given) {
  infer::LoadOptions teacher_options;
  if (!f.teacher_input_shape.empty())
    teacher_options.inputs.input_shape = infer::parse_shape(f.teacher_input_shape, "--teacher-input-shape");
  std::string folder = f.data_dir;
  data::DataOptions folder_options = data_options(f.data);
  if (!data_given) {
    const infer::InferenceModelPtr recorded = infer::load_inference_model(f.teacher_path, teacher_options);
    if (!recorded->data_dir.empty()) {
      folder = recorded->data_dir;
      folder_options = data::merge_data_options(recorded->data_options, folder_options);
    }
  }
  f.options.data_dir = folder;
  data::Dataset dataset = data::load_dataset(folder, f.limit, f.test_limit, folder_options);
  teacher_options.inputs.mean = dataset.normalization.mean;
  teacher_options.inputs.std = dataset.normalization.std;
  infer::InferenceModelPtr teacher = infer::load_inference_model(f.teacher_path, teacher_options);
  const std::string mismatch = data_given ? data::describe_data_mismatch(teacher->trained_data, dataset) : "";
  if (!mismatch.empty()) std::cerr << "ipj: warning: " << mismatch << "\n";
  return {std::move(teacher), std::move(dataset)};
}

int run_distill(DistillFlags& f, bool data_given) {
  train::DistillOptions& options = f.options;
  require_writable_folder(options.out_dir, "--out");  // before any work
  options.show_progress = !f.output.quiet && !f.output.json;
  options.student = parse_model_flags(f.student, f.input_shape, "--student");
  const auto [teacher, dataset] = load_teacher_and_data(f, data_given);
  Json report = train::run_distillation(
      options, dataset, [&](const torch::Tensor& pixels) { return teacher->forward(pixels); });
  report["teacher"] = f.teacher_path;
  report["dataset"] = data::to_json(dataset);
  if (f.output.json) {
    print_json(report);
    return 0;
  }
  std::printf("student %s: test accuracy %.4f (teacher %.4f, gap %.2f pt), %lld parameters\n",
              options.student.label().c_str(), report["student_acc"].get<double>(),
              report["teacher_acc"].get<double>(), report["acc_gap_pt"].get<double>(),
              static_cast<long long>(report["student_params"].get<std::int64_t>()));
  if (!options.out_dir.empty()) std::printf("wrote %s/checkpoint.pt\n", options.out_dir.c_str());
  if (!options.out_dir.empty() && options.student.is_file())
    std::printf("wrote %s/model.pt (TorchScript, trained)\n", options.out_dir.c_str());
  return 0;
}

}  // namespace

CLI::App* register_distill_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "distill",
      "Knowledge distillation: train a student model on a teacher's softened outputs plus the labels\n"
      "Example: ipj distill --teacher runs/cnn --student mlp --epochs 3 --temperature 4 --alpha 0.7 --out "
      "runs/kd");
  static DistillFlags flags;
  add_distill_flags(*command, flags);
  command->callback([&runner, command] {
    runner = [command] { return run_distill(flags, command->count("--data") > 0); };
  });
  return command;
}

}  // namespace ipj::cli
