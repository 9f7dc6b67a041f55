// Structured and magnitude pruning of LayerPrograms, fine-tuning, and the `ipj prune` workflow.
#include "ipj/quant/prune.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "ipj/core/error.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/quant/graph_file.hpp"
#include "ipj/quant/program_file.hpp"
#include "ipj/quant/source_model.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/evaluate.hpp"
#include "program_training.hpp"
#include "script_workflows.hpp"

namespace ipj::quant {
namespace {

std::int64_t parameter_count(const LayerProgram& program) {
  std::int64_t count = 0;
  for (const Layer& layer : program.layers)
    if (has_weights(layer)) count += layer.weight.numel() + layer.bias.numel();
  return count;
}

}  // namespace

LayerProgram prune_structured(const LayerProgram& program, double fraction, std::string* tied) {
  if (!(fraction >= 0.0 && fraction < 1.0)) fail(ErrorCategory::usage, "--sparsity must be in [0, 1)");
  torch::NoGradGuard no_grad;
  LayerProgram pruned = program;
  std::vector<std::size_t> weighted_layers;
  for (std::size_t index = 0; index < pruned.layers.size(); ++index)
    if (has_weights(pruned.layers[index])) weighted_layers.push_back(index);
  for (std::size_t position = 0; position + 1 < weighted_layers.size(); ++position) {
    Layer& layer = pruned.layers[weighted_layers[position]];
    Layer& next = pruned.layers[weighted_layers[position + 1]];
    const std::int64_t outputs = layer.weight.size(0);
    const auto keep_count =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::lround(outputs * (1.0 - fraction))));
    // L1 norm of each output unit / channel: w [out, ...] -> [out]
    const torch::Tensor norms = layer.weight.abs().reshape({outputs, -1}).sum(1);
    const torch::Tensor keep = std::get<0>(std::get<1>(norms.topk(keep_count)).sort());  // ascending indices
    layer.weight = layer.weight.index_select(0, keep).contiguous();
    layer.bias = layer.bias.index_select(0, keep).contiguous();
    if (next.kind == LayerKind::conv2d || next.weight.size(1) == outputs) {
      next.weight =
          next.weight.index_select(1, keep).contiguous();  // conv [out, in, kh, kw] or linear [out, in]
    } else {
      // conv -> (pool) -> flatten -> linear: the linear layer's inputs are grouped per channel (C x H x W)
      const std::int64_t per_channel = next.weight.size(1) / outputs;
      const torch::Tensor columns =
          (keep.view({-1, 1}) * per_channel + torch::arange(per_channel, torch::kLong).view({1, -1}))
              .reshape({-1});
      next.weight = next.weight.index_select(1, columns).contiguous();
    }
  }
  pruned.model_name = program.model_name + "-pruned";
  if (tied != nullptr && !weighted_layers.empty())
    *tied = "the last layer (its " + std::to_string(program.num_classes) + " outputs are the classes)";
  return pruned;
}

std::vector<torch::Tensor> prune_magnitude(LayerProgram& program, double sparsity) {
  if (!(sparsity >= 0.0 && sparsity < 1.0)) fail(ErrorCategory::usage, "--sparsity must be in [0, 1)");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> masks(program.layers.size());
  for (std::size_t index = 0; index < program.layers.size(); ++index) {
    Layer& layer = program.layers[index];
    if (!has_weights(layer)) continue;
    const std::int64_t count = layer.weight.numel();
    const auto pruned_count = static_cast<std::int64_t>(std::floor(count * sparsity));
    torch::Tensor mask = torch::ones_like(layer.weight);
    if (pruned_count > 0) {
      const torch::Tensor order = layer.weight.abs().reshape({-1}).argsort();
      mask.view({-1}).index_fill_(0, order.slice(0, 0, pruned_count), 0.0);
    }
    layer.weight = layer.weight * mask;
    masks[index] = mask;
  }
  return masks;
}

double weight_sparsity(const LayerProgram& program) {
  std::int64_t zeros = 0, total = 0;
  for (const Layer& layer : program.layers) {
    if (!has_weights(layer)) continue;
    zeros += layer.weight.eq(0).sum().item<std::int64_t>();
    total += layer.weight.numel();
  }
  return total ? static_cast<double>(zeros) / static_cast<double>(total) : 0.0;
}

