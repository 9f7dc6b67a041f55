// `ipj train`, `ipj compare` and `ipj distill` on users' TorchScript files (made at test time by Debian's
// python3-torch) as a user runs them: the JSON contract, OUT/model.pt, and clear errors for bad files.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "ipj/core/atomic_file.hpp"
#include "support/test_support.hpp"
#include "support/user_models.hpp"

namespace ipj {
namespace {

using nlohmann::json;

using testing::ipj;

}  // namespace

TEST(CliUserModel, TrainJsonContractWritesTorchScriptCheckpointAndResults) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), {"cnn_bn_scripted"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 96, 32, /*gzip=*/true);
  const auto result =
      ipj("train --model " + dir.file("cnn_bn_scripted.pt") + " --input-shape 1,28,28 --data " +
          dir.file("data") + " --out " + dir.file("out") + " --json --batch 32 --no-energy");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(result.out);  // exactly one JSON object on stdout
  EXPECT_GE(report["final"]["test_acc"].get<double>(), 0.0);
  EXPECT_LE(report["final"]["test_acc"].get<double>(), 1.0);
  EXPECT_EQ(report["config"]["model"], dir.file("cnn_bn_scripted.pt"));
  EXPECT_EQ(report["config"]["model_source"], "torchscript");
  EXPECT_EQ(report["config"]["input_shape"], json({1, 28, 28}));
  EXPECT_EQ(report["model"]["source"], "torchscript");
  for (const char* file : {"model.pt", "checkpoint.pt", "results.json"})
    EXPECT_TRUE(std::filesystem::exists(dir.file("out/") + file)) << file;
  EXPECT_EQ(json::parse(read_file(dir.file("out/results.json")))["final"]["test_acc"],
            report["final"]["test_acc"]);
  // Human output names the trained file; --resume continues it.
  const auto resumed =
      ipj("train --model " + dir.file("cnn_bn_scripted.pt") + " --data " + dir.file("data") + " --out " +
          dir.file("out") + " --resume --epochs 2 --batch 32 --no-energy --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("model.pt"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("epoch 2"), std::string::npos) << resumed.out;
  // Inference tools take the run folder (the checkpoint's weights in the user's module, normalisation
  // included).
  const bool bf16_runs = !testing::onednn_refuses_bf16();  // scripts/test-as-avx2.sh
  const auto bench =
      ipj("bench --model " + dir.file("out") + " --variants " + (bf16_runs ? "fp32,bf16" : "fp32") +
          " --batch 4 --window-s 0.05 --warmup-s 0.01 --max-windows 3 --no-energy --test-limit 32 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const json rows = json::parse(bench.out)["rows"];
  ASSERT_EQ(rows.size(), bf16_runs ? 2u : 1u);
  EXPECT_NEAR(rows[0]["test_acc"].get<double>(),
              json::parse(read_file(dir.file("out/results.json")))["final"]["test_acc"].get<double>(), 1e-9);
}

TEST(CliUserModel, BadModelFilesExitWithOneClearLineNeverAnInternalError) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(
      dir.path(), {"garbage", "state_dict", "mlp_frozen", "no_parameters_scripted", "wrong_classes_scripted",
                   "wrong_input_scripted", "tuple_output_scripted", "mlp_scripted", "flat_mlp_traced"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 32, 16, /*gzip=*/false);
  const std::string common = " --data " + dir.file("data") + " --no-save --quiet --no-energy";
  ASSERT_EQ(ipj("train --model cnn --limit 16" + common).exit_code, 0);
  ASSERT_EQ(ipj("train --model mlp --limit 16 --out " + dir.file("ipj-run") + " --quiet --no-energy --data " +
                dir.file("data"))
                .exit_code,
            0);
  struct Case {
    std::string arguments;
    int exit_code;
    std::string fragment;  // in the message, besides "ipj: error:"
  };
  const std::vector<Case> cases = {
      {"--model " + dir.file("garbage.pt"), 3, "is not a TorchScript file"},
      {"--model " + dir.file("state_dict.pt"), 3, "is not a TorchScript file"},
      {"--model " + dir.file("mlp_frozen.pt"), 3, "has no trainable parameters"},
      {"--model " + dir.file("no_parameters_scripted.pt"), 3, "has no trainable parameters"},
      {"--model " + dir.file("wrong_classes_scripted.pt"), 3, "outputs 5 classes but the data set has 10"},
      {"--model " + dir.file("wrong_input_scripted.pt"), 3, "failed on a batch of shape [2, 1, 28, 28]"},
      {"--model " + dir.file("tuple_output_scripted.pt"), 3, "returned a Tuple"},
      {"--model " + dir.file("ipj-run/checkpoint.pt"), 3, "is an ipj training checkpoint"},
      {"--model " + dir.file("missing.pt"), 4, "no model file at"},
      {"--model " + dir.path(), 2, "is a folder"},
      {"--model " + dir.file("mlp_scripted.pt") + " --input-shape 3,32,32", 2,
       "does not match the data set's images"},
      {"--model " + dir.file("mlp_scripted.pt") + " --input-shape 100", 2,
       "is not the size of the data set's images"},
      {"--model " + dir.file("mlp_scripted.pt") + " --input-shape 1,x", 2, "--input-shape"},
      {"--model " + dir.file("flat_mlp_traced.pt"), 3, "--input-shape N feeds flat vectors"},
      {"--model " + dir.file("mlp_scripted.pt") + " --compile jit", 5, "--compile none"},
      {"--model cnn --input-shape 1,28,28", 2, "--input-shape is for TorchScript files"},
      {"--model resnet", 2, "or the path of a TorchScript file"},
  };
  for (const auto& test : cases) {
    SCOPED_TRACE(test.arguments);
    const auto result = ipj("train " + test.arguments + common);
    EXPECT_EQ(result.exit_code, test.exit_code) << result.err;
    EXPECT_EQ(result.err.rfind("ipj: error: ", 0), 0u) << result.err;  // not "internal error"
    EXPECT_NE(result.err.find(test.fragment), std::string::npos) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
  // A flat model with --input-shape N trains.
  EXPECT_EQ(ipj("train --model " + dir.file("flat_mlp_traced.pt") + " --input-shape 784" + common).exit_code,
            0);
}

// ipj bench with an --input-shape the model cannot take: both the auto engine and a forced one say which
// inputs failed and point at the flag (a hostile pass: onednn said "--fp32-engine auto or frozen run it",
// which failed the same way).
TEST(CliUserModel, BenchOnAWrongInputShapePointsAtTheFlag) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), {"mlp_scripted"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string common = "bench --model " + dir.file("mlp_scripted.pt") +
                             " --input-shape 3,9,9 --variants fp32 --batch 4 --no-energy --no-accuracy "
                             "--window-s 0.01 --warmup-s 0 --max-windows 1 --quiet --fp32-engine ";
  for (const auto& [engine, exit_code, inputs] :
       {std::tuple<const char*, int, const char*>{"auto", 5, "on [4, 3, 9, 9] inputs"},
        {"onednn", 2, "random [1, 3, 9, 9] input"}}) {
    const auto result = ipj(common + engine);
    EXPECT_EQ(result.exit_code, exit_code) << engine << ": " << result.err;
    EXPECT_NE(result.err.find(inputs), std::string::npos) << result.err;
    EXPECT_NE(result.err.find("is --input-shape the shape of one of the model's samples?"), std::string::npos)
        << result.err;
    EXPECT_EQ(result.err.find("auto or frozen run it"), std::string::npos) << result.err;
  }
}

// --prefer reaches the fp32 engine choice and its record; a bad spelling is a usage error naming both.
TEST(CliUserModel, BenchRecordsWhatTheEngineChoicePrefers) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), {"mlp_scripted"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string common = "bench --model " + dir.file("mlp_scripted.pt") +
                             " --input-shape 1,28,28 --variants fp32 --batch 1,4 --no-energy --no-accuracy "
                             "--window-s 0.01 --warmup-s 0 --max-windows 1 --quiet --json --prefer ";
  for (const char* prefer : {"joules", "latency"}) {
    const auto result = ipj(common + prefer);
    ASSERT_EQ(result.exit_code, 0) << prefer << ": " << result.err;
    const json report = json::parse(result.out);
    EXPECT_EQ(report["variants"][0]["fp32_engine"]["prefer"], prefer) << result.out;
  }
  const auto bad = ipj(common + "speed");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--prefer must be joules or latency, got 'speed'"), std::string::npos) << bad.err;
}

