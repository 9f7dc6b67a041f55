// `ipj export` on a runtime ipj did not write: ONNX files of ipj's zoo models (mlp, cnn trained on a
// Fashion-MNIST subset; resnet18/50 checkpoints after a few steps), int8 files (static and dynamic, program
// and graph) and user TorchScript models made at test time by python3-torch/torchvision run on ONNX Runtime
// (npm onnxruntime-node, installed by scripts/install-onnxruntime.sh: the CTest fixture) and match ipj's own
// outputs at batch 1 and 7; int8 exports keep their accuracy in ONNX Runtime; TorchScript exports match;
// models the graph IR refuses (tests/models/python/any_models.py: attention, ViT, norms, ...) go through the
// direct TorchScript exporter; unsupported operators, checker failures and bad flags surface as ipj::Error.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <torch/script.h>
#include <torch/torch.h>

#include "inference_fixture.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/export/model_export.hpp"
#include "ipj/export/onnx_runtime.hpp"
#include "ipj/quant/quantize.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/trainer.hpp"
#include "support/test_cache.hpp"
#include "support/user_models.hpp"

namespace ipj::exporter {
namespace {

constexpr float kMean = 0.2860f, kStd = 0.3530f;  // the normalisation the Python models expect

const OnnxRuntimeNode& runtime() {
  static const OnnxRuntimeNode found = [] {
    const std::string node_modules =
        testing::test_source_dir() + "/../node_modules";  // scripts/install-onnxruntime.sh
    setenv("IPJ_ONNXRUNTIME_NODE", node_modules.c_str(), 1);
    std::string reason;
    const std::optional<OnnxRuntimeNode> runtime = find_onnxruntime_node(reason);
    if (!runtime)
      throw std::runtime_error("ONNX Runtime missing (run scripts/install-onnxruntime.sh): " + reason);
    return *runtime;
  }();
  return found;
}

testing::TempDir& scratch() {
  static testing::TempDir dir;
  return dir;
}

// TorchScript models of tests/quant/make_graph_models.py (cnn_bn takes raw pixels, the others normalised).
const std::string& python_models() {
  static const std::string dir = [] {
    const std::string out = scratch().file("python");
    std::filesystem::create_directories(out);
    const std::string script = testing::test_source_dir() + "/quant/make_graph_models.py";
    const auto result = testing::run_cached_maker(testing::python_path() + " " + script, out, "", {script});
    if (result.exit_code != 0) throw std::runtime_error("model script failed: " + result.err);
    return out;
  }();
  return dir;
}

quant::ImportOptions import_for(const std::string& python_model) {
  quant::ImportOptions import;
  import.input_shape = {1, 28, 28};
  if (python_model != "cnn_bn") {
    import.mean = {kMean};
    import.std = {kStd};
  }
  return import;
}

// A resnet checkpoint after one SGD step on 64 images (real weights and BatchNorm statistics; ResNet-50's
// took 9.9 s with two steps on 128 images and 64 to evaluate, 5.4 s now).
std::string zoo_checkpoint(const std::string& model) {
  static std::map<std::string, std::string> made;
  if (auto found = made.find(model); found != made.end()) return found->second;
  static const data::Dataset small = data::load_dataset(data::kDefaultDataDirectory, 64, 16);
  train::TrainConfig config;
  config.model = model;
  config.epochs = 1;
  config.batch_size = 64;
  config.seed = 3;
  config.measure_energy = false;
  config.out_dir = scratch().file(model);
  train::TrainHooks hooks;
  hooks.show_progress = false;
  train::run_training(config, small, hooks);
  return made[model] = scratch().file(model + "/" + train::kCheckpointFileName);
}

Json export_verified(const std::string& model_path, const std::string& name,
                     const quant::ImportOptions& import = {}) {
  runtime();
  ExportOptions options;
  options.model_path = model_path;
  options.out_path = scratch().file(name + ".onnx");
  options.import = import;
  options.verify = true;
  return run_export(options);
}

void expect_parity(const Json& report) {
  ASSERT_EQ(report.at("verify").at("status"), "passed") << report.dump(2);
  ASSERT_EQ(report["verify"]["batches"].size(), 2u);
  for (const Json& batch : report["verify"]["batches"]) {
    EXPECT_TRUE(batch.at("passed").get<bool>()) << batch.dump();
    std::printf("[parity] %s %s batch %lld: max |diff| %.3g, relative %.3g (tolerance %.3g)\n",
                report["model_name"].get<std::string>().c_str(), report["variant"].get<std::string>().c_str(),
                static_cast<long long>(batch["batch"].get<std::int64_t>()),
                batch["max_abs_diff"].get<double>(), batch["max_rel_diff"].get<double>(),
                batch["tolerance"].get<double>());
  }
  EXPECT_EQ(report["input"]["name"], kInputName);
  EXPECT_EQ(report["output"]["name"], kOutputName);
  check_onnx_model(read_file(report["out"].get<std::string>()), "written file");
}

class ZooModel : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooModel, Fp32OnnxMatchesIpjOnOnnxRuntime) {
  const std::string model = GetParam();
  const std::string path =
      model == "mlp" || model == "cnn" ? testing::trained_checkpoint(model) : zoo_checkpoint(model);
  const Json report = export_verified(path, "zoo_" + model);
  expect_parity(report);
  EXPECT_EQ(report["source_format"], "ipj-checkpoint");
  EXPECT_EQ(report["output"]["shape"], Json::parse(R"(["N", 10])"));
  if (model == "resnet18") {
    EXPECT_GT(report["onnx"]["operators"]["Conv"].get<int>(), 15);
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooModel, ::testing::Values("mlp", "cnn", "resnet18", "resnet50"));

class UserModel : public ::testing::TestWithParam<std::string> {};

TEST_P(UserModel, TorchScriptFileRoundTripsThroughOnnxRuntime) {
  const std::string model = GetParam();
  const Json report =
      export_verified(python_models() + "/" + model + "_scripted.pt", "user_" + model, import_for(model));
  expect_parity(report);
  EXPECT_EQ(report["source_format"], "torchscript");
  EXPECT_LT(report["import_difference"].get<double>(), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Python, UserModel,
                         ::testing::Values("cnn_bn", "residual", "resnet18", "mobilenet_v2"));

// Writes an int8 model with `ipj quantize`'s library call; `model` is a checkpoint or a TorchScript file.
std::string quantized(const std::string& model_path, quant::QuantMode mode, const std::string& name,
                      const quant::ImportOptions& import = {}) {
  quant::QuantizeOptions options;
  options.model_path = model_path;
  options.out_path = scratch().file(name + "-int8.pt");
  options.import = import;
  options.mode = mode;
  options.calib_samples = 256;
  options.max_drop_pt = 100.0;  // accuracy is checked below, in ONNX Runtime
  options.test_limit = 500;
  options.show_progress = false;
  const quant::QuantizeResult result = quant::run_quantize(options);
  if (!result.written) throw std::runtime_error("quantize did not write " + options.out_path);
  return options.out_path;
}

// Accuracy of a model file on the first `count` test images: in ONNX Runtime (onnx_path) or in ipj.
double onnx_accuracy(const std::string& onnx_path, std::int64_t count) {
  torch::Tensor pixels, labels;
  data::for_each_pixel_batch_in_order(testing::fashion_subset().test, count, count,
                                      [&](const torch::Tensor& batch, const torch::Tensor& batch_labels) {
                                        pixels = batch;
                                        labels = batch_labels;
                                      });
  const torch::Tensor logits = run_onnxruntime(runtime(), onnx_path, pixels).output;  // [count, 10]
  return logits.argmax(1).eq(labels).to(torch::kFloat).mean().item<double>();
}

TEST(Int8Export, StaticCnnIsQdqAndKeepsAccuracyInOnnxRuntime) {
  const std::string checkpoint = testing::trained_checkpoint("cnn");
  const Json fp32 = export_verified(checkpoint, "cnn_fp32");
  const Json int8 =
      export_verified(quantized(checkpoint, quant::QuantMode::static_ptq, "cnn_static"), "cnn_static");
  expect_parity(int8);
  EXPECT_EQ(int8["variant"], "int8-static");
  EXPECT_GT(int8["onnx"]["operators"]["QuantizeLinear"].get<int>(), 3);
  EXPECT_GT(int8["onnx"]["operators"]["DequantizeLinear"].get<int>(), 5);
  const double fp32_accuracy = onnx_accuracy(fp32["out"], 1000);
  const double int8_accuracy = onnx_accuracy(int8["out"], 1000);
  std::printf("[accuracy] cnn on ONNX Runtime, 1000 test images: fp32 %.4f, int8 static %.4f\n",
              fp32_accuracy, int8_accuracy);
  EXPECT_GT(fp32_accuracy, 0.6);
  EXPECT_LE(fp32_accuracy - int8_accuracy, 0.005);
}

TEST(Int8Export, DynamicMlpUsesDynamicQuantizeLinear) {
  const std::string checkpoint = testing::trained_checkpoint("mlp");
  const Json int8 =
      export_verified(quantized(checkpoint, quant::QuantMode::dynamic, "mlp_dynamic"), "mlp_dynamic");
  expect_parity(int8);
  EXPECT_EQ(int8["variant"], "int8-dynamic");
  EXPECT_EQ(int8["onnx"]["operators"]["DynamicQuantizeLinear"].get<int>(), 3);
  const Json fp32 = export_verified(checkpoint, "mlp_fp32");
  EXPECT_LE(onnx_accuracy(fp32["out"], 1000) - onnx_accuracy(int8["out"], 1000), 0.005);
}

TEST(Int8Export, StaticResidualGraphFileMatchesOnnxRuntime) {
  const std::string source = python_models() + "/residual_scripted.pt";
  const Json report = export_verified(
      quantized(source, quant::QuantMode::static_ptq, "residual", import_for("residual")), "residual_static");
  expect_parity(report);
  EXPECT_EQ(report["source_format"], "ipj-int8-graph");
  for (const Json& batch : report["verify"]["batches"])
    std::printf("[steps] residual, batch %lld: %.2f output steps\n",
                static_cast<long long>(batch["batch"].get<std::int64_t>()),
                batch["max_diff_steps"].get<double>());
}

// One quantized layer: ipj's int8 and ONNX Runtime's agree within one step of the output grid, as the issue
// asks; deeper nets drift a few steps because roundings flip layer after layer (bound and measurements in
// parity_tolerance, src/export/model_export.cpp).
TEST(Int8Export, OneStaticLayerMatchesWithinOneOutputStep) {
  quant::ImportOptions raw_pixels;
  raw_pixels.input_shape = {1, 28, 28};
  const Json report = export_verified(
      quantized(python_models() + "/one_linear.pt", quant::QuantMode::static_ptq, "one_linear", raw_pixels),
      "one_linear_static");
  expect_parity(report);
  for (const Json& batch : report["verify"]["batches"]) {
    std::printf("[steps] one linear layer, batch %lld: %.2f output steps\n",
                static_cast<long long>(batch["batch"].get<std::int64_t>()),
                batch["max_diff_steps"].get<double>());
    EXPECT_GT(batch.at("output_step").get<double>(), 0.0);
    EXPECT_LE(batch.at("max_diff_steps").get<double>(), 1.0 + 1e-6) << batch.dump();
  }
}

TEST(TorchScriptExport, FrozenModulesMatchIpj) {
  ExportOptions options;
  options.format = ExportFormat::torchscript;
  options.model_path = zoo_checkpoint("resnet18");
  options.out_path = scratch().file("resnet18_frozen.pt");
  const Json zoo = run_export(options);
  ASSERT_EQ(zoo["self_check"].size(), 2u);
  EXPECT_TRUE(zoo["self_check"][1]["passed"].get<bool>());
  // The written module takes raw pixels and equals ipj's checkpoint inference.
  torch::jit::Module loaded = torch::jit::load(options.out_path);
  const torch::Tensor pixels = random_pixels({1, 28, 28}, 3, 11);
  EXPECT_EQ(loaded.forward({pixels}).toTensor().sizes(), torch::IntArrayRef({3, 10}));

  options.model_path = python_models() + "/mobilenet_v2_scripted.pt";
  options.import = import_for("mobilenet_v2");
  options.out_path = scratch().file("mobilenet_frozen.pt");
  const Json user = run_export(options);
  EXPECT_TRUE(user["self_check"][0]["passed"].get<bool>());
  EXPECT_LT(user["self_check"][0]["max_abs_diff"].get<double>(), 1e-4);

  // TorchScript to TorchScript needs no import: an operator ONNX export refuses (sigmoid) freezes fine.
  options.model_path = python_models() + "/swish.pt";
  options.import = {};
  options.import.input_shape = {1, 28, 28};
  options.out_path = scratch().file("swish_frozen.pt");
  const Json swish = run_export(options);
  EXPECT_TRUE(swish["self_check"][1]["passed"].get<bool>());
  EXPECT_EQ(swish["output"]["shape"], Json::parse(R"(["N", 10])"));

  options.model_path = quantized(testing::trained_checkpoint("mlp"), quant::QuantMode::dynamic, "mlp_for_ts");
  options.import = {};
  try {
    run_export(options);
    FAIL() << "int8 to TorchScript must be refused";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what()).find("--format onnx"), std::string::npos);
  }
}

// The graph IR refuses a sigmoid: `ipj export` falls back to the direct TorchScript exporter and says so.
TEST(OnnxExportErrors, GraphIrRefusalFallsBackToTheDirectExporter) {
  runtime();
  ExportOptions options;
  options.model_path = python_models() + "/swish.pt";
  options.import.input_shape = {1, 28, 28};
  options.out_path = scratch().file("swish.onnx");
  options.verify = true;
  const Json report = run_export(options);
  expect_parity(report);
  EXPECT_EQ(report["export_path"], "torchscript-direct");
  ASSERT_EQ(report["warnings"].size(), 1u);
  EXPECT_NE(report["warnings"][0].get<std::string>().find("sigmoid"), std::string::npos) << report.dump(2);
  EXPECT_EQ(report["onnx"]["operators"]["Sigmoid"].get<int>(),
            report["torchscript_operators"]["aten::sigmoid"].get<int>());
}

// Architectures of tests/models/python/any_models.py (images [B, 1, 16, 16]), scripted and traced, made once.
const std::string& any_models() {
  static const std::string dir = [] {
    const std::string out = scratch().file("any_models");
    std::filesystem::create_directories(out);
    std::string names;
    for (const char* architecture : {"se_cnn", "concat", "shuffle", "norms", "transformer", "tanh_mlp", "vit",
                                     "mixed", "sort", "relu_chain", "encoder"})
      names += std::string(" ") + architecture + "_scripted " + architecture + "_traced";
    const std::string script = testing::test_source_dir() + "/models/python/any_models.py";
    const auto result =
        testing::run_cached_maker(testing::python_path() + " " + script + " make", out, names, {script});
    if (result.exit_code != 0) throw std::runtime_error("any_models.py failed: " + result.err);
    return out;
  }();
  return dir;
}

testing::ProcessResult cli_export(const std::string& model, const std::string& out,
                                  const std::string& extra) {
  runtime();  // sets IPJ_ONNXRUNTIME_NODE, which the child inherits
  return testing::run_process(testing::ipj_binary() + " export --model " + model +
                              " --input-shape 1,16,16 --format onnx --out " + out + " --verify --json" +
                              extra);
}

class AnyArchitecture : public ::testing::TestWithParam<std::string> {};

// `ipj export --verify` takes every architecture the graph IR refuses, scripted and traced, through the
// direct TorchScript exporter; ONNX Runtime matches ipj's inference of the file within the float bound.
TEST_P(AnyArchitecture, CliExportsAndOnnxRuntimeAgrees) {
  for (const char* kind : {"_scripted", "_traced"}) {
    const std::string name = GetParam() + kind;
    SCOPED_TRACE(name);
    const std::string out = scratch().file("any_" + name + ".onnx");
    const std::string extra = GetParam() == "vit" ? " --mean 0.4 --std 0.3" : "";
    const auto result = cli_export(any_models() + "/" + name + ".pt", out, extra);
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const Json report = Json::parse(result.out);
    expect_parity(report);
    EXPECT_EQ(report["export_path"], "torchscript-direct") << report.dump(2);
    EXPECT_EQ(report["variant"], "fp32");
    EXPECT_EQ(report["opset"], kDefaultOpset);
    EXPECT_EQ(report["output"]["shape"], Json::parse(R"(["N", 10])"));
    for (const Json& batch : report["verify"]["batches"])
      EXPECT_LE(batch["max_rel_diff"].get<double>(), 1e-4) << batch.dump();
    EXPECT_TRUE(std::filesystem::exists(out));
  }
  if (GetParam() != "vit") return;
  // Below opset 17 LayerNormalization does not exist: ReduceMean arithmetic instead.
  const auto old_opset =
      cli_export(any_models() + "/vit_scripted.pt", scratch().file("vit13.onnx"), " --opset 13");
  ASSERT_EQ(old_opset.exit_code, 0) << old_opset.err;
  const Json report = Json::parse(old_opset.out);
  expect_parity(report);
  EXPECT_EQ(report["onnx"]["opset"], 13);
  EXPECT_FALSE(report["onnx"]["operators"].contains("LayerNormalization")) << report["onnx"].dump();
}

INSTANTIATE_TEST_SUITE_P(Python, AnyArchitecture,
                         ::testing::Values("se_cnn", "concat", "shuffle", "norms", "transformer", "tanh_mlp",
                                           "vit", "mixed", "encoder"));

// A model `ipj train` wrote records its input shape and normalisation (ipj.json): export takes them as bench,
// quantize and serve do. Before, export demanded --input-shape, and with it the direct exporter left the
// normalisation out while the parity reference applied it (ONNX Runtime 3.3 off, exit 6; a model whose
// output hardly depends on its input even passed and wrote a file without the normalisation).
TEST(AnyArchitectureExport, ATrainedFileExportsWithItsRecordedInputsAndNormalisation) {
  const std::string run = scratch().file("trained_concat");
  const auto trained = testing::run_process(
      testing::ipj_binary() + " train --model " + any_models() +
      "/concat_scripted.pt --input-shape 1,16,16 " +
      "--resize 16,16 --limit 300 --test-limit 100 --epochs 1 --no-energy --quiet --out " + run);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  runtime();  // sets IPJ_ONNXRUNTIME_NODE, which the child inherits
  const std::string out = scratch().file("trained_concat.onnx");
  const auto exported = testing::run_process(testing::ipj_binary() + " export --model " + run +
                                             "/model.pt --format onnx --out " + out + " --verify --json");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const Json report = Json::parse(exported.out);
  expect_parity(report);
  EXPECT_EQ(report["input"]["shape"], Json::parse(R"(["N", 1, 16, 16])"));
  EXPECT_TRUE(report["onnx"]["operators"].contains("Sub")) << report["onnx"].dump();  // (pixels - mean) / std
  EXPECT_TRUE(report["onnx"]["operators"].contains("Div")) << report["onnx"].dump();
}

TEST(AnyArchitectureExport, DynamicInt8TorchScriptQuantizesInputsAsPyTorch) {
  const std::string data = scratch().file("any_data");
  testing::write_synthetic_idx_dataset(data, 64, 32, /*gzip=*/false, 16, 16);
  const std::string int8 = scratch().file("transformer_dynamic.pt");
  const auto quantized = testing::run_process(testing::ipj_binary() + " quantize --model " + any_models() +
                                              "/transformer_scripted.pt --input-shape 1,16,16 " + "--data " +
                                              data + " --mode dynamic --max-drop 100 --json --out " + int8);
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  const auto result = cli_export(int8, scratch().file("transformer_dynamic.onnx"), "");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json report = Json::parse(result.out);
  expect_parity(report);
  EXPECT_EQ(report["variant"], "int8-dynamic");
  // reduce_range (as nn.quantized.dynamic.Linear): 128 levels, written as QuantizeLinear + DequantizeLinear.
  EXPECT_EQ(report["onnx"]["operators"]["QuantizeLinear"].get<int>(),
            report["torchscript_operators"]["quantized::linear_dynamic"].get<int>());
  EXPECT_EQ(report["warnings"].size(), 2u) << report.dump(2);
}

TEST(AnyArchitectureExport, StaticInt8TorchScriptIsQdqWithFloatIslands) {
  const std::string data = scratch().file("static_data");
  testing::write_synthetic_idx_dataset(data, 64, 32, /*gzip=*/false, 16, 16);
  // relu_chain: an int8 conv region, then SiLU and a float head; se_cnn: int8 conv/linear layers between
  // float SiLU/sigmoid/mul islands (every region forced int8).
  for (const char* name : {"relu_chain_scripted", "se_cnn_traced"}) {
    SCOPED_TRACE(name);
    const std::string int8 = scratch().file(std::string(name) + "_static.pt");
    const auto quantized =
        testing::run_process(testing::ipj_binary() + " quantize --model " + any_models() + "/" + name +
                             ".pt --input-shape 1,16,16 --data " + data +
                             " --mode static --int8-regions all --max-drop 100 --json --out " + int8);
    ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
    const auto result = cli_export(int8, scratch().file(std::string(name) + "_static.onnx"), "");
    ASSERT_EQ(result.exit_code, 0) << result.err;
    const Json report = Json::parse(result.out);
    expect_parity(report);
    EXPECT_EQ(report["variant"], "int8-static");
    EXPECT_EQ(report["export_path"], "torchscript-direct");
    const Json& operators = report["onnx"]["operators"];
    EXPECT_GE(operators.value("QuantizeLinear", 0), 1) << operators.dump();
    EXPECT_GE(operators.value("DequantizeLinear", 0), operators.value("QuantizeLinear", 0))
        << operators.dump();
    EXPECT_GE(operators.value("Sigmoid", 0) + operators.value("Mul", 0), 1)
        << operators.dump();  // float islands
  }
}

TEST(OnnxExportErrors, UnsupportedOperatorIsNamedWithItsPlace) {
  for (const char* name : {"sort_scripted", "sort_traced"}) {
    SCOPED_TRACE(name);
    const std::string out = scratch().file(std::string(name) + ".onnx");
    const auto result = cli_export(any_models() + "/" + name + ".pt", out, "");
    EXPECT_EQ(result.exit_code, 5) << result.err;  // ErrorCategory::unsupported
    EXPECT_NE(result.err.find("aten::sort"), std::string::npos) << result.err;
    EXPECT_EQ(result.err.find("prim::"), std::string::npos) << result.err;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

// An in-place ReLU on a tensor a view still reads: the exporter wrote the ReLU as a new value nothing read,
// so without --verify the file answered 0.36 off (a hostile pass). Refused, named, not written.
TEST(OnnxExportErrors, InPlaceOpsThroughViewsAndTupleOutputsAreRefusedNotWritten) {
  const std::string dir = scratch().file("view_relu");
  std::filesystem::create_directories(dir);
  const auto made =
      testing::make_user_models(dir, {"view_then_inplace_relu_scripted", "tuple_output_scripted"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string out = scratch().file("view_relu.onnx");
  const auto result = testing::run_process(
      testing::ipj_binary() + " export --model " + dir +
      "/view_then_inplace_relu_scripted.pt --input-shape 1,28,28 --out " + out + " --json");
  EXPECT_EQ(result.exit_code, 5) << result.out << result.err;  // ErrorCategory::unsupported
  EXPECT_NE(result.err.find("aten::relu_ in the model's own forward, code/__torch__.py:"), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("changes a tensor in place that another value reads or is a view of"),
            std::string::npos)
      << result.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  // A model that returns a tuple is told so (it read "prim::TupleConstruct ... gives a value whose shape was
  // not recorded"), with the exit code bench and serve give it.
  const auto tuple =
      testing::run_process(testing::ipj_binary() + " export --model " + dir +
                           "/tuple_output_scripted.pt --input-shape 1,28,28 --out " + out + " --json");
  EXPECT_EQ(tuple.exit_code, 3) << tuple.out << tuple.err;  // ErrorCategory::invalid_input
  EXPECT_NE(tuple.err.find("returns Tuple[Tensor, Tensor], not one tensor"), std::string::npos) << tuple.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(OnnxExportErrors, CheckerFailuresSurface) {
  // A real export, then one Conv loses its weight input: libonnx's checks must reject it.
  const std::string path = testing::trained_checkpoint("cnn");
  ExportableModel model = load_exportable_model(path, {});
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(graph_to_onnx(model.graph, nullptr, kDefaultOpset)));
  for (onnx::NodeProto& node : *proto.mutable_graph()->mutable_node())
    if (node.op_type() == "Conv") node.set_input(1, "no_such_tensor");
  try {
    check_onnx_model(proto.SerializeAsString(), "damaged");
    FAIL() << "the checker must reject a Conv reading an undefined tensor";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what()).find("libonnx"), std::string::npos) << error.what();
  }
  EXPECT_THROW(graph_to_onnx(model.graph, nullptr, 12), Error);
  EXPECT_THROW(graph_to_onnx(model.graph, nullptr, 18), Error);
  EXPECT_NO_THROW(graph_to_onnx(model.graph, nullptr, 13));
}

TEST(ExportCli, JsonReportAndHelp) {
  const std::string out = scratch().file("cli.onnx");
  const auto result = testing::run_process(testing::ipj_binary() + " export --model " +
                                           testing::trained_checkpoint("mlp") + " --out " + out + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json report = Json::parse(result.out);  // exactly one JSON object
  EXPECT_EQ(report["schema_version"], kExportSchemaVersion);
  EXPECT_EQ(report["format"], "onnx");
  EXPECT_EQ(report["opset"], kDefaultOpset);
  EXPECT_EQ(report["verify"]["status"], "not_requested");
  EXPECT_TRUE(std::filesystem::exists(out));
  const auto help = testing::run_process(testing::ipj_binary() + " export --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Example: ipj export"), std::string::npos);
  const auto bad =
      testing::run_process(testing::ipj_binary() + " export --model " + testing::trained_checkpoint("mlp") +
                           " --out " + out + " --format tflite");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  const auto unavailable =
      testing::run_process("IPJ_ONNXRUNTIME_NODE=/nonexistent " + testing::ipj_binary() + " export --model " +
                           testing::trained_checkpoint("mlp") + " --out " + out + " --verify --json");
  ASSERT_EQ(unavailable.exit_code, 0) << unavailable.err;
  EXPECT_EQ(Json::parse(unavailable.out)["verify"]["status"], "unavailable");
  // a TMPDIR that is not a folder is named (it read "No such file or directory: ''" before a hostile pass)
  const auto bad_tmpdir =
      testing::run_process("TMPDIR=/nonexistent/dir " + testing::ipj_binary() + " export --model " +
                           testing::trained_checkpoint("mlp") + " --out " + out + " --verify --json");
  if (bad_tmpdir.exit_code == 0) {  // no ONNX Runtime here: nothing needed a temporary folder
    EXPECT_EQ(Json::parse(bad_tmpdir.out)["verify"]["status"], "unavailable");
  } else {
    testing::expect_cli_failure(bad_tmpdir, 4, "TMPDIR='/nonexistent/dir'");
  }
}

}  // namespace
}  // namespace ipj::exporter
