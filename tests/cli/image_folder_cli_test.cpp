// `--data DIR` with DIR/train/<class>/*.png and DIR/test/<class>/*.png through the real binary: every
// command that takes --data, --resize recorded and reused, bad images (exit 3 or skipped and counted), and
// bit-identical training on a PNG folder and on the same samples as IDX (scripts/make_image_folder.py), and
// users' TorchScript models (--model FILE.pt) on a folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "ipj/core/atomic_file.hpp"
#include "support/test_support.hpp"
#include "support/user_models.hpp"

namespace ipj {
namespace {

using nlohmann::json;

using testing::ipj;

json run_json(const std::string& arguments) {
  const auto result = ipj(arguments + " --json");
  EXPECT_EQ(result.exit_code, 0) << arguments << "\n" << result.err;
  try {
    return json::parse(result.out);
  } catch (const std::exception& error) {
    ADD_FAILURE() << arguments << ": stdout is not one JSON object: " << result.out;
    return json::object();
  }
}

// Three colour classes ("red", "green", "blue": that channel bright) of RGB PNGs 10..13 pixels wide, so that
// --resize is needed; 16 training and 4 test images per class.
std::string write_colour_folder(const testing::TempDir& dir) {
  std::mt19937 generator(5);
  std::uniform_int_distribution<int> noise(0, 80), size(10, 13);
  const char* names[3] = {"red", "green", "blue"};
  for (const auto& [split, count] : {std::pair{"train", 16}, std::pair{"test", 4}}) {
    for (int label = 0; label < 3; ++label) {
      for (int index = 0; index < count; ++index) {
        const int height = size(generator), width = size(generator);
        std::vector<std::uint8_t> pixels(static_cast<size_t>(height * width * 3));
        for (size_t offset = 0; offset < pixels.size(); ++offset)
          pixels[offset] =
              static_cast<std::uint8_t>(noise(generator) + (offset % 3 == size_t(label) ? 170 : 0));
        testing::write_png(dir.file(std::string("colours/") + split + "/" + names[label] + "/" +
                                    std::to_string(index) + ".png"),
                           height, width, 3, pixels);
      }
    }
  }
  return dir.file("colours");
}

void expect_one_line_failure(const testing::ProcessResult& result, int exit_code,
                             const std::vector<std::string>& fragments) {
  EXPECT_EQ(result.exit_code, exit_code) << result.err;
  for (const auto& fragment : fragments)
    EXPECT_NE(result.err.find(fragment), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_TRUE(result.out.empty()) << result.out;
}

}  // namespace

TEST(ImageFolderCli, EveryDataCommandReadsTheFolder) {
  testing::TempDir dir;
  const std::string data = write_colour_folder(dir);
  expect_one_line_failure(ipj("train --data " + data + " --epochs 1 --no-save --json"), 3,
                          {"images differ in size", "--resize H,W"});
  expect_one_line_failure(ipj("train --data " + data + " --resize 8x8 --no-save"), 2, {"--resize"});

  const std::string run = dir.file("run");
  const json trained =
      run_json("train --model mlp --data " + data +
               " --resize 8,8 --epochs 3 --lr 0.05 --limit 40 --seed 1 --quiet --out " + run);
  EXPECT_EQ(trained["dataset"]["format"], "image-folder");
  EXPECT_EQ(trained["dataset"]["classes"], json({"blue", "green", "red"}));  // sorted folder names
  EXPECT_EQ(trained["dataset"]["input_shape"], json({3, 8, 8}));
  EXPECT_EQ(trained["dataset"]["train_samples"], 40);
  EXPECT_EQ(trained["dataset"]["test_samples"], 12);
  EXPECT_EQ(trained["config"]["data_options"]["resize"], json({8, 8}));
  EXPECT_GT(trained["final"]["test_acc"].get<double>(), 0.6);  // chance is 0.33
  EXPECT_EQ(json::parse(read_file(run + "/results.json"))["dataset"]["classes"].size(), 3u);

  // The commands that start from the trained model reuse its data folder and --resize 8,8.
  const json quantized = run_json("quantize --model " + run +
                                  " --mode static --calib 16 --max-drop 100 --out " + dir.file("q.pt"));
  EXPECT_EQ(quantized["dataset"]["input_shape"], json({3, 8, 8}));
  EXPECT_EQ(quantized["test_samples"], 12);
  const json pruned =
      run_json("prune --model " + run + " --sparsity 0.5 --epochs 1 --out " + dir.file("p.pt"));
  EXPECT_EQ(pruned["dataset"]["format"], "image-folder");
  const json bench = run_json("bench --model " + run +
                              " --variants fp32,int8-static --batch 4 --window-s 0.05 --warmup-s 0.01 "
                              "--max-windows 2 --calib 16 --no-energy");
  EXPECT_EQ(bench["dataset"]["format"], "image-folder");
  EXPECT_EQ(bench["dataset"]["test_samples"], 12);
  // Its statistics would be those of the one training image read (the model uses its own): left out.
  EXPECT_FALSE(bench["dataset"].contains("mean")) << bench["dataset"];
  EXPECT_FALSE(bench["dataset"].contains("train_samples")) << bench["dataset"];
  EXPECT_GT(bench["variants"][0]["test_acc"].get<double>(), 0.6);
  const json distilled = run_json("distill --teacher " + run + " --student mlp --epochs 1 --data " + data +
                                  " --resize 8,8 --quiet");
  EXPECT_EQ(distilled["dataset"]["train_samples"], 48);
  const json compared = run_json("compare --model mlp --data " + data +
                                 " --resize 8,8 --channels 1 --max-epochs 1 --epochs 1 --target-acc 0.99 "
                                 "--limit 24 --quiet --out " +
                                 dir.file("compare"));
  EXPECT_EQ(json::parse(read_file(dir.file("compare/optimized/results.json")))["dataset"]["input_shape"],
            json({1, 8, 8}));
  EXPECT_TRUE(compared.contains("baseline"));
}

TEST(ImageFolderCli, BadImageExitsThreeOrIsSkippedAndCounted) {
  testing::TempDir dir;
  const std::string data = write_colour_folder(dir);
  write_file_atomically(dir.file("colours/train/green/bad.png"), "\x89PNG\r\n\x1a\n but then nothing");
  expect_one_line_failure(ipj("train --data " + data + " --resize 8,8 --epochs 1 --no-save"), 3,
                          {"bad.png", "damaged PNG header", "--skip-bad-images"});
  const json report = run_json("train --data " + data +
                               " --resize 8,8 --epochs 1 --skip-bad-images --quiet --out " + dir.file("run"));
  EXPECT_EQ(report["dataset"]["skipped_images"], 1);
  EXPECT_NE(report["dataset"]["skipped_files"][0].get<std::string>().find("bad.png"), std::string::npos);
  EXPECT_EQ(report["dataset"]["train_samples"], 48);
  EXPECT_EQ(json::parse(read_file(dir.file("run/results.json")))["dataset"]["skipped_images"], 1);
}

TEST(ImageFolderCli, PngFolderTrainsBitIdenticallyToTheSameSamplesAsIdx) {
  testing::TempDir dir;
  const auto converted = testing::run_process(
      testing::python_path() + " " + testing::test_source_dir() +
      "/../scripts/make_image_folder.py --data /usr/share/datasets/fashion-mnist --limit 2000 "
      "--test-limit 500 --out " +
      dir.file("png") + " --also-idx " + dir.file("idx"));
  ASSERT_EQ(converted.exit_code, 0) << converted.err;
  const std::string flags = " --model mlp --epochs 1 --seed 3 --quiet --no-save";
  const json from_png = run_json("train --data " + dir.file("png") + flags);
  const json from_idx = run_json("train --data " + dir.file("idx") + flags);
  EXPECT_EQ(from_png["dataset"]["format"], "image-folder");
  EXPECT_EQ(from_png["dataset"]["classes"][9], "9-ankle-boot");
  EXPECT_EQ(from_idx["dataset"]["format"], "idx");
  // Same pixels in the same order: the same statistics, losses and accuracy, bit for bit.
  EXPECT_EQ(from_png["dataset"]["mean"], from_idx["dataset"]["mean"]);
  EXPECT_EQ(from_png["dataset"]["std"], from_idx["dataset"]["std"]);
  EXPECT_EQ(from_png["epochs"][0]["loss"], from_idx["epochs"][0]["loss"]);
  EXPECT_EQ(from_png["epochs"][0]["test_loss"], from_idx["epochs"][0]["test_loss"]);
  EXPECT_EQ(from_png["final"]["test_acc"], from_idx["final"]["test_acc"]);
  EXPECT_GT(from_png["final"]["test_acc"].get<double>(), 0.5);
}

TEST(ImageFolderCli, TorchScriptModelsTrainCompareDistillAndBenchOnAFolder) {
  testing::TempDir dir;
  const auto converted = testing::run_process(
      testing::python_path() + " " + testing::test_source_dir() +
      "/../scripts/make_image_folder.py --data /usr/share/datasets/fashion-mnist --limit 300 --test-limit 60 "
      "--out " +
      dir.file("png"));
  ASSERT_EQ(converted.exit_code, 0) << converted.err;
  const auto made = testing::make_user_models(dir.path(), {"residual_scripted", "mlp_traced"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string data = " --data " + dir.file("png");
  const std::string residual = dir.file("residual_scripted.pt");

  // A residual net (adaptive pooling: any image size) on the folder, resized; the trained file records the
  // class names and the statistics it needs.
  const json trained =
      run_json("train --model " + residual + data +
               " --resize 20,20 --epochs 1 --batch 32 --no-energy --quiet --out " + dir.file("run"));
  EXPECT_EQ(trained["dataset"]["format"], "image-folder");
  EXPECT_EQ(trained["config"]["model_source"], "torchscript");
  EXPECT_EQ(trained["config"]["data_options"]["resize"], json({20, 20}));
  EXPECT_EQ(trained["dataset"]["input_shape"], json({1, 20, 20}));
  ASSERT_TRUE(std::filesystem::exists(dir.file("run/model.pt")));
  // --resume keeps the data flags: a different --resize is refused, the same continues.
  expect_one_line_failure(ipj("train --model " + residual + data +
                              " --resize 16,16 --epochs 2 --resume --quiet --out " + dir.file("run")),
                          2, {"--resume", "--resize", "[20,20]"});
  EXPECT_EQ(
      ipj("train --model " + residual + data + " --resize 20,20 --epochs 2 --batch 32 --resume --quiet " +
          "--no-energy --out " + dir.file("run"))
          .exit_code,
      0);
  // A flat --input-shape must be the resized image's size; the message says which.
  expect_one_line_failure(ipj("train --model " + dir.file("mlp_traced.pt") + data +
                              " --resize 20,20 --input-shape 784 --no-save --quiet"),
                          2, {"--input-shape 784", "1x20x20 = 400", "--input-shape 400"});

  const json compared = run_json("compare --model " + residual + data +
                                 " --resize 20,20 --max-epochs 1 --epochs 1 --target-acc 0.99 --limit 128 "
                                 "--quiet --out " +
                                 dir.file("compare"));
  EXPECT_EQ(compared["optimized"]["recipe"]["data_options"]["resize"], json({20, 20}));
  EXPECT_TRUE(std::filesystem::exists(dir.file("compare/optimized/model.pt")));

  // The trained run as teacher, the traced MLP file as student, on the folder's 28x28 images (the residual
  // net pools adaptively, so it takes them too).
  const json distilled =
      run_json("distill --teacher " + dir.file("run") + " --student " + dir.file("mlp_traced.pt") + data +
               " --epochs 1 --quiet --out " + dir.file("kd"));
  EXPECT_EQ(distilled["dataset"]["format"], "image-folder");
  EXPECT_TRUE(std::filesystem::exists(dir.file("kd/model.pt")));

  // bench on the run folder reuses its data folder and --resize; the user's file with --input-shape and
  // --data.
  const std::string bench_flags =
      " --variants fp32 --batch 4 --window-s 0.05 --warmup-s 0.01 --max-windows 2 --no-energy";
  const json from_run = run_json("bench --model " + dir.file("run") + bench_flags);
  EXPECT_EQ(from_run["dataset"]["input_shape"], json({1, 20, 20}));
  EXPECT_EQ(from_run["dataset"]["test_samples"], 60);
  const json from_file =
      run_json("bench --model " + residual + " --input-shape 1,28,28" + data + bench_flags);
  EXPECT_EQ(from_file["dataset"]["format"], "image-folder");
  EXPECT_EQ(from_file["rows"].size(), 1u);
}

}  // namespace ipj