TEST(CliUserModel, CompareAndDistillTakeTorchScriptFiles) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), {"cnn_bn_scripted", "mlp_traced"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 128, 32, /*gzip=*/false);
  const auto compared =
      ipj("compare --model " + dir.file("cnn_bn_scripted.pt") + " --data " + dir.file("data") +
          " --max-epochs 1 --epochs 1 --target-acc 0.5 --json --quiet --out " + dir.file("cmp"));
  ASSERT_EQ(compared.exit_code, 0) << compared.err;
  const json report = json::parse(compared.out);
  for (const char* side : {"baseline", "optimized"}) {
    EXPECT_TRUE(report[side].contains("test_acc")) << side;
    EXPECT_EQ(report[side]["recipe"]["model_source"], "torchscript") << side;
    EXPECT_TRUE(std::filesystem::exists(dir.file("cmp/") + side + "/model.pt")) << side;
  }
  EXPECT_EQ(report["optimized"]["recipe"]["memory_format"], "channels_last");  // 4-D weights: convolutional
  EXPECT_EQ(report["baseline"]["recipe"]["precision"], "fp32");

  // A file teacher (the compare run's trained cnn, normalised input like the student) and a file student.
  const auto distilled = ipj("distill --teacher " + dir.file("cmp/optimized/model.pt") + " --student " +
                             dir.file("mlp_traced.pt") + " --data " + dir.file("data") +
                             " --epochs 1 --json --out " + dir.file("kd"));
  ASSERT_EQ(distilled.exit_code, 0) << distilled.err;
  const json kd = json::parse(distilled.out);
  EXPECT_EQ(kd["student"], dir.file("mlp_traced.pt"));
  EXPECT_GE(kd["student_acc"].get<double>(), 0.0);
  // The suite sets OMP_WAIT_POLICY for the processes it starts.
  EXPECT_NE(kd["threads"]["omp_wait_policy"].get<std::string>().find("(set by the user)"), std::string::npos);
  EXPECT_TRUE(kd["threads"].contains("wait_policy_reason"));
  EXPECT_GT(kd["teacher_acc"].get<double>(), 0.0);
  EXPECT_TRUE(std::filesystem::exists(dir.file("kd/model.pt")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("kd/checkpoint.pt")));
  // A zoo student still works from a file teacher.
  const auto zoo_student = ipj("distill --teacher " + dir.file("cmp/optimized/model.pt") +
                               " --student mlp --epochs 1 --json --data " + dir.file("data"));
  ASSERT_EQ(zoo_student.exit_code, 0) << zoo_student.err;
}

}  // namespace ipj
