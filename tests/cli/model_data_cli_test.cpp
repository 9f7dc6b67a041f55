// What a model file records about its training data, through the real binary: `ipj train` of a TorchScript
// file on an image folder writes it into OUT/model.pt's ipj.json; bench and prune use it without --data and
// warn on other data; bench keeps measured rows when a variant fails; prune reports the fraction of
// parameters it removed and warns when structured pruning removed far less than --sparsity.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "support/test_support.hpp"
#include "support/user_models.hpp"

namespace ipj {
namespace {

using nlohmann::json;

using testing::ipj;

json parse_stdout(const testing::ProcessResult& result, const std::string& what) {
  EXPECT_EQ(result.exit_code, 0) << what << "\n" << result.err;
  try {
    return json::parse(result.out);
  } catch (const std::exception&) {
    ADD_FAILURE() << what << ": stdout is not one JSON object: " << result.out << "\n" << result.err;
    return json::object();
  }
}

// Five classes of 12x12 RGB PNGs ("c0".."c4": a channel and a brightness per class), 8 training and 4 test
// images each: unlike Fashion-MNIST in class count, channels and size.
std::string write_five_class_folder(const testing::TempDir& dir) {
  std::mt19937 generator(11);
  std::uniform_int_distribution<int> noise(0, 60);
  const char* names[5] = {"c0", "c1", "c2", "c3", "c4"};
  for (const auto& [split, count] : {std::pair{"train", 8}, std::pair{"test", 4}})
    for (int label = 0; label < 5; ++label)
      for (int index = 0; index < count; ++index) {
        std::vector<std::uint8_t> pixels(12 * 12 * 3);
        for (std::size_t offset = 0; offset < pixels.size(); ++offset)
          pixels[offset] = static_cast<std::uint8_t>(
              noise(generator) + (offset % 3 == std::size_t(label % 3) ? 100 + 40 * (label / 3) : 0));
        testing::write_png(dir.file(std::string("folder/") + split + "/" + names[label] + "/" +
                                    std::to_string(index) + ".png"),
                           12, 12, 3, pixels);
      }
  return dir.file("folder");
}

// The ipj.json extra file of a TorchScript archive (torch.jit.load(F, _extra_files={"ipj.json": ""})).
json read_ipj_json(const std::string& model_file) {
  const auto read = testing::run_process(
      testing::python_path() +
      " -c \"import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
      "print(next(z.read(n).decode() for n in z.namelist() if n.endswith('extra/ipj.json')))\" " +
      model_file);
  EXPECT_EQ(read.exit_code, 0) << read.err;
  return json::parse(read.out);
}

const char* const kBenchFlags = " --batch 4 --window-s 0.02 --warmup-s 0.01 --max-windows 2 --no-energy";

}  // namespace

// Finding: a model.pt trained on an image folder was benched on Fashion-MNIST (exit 0, accuracy 0.12) and
// pruned with an internal error (exit 70) when --data was left out.
TEST(ModelDataCli, TrainedFileRecordsItsDataAndCommandsUseIt) {
  testing::TempDir dir;
  const std::string folder = write_five_class_folder(dir);
  // A 5-class MLP on 1x28x28 images: the folder's RGB 12x12 images need --channels 1 --resize 28,28.
  ASSERT_EQ(testing::make_user_models(dir.path(), {"wrong_classes_scripted"}).exit_code, 0);
  const auto trained = ipj("train --model " + dir.file("wrong_classes_scripted.pt") + " --data " + folder +
                           " --channels 1 --resize 28,28 --epochs 1 --batch 8 --lr 0.05 "
                           "--no-energy --quiet --out " +
                           dir.file("run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string model = dir.file("run/model.pt");

  const json data = read_ipj_json(model)["data"];
  EXPECT_EQ(data["path"], std::filesystem::absolute(folder).lexically_normal().string());
  EXPECT_EQ(data["format"], "image-folder");
  EXPECT_EQ(data["channels"], 1);
  EXPECT_EQ(data["resize"], json({28, 28}));
  EXPECT_EQ(data["num_classes"], 5);
  EXPECT_EQ(data["classes"], json({"c0", "c1", "c2", "c3", "c4"}));
  EXPECT_EQ(data["mean"].size(), 1u);
  EXPECT_EQ(data["std"].size(), 1u);

  // bench without --data (and without --input-shape): the folder, 1 channel, resized to 28x28.
  const json bench =
      parse_stdout(ipj("bench --model " + model + " --variants fp32 --json" + kBenchFlags), "bench");
  EXPECT_EQ(bench["dataset"]["format"], "image-folder");
  EXPECT_EQ(bench["dataset"]["test_samples"], 20);
  EXPECT_EQ(bench["dataset"]["input_shape"], json({1, 28, 28}));
  // No data warning (a busy-machine warning is the load beside this test under ctest -j2, not the data).
  for (const json& warning : bench["warnings"])
    EXPECT_EQ(warning.get<std::string>().rfind("the machine was busy", 0), 0u) << bench["warnings"];

  // Other data (10 classes): benched, with a warning on stderr and in the JSON.
  testing::write_synthetic_idx_dataset(dir.file("idx"), 16, 16, /*gzip=*/false);
  const auto other =
      ipj("bench --model " + model + " --variants fp32 --data " + dir.file("idx") + " --json" + kBenchFlags);
  const json other_report = parse_stdout(other, "bench --data");
  ASSERT_GE(other_report["warnings"].size(), 1u) << other.err;
  const std::string warning = other_report["warnings"][0];
  EXPECT_NE(warning.find("5 classes"), std::string::npos) << warning;
  EXPECT_NE(warning.find("10 classes"), std::string::npos) << warning;
  EXPECT_NE(other.err.find("ipj: warning: the model was trained on"), std::string::npos) << other.err;

  // prune without --data works on the folder; with data of another image size it is a bad-input error.
  const json pruned =
      parse_stdout(ipj("prune --model " + model + " --sparsity 0.5 --structured --epochs 1 --out " +
                       dir.file("pruned.pt") + " --json"),
                   "prune");
  EXPECT_EQ(pruned["dataset"]["format"], "image-folder");
  EXPECT_EQ(pruned["dataset"]["train_samples"], 40);
  EXPECT_GT(pruned["removed_params_fraction"].get<double>(), 0.0);
  const auto mismatch = ipj("prune --model " + model + " --sparsity 0.5 --structured --data " +
                            dir.file("idx") + " --resize 12,12 --quiet --out " + dir.file("p2.pt"));
  testing::expect_cli_failure(mismatch, 3, "another shape (1x12x12) than the model's input (1x28x28)");
  // The pruned graph file carries the record on: bench it without --data.
  const json rebench = parse_stdout(
      ipj("bench --model " + dir.file("pruned.pt") + " --variants fp32 --json" + kBenchFlags), "rebench");
  EXPECT_EQ(rebench["dataset"]["format"], "image-folder");
}

// Finding: one unsupported variant threw the measured rows away.
TEST(ModelDataCli, BenchKeepsMeasuredRowsAndReportsSkippedVariants) {
  testing::TempDir dir;
  ASSERT_EQ(testing::make_user_models(dir.path(), {"mlp_scripted"}).exit_code, 0);
  testing::write_synthetic_idx_dataset(dir.file("idx"), 16, 16, /*gzip=*/false);
  const std::string common =
      "bench --model " + dir.file("mlp_scripted.pt") + " --input-shape 1,28,28 --data " + dir.file("idx");
  const auto result = ipj(common + " --variants fp32,int8-qat --json" + kBenchFlags);
  const json report = parse_stdout(result, "bench");
  ASSERT_EQ(report["rows"].size(), 1u);
  EXPECT_EQ(report["rows"][0]["variant"], "fp32");
  ASSERT_EQ(report["skipped"].size(), 1u);
  EXPECT_EQ(report["skipped"][0]["variant"], "int8-qat");
  EXPECT_TRUE(report["skipped"][0]["batch"].is_null());
  EXPECT_NE(report["skipped"][0]["reason"].get<std::string>().find("int8-qat"), std::string::npos);
  EXPECT_NE(result.err.find("ipj: warning: skipped variant int8-qat"), std::string::npos) << result.err;
  const auto human = ipj(common + " --variants fp32,int8-qat" + std::string(kBenchFlags));
  EXPECT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("skipped: int8-qat ("), std::string::npos) << human.out;
  // Nothing measured: the variant's own error and exit code (5: unsupported).
  testing::expect_cli_failure(ipj(common + " --variants int8-qat --quiet" + std::string(kBenchFlags)), 5,
                              "int8-qat");
}

// Finding: structured pruning that removed 0.03% of the parameters said only "wrote ...".
TEST(ModelDataCli, PruneReportsRemovedParameterFractionAndWarnsWhenChannelsAreTied) {
  testing::TempDir dir;
  ASSERT_EQ(testing::make_user_models(dir.path(), {"tied_residual_scripted", "mlp_scripted"}).exit_code, 0);
  testing::write_synthetic_idx_dataset(dir.file("idx"), 32, 16, /*gzip=*/false);
  const auto tied = ipj("prune --model " + dir.file("tied_residual_scripted.pt") +
                        " --input-shape 1,28,28 --sparsity 0.5 --structured --epochs 0 --data " +
                        dir.file("idx") + " --out " + dir.file("tied.pt") + " --json");
  const json report = parse_stdout(tied, "prune tied");
  const double removed = report["removed_params_fraction"].get<double>();
  const double expected =
      1.0 - report["pruned_params"].get<double>() / report["original_params"].get<double>();
  EXPECT_NEAR(removed, expected, 1e-12);
  EXPECT_GT(removed, 0.0);
  EXPECT_LT(removed, 0.05);  // only fc1 (4 units) can lose units
  ASSERT_EQ(report["warnings"].size(), 1u);
  const std::string warning = report["warnings"][0];
  EXPECT_NE(warning.find("far below --sparsity 0.5"), std::string::npos) << warning;
  EXPECT_NE(warning.find("residual add"), std::string::npos) << warning;
  EXPECT_NE(tied.err.find("ipj: warning: structured pruning removed"), std::string::npos) << tied.err;
  const auto human = ipj("prune --model " + dir.file("tied_residual_scripted.pt") +
                         " --input-shape 1,28,28 --sparsity 0.5 --structured --epochs 0 --data " +
                         dir.file("idx") + " --out " + dir.file("tied2.pt"));
  EXPECT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("parameters removed"), std::string::npos) << human.out;

  // The contract, as the issue states it (default data: Fashion-MNIST; magnitude pruning zeroes half of the
  // weights, which are almost all of the parameters).
  const json plain =
      parse_stdout(ipj("prune --model " + dir.file("mlp_scripted.pt") +
                       " --input-shape 1,28,28 --sparsity 0.5 --out " + dir.file("mlp.pt") + " --json"),
                   "prune contract");
  ASSERT_TRUE(plain.contains("removed_params_fraction")) << plain;
  EXPECT_GT(plain["removed_params_fraction"].get<double>(), 0.45);
  EXPECT_LE(plain["removed_params_fraction"].get<double>(), 0.5);
  EXPECT_NEAR(plain["weight_sparsity"].get<double>(), 0.5, 0.01);
  EXPECT_TRUE(plain["warnings"].empty());
}

}  // namespace ipj