void fine_tune(LayerProgram& program, const data::ImageSet& images, int epochs, double learning_rate,
               std::int64_t batch_size, std::uint64_t seed, bool show_progress,
               const std::vector<torch::Tensor>& masks) {
  const std::vector<torch::Tensor> parameters = make_trainable(program);
  const PixelTraining settings{epochs, learning_rate, batch_size, seed, "fine-tune", show_progress};
  auto loss = [&](const data::Batch& batch, const train::StepContext&) {
    const torch::Tensor logits = run_float(program, batch.images);  // [B, classes]
    return train::StepLoss{torch::nn::functional::cross_entropy(logits, batch.labels), logits};
  };
  auto keep_pruned_weights_at_zero = [&] {
    torch::NoGradGuard no_grad;
    for (std::size_t index = 0; index < program.layers.size(); ++index)
      if (masks[index].defined()) program.layers[index].weight.mul_(masks[index]);
  };
  train_on_pixels(images, settings, parameters, loss,
                  masks.empty() ? std::function<void()>() : keep_pruned_weights_at_zero);
  freeze(program);
}

SourceProgram load_source_program(const std::string& path) {
  SourceProgram source;
  std::error_code error;  // error_code form: a symbolic-link loop is reported by the loader, not thrown here
  if (!std::filesystem::is_directory(path, error) && is_program_file(path)) {
    ProgramFile file = load_program(path);
    source.program = std::move(file.program);
    source.data_dir = file.extra.value("data_dir", std::string(data::kDefaultDataDirectory));
    source.data_options = data::data_options_from_json(file.extra.value("data_options", Json::object()));
    source.path = path;
    return source;
  }
  const train::TrainedModel trained = train::load_trained_model(path);
  source.program = extract_program(*trained.model, trained.state.model_info);
  source.data_dir = trained.state.config.value("data", std::string(data::kDefaultDataDirectory));
  source.data_options =
      data::data_options_from_json(trained.state.config.value("data_options", Json::object()));
  source.path = trained.path;
  return source;
}

