// Format dispatch and the InferenceModel implementations (classifier, TorchScript, int8 program); graph IR
// models (ResNets, graph files, int8 of TorchScript files) are in graph_models.cpp.
#include "ipj/infer/inference_model.hpp"

#include <torch/script.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <sstream>

#include "graph_models.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/script_program.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/quant/graph_builders.hpp"
#include "ipj/quant/graph_file.hpp"
#include "ipj/quant/program_file.hpp"
#include "ipj/quant/quantize.hpp"
#include "ipj/quant/script_model.hpp"
#include "ipj/quant/script_static.hpp"
#include "ipj/quant/source_model.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/model_setup.hpp"
#include "ipj/train/precision.hpp"

namespace ipj::infer {
namespace {

// An ipj classifier in eval mode: pixels -> (pixels - mean) / std -> model; optional bf16 autocast.
class ClassifierModel : public InferenceModel {
 public:
  ClassifierModel(models::ClassifierPtr model, const std::vector<float>& mean, const std::vector<float>& std,
                  std::string precision)
      : model_(std::move(model)),
        mean_(torch::tensor(mean).view({1, -1, 1, 1})),
        std_(torch::tensor(std).view({1, -1, 1, 1})),
        precision_(std::move(precision)) {}
  torch::Tensor forward(const torch::Tensor& input) const override {
    torch::NoGradGuard no_grad;
    const torch::Tensor normalized = (input - mean_) / std_;  // [B, C, H, W]
    train::AutocastRegion autocast(precision_, false);
    return model_->forward(normalized).to(torch::kFloat);
  }

 private:
  models::ClassifierPtr model_;
  torch::Tensor mean_, std_;
  std::string precision_;
};

class Int8Model : public InferenceModel {
 public:
  explicit Int8Model(quant::QuantizedProgram program) : program_(std::move(program)) {}
  torch::Tensor forward(const torch::Tensor& input) const override { return program_.forward(input); }
  const quant::QuantizedProgram& program() const { return program_; }

