// `ipj quantize --mode dynamic` and `ipj prune` on architectures ipj's graph importer does not cover
// (squeeze-excite, concat, channel shuffle, GroupNorm/LayerNorm, attention, tanh), scripted and traced, made
// at test time by Debian's python3-torch (tests/models/python/any_models.py), which also checks the outputs
// against torch.ao.quantization.quantize_dynamic and the float model.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "ipj/core/atomic_file.hpp"
#include "support/test_support.hpp"

namespace ipj {
namespace any_architecture_test {  // named: test files are compiled in unity batches

using nlohmann::json;

testing::ProcessResult run_ipj(const std::string& arguments) {
  return testing::run_process(testing::ipj_binary() + " " + arguments);
}

testing::ProcessResult any_models(const std::string& arguments) {
  return testing::run_process(testing::python_path() + " " + testing::test_source_dir() +
                              "/models/python/any_models.py " + arguments);
}

// Architecture -> nn.Linear layers (all run once per forward) and one float operator it must report.
const std::map<std::string, std::pair<int, std::string>>& architectures() {
  static const std::map<std::string, std::pair<int, std::string>> table{
      {"se_cnn", {3, "aten::sigmoid"}},         {"concat", {1, "aten::cat"}},
      {"shuffle", {1, "aten::transpose"}},      {"norms", {2, "aten::group_norm"}},
      {"transformer", {4, "aten::layer_norm"}}, {"tanh_mlp", {2, "aten::tanh"}}};
  return table;
}

std::int64_t count_of(const json& ops, const std::string& op) {
  for (const json& entry : ops)
    if (entry.at("op") == op) return entry.at("count").get<std::int64_t>();
  return 0;
}

std::int64_t int8_kernel_calls(const json& ops) {
  std::int64_t calls = 0;
  for (const char* op :
       {"quantized::conv2d", "quantized::conv2d_relu", "quantized::linear", "quantized::linear_relu"})
    calls += count_of(ops, op);
  return calls;
}

}  // namespace any_architecture_test

using any_architecture_test::json;
using any_architecture_test::run_ipj;

TEST(CliAnyArchitecture, DynamicInt8AndMagnitudePruningTakeEveryModelAndAgreeWithPyTorch) {
  testing::TempDir dir;
  std::vector<std::string> names;
  std::string make_arguments = "make " + dir.path();
  for (const auto& [architecture, expected] : any_architecture_test::architectures())
    for (const char* kind : {"_scripted", "_traced"}) {
      names.push_back(architecture + kind);
      make_arguments += " " + names.back();
    }
  const auto made = any_architecture_test::any_models(make_arguments);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 64, 32, /*gzip=*/false, 16, 16);
  const std::string common = " --input-shape 1,16,16 --data " + dir.file("data") + " --json";
  json manifest = json::array();
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const auto& [linears, float_op] =
        any_architecture_test::architectures().at(name.substr(0, name.rfind('_')));
    const auto quantized = run_ipj("quantize --model " + dir.file(name + ".pt") + common +
                                   " --mode dynamic --max-drop 100 --out " + dir.file(name + "-int8.pt"));
    ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
    const json report = json::parse(quantized.out);
    EXPECT_EQ(report["int8_layers"], linears);
    EXPECT_EQ(any_architecture_test::count_of(report["int8_ops"], "quantized::linear_dynamic"), linears)
        << report["int8_ops"];
    EXPECT_GT(any_architecture_test::count_of(report["float_ops"], float_op), 0) << report["float_ops"];
    EXPECT_EQ(any_architecture_test::count_of(report["float_ops"], "quantized::linear_dynamic"), 0);
    EXPECT_TRUE(report["accepted"].get<bool>());
    EXPECT_EQ(report["out"], dir.file(name + "-int8.pt"));

