// `ipj models`: the model registry with parameter and FLOP counts for a given input shape.
#include <torch/torch.h>

#include <iostream>

#include "cli_support.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/models/flop_counter.hpp"
#include "ipj/models/registry.hpp"

namespace ipj::cli {

CLI::App* register_models_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand("models",
                                     "List the built-in models with parameters and FLOPs per sample\n"
                                     "Example: ipj models --input 3x32x32 --json");
  static CommonOutputFlags flags;
  static std::string input = "1x28x28";
  static int classes = 10;
  add_output_flags(*command, flags);
  command->add_option("--input", input, "Input shape CxHxW (default 1x28x28, Fashion-MNIST)");
  command->add_option("--classes", classes, "Number of classes")->check(CLI::Range(2, 100000));
  command->callback([&runner] {
    runner = [] {
      models::InputShape shape;
      if (std::sscanf(input.c_str(), "%dx%dx%d", &shape.channels, &shape.height, &shape.width) != 3 ||
          shape.channels < 1 || shape.height < 1 || shape.width < 1) {
        throw ipj::Error(ipj::ErrorCategory::usage,
                         "--input '" + input + "' is not a shape like 1x28x28 (CxHxW)");
      }
      Json rows = Json::array();
      TextTable table({"model", "parameters", "MFLOPs/sample (fwd)", "description"});
      table.align_left(3);
      for (const auto& entry : models::model_catalog()) {
        auto model = models::create_model(entry.name, shape, classes);
        model->eval();
        torch::NoGradGuard no_grad;
        const std::int64_t flops = models::count_flops([&] {
          model->forward(torch::zeros({1, shape.channels, shape.height, shape.width}));
        });
        const std::int64_t parameters = models::count_parameters(*model);
        rows.push_back({{"name", entry.name},
                        {"description", entry.description},
                        {"parameters", parameters},
                        {"forward_flops_per_sample", flops},
                        {"train_flops_per_sample_estimate", 3 * flops}});
        char mflops[32];
        std::snprintf(mflops, sizeof mflops, "%.2f", flops / 1e6);
        table.add_row({entry.name, std::to_string(parameters), mflops, entry.description});
      }
      if (flags.json) {
        print_json({{"input_shape", {shape.channels, shape.height, shape.width}},
                    {"classes", classes},
                    {"models", rows}});
      } else {
        std::cout << "Input " << input << ", " << classes
                  << " classes (FLOPs: 2 per multiply-add; training ~3x)\n"
                  << table.render();
      }
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