 private:
  quant::QuantizedProgram program_;
};

std::int64_t tensor_bytes(const torch::jit::Module& module) {
  std::int64_t bytes = 0;
  for (const auto& parameter : module.parameters())
    bytes += parameter.numel() * parameter.element_size();
  for (const auto& buffer : module.buffers())
    bytes += buffer.numel() * buffer.element_size();
  return bytes;
}

// The variant a float file runs as: `requested`, or `as_stored` for Variant::file.
Variant as_stored_or(Variant requested, Variant as_stored) {
  return requested == Variant::file ? as_stored : requested;
}

// The program as TorchScript frozen the given way, on raw pixels.
std::shared_ptr<InferenceModel> script_program_model(const quant::LayerProgram& program, Freezing freezing) {
  auto model = std::make_shared<ScriptModel>(script_program(program, freezing), std::vector<float>{},
                                             std::vector<float>{}, "fp32", std::vector<std::int64_t>{});
  model->parameter_bytes = quant::float_parameter_bytes(program);
  return model;
}

// jit / int8 variants of a float LayerProgram (from a checkpoint or a program file).
std::shared_ptr<InferenceModel> program_variant(quant::LayerProgram program, Variant variant,
                                                const std::string& data_dir,
                                                const data::DataOptions& data_options,
                                                const LoadOptions& options) {
  if (variant == Variant::fp32 || variant == Variant::jit) {
    // TorchScript of the program: frozen (fp32's eager engine) or optimised (fp32's frozen engine, jit)
    const GraphBuilder scripted = [&program](Freezing freezing) {
      return script_program_model(program, freezing);
    };
    if (variant == Variant::jit)
      return jit_model(scripted(Freezing::frozen), scripted, program.input_shape, options.run);
    return fp32_engine_model(scripted(Freezing::frozen), scripted, program.input_shape, options.run,
                             [&program] { return quant::graph_from_program(program); });
  }
  std::vector<quant::QuantParams> params;
  quant::QuantMode mode = quant::QuantMode::dynamic;
  if (variant == Variant::int8_static) {
    mode = quant::QuantMode::static_ptq;
    const CalibrationImages calibration =
        load_calibration_images(options.calibration, data_dir, data_options, program.input_shape);
    params = quant::calibrate(program, calibration.images, options.calibration.samples, 256,
                              quant::ObserverKind::minmax, 100.0);
  } else if (variant != Variant::int8_dynamic) {
    fail(ErrorCategory::unsupported,
         "variant '" + choice_name(variant) +
             "' is not available here (int8-qat: bench the file `ipj quantize --mode qat` writes)");
  }
  auto int8 = std::make_shared<Int8Model>(
      quant::QuantizedProgram::convert(program, mode, params, options.run.engine));
  int8->parameter_bytes = int8->program().parameter_bytes();
  return int8;
}

InferenceModelPtr from_checkpoint(const std::string& path, const LoadOptions& options) {
  const train::TrainedModel trained = train::load_trained_model(path);
  const Json& info = trained.state.model_info;
  const auto mean = info.at("mean").get<std::vector<float>>();
  const auto std = info.at("std").get<std::vector<float>>();
  const Variant variant = as_stored_or(options.run.variant, Variant::fp32);
  const std::string data_dir = trained.state.config.value("data", std::string(data::kDefaultDataDirectory));
  const data::DataOptions data_options =
      data::data_options_from_json(trained.state.config.value("data_options", Json::object()));
  const std::string name = info.at("name").get<std::string>();
  std::shared_ptr<InferenceModel> result;
  if (variant == Variant::fp32 || variant == Variant::bf16) {
    result = std::make_shared<ClassifierModel>(trained.model, mean, std, choice_name(variant));
    if (variant == Variant::fp32)  // eager, or the same network as a frozen graph
      result = fp32_engine_model(
          result,
          [&](Freezing freezing) {  // the same network as TorchScript on raw pixels
            return models::has_layer_program(name)
                       ? script_program_model(quant::extract_program(*trained.model, info), freezing)
                       : script_graph_model(quant::extract_graph(*trained.model, info), freezing);
          },
          info.at("input_shape").get<std::vector<std::int64_t>>(), options.run,
          [&] {
            return models::has_layer_program(name)
                       ? quant::graph_from_program(quant::extract_program(*trained.model, info))
                       : quant::extract_graph(*trained.model, info);
          });
    std::int64_t bytes = 0;
    for (const auto& parameter : trained.model->parameters())
      bytes += parameter.numel() * 4;
    for (const auto& buffer : trained.model->buffers())
      bytes += buffer.numel() * buffer.element_size();
    result->parameter_bytes = bytes;
  } else if (models::has_layer_program(name)) {
    result = program_variant(quant::extract_program(*trained.model, info), variant, data_dir, data_options,
                             options);
  } else {
    result =
        graph_variant(quant::extract_graph(*trained.model, info), variant, data_dir, data_options, options);
  }
  result->variant = variant;
  result->format = ModelFormat::ipj_checkpoint;
  result->path = trained.path;
  result->model_name = name;
  result->sample_shape = info.at("input_shape").get<std::vector<std::int64_t>>();
  result->data_dir = data_dir;
  result->data_options = data_options;
  result->trained_data = train::trained_data_record(info, trained.state.config, trained.path);
  return result;
}

// What a model loaded from an ipj file says about itself (variant, format, origin, input, data).
struct FileModelDescription {
  Variant variant;
  ModelFormat format;
  std::string path;
  std::string model_name;
  std::vector<std::int64_t> sample_shape;
  std::string data_dir;
  data::DataOptions data_options;
};

void describe_file_model(InferenceModel& model, FileModelDescription description) {
  model.variant = description.variant;
  model.format = description.format;
  model.path = std::move(description.path);
  model.model_name = std::move(description.model_name);
  model.sample_shape = std::move(description.sample_shape);
  model.data_dir = std::move(description.data_dir);
  model.data_options = std::move(description.data_options);
}

InferenceModelPtr from_program(const std::string& path, const LoadOptions& options) {
  quant::ProgramFile file = quant::load_program(path);
  const Variant variant = as_stored_or(options.run.variant, Variant::fp32);
  if (variant == Variant::bf16)
    fail(ErrorCategory::unsupported,
         "variant bf16 needs an ipj checkpoint; program files run fp32, jit or int8");
  const std::string data_dir = file.extra.value("data_dir", std::string(data::kDefaultDataDirectory));
  const data::DataOptions data_options =
      data::data_options_from_json(file.extra.value("data_options", Json::object()));
  const auto sample_shape = file.program.input_shape;
  const std::string model_name = file.program.model_name;
  auto result = program_variant(std::move(file.program), variant, data_dir, data_options, options);
  describe_file_model(
      *result, {variant, ModelFormat::ipj_program, path, model_name, sample_shape, data_dir, data_options});
  result->trained_data =
      data::data_record_from_json(file.extra.value("data_record", Json()), "'" + path + "'");
  return result;
}

InferenceModelPtr from_int8(const std::string& path, const LoadOptions& options) {
  auto program = quant::QuantizedProgram::load(path, options.run.engine);
  const Variant stored = stored_int8_variant(quant::quant_mode_name(program.mode()), "'" + path + "'");
  require_stored_variant(options.run.variant, stored, path);
  auto result = std::make_shared<Int8Model>(std::move(program));
  const quant::QuantizedProgram& loaded = result->program();
  describe_file_model(*result,
                      {stored, ModelFormat::ipj_int8, path, loaded.program().model_name,
                       loaded.program().input_shape, loaded.extra().value("data_dir", std::string()),
                       data::data_options_from_json(loaded.extra().value("data_options", Json::object()))});
  result->parameter_bytes = loaded.parameter_bytes();
  result->trained_data =
      data::data_record_from_json(loaded.extra().value("data_record", Json()), "'" + path + "'");
  return result;
}

InferenceModelPtr from_graph(const std::string& path, const LoadOptions& options) {
  quant::GraphFile file = quant::load_graph(path);
  const Variant variant = as_stored_or(options.run.variant, Variant::fp32);
  const std::string data_dir = file.extra.value("data_dir", std::string());
  const data::DataOptions data_options =
      data::data_options_from_json(file.extra.value("data_options", Json::object()));
  const auto sample_shape = file.graph.input_shape;
  const std::string model_name = file.graph.model_name;
  auto result = graph_variant(std::move(file.graph), variant, data_dir, data_options, options);
  describe_file_model(
      *result, {variant, ModelFormat::ipj_graph, path, model_name, sample_shape, data_dir, data_options});
  result->trained_data =
      data::data_record_from_json(file.extra.value("data_record", Json()), "'" + path + "'");
  return result;
}

// int8-static of a TorchScript file the graph importer refuses: int8 regions on the module as it is
// (quant/script_static.hpp), calibrated on --calib images of the data the file records, else --data.
std::shared_ptr<InferenceModel> torchscript_static(const torch::jit::Module& module, const std::string& path,
                                                   const LoadOptions& options,
                                                   const quant::ImportOptions& import,
                                                   const data::DataRecord& trained_data) {
  const CalibrationImages calibration = load_calibration_images(
      options.calibration, trained_data.directory, trained_data.options, options.inputs.input_shape);
  quant::StaticScriptOptions settings;
  settings.engine = options.run.engine;
  settings.calib_samples = options.calibration.samples;
  const quant::StaticScript int8 =
      quant::quantize_script_static(module, import, calibration.images, settings, path);
  std::vector<std::int64_t> reshape;  // a flat --input-shape (e.g. 784) feeds [B, 784]
  if (options.inputs.input_shape.size() == 1) reshape = options.inputs.input_shape;
  auto result =
      std::make_shared<ScriptModel>(*int8.module, options.inputs.mean, options.inputs.std, "fp32", reshape);
  result->parameter_bytes = int8.int8_bytes;
  if (int8.int8_layers == 0)
    result->load_notes.push_back(
        "int8-static of '" + path +
        "': no conv2d/linear call runs in int8 (each int8 region was too small to pay "
        "for its quantize/dequantize), so this row is the float module; `ipj quantize --mode static "
        "--int8-regions all` quantizes every region");
  return result;
}

quant::ImportOptions import_options(const ModelInputs& inputs) {
  quant::ImportOptions import;
  import.input_shape = inputs.input_shape;
  import.mean = inputs.mean;
  import.std = inputs.std;
  return import;
}

// A TorchScript file as graph IR on raw pixels (its --mean/--std applied), checked against the module on 8
// random inputs; ipj::Error(unsupported) where the importer refuses an operator or the check fails (`use`
// names what is then unavailable).
quant::Graph imported_graph(const torch::jit::Module& module, const std::string& path,
                            const ModelInputs& inputs, const std::string& use) {
  const quant::ImportOptions import = import_options(inputs);
  quant::Graph graph = quant::import_torchscript(module, path, import);
  const double difference =
      quant::import_difference(module, graph, import, torch::rand(batch_shape(8, inputs.input_shape)));
  if (!(difference <= 1e-3))
    fail(ErrorCategory::unsupported, "'" + path + "': ipj's imported graph differs from the module by " +
                                         std::to_string(difference) + " (relative); " + use +
                                         " is not available for it");
  return graph;
}

// int8 variants of a TorchScript file: imported into the graph IR (with its --mean/--std), checked against
// the module on random inputs, then converted.
std::shared_ptr<InferenceModel> torchscript_int8(const torch::jit::Module& module, const std::string& path,
                                                 Variant variant, const LoadOptions& options,
                                                 const data::DataRecord& trained_data) {
  if (options.inputs.input_shape.empty())
    fail(ErrorCategory::usage, "int8 variants of TorchScript files need --input-shape (e.g. 1,28,28)");
  const quant::ImportOptions import = import_options(options.inputs);
  quant::Graph graph;
  try {
    graph = imported_graph(module, path, options.inputs, "int8");
  } catch (const Error& error) {
    if (error.category() != ErrorCategory::unsupported || variant != Variant::int8_static) throw;
    spdlog::warn("{}; int8-static runs on the TorchScript module as it is (int8 regions, float elsewhere)",
                 error.what());
    return torchscript_static(module, path, options, import, trained_data);
  }
  // int8-static calibrates on the data the file was trained on (`ipj train` records it), else --data.
  return graph_variant(std::move(graph), variant, trained_data.directory, trained_data.options, options);
}

// int8-dynamic of a TorchScript file: its nn.Linear layers in int8 on the module as it is (any operator).
std::shared_ptr<InferenceModel> torchscript_dynamic(const torch::jit::Module& module, const std::string& path,
                                                    const LoadOptions& options,
                                                    const std::vector<std::int64_t>& reshape) {
  const quant::DynamicScript int8 = quant::quantize_script_dynamic(module, options.run.engine, path);
  auto result =
      std::make_shared<ScriptModel>(*int8.module, options.inputs.mean, options.inputs.std, "fp32", reshape);
  result->parameter_bytes = int8.int8_bytes;
  return result;
}

// int8-dynamic for a file `ipj quantize --mode dynamic` wrote from a TorchScript file (its ipj.json says
// so), int8-static for --mode static, else none.
std::optional<Variant> stored_script_variant(const std::string& info_text, const std::string& path) {
  if (info_text.empty()) return std::nullopt;
  const Json info = Json::parse(info_text, nullptr, /*allow_exceptions=*/false);
  if (!info.is_object() || !info.contains("quantization") || !info["quantization"].is_object())
    return std::nullopt;
  return stored_int8_variant(info["quantization"].value("mode", std::string("dynamic")),
                             "'" + path + "' (its ipj.json's quantization mode)");
}

// A file that `ipj train` wrote (OUT/model.pt) brings its input shape and normalisation; flags win.
InferenceModelPtr from_torchscript(const std::string& path, const LoadOptions& given) {
  torch::jit::Module module;
  torch::jit::ExtraFilesMap extra_files{{train::kTorchScriptInfoName, ""}};
  load_file_checked(path, "TorchScript file",
                    [&] { module = torch::jit::load(path, c10::nullopt, extra_files); });
  LoadOptions options = given;
  train::fill_inputs_from_trained_info(extra_files[train::kTorchScriptInfoName], path,
                                       options.inputs.input_shape, options.inputs.mean, options.inputs.std);
  const data::DataRecord trained_data =
      train::trained_data_record(extra_files[train::kTorchScriptInfoName], path);
  if (!module.find_method("forward"))
    fail(ErrorCategory::invalid_input,
         "'" + path + "' has no forward method (save a scripted or traced module)");
  module.eval();
  const std::optional<Variant> stored = stored_script_variant(extra_files[train::kTorchScriptInfoName], path);
  if (stored == Variant::int8_static) {
    // Its packed int8 weights are repacked when the file loads, for the engine selected then: the one
    // `ipj quantize` calibrated and checked them on (recorded in ipj.json), so load it again under that one.
    const Json info = Json::parse(extra_files[train::kTorchScriptInfoName]);
    quant::select_quantized_engine(options.run.engine != "auto"
                                       ? options.run.engine
                                       : info["quantization"].value("engine", std::string("auto")));
    load_file_checked(path, "TorchScript file", [&] { module = torch::jit::load(path); });
    module.eval();
  }
  if (stored) require_stored_variant(options.run.variant, *stored, path);
  const Variant variant = stored ? *stored : as_stored_or(options.run.variant, Variant::fp32);
  std::vector<std::int64_t> reshape;  // a flat --input-shape (e.g. 784) feeds [B, 784]
  if (options.inputs.input_shape.size() == 1) reshape = options.inputs.input_shape;
  std::shared_ptr<InferenceModel> result;
  if (stored)
    result = std::make_shared<ScriptModel>(module, options.inputs.mean, options.inputs.std, "fp32", reshape);
  else if (variant == Variant::int8_dynamic)
    result = torchscript_dynamic(module, path, options, reshape);
  else if (is_int8(variant))
    result = torchscript_int8(module, path, variant, options, trained_data);
  else if (variant == Variant::fp32 || variant == Variant::jit) {  // fp32: eager or frozen; jit: frozen
    auto eager =
        std::make_shared<ScriptModel>(module, options.inputs.mean, options.inputs.std, "fp32", reshape);
    const GraphBuilder build_graph = [&](Freezing freezing) {
      return std::make_shared<ScriptModel>(freeze_for_inference(module, freezing), options.inputs.mean,
                                           options.inputs.std, "fp32", reshape);
    };
    result = variant == Variant::jit
                 ? jit_model(std::move(eager), build_graph, options.inputs.input_shape, options.run)
                 : fp32_engine_model(
                       std::move(eager), build_graph, options.inputs.input_shape, options.run,
                       [&] { return imported_graph(module, path, options.inputs, "XNNPACK's runtime"); });
  } else
    result = std::make_shared<ScriptModel>(module, options.inputs.mean, options.inputs.std,
                                           variant == Variant::bf16 ? "bf16" : "fp32", reshape);
  result->variant = variant;
  result->format = ModelFormat::torchscript;
  result->path = path;
  result->model_name = module.type()->name() ? module.type()->name()->name() : "torchscript";
  result->sample_shape = options.inputs.input_shape;
  result->trained_data = trained_data;
  result->data_dir = trained_data.directory;  // "" when the file records no data
  result->data_options = trained_data.options;
  if (stored)
    result->parameter_bytes = quant::script_model_bytes(module);
  else if (!is_int8(variant))
    result->parameter_bytes = tensor_bytes(module);
  return result;
}

}  // namespace

ScriptModel::ScriptModel(torch::jit::Module module, std::vector<float> mean, std::vector<float> std,
                         std::string precision, std::vector<std::int64_t> reshape)
    : module_(std::move(module)),
      mean_(std::move(mean)),
      std_(std::move(std)),
      precision_(std::move(precision)),
      reshape_(std::move(reshape)) {}

torch::Tensor ScriptModel::forward(const torch::Tensor& input) const {
  torch::NoGradGuard no_grad;
  torch::Tensor x = input;
  if (!reshape_.empty()) {  // first: a flat model's per-feature values apply to [B, F], not to [B, 1, H, W]
    std::vector<std::int64_t> shape{x.size(0)};
    shape.insert(shape.end(), reshape_.begin(), reshape_.end());
    x = x.reshape(shape);
  }
  x = quant::normalize_by_dim1(x, mean_, std_);
  train::AutocastRegion autocast(precision_, false);
  torch::jit::Module& module = const_cast<torch::jit::Module&>(module_);  // forward does not mutate
  const c10::IValue output = module.forward({x});
  if (!output.isTensor())
    fail(ErrorCategory::invalid_input, std::string(kUnservableAnswer) + "a " + output.tagKind() +
                                           ", ipj serves models that return one tensor");
  const torch::Tensor result = output.toTensor();
  if (result.is_complex())  // .to(kFloat) would drop the imaginary part without a word
    fail(ErrorCategory::unsupported,
         std::string(kUnservableAnswer) + "complex values (" +
             std::string(c10::toString(result.scalar_type())) +
             "); ipj takes real outputs: return torch.view_as_real(y) (real and imaginary parts) or y.abs() "
             "from forward");
  return result.to(torch::kFloat);
}

const std::vector<std::string>& variant_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const auto& [variant, name] : ChoiceNames<Variant>::names)
      if (variant != Variant::file) all.push_back(name);
    return all;
  }();
  return names;
}