    const auto pruned = run_ipj("prune --model " + dir.file(name + ".pt") + common +
                                " --sparsity 0.5 --epochs 0 --out " + dir.file(name + "-pruned.pt"));
    ASSERT_EQ(pruned.exit_code, 0) << pruned.err;
    const json prune_report = json::parse(pruned.out);
    EXPECT_EQ(prune_report["method"], "magnitude");
    EXPECT_EQ(prune_report["threads"]["plan"], "libtorch-default");  // tests run ipj with OMP_WAIT_POLICY set
    EXPECT_NE(prune_report["threads"]["omp_wait_policy"].get<std::string>().find("(set by the user)"),
              std::string::npos);
    EXPECT_GT(prune_report["removed_params_fraction"].get<double>(), 0.3);  // weights are most parameters
    EXPECT_LE(prune_report["removed_params_fraction"].get<double>(), 0.5);
    EXPECT_NEAR(prune_report["weight_sparsity"].get<double>(), 0.5, 0.01);
    EXPECT_GT(prune_report["original_macs"].get<std::int64_t>(), 0);
    manifest.push_back({{"name", name},
                        {"original", dir.file(name + ".pt")},
                        {"quantized", dir.file(name + "-int8.pt")},
                        {"pruned", dir.file(name + "-pruned.pt")}});
  }
  write_file_atomically(dir.file("manifest.json"), manifest.dump());
  const auto checked = any_architecture_test::any_models("check " + dir.file("manifest.json"));
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  const json result = json::parse(checked.out);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const json& row = result.at(name);
    const double scale = row["logit_scale"].get<double>();
    EXPECT_LT(row["original_vs_eager"].get<double>(), 1e-5);  // the model PyTorch quantized is the file's
    // ipj's int8 file, run by PyTorch, against PyTorch's own quantize_dynamic: same weights, same kernels.
    EXPECT_LE(row["ipj_vs_pytorch"].get<double>(), 0.01 * scale) << row;
    EXPECT_LE(row["ipj_vs_float"].get<double>(), 0.1 * scale) << row;
    // The pruned file is the float model with its smallest weights zeroed, nothing else changed.
    EXPECT_LT(row["pruned_vs_masked_float"].get<double>(), 1e-4 * std::max(scale, 1.0)) << row;
    EXPECT_EQ(row["kept_weights_changed"].get<double>(), 0.0) << row;
    EXPECT_GE(row["lowest_sparsity"].get<double>(), 0.45) << row;
  }
  // ipj's inference paths load the int8 file (ipj.json: input shape, variant) and run int8-dynamic of a
  // model the graph importer refuses (sigmoid gates).
  const std::string bench_flags =
      " --batch 4 --window-s 0.05 --warmup-s 0.01 --max-windows 3 --no-energy --test-limit 32 --json "
      "--data " +
      dir.file("data");
  const auto file_bench = run_ipj("bench --model " + dir.file("transformer_scripted-int8.pt") + bench_flags);
  ASSERT_EQ(file_bench.exit_code, 0) << file_bench.err;
  EXPECT_EQ(json::parse(file_bench.out)["rows"][0]["variant"], "int8-dynamic");
  const auto variant_bench = run_ipj("bench --model " + dir.file("se_cnn_traced.pt") +
                                     " --input-shape 1,16,16 --variants fp32,int8-dynamic" + bench_flags);
  ASSERT_EQ(variant_bench.exit_code, 0) << variant_bench.err;
  const json rows = json::parse(variant_bench.out)["rows"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["variant"], "int8-dynamic");
  EXPECT_NEAR(rows[1]["test_acc"].get<double>(), rows[0]["test_acc"].get<double>(), 0.1);
}

