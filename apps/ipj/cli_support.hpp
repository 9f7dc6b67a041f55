// Shared CLI plumbing: the registration signature of subcommands, JSON/human output helpers, the data flags
// of every command that takes --data.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/data/data_options.hpp"
#include "ipj/models/model_source.hpp"

namespace ipj::cli {

// Every subcommand registers itself on the app and sets `run` to what executes it after parsing.
using CommandRunner = std::function<int()>;

struct CommonOutputFlags {
  bool json = false;   // one JSON object on stdout, nothing else there
  bool quiet = false;  // no progress on stderr
};

void add_output_flags(CLI::App& command, CommonOutputFlags& flags);

// --resize H,W, --channels 1|3, --mean/--std (with_normalization), --skip-bad-images, --image-cache-mb,
// --decode-threads: how --data is read (docs/CLI.md "Data flags", docs/DATA.md).
struct DataFlags {
  std::string resize;
  std::string mean;
  std::string std;
  data::DataOptions options;
};
void add_data_flags(CLI::App& command, DataFlags& flags, bool with_normalization);
// The parsed and validated options; throws ipj::Error(usage) naming the flag.
data::DataOptions data_options(const DataFlags& flags);

// "runs/<name>-YYYYmmdd-HHMMSS": the default run folder of commands that write results.
std::string default_run_folder(const std::string& name);

// `--model TEXT` (a zoo name or a TorchScript file) with `--input-shape C,H,W|N` ("" when not given).
models::ModelSource parse_model_flags(const std::string& model, const std::string& input_shape,
                                      const std::string& model_flag = "--model");
// Help text of --input-shape, the same for every command that takes a TorchScript --model.
extern const char* const kInputShapeHelp;
// A CLI11 check for a floating-point flag: a finite number in [min, max]. CLI::Range and
// CLI::NonNegativeNumber let NaN (and +inf for open ranges) through; this refuses them, naming the value.
CLI::Validator finite_range(double min, double max);

// "0.5,0.25" -> {0.5, 0.25}; throws ipj::Error(usage) naming `flag` on bad text.
std::vector<float> parse_floats(const std::string& text, const std::string& flag);
// Comma-separated parts, empty ones dropped.
std::vector<std::string> split_commas(const std::string& text);
// --input-shape/--mean/--std of TorchScript models (left empty when the texts are).
struct ModelInputFlags {
  std::string input_shape, mean, std;
};
void add_model_input_flags(CLI::App& command, ModelInputFlags& flags);
// Parses them into `shape`, `mean` and `std`; throws ipj::Error(usage) on bad text or unequal mean/std.
void parse_model_input_flags(const ModelInputFlags& flags, std::vector<std::int64_t>& shape,
                             std::vector<float>& mean, std::vector<float>& std);
// Prints `value` as one compact JSON line on stdout.
void print_json(const Json& value);

// The TrainConfig JSON keys (train/train_config.hpp) set by flags given on this command line:
// "--weight-decay"
// -> "weight_decay", "--thread-plan" -> "tune_threads", "--no-energy" -> "measure_energy". These override a
// --recipe file's values.
std::vector<std::string> given_config_keys(const CLI::App& command);

// After a recipe file was applied (`model`: from --model, or the recipe's own): warns on stderr when it is
// not the model the recipe was tuned for (another model or input shape, or the file changed since), and gives
// the same file given without --input-shape the recipe's input shape (train::check_recipe_model).
void check_model_against_recipe(const CLI::App& command, const Json& recipe, const std::string& recipe_path,
                                models::ModelSource& model);

CLI::App* register_devices_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_models_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_train_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_measure_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_compare_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_quantize_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_bench_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_serve_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_prune_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_distill_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_load_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_export_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_launch_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_report_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_gate_command(CLI::App& app, CommandRunner& runner);
CLI::App* register_tune_command(CLI::App& app, CommandRunner& runner);

}  // namespace ipj::cli