bool is_int8(Variant variant) {
  return variant == Variant::int8_dynamic || variant == Variant::int8_static || variant == Variant::int8_qat;
}

Variant stored_int8_variant(const std::string& mode, const std::string& where) {
  for (const Variant variant : {Variant::int8_dynamic, Variant::int8_static, Variant::int8_qat})
    if (choice_name(variant) == "int8-" + mode) return variant;
  fail(ErrorCategory::invalid_input,
       where + ": unknown int8 mode '" + mode + "' (ipj writes dynamic, static or qat); re-run ipj quantize");
}

Variant parse_variant(const std::string& text, const std::string& setting) {
  for (const auto& [variant, name] : ChoiceNames<Variant>::names)
    if (text == name) return variant;
  std::string list;
  for (const auto& [variant, name] : ChoiceNames<Variant>::names)
    list += (list.empty() ? "" : ", ") + std::string(name);
  fail(ErrorCategory::usage,
       (setting.empty() ? "" : setting + ": ") + "unknown variant '" + text + "': use " + list);
}

void require_stored_variant(Variant requested, Variant stored, const std::string& path) {
  if (requested == Variant::file || requested == stored) return;
  fail(ErrorCategory::unsupported, "'" + path + "' is an int8 model (" + choice_name(stored) +
                                       "); it runs only as variant '" + choice_name(stored) +
                                       "' (or 'file')");
}