// Static int8 of models the graph importer refuses: the TorchScript fallback quantizes their conv/linear
// regions and keeps the rest float, PyTorch runs the file, and ipj bench runs it as the int8-static variant.
TEST(CliAnyArchitecture, StaticInt8QuantizesSupportedRegionsOfEveryModelAndKeepsTheRestFloat) {
  testing::TempDir dir;
  std::vector<std::string> names;
  std::string make_arguments = "make " + dir.path();
  for (const auto& [architecture, expected] : any_architecture_test::architectures())
    for (const char* kind : {"_scripted", "_traced"}) {
      names.push_back(architecture + kind);
      make_arguments += " " + names.back();
    }
  const auto made = any_architecture_test::any_models(make_arguments);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 64, 32, /*gzip=*/false, 16, 16);
  const std::string common =
      " --input-shape 1,16,16 --data " + dir.file("data") + " --mode static --calib 64 --max-drop 100 --json";
  json manifest = json::array();
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const std::string float_op =
        any_architecture_test::architectures().at(name.substr(0, name.rfind('_'))).second;
    // --int8-regions all: these models are too small for any region to pay for its borders.
    const auto quantized = run_ipj("quantize --model " + dir.file(name + ".pt") + common +
                                   " --int8-regions all --out " + dir.file(name + "-static.pt"));
    ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
    EXPECT_NE(quantized.err.find("ipj: warning: static int8 on the TorchScript module"), std::string::npos)
        << quantized.err;
    EXPECT_NE(quantized.err.find("operator"), std::string::npos)
        << quantized.err;  // what forced the fallback
    const json report = json::parse(quantized.out);
    EXPECT_EQ(report["mode"], "static");
    EXPECT_EQ(report["method"], "torchscript");
    EXPECT_GT(report["int8_layers"].get<int>(), 0) << report;
    EXPECT_GT(any_architecture_test::int8_kernel_calls(report["int8_ops"]), 0) << report["int8_ops"];
    EXPECT_GT(any_architecture_test::count_of(report["float_ops"], float_op), 0) << report["float_ops"];
    EXPECT_GT(any_architecture_test::count_of(report["border_ops"], "aten::quantize_per_tensor"), 0);
    EXPECT_GT(any_architecture_test::count_of(report["border_ops"], "aten::dequantize"), 0);
    EXPECT_TRUE(report["accepted"].get<bool>());
    EXPECT_LT(report["int8_bytes"].get<std::int64_t>(), report["fp32_bytes"].get<std::int64_t>());
    EXPECT_LE(std::abs(report["acc_drop_pt"].get<double>()), 20.0) << report;
    manifest.push_back({{"name", name},
                        {"static", dir.file(name + "-static.pt")},
                        {"images", dir.file("data/t10k-images-idx3-ubyte")}});
  }
  write_file_atomically(dir.file("manifest.json"), manifest.dump());
  const auto checked = any_architecture_test::any_models("check-static " + dir.file("manifest.json"));
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  const json result = json::parse(checked.out);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const json& row = result.at(name);
    // PyTorch loads and runs the file: its int8 ops are PyTorch's own quantized TorchScript operators.
    EXPECT_FALSE(row["quantized_ops"].empty()) << row;
    // On images like the calibration images: 8-bit activations (step = observed range / 255) through at most
    // five int8 layers of these models stay within a few percent of the largest logit; 10% leaves room for
    // the test images reaching outside the ranges observed on 64 training images.
    EXPECT_LE(row["static_vs_float"].get<double>(), 0.1 * row["logit_scale"].get<double>()) << row;
  }
  const std::string bench_flags =
      " --batch 4 --window-s 0.05 --warmup-s 0.01 --max-windows 3 --no-energy --test-limit 32 --json "
      "--data " +
      dir.file("data");
  const auto bench = run_ipj("bench --model " + dir.file("se_cnn_traced-static.pt") + bench_flags);
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(json::parse(bench.out)["rows"][0]["variant"], "int8-static");
  // bench --variants int8-static of the plain file: the importer refuses it, so it is converted the same way.
  const auto floats = run_ipj("bench --model " + dir.file("se_cnn_traced.pt") +
                              " --input-shape 1,16,16 --variants fp32,int8-static --calib 64" + bench_flags);
  ASSERT_EQ(floats.exit_code, 0) << floats.err;
  const json rows = json::parse(floats.out)["rows"];
  ASSERT_EQ(rows.size(), 2u) << floats.out;
  EXPECT_EQ(rows[1]["variant"], "int8-static");
  EXPECT_NE(floats.err.find("aten::silu"), std::string::npos) << floats.err;  // the warning says why
  EXPECT_NEAR(json::parse(bench.out)["rows"][0]["test_acc"].get<double>(), rows[0]["test_acc"].get<double>(),
              0.1);
  EXPECT_NEAR(rows[1]["test_acc"].get<double>(), rows[0]["test_acc"].get<double>(), 0.1);
}

