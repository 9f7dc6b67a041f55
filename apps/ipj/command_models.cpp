// `ipj models`: the model registry with parameter and FLOP counts for a given input shape.
#include <algorithm>
#include <iostream>

#include "cli_support.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/models/registry.hpp"

namespace ipj::cli {
namespace {

// "CxHxW", each a positive integer, at most 2^18 values per sample (the mlp's first layer alone grows with
// it: 2^18 inputs x 512 units are 0.5 GB of weights).
models::InputShape parse_input_shape(const std::string& text) {
  const std::string usage = "--input '" + text + "' is not a shape like 1x28x28 (CxHxW, positive integers)";
  std::vector<long long> sizes;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find('x', start), text.size());
    const std::string part = text.substr(start, end - start);
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos)
      throw ipj::Error(ipj::ErrorCategory::usage, usage);
    sizes.push_back(std::stoll(part));
    start = end + 1;
  }
  if (sizes.size() != 3 || sizes[0] < 1 || sizes[1] < 1 || sizes[2] < 1)
    throw ipj::Error(ipj::ErrorCategory::usage, usage);
  if (sizes[0] * sizes[1] * sizes[2] > (1 << 18))
    throw ipj::Error(
        ipj::ErrorCategory::usage,
        "--input '" + text + "' is too large: at most 262144 values per sample (e.g. 3x256x256)");
  return models::InputShape{static_cast<int>(sizes[0]), static_cast<int>(sizes[1]),
                            static_cast<int>(sizes[2])};
}

}  // namespace

CLI::App* register_models_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand("models",
                                     "List the built-in models with parameters and FLOPs per sample\n"
                                     "Example: ipj models --input 3x32x32 --json");
  static CommonOutputFlags flags;
  static std::string input = "1x28x28";
  static int classes = 10;
  add_output_flags(*command, flags);
  command->add_option("--input", input, "Input shape CxHxW (default 1x28x28, Fashion-MNIST)");
  command->add_option("--classes", classes, "Number of classes")->check(integer_range(2, 100000));
  command->callback([&runner] {
    runner = [] {
      const models::InputShape shape = parse_input_shape(input);
      Json rows = Json::array();
      TextTable table({"model", "parameters", "MFLOPs/sample (fwd)", "description"});
      table.align_left(3);
      for (const auto& entry : models::model_catalog()) {
        const models::ModelCounts counts =
            models::count_model(*models::create_model(entry.name, shape, classes), shape);
        const std::int64_t flops = counts.forward_flops_per_sample;
        rows.push_back({{"name", entry.name},
                        {"description", entry.description},
                        {"parameters", counts.parameters},
                        {"forward_flops_per_sample", flops},
                        {"train_flops_per_sample_estimate", 3 * flops}});
        table.add_row({entry.name, std::to_string(counts.parameters), format_number("%.2f", flops / 1e6),
                       entry.description});
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
