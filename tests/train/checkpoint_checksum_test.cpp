// Checked checkpoints: a flipped byte anywhere (zip headers, tensor data, JSON metadata, the trailer) is
// refused naming the file; checkpoints without a checksum load only in format 1 (older ipj), a stripped
// checksum of a format-2 file is refused; LibTorch's own errors on damaged unsealed files come out as
// invalid_input naming the file, never as another exception.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <random>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/checkpoint.hpp"
#include "support/test_support.hpp"

namespace ipj::train {
namespace {

// An untrained mlp for 1x8x8 inputs (about 300k parameters) with momentum state, saved as a checkpoint.
std::string save_small_checkpoint(const testing::TempDir& dir) {
  torch::manual_seed(3);
  auto model = models::create_model("mlp", models::InputShape{1, 8, 8}, 10);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  model->forward(torch::rand({4, 1, 8, 8})).sum().backward();
  optimizer.step();
  CheckpointState state;
  state.completed_epochs = 1;
  state.config = {{"model", "mlp"}, {"lr", 0.1}};
  state.epoch_metrics = Json::array({{{"epoch", 1}, {"test_acc", 0.5}}});
  state.model_info = {
      {"name", "mlp"}, {"input_shape", {1, 8, 8}}, {"num_classes", 10}, {"mean", {0.5}}, {"std", {0.25}}};
  const std::string path = dir.file("run/checkpoint.pt");
  save_checkpoint(path, *model, optimizer, state);
  return path;
}

void expect_refused(const std::string& path, const std::string& context) {
  try {
    load_trained_model(path);
    ADD_FAILURE() << "damaged checkpoint loaded: " << context;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << context << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
  }
}

// A sealed archive with its checksum comment removed.
std::string without_checksum(const std::string& sealed) {
  std::string legacy = sealed.substr(0, sealed.size() - 26);
  legacy[legacy.size() - 2] = '\0';  // zip comment length back to 0
  return legacy;
}

// The checkpoint as an ipj before checksums wrote it: format 1, unsealed (the layout save_checkpoint writes).
std::string save_format1_checkpoint(const testing::TempDir& dir) {
  torch::manual_seed(3);
  auto model = models::create_model("mlp", models::InputShape{1, 8, 8}, 10);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::serialize::OutputArchive archive;
  archive.write("ipj_checkpoint_format", c10::IValue(std::int64_t{1}));
  archive.write("completed_epochs", c10::IValue(std::int64_t{1}));
  archive.write("config_json", c10::IValue(Json{{"model", "mlp"}}.dump()));
  archive.write("metrics_json", c10::IValue(Json::array().dump()));
  const Json info = {
      {"name", "mlp"}, {"input_shape", {1, 8, 8}}, {"num_classes", 10}, {"mean", {0.5}}, {"std", {0.25}}};
  archive.write("model_info_json", c10::IValue(info.dump()));
  torch::serialize::OutputArchive model_archive, optimizer_archive;
  model->save(model_archive);
  archive.write("model", model_archive);
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  const std::string path = dir.file("old/checkpoint.pt");
  std::filesystem::create_directories(dir.file("old"));
  archive.save_to(path);
  return path;
}

}  // namespace

TEST(CheckedCheckpoint, SealedOnSaveAndLoadsAgain) {
  testing::TempDir dir;
  const std::string path = save_small_checkpoint(dir);
  EXPECT_EQ(verify_zip_archive(path), ChecksumStatus::verified);
  const TrainedModel loaded = load_trained_model(dir.file("run"));
  EXPECT_EQ(loaded.state.completed_epochs, 1);
  EXPECT_EQ(loaded.state.model_info["name"], "mlp");
}

TEST(CheckedCheckpoint, HundredFlippedBytesAndFlipsInEveryRegionAreRefused) {
  testing::TempDir dir;
  const std::string path = save_small_checkpoint(dir);
  const std::string sealed = read_file(path);
  std::mt19937 random(11);
  // The reproduction: 100 bytes flipped at random.
  std::string damaged = sealed;
  for (int flip = 0; flip < 100; ++flip)
    damaged[random() % damaged.size()] ^= static_cast<char>(0xff);
  write_file_atomically(path, damaged);
  expect_refused(path, "100 flipped bytes");
  // One flipped byte: in the first zip headers, at random (mostly tensor data), in the pickled metadata, and
  // in each of the last 64 bytes (central directory end, zip end record, checksum comment).
  std::vector<std::size_t> positions;
  for (std::size_t position = 0; position < 64; ++position) {
    positions.push_back(position);
    positions.push_back(sealed.size() - 1 - position);
  }
  for (int sample = 0; sample < 200; ++sample)
    positions.push_back(random() % sealed.size());
  for (const std::string& marker : {std::string("ipj_checkpoint_format"), std::string("config_json")})
    if (const std::size_t found = sealed.find(marker); found != std::string::npos)
      positions.push_back(found + 2);
  for (const std::size_t position : positions) {
    damaged = sealed;
    damaged[position] ^= static_cast<char>(0x01);
    write_file_atomically(path, damaged);
    expect_refused(path, "byte " + std::to_string(position));
  }
  torch::manual_seed(0);
  auto model = models::create_model("mlp", models::InputShape{1, 8, 8}, 10);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_THROW(load_checkpoint(path, *model, optimizer), Error);  // the --resume path
  EXPECT_THROW(read_checkpoint_state(path), Error);
}

TEST(CheckedCheckpoint, Format1CheckpointsWithoutChecksumStillLoad) {
  testing::TempDir dir;
  const std::string path = save_format1_checkpoint(dir);
  EXPECT_EQ(verify_zip_archive(path), ChecksumStatus::absent);
  EXPECT_EQ(load_trained_model(path).state.completed_epochs, 1);  // with a warning on stderr
}

// Issue 22: a damaged checkpoint whose checksum comment was removed loaded as "written before checksums".
// Files of format 2 are always sealed, so one without a checksum is refused naming it.
TEST(CheckedCheckpoint, CurrentFormatWithItsChecksumStrippedIsRefusedNamingIt) {
  testing::TempDir dir;
  const std::string path = save_small_checkpoint(dir);
  write_file_atomically(path, without_checksum(read_file(path)));
  EXPECT_EQ(verify_zip_archive(path), ChecksumStatus::absent);
  expect_refused(path, "stripped checksum");
  try {
    read_checkpoint_state(path);
    ADD_FAILURE() << "loaded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("checksum was stripped"), std::string::npos) << error.what();
  }
  torch::manual_seed(0);
  auto model = models::create_model("mlp", models::InputShape{1, 8, 8}, 10);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_THROW(load_checkpoint(path, *model, optimizer), Error);  // the --resume path
}

TEST(CheckedCheckpoint, LibTorchErrorsOnDamagedUnsealedFilesAreInvalidInputNamingTheFile) {
  testing::TempDir dir;
  const std::string path = save_format1_checkpoint(dir);
  const std::string legacy = read_file(path);
  std::mt19937 random(5);
  int refused = 0;
  for (int sample = 0; sample < 40; ++sample) {
    std::string damaged = legacy;
    if (sample % 2 == 0) {
      damaged.resize(random() % damaged.size());  // truncated
    } else {
      for (int flip = 0; flip < 50; ++flip)
        damaged[random() % damaged.size()] ^= static_cast<char>(0xff);
    }
    write_file_atomically(path, damaged);
    try {
      load_trained_model(path);  // an unsealed file may load wrong weights: that is what checksums prevent
    } catch (const Error& error) {
      ++refused;
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << error.what();
      EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "sample " << sample << " escaped as " << error.what();
    }
  }
  EXPECT_GE(refused, 20);  // every truncated file at least
}

}  // namespace ipj::train
