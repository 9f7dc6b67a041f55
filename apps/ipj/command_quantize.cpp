// `ipj quantize`: int8 conversion of a trained model with an accuracy guard (see ipj/quant/quantize.hpp).
#include <cstdio>
#include <iostream>

#include "cli_support.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/quant/quantize.hpp"

namespace ipj::cli {

CLI::App* register_quantize_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "quantize",
      "Convert a trained model to int8 (dynamic, static with calibration, or QAT); refuses to write it when\n"
      "test accuracy drops more than --max-drop points. ipj models, and TorchScript files: --mode dynamic\n"
      "on any model (its nn.Linear layers in int8, as PyTorch's quantize_dynamic; TorchScript out), static\n"
      "and qat through ipj's graph importer (conv/BN/linear/add/ReLU/ReLU6/pooling: ResNets, MobileNetV2);\n"
      "static on a model the importer refuses quantizes its conv/linear regions on the module as it is and\n"
      "keeps the other operators float (TorchScript out)\n"
      "Example: ipj quantize --model runs/mlp --mode static --calib 1000 --out mlp-int8.pt\n"
      "Example: ipj quantize --model resnet.pt --input-shape 1,28,28 --mean 0.286 --std 0.353 --mode static "
      "--out resnet-int8.pt");
  static CommonOutputFlags flags;
  static quant::QuantizeOptions options;
  static std::string mode = "static", observer = "minmax", int8_regions = "fast";
  static DataFlags data_flags;
  static ModelInputFlags input_flags;
  add_output_flags(*command, flags);
  command
      ->add_option("--model", options.model_path,
                   "ipj checkpoint / run folder, ipj program or graph file (ipj prune), or TorchScript file")
      ->required();
  add_model_input_flags(*command, input_flags);
  command->add_option("--mode", mode, "dynamic | static | qat")->capture_default_str();
  command->add_option("--out", options.out_path, "Where to write the int8 model")->required();
  command->add_option("--max-drop", options.max_drop_pt, "Largest accepted accuracy drop, in points")
      ->check(finite_range(0.0, 100.0))
      ->capture_default_str();
  command->add_option("--calib", options.calib_samples, "Training samples used for calibration (static)")
      ->check(positive_integer(kMaxSamples))
      ->capture_default_str();
  command->add_option("--observer", observer, "Activation observer: minmax | percentile")
      ->capture_default_str();
  command->add_option("--percentile", options.percentile, "Percentile kept by the percentile observer")
      ->check(range_above(50.0, 100.0))
      ->capture_default_str();
  command->add_option("--epochs", options.qat_epochs, "QAT fine-tuning epochs")
      ->check(positive_integer(1000000))
      ->capture_default_str();
  command->add_option("--lr", options.qat_learning_rate, "QAT learning rate (SGD, momentum 0.9)")
      ->check(positive_number(100.0))
      ->capture_default_str();
  command
      ->add_option("--int8-regions", int8_regions,
                   "Static int8 of TorchScript files the graph importer refuses: fast (keep int8 regions\n"
                   "that pay for their quantize/dequantize borders) | all (every supported region)")
      ->capture_default_str();
  command->add_option("--engine", options.engine, "Quantized engine: auto | onednn | qnnpack | fbgemm")
      ->capture_default_str();
  command->add_option(
      "--data", options.data_dir,
      "Data set folder (default: the one the model was trained on; Fashion-MNIST for TorchScript)");
  command
      ->add_option("--test-limit", options.test_limit, "Evaluate on the first N test samples only (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  add_data_flags(*command, data_flags, false);
  command
      ->add_option("--limit", options.train_limit,
                   "qat: train on the first N training samples only (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command->callback([&runner] {
    runner = [] {
      require_writable_file(options.out_path, "--out");  // before any work
      options.data_options = data_options(data_flags);
      options.mode = quant::parse_quant_mode(mode);
      parse_model_input_flags(input_flags, options.import.input_shape, options.import.mean,
                              options.import.std);
      options.observer = quant::parse_observer_kind(observer);
      options.int8_regions = quant::parse_int8_regions(int8_regions);
      options.show_progress = !flags.quiet && !flags.json;
      const quant::QuantizeResult result = quant::run_quantize(options);
      print_warnings(result.report);
      if (flags.json) {
        print_json(result.report);
      } else {
        TextTable table({"", "fp32", "int8"});
        table.add_row({"test accuracy", format_number("%.4f", result.fp32_acc),
                       format_number("%.4f", result.int8_acc)});
        table.add_row({"weights", format_number("%.1f KiB", result.fp32_bytes / 1024.0),
                       format_number("%.1f KiB", result.int8_bytes / 1024.0)});
        std::cout << table.render();
        std::printf("mode %s, engine %s: accuracy drop %.2f pt (limit %.2f)\n", mode.c_str(),
                    result.engine.c_str(), result.acc_drop_pt, options.max_drop_pt);
        if (result.written) std::printf("wrote %s\n", options.out_path.c_str());
      }
      if (!result.accepted) {
        fail(ErrorCategory::runtime,
             "int8 accuracy drops " + std::to_string(result.acc_drop_pt).substr(0, 5) + " pt > --max-drop " +
                 std::to_string(options.max_drop_pt).substr(0, 4) + "; '" + options.out_path +
                 "' not written. Try --observer percentile, a larger --calib, --mode qat, or --mode dynamic");
      }
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