// The default border rule keeps an int8 region that pays for its borders (three convolutions) and leaves a
// lone small linear layer float, saying why.
TEST(CliAnyArchitecture, StaticInt8BorderRuleKeepsAConvRegionAndLeavesASmallHeadFloat) {
  testing::TempDir dir;
  const auto made =
      any_architecture_test::any_models("make " + dir.path() + " relu_chain_traced se_cnn_scripted");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 64, 32, /*gzip=*/false, 16, 16);
  const std::string common =
      " --input-shape 1,16,16 --data " + dir.file("data") + " --mode static --calib 64 --max-drop 100 --json";
  const auto chain = run_ipj("quantize --model " + dir.file("relu_chain_traced.pt") + common + " --out " +
                             dir.file("chain.pt"));
  ASSERT_EQ(chain.exit_code, 0) << chain.err;
  const json report = json::parse(chain.out);
  EXPECT_EQ(report["int8_layers"], 3) << report;  // BN folded, ReLU fused: quantized::conv2d_relu x3
  EXPECT_EQ(any_architecture_test::count_of(report["int8_ops"], "quantized::conv2d_relu"), 3) << report;
  EXPECT_EQ(any_architecture_test::count_of(report["border_ops"], "aten::quantize_per_tensor"), 1) << report;
  EXPECT_GT(any_architecture_test::count_of(report["float_ops"], "aten::silu"), 0) << report;
  EXPECT_GT(any_architecture_test::count_of(report["float_ops"], "aten::linear"), 0) << report;
  ASSERT_EQ(report["float_layers"].size(), 1u) << report;
  EXPECT_NE(report["float_layers"][0].get<std::string>().find("border rule"), std::string::npos);
  // A model whose regions are all too small stays float, with a warning, and is still written.
  const auto small = run_ipj("quantize --model " + dir.file("se_cnn_scripted.pt") + common + " --out " +
                             dir.file("small.pt"));
  ASSERT_EQ(small.exit_code, 0) << small.err;
  EXPECT_EQ(json::parse(small.out)["int8_layers"], 0);
  EXPECT_NE(small.err.find("no conv2d/linear call runs in int8"), std::string::npos) << small.err;
  EXPECT_NE(small.err.find("--int8-regions all quantizes every region"), std::string::npos) << small.err;
  // bench's int8-static row of that model is the float module: the results say so (they said nothing)
  const auto benched =
      run_ipj("bench --model " + dir.file("se_cnn_scripted.pt") + " --input-shape 1,16,16 --data " +
              dir.file("data") + " --variants int8-static --batch 1 --window-s 0.02 " +
              "--max-windows 2 --no-energy --quiet --json");
  ASSERT_EQ(benched.exit_code, 0) << benched.err;
  bool said = false;
  const json bench_report = json::parse(benched.out);
  for (const auto& warning : bench_report["warnings"])
    said = said || warning.get<std::string>().find("this row is the float module") != std::string::npos;
  EXPECT_TRUE(said) << benched.out;
  const auto bad = run_ipj("quantize --model " + dir.file("se_cnn_scripted.pt") + common +
                           " --int8-regions some --out " + dir.file("bad.pt"));
  testing::expect_cli_failure(bad, 2, "--int8-regions");
}

TEST(CliAnyArchitecture, PruneFineTunesAndStructuredFallsBackToMagnitudeWithAWarning) {
  testing::TempDir dir;
  const auto made =
      any_architecture_test::any_models("make " + dir.path() + " transformer_scripted se_cnn_scripted");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 64, 32, /*gzip=*/false, 16, 16);
  const std::string common = " --input-shape 1,16,16 --data " + dir.file("data") + " --sparsity 0.5";
  const auto tuned = run_ipj("prune --model " + dir.file("transformer_scripted.pt") + common +
                             " --epochs 1 --json --out " + dir.file("tuned.pt"));
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  const json report = json::parse(tuned.out);
  EXPECT_EQ(report["fine_tune_epochs"], 1);
  EXPECT_NEAR(report["weight_sparsity"].get<double>(), 0.5, 0.01);  // masks survive fine-tuning
  EXPECT_GT(report["removed_params_fraction"].get<double>(), 0.3);
  EXPECT_TRUE(report["warnings"].empty()) << report["warnings"];

  // --structured: the importer refuses sigmoid gates, so the model is pruned by magnitude, and says so.
  const auto structured = run_ipj("prune --model " + dir.file("se_cnn_scripted.pt") + common +
                                  " --structured --epochs 0 --json --out " + dir.file("structured.pt"));
  ASSERT_EQ(structured.exit_code, 0) << structured.err;
  const json fallback = json::parse(structured.out);
  EXPECT_EQ(fallback["method"], "magnitude");
  ASSERT_EQ(fallback["warnings"].size(), 1u);
  EXPECT_NE(fallback["warnings"][0].get<std::string>().find("--structured"), std::string::npos);
  EXPECT_NE(structured.err.find("ipj: warning: --structured"), std::string::npos) << structured.err;
  // The pruned file is a TorchScript model the graph-free quantizer takes again.
  const auto quantized =
      run_ipj("quantize --model " + dir.file("structured.pt") + " --data " + dir.file("data") +
              " --mode dynamic --max-drop 100 --json --out " + dir.file("structured-int8.pt"));
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;  // input shape from the pruned file's ipj.json
  EXPECT_EQ(json::parse(quantized.out)["int8_layers"], 3);
}