std::vector<std::int64_t> parse_shape(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> shape;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    try {
      std::size_t used = 0;
      const long long value = std::stoll(part, &used);
      if (used != part.size() || value <= 0 || value > (1 << 20)) throw std::invalid_argument(part);
      shape.push_back(value);
    } catch (const std::exception&) {
      fail(ErrorCategory::usage,
           flag + " '" + text +
               "': expected positive integers up to 1048576 separated by commas, e.g. 1,28,28");
    }
  }
  std::int64_t values = 1;
  for (const std::int64_t size : shape)
    if ((values *= size) > (std::int64_t{1} << 28))
      fail(ErrorCategory::usage, flag + " '" + text + "' is too large: at most 268435456 values per sample");
  if (shape.empty()) fail(ErrorCategory::usage, flag + " is empty: give e.g. 1,28,28");
  return shape;
}

InferenceModelPtr load_inference_model(const std::string& path) {
  return load_inference_model(path, LoadOptions());
}

namespace {

InferenceModelPtr load_by_format(const std::string& path, const LoadOptions& options) {
  switch (quant::detect_model_file(path)) {
    case quant::ModelFileFormat::checkpoint:
      return from_checkpoint(path, options);
    case quant::ModelFileFormat::int8:
      return from_int8(path, options);
    case quant::ModelFileFormat::int8_graph:
      return int8_graph_model(path, options);
    case quant::ModelFileFormat::program:
      return from_program(path, options);
    case quant::ModelFileFormat::graph:
      return from_graph(path, options);
    case quant::ModelFileFormat::torchscript:
      return from_torchscript(path, options);
  }
  fail(ErrorCategory::internal, "unreachable file format");
}

}  // namespace

