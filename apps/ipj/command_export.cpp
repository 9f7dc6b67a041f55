// `ipj export`: a model as ONNX (float or QDQ int8) or frozen TorchScript (see ipj/export/model_export.hpp).
#include <cstdio>
#include <iostream>

#include "cli_support.hpp"
#include "ipj/export/model_export.hpp"

namespace ipj::cli {
namespace {

void print_human(const Json& report) {
  for (const Json& warning : report.value("warnings", Json::array()))
    std::fprintf(stderr, "warning: %s\n", warning.get<std::string>().c_str());
  std::printf("wrote %s (%s, %s, %.1f KiB)\n", report.at("out").get<std::string>().c_str(),
              report.at("format").get<std::string>().c_str(), report.at("variant").get<std::string>().c_str(),
              report.at("bytes").get<double>() / 1024.0);
  std::printf("input '%s' %s -> output '%s' %s\n", report["input"]["name"].get<std::string>().c_str(),
              report["input"]["shape"].dump().c_str(), report["output"]["name"].get<std::string>().c_str(),
              report["output"]["shape"].dump().c_str());
  if (report.contains("onnx"))
    std::printf("opset %d, %d nodes, operators %s\n", report["onnx"]["opset"].get<int>(),
                report["onnx"]["nodes"].get<int>(), report["onnx"]["operators"].dump().c_str());
  const auto print_batches = [](const char* what, const Json& batches) {
    for (const Json& batch : batches)
      std::printf("%s batch %lld: max |difference| %.3g (tolerance %.3g) %s\n", what,
                  static_cast<long long>(batch["batch"].get<std::int64_t>()),
                  batch["max_abs_diff"].get<double>(), batch["tolerance"].get<double>(),
                  batch["passed"].get<bool>() ? "ok" : "FAILED");
  };
  if (report.contains("self_check")) print_batches("TorchScript vs ipj:", report["self_check"]);
  if (!report.contains("verify")) return;
  const Json& verify = report["verify"];
  const std::string status = verify.at("status").get<std::string>();
  if (status == "passed")
    print_batches(("ONNX Runtime (" + verify["runtime"].get<std::string>() + ") vs ipj:").c_str(),
                  verify["batches"]);
  if (status == "unavailable")
    std::fprintf(stderr, "warning: --verify skipped: %s\n", verify["reason"].get<std::string>().c_str());
}

}  // namespace

CLI::App* register_export_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "export",
      "Export a model as ONNX (float, or QDQ for int8 files; raw [0,1] pixels in, logits out, dynamic "
      "batch)\n"
      "or as frozen, inference-optimised TorchScript. --verify runs the ONNX file on ONNX Runtime\n"
      "(npm onnxruntime-node) and compares it with ipj's own outputs before writing it.\n"
      "Example: ipj export --model runs/mlp --format onnx --out mlp.onnx --verify\n"
      "Example: ipj export --model resnet.pt --input-shape 1,28,28 --mean 0.286 --std 0.353 --out "
      "resnet.onnx");
  static CommonOutputFlags flags;
  static exporter::ExportOptions options;
  static std::string format = "onnx";
  static ModelInputFlags input_flags;
  add_output_flags(*command, flags);
  command
      ->add_option(
          "--model", options.model_path,
          "ipj checkpoint / run folder, program or graph file (ipj prune), int8 file (ipj quantize), or "
          "TorchScript file")
      ->required();
  add_model_input_flags(*command, input_flags);
  command->add_option("--format", format, "onnx | torchscript")->capture_default_str();
  command->add_option("--out", options.out_path, "Where to write the exported model (atomically)")
      ->required();
  command->add_option("--opset", options.opset, "ONNX opset (13-17)")
      ->check(integer_range(13, 17))
      ->capture_default_str();
  command->add_flag(
      "--verify", options.verify,
      "Check the ONNX file on ONNX Runtime (Node.js + onnxruntime-node) against ipj at batch 1 and 7");
  command->callback([&runner] {
    runner = [] {
      options.format = exporter::parse_export_format(format);
      parse_model_input_flags(input_flags, options.import.input_shape, options.import.mean,
                              options.import.std);
      const Json report = exporter::run_export(options);
      if (flags.json)
        print_json(report);
      else
        print_human(report);
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