namespace {

std::int64_t count_parameters(const LayerProgram& program) {
  return parameter_count(program);
}
std::int64_t count_parameters(const Graph& graph) {
  return graph_parameter_count(graph);
}
std::int64_t count_macs(const LayerProgram& program) {
  return multiply_accumulates(program);
}
std::int64_t count_macs(const Graph& graph) {
  return graph_multiply_accumulates(graph);
}
void save_model(const std::string& path, const LayerProgram& program, const Json& extra) {
  save_program(path, program, extra);
}
void save_model(const std::string& path, const Graph& graph, const Json& extra) {
  save_graph(path, graph, extra);
}

// "removed_params_fraction": parameters removed (structured) or zeroed (`zeroed`, magnitude pruning) over all
// parameters, as the TorchScript path reports it; when structured pruning removed less than half of what
// --sparsity asked, a warning saying what kept the channels.
void add_removed_fraction(Json& report, const PruneOptions& options, const std::string& tied,
                          std::int64_t zeroed) {
  const auto original = report["original_params"].get<std::int64_t>();
  const auto pruned = report["pruned_params"].get<std::int64_t>();
  const double removed =
      original > 0 ? static_cast<double>(options.structured ? original - pruned : zeroed) / original : 0.0;
  report["removed_params_fraction"] = removed;
  if (!options.structured || !(removed < 0.5 * options.sparsity)) return;
  char numbers[160];
  std::snprintf(numbers, sizeof numbers,
                "structured pruning removed %.2f%% of the parameters, far below --sparsity %g (%.0f%% of the "
                "units of each prunable layer)",
                removed * 100.0, options.sparsity, options.sparsity * 100.0);
  report["warnings"].push_back(std::string(numbers) +
                               ": most parameters sit in layers whose channels are tied (" +
                               (tied.empty() ? std::string("none reported") : tied) +
                               "); magnitude pruning (omit --structured) zeroes weights anywhere");
}

template <typename Model>
Json prune_model(const Model& original, const PruneOptions& options, const data::Dataset& dataset,
                 const SourceData& data, const std::string& source_path, Json warnings) {
  const std::string& data_dir = data.directory;
  auto accuracy = [&](const Model& model) {
    torch::NoGradGuard no_grad;
    return train::pixel_accuracy([&](const torch::Tensor& x) { return float_forward(model, x); },
                                 dataset.test, 256);
  };
  const double original_acc = accuracy(original);
  Model pruned;
  std::vector<torch::Tensor> masks;
  std::string tied;
  if (options.structured) {
    pruned = prune_structured(original, options.sparsity, &tied);
  } else {
    pruned = original;
    masks = prune_magnitude(pruned, options.sparsity);
    pruned.model_name = original.model_name + "-sparse";
  }
  const double pruned_acc_before_tuning = accuracy(pruned);
  if (options.epochs > 0)
    fine_tune(pruned, dataset.train, options.epochs, options.learning_rate, options.batch_size, options.seed,
              options.show_progress, masks);
  const double pruned_acc = accuracy(pruned);
  Json extra = {{"data_dir", data_dir},
                {"data_options", data::to_json(data.options)},
                {"data_record", data::to_json(data::data_record(dataset))},
                {"source", source_path},
                {"structured", options.structured},
                {"sparsity", options.sparsity},
                {"test_acc", pruned_acc}};
  save_model(options.out_path, pruned, extra);
  Json report = {{"schema_version", kResultsSchemaVersion},
                 {"kind", "prune"},
                 {"threads", device::unplanned_threads_json()},
                 {"model", source_path},
                 {"method", options.structured ? "structured" : "magnitude"},
                 {"dataset", data::to_json(dataset)},
                 {"sparsity", options.sparsity},
                 {"fine_tune_epochs", options.epochs},
                 {"original_acc", original_acc},
                 {"pruned_acc_before_fine_tune", pruned_acc_before_tuning},
                 {"pruned_acc", pruned_acc},
                 {"acc_drop_pt", (original_acc - pruned_acc) * 100.0},
                 {"original_params", count_parameters(original)},
                 {"pruned_params", count_parameters(pruned)},
                 {"original_macs", count_macs(original)},
                 {"pruned_macs", count_macs(pruned)},
                 {"weight_sparsity", weight_sparsity(pruned)},
                 {"out", options.out_path},
                 {"warnings", std::move(warnings)}};
  std::int64_t zeroed = 0;  // magnitude pruning: weights its masks hold at zero
  for (const torch::Tensor& mask : masks)
    if (mask.defined()) zeroed += mask.numel() - mask.count_nonzero().item<std::int64_t>();
  add_removed_fraction(report, options, tied, zeroed);
  return report;
}

Json run_prune_graph(const PruneOptions& options) {
  if (options.out_path.empty()) fail(ErrorCategory::usage, "--out FILE is required");
  if (options.epochs < 0) fail(ErrorCategory::usage, "--epochs must be >= 0");
  if (!(options.sparsity >= 0.0 && options.sparsity < 1.0))  // NaN fails too
    fail(ErrorCategory::usage, "--sparsity must be in [0, 1)");
  if (!(options.learning_rate > 0.0 && options.learning_rate <= 100.0))
    fail(ErrorCategory::usage, "--lr must be a positive number up to 100");
  const SourceModel source = load_source_model(options.model_path, options.import);
  const SourceData data = source_data(source, options.data_dir, options.data_options);
  const data::Dataset dataset =
      data::load_dataset(data.directory, options.train_limit, options.test_limit, data.options);
  Json warnings = Json::array();
  add_data_warning(source, options.data_dir, dataset, warnings);
  // Before any forward pass: images of another shape or more classes than outputs are the user's data
  // problem (exit 3), not a LibTorch shape error.
  check_data_shape(source.program ? source.program->input_shape : source.graph->input_shape, dataset.train,
                   data.directory);
  check_data_classes(source.program ? source.program->num_classes : source.graph->num_classes, dataset,
                     source.path);
  if (source.program) return prune_model(*source.program, options, dataset, data, source.path, warnings);
  torch::Tensor sample;
  data::for_each_pixel_batch_in_order(
      dataset.test, 64, 64, [&](const torch::Tensor& pixels, const torch::Tensor&) { sample = pixels; });
  check_import(source, sample);
  return prune_model(*source.graph, options, dataset, data, source.path, warnings);
}

}  // namespace

// TorchScript files: magnitude pruning works on the module as it is (no operator refuses the model);
// structured pruning needs the graph importer and falls back to magnitude where it refuses the model.
Json run_prune(const PruneOptions& options) {
  if (detect_model_file(options.model_path) != ModelFileFormat::torchscript) return run_prune_graph(options);
  if (!options.structured) return run_prune_script(options, "");
  try {
    return run_prune_graph(options);
  } catch (const Error& error) {
    if (error.category() != ErrorCategory::unsupported) throw;
    return run_prune_script(options, error.what());
  }
}

}  // namespace ipj::quant
