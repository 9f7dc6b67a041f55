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

// A new folder runs/<name>-<YYYYmmdd-HHMMSS>[-N] in the working directory, made here so that runs started in
// the same second never share one (ipj::Error io where it cannot be made).
std::string default_run_folder(const std::string& name);
// main(): removes the folders default_run_folder made that the run left empty (it failed before writing).
void remove_reserved_run_folders_left_empty();

// `--model TEXT` (a zoo name or a TorchScript file) with `--input-shape C,H,W|N` ("" when not given).
models::ModelSource parse_model_flags(const std::string& model, const std::string& input_shape,
                                      const std::string& model_flag = "--model");
// Help text of --input-shape, the same for every command that takes a TorchScript --model.
extern const char* const kInputShapeHelp;
// The range checks of numeric flags, one per kind, applied in every command's flag table (docs/CLI.md
// "Numeric flags"). CLI11 runs them on the text before converting it and names the flag ("--seed: '-1' is out
// of range: give a whole number in [0, 18446744073709551615]"; exit 2). They refuse what CLI11's own
// conversions and checks let through: "-1" into an unsigned flag (it wraps), 1e30 into an integer (it
// clamps), NaN and infinities (CLI::Range and CLI::NonNegativeNumber pass NaN).
// A whole number in [min, max] (no fraction, no exponent).
CLI::Validator integer_range(std::int64_t min, std::int64_t max);
// Counts and limits where 0 means all / off / the default: a whole number in [0, max].
CLI::Validator non_negative_integer(std::int64_t max);
// Sizes that must be at least 1 (batch sizes, epochs, windows): a whole number in [1, max].
CLI::Validator positive_integer(std::int64_t max);
// Seeds: a whole number in [0, 2^64 - 1].
CLI::Validator seed_value();
// A finite number in [min, max].
CLI::Validator finite_range(double min, double max);
// A fraction in [0, 1] (accuracies, momentum, mixing weights).
CLI::Validator probability();
// A finite number in (min, max].
CLI::Validator range_above(double min, double max);
// A finite number in (0, max] (learning rates, seconds, temperatures).
CLI::Validator positive_number(double max);
// Largest sample count a --limit-style flag accepts (far above any data set; refuses 1e30 and typos).
inline constexpr std::int64_t kMaxSamples = std::int64_t{1} << 40;
// Largest batch a --batch-style flag accepts.
inline constexpr std::int64_t kMaxBatch = std::int64_t{1} << 24;

// "0.5,0.25" -> {0.5, 0.25}; throws ipj::Error(usage) naming `flag` on bad text.
std::vector<float> parse_floats(const std::string& text, const std::string& flag);
// "1,8,64" -> {1, 8, 64}, each a whole number in [min, max]; throws ipj::Error(usage) naming `flag`, the
// bad part and the range.
std::vector<std::int64_t> parse_integer_list(const std::string& text, const std::string& flag,
                                             std::int64_t min, std::int64_t max);
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
// Prints each string of `report["warnings"]` (if any) on stderr as "ipj: warning: ...".
void print_warnings(const Json& report);
// Prints `value` as one compact JSON line on stdout.
void print_json(const Json& value);

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