// nn.TransformerEncoder in eval mode takes its fast path (one fused kernel on the layers' float weights):
// dynamic int8 swapped 6 Linear layers but a forward calls 2 of them in int8, and the file grew. The report
// said int8_layers 6 and nothing else (a new user's pass, 12-07); now two warnings say so.
TEST(CliAnyArchitecture, DynamicInt8SaysWhichLinearLayersAFusedPathKeepsFloat) {
  testing::TempDir dir;
  const std::string script =
      "import torch, torch.nn as nn\n"
      "class Vit(nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.embed = nn.Linear(16, 32)\n"
      "        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)\n"
      "        self.enc = nn.TransformerEncoder(layer, num_layers=1)\n"
      "        self.head = nn.Linear(32, 10)\n"
      "    def forward(self, x):\n"
      "        p = x.reshape(x.size(0), 16, 16)\n"
      "        return self.head(self.enc(self.embed(p)).mean(1))\n"
      "torch.manual_seed(0)\n"
      "torch.jit.script(Vit().eval()).save('" +
      dir.file("vit.pt") + "')\n";
  write_file_atomically(dir.file("make.py"), script);
  const auto made = testing::run_process(testing::python_path() + " " + dir.file("make.py"));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 16, 16, /*gzip=*/false, 16, 16);
  const auto quantized =
      run_ipj("quantize --model " + dir.file("vit.pt") + " --input-shape 1,16,16 --data " + dir.file("data") +
              " --mode dynamic --max-drop 100 --json --out " + dir.file("vit-int8.pt"));
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  const json report = json::parse(quantized.out);
  const int called = any_architecture_test::count_of(report["int8_ops"], "quantized::linear_dynamic");
  ASSERT_LT(called, report["int8_layers"].get<int>()) << "the fast path ran int8 layers: update this test";
  ASSERT_GE(report["warnings"].size(), 1u) << report;
  EXPECT_NE(report["warnings"][0].get<std::string>().find("called quantized::linear_dynamic " +
                                                          std::to_string(called) + " time(s)"),
            std::string::npos)
      << report["warnings"];
  EXPECT_NE(quantized.err.find("ipj: warning: "), std::string::npos) << quantized.err;
}

TEST(CliAnyArchitecture, DynamicInt8OfAModelWithoutLinearLayersIsRefusedWithTheReason) {
  testing::TempDir dir;
  const auto made =
      testing::run_process(testing::python_path() + " " + testing::test_source_dir() +
                           "/models/python/user_models.py make " + dir.path() + " no_parameters_scripted");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 16, 16, /*gzip=*/false, 16, 16);
  const auto result = run_ipj("quantize --model " + dir.file("no_parameters_scripted.pt") +
                              " --input-shape 1,16,16 --mode dynamic --data " + dir.file("data") + " --out " +
                              dir.file("q.pt"));
  testing::expect_cli_failure(result, 5, "has no torch.nn.Linear layer");
}

// Attention under bf16 autocast has no bf16 path in LibTorch 1.13 ("expected scalar type BFloat16 but found
// Float"): train and compare find that before training and run the model in fp32 with a warning.
TEST(CliAnyArchitecture, Bf16FailureFallsBackToFp32InTrainAndCompare) {
  testing::TempDir dir;
  const auto made = any_architecture_test::any_models("make " + dir.path() + " transformer_scripted");
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 64, 32, /*gzip=*/false, 16, 16);
  const std::string common = " --model " + dir.file("transformer_scripted.pt") +
                             " --input-shape 1,16,16 --data " + dir.file("data") + " --quiet";
  const auto trained =
      run_ipj("train" + common + " --precision bf16 --epochs 1 --json --out " + dir.file("train"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const json report = json::parse(trained.out);
  EXPECT_EQ(report["precision"]["requested"], "bf16");
  EXPECT_EQ(report["precision"]["used"], "fp32");
  const std::string reason = report["precision"]["reason"].get<std::string>();
  EXPECT_NE(reason.find("fell back to fp32"), std::string::npos) << reason;
  // fp32 runs, so ScriptClassifier's input-shape hint does not apply (it was cut to "--precisi)")
  EXPECT_EQ(reason.find("check that it takes the data set's images"), std::string::npos) << reason;
  EXPECT_NE(trained.err.find("training it in fp32 instead"), std::string::npos) << trained.err;
  EXPECT_EQ(report["final"]["epochs_completed"], 1);

  const auto compared = run_ipj("compare" + common +
                                " --precision bf16 --target-acc 0.5 --max-epochs 1 --epochs 1 --json --out " +
                                dir.file("compare"));
  ASSERT_EQ(compared.exit_code, 0) << compared.err;
  const json comparison = json::parse(compared.out);
  EXPECT_EQ(comparison["optimized"]["precision"], "fp32");
  EXPECT_EQ(comparison["optimized"]["recipe"]["precision"], "bf16");  // what was asked for
  EXPECT_NE(comparison["optimized"]["precision_reason"].get<std::string>().find("fell back"),
            std::string::npos);
  // a user's model the built-in recipe leaves more than 0.5 point behind gets advice on its learning rate
  EXPECT_EQ(comparison["accuracy_advice"].is_string(), !comparison["within_half_point"].get<bool>())
      << comparison["accuracy_advice"];
}

}  // namespace ipj