namespace {

// XNNPACK's int8 runtime of a static (or QAT) int8 program, allowed within two output quanta of LibTorch's
// int8 kernels (requantization rounding: measured 0 on the mlp, at most 1 on the cnn). None for dynamic
// int8, other model kinds, or an engine asked for by name (--engine onednn runs oneDNN).
Batch1Candidate xnnpack_int8_candidate(const InferenceModel& model, const RunOptions& run) {
  const auto* int8 = dynamic_cast<const Int8Model*>(&model);
  if (!int8 || run.engine != "auto" || int8->program().mode() == quant::QuantMode::dynamic ||
      !xnnpack_runtime_available())
    return {};
  Batch1Candidate candidate;
  candidate.build = [program = int8->program()](InferenceModelPtr busy, std::int64_t batch, int threads) {
    return xnnpack_int8_runtime_model(program, batch, std::move(busy), threads);
  };
  const double tolerance = 2.01 * int8->program().output_params().back().scale;
  const std::vector<std::int64_t> shape = batch_shape(1, model.sample_shape);
  candidate.disagreement = [tolerance, shape](const Forward& reference, const Forward& xnnpack) {
    double worst = 0.0;  // [0, 1) pixels and normal(0, 2) values
    for (int round = 0; round < 16; ++round) {
      const torch::Tensor input = round % 2 == 0 ? torch::rand(shape) : torch::randn(shape) * 2.0;
      worst = std::max(worst, (xnnpack(input) - reference(input)).abs().max().item<double>());
    }
    return worst <= tolerance
               ? std::string()
               : "differs by " + format_number("%.4g", worst) + " > " + format_number("%.4g", tolerance);
  };
  return candidate;
}

}  // namespace

InferenceModelPtr load_inference_model(const std::string& path, const LoadOptions& options) {
  const UncountedRuntimeCalls load_time;  // the timings and checks below answer no request
  InferenceModelPtr model = load_by_format(path, options);
  // int8 kernels at batch 1 often run faster on one thread than waking the pool (fp32 measures this as
  // part of its engine choice), and a static int8 program faster still on XNNPACK's int8 runtime
  if (is_int8(model->variant) && options.run.int8_routes) {
    Batch1Candidate xnnpack = xnnpack_int8_candidate(*model, options.run);
    if (!xnnpack.build) xnnpack = xnnpack_int8_graph_candidate(*model, options.run);
    const InferenceModelPtr int8 = model;
    model = with_measured_batch1_threads(std::move(model), options.run.pool_threads, xnnpack);
    // and larger batches of static int8 on XNNPACK's int8 runtime where it is faster (its VNNI GEMMs)
    model = with_batched_int8_xnnpack(std::move(model), int8, xnnpack, options.run);
  }
  return model;
}

}  // namespace ipj::infer
