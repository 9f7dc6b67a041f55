// Checked int8 and program files: sealed on save, a flipped byte is refused naming the file by the loaders
// and by load_inference_model; a damaged TorchScript file is invalid_input naming it (not a LibTorch
// exception).
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <random>

#include "inference_fixture.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/script_program.hpp"
#include "ipj/quant/program_file.hpp"
#include "ipj/quant/prune.hpp"
#include "ipj/quant/quantized_program.hpp"

namespace ipj::quant {
namespace {

template <typename Load>
void expect_refused(const std::string& path, Load load, const std::string& context) {
  try {
    load();
    ADD_FAILURE() << "damaged file loaded: " << context;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << context << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << context << " escaped as " << error.what();
  }
}

// Flips one byte at each of `count` random positions (one per copy) and checks that `load` refuses each copy.
template <typename Load>
void expect_every_flip_refused(const std::string& path, Load load, int count) {
  const std::string sealed = read_file(path);
  std::mt19937 random(9);
  for (int sample = 0; sample < count; ++sample) {
    const std::size_t position = sample < 30 ? sealed.size() - 1 - sample : random() % sealed.size();
    std::string damaged = sealed;
    damaged[position] ^= static_cast<char>(0x10);
    write_file_atomically(path, damaged);
    expect_refused(path, load, "byte " + std::to_string(position));
    expect_refused(
        path, [&] { infer::load_inference_model(path); }, "inference, byte " + std::to_string(position));
  }
  write_file_atomically(path, sealed);
}

}  // namespace

TEST(CheckedFiles, Int8FilesAreSealedAndEveryFlippedByteIsRefused) {
  testing::TempDir dir;
  const SourceProgram source = load_source_program(testing::trained_checkpoint("mlp"));
  const std::string path = dir.file("mlp-int8.pt");
  QuantizedProgram::convert(source.program, QuantMode::dynamic, {}, "auto").save(path, Json::object());
  EXPECT_EQ(verify_zip_archive(path), ChecksumStatus::verified);
  EXPECT_NO_THROW(QuantizedProgram::load(path));
  expect_every_flip_refused(
      path, [&] { QuantizedProgram::load(path); }, 80);
}

TEST(CheckedFiles, ProgramFilesAreSealedAndEveryFlippedByteIsRefused) {
  testing::TempDir dir;
  const SourceProgram source = load_source_program(testing::trained_checkpoint("mlp"));
  const std::string path = dir.file("mlp-pruned.pt");
  save_program(path, prune_structured(source.program, 0.5), Json::object());
  EXPECT_EQ(verify_zip_archive(path), ChecksumStatus::verified);
  EXPECT_NO_THROW(load_program(path));
  expect_every_flip_refused(
      path, [&] { load_program(path); }, 80);
}

// Issue 22: int8 and program files of the current format are always sealed: with the checksum comment
// stripped they are refused naming the file, not loaded as "written before checksums".
TEST(CheckedFiles, Int8AndProgramFilesWithTheirChecksumStrippedAreRefused) {
  testing::TempDir dir;
  const SourceProgram source = load_source_program(testing::trained_checkpoint("mlp"));
  const std::string int8 = dir.file("mlp-int8.pt"), pruned = dir.file("mlp-pruned.pt");
  QuantizedProgram::convert(source.program, QuantMode::dynamic, {}, "auto").save(int8, Json::object());
  save_program(pruned, prune_structured(source.program, 0.5), Json::object());
  for (const std::string& path : {int8, pruned}) {
    std::string bytes = read_file(path);
    bytes.resize(bytes.size() - 26);  // the comment "ipj-xxh64:<16 hex>"
    bytes[bytes.size() - 2] = '\0';   // zip comment length back to 0: a valid zip without a checksum
    write_file_atomically(path, bytes);
    EXPECT_EQ(verify_zip_archive(path), ChecksumStatus::absent);
    expect_refused(
        path, [&] { infer::load_inference_model(path); }, "stripped " + path);
  }
  expect_refused(
      int8, [&] { QuantizedProgram::load(int8); }, "stripped int8");
  expect_refused(
      pruned, [&] { load_program(pruned); }, "stripped program");
}

TEST(CheckedFiles, DamagedTorchScriptFilesAreInvalidInputNamingTheFile) {
  testing::TempDir dir;
  const SourceProgram source = load_source_program(testing::trained_checkpoint("mlp"));
  const std::string path = dir.file("user.pt");
  infer::script_program(source.program, infer::Freezing::frozen).save(path);
  infer::LoadOptions options;
  options.inputs.input_shape = {1, 28, 28};
  EXPECT_NO_THROW(
      infer::load_inference_model(path, options));  // a user's file: no checksum, no warning needed
  const std::string original = read_file(path);
  std::mt19937 random(2);
  for (int sample = 0; sample < 20; ++sample) {
    std::string damaged = original;
    if (sample % 2 == 0) {
      damaged.resize(random() % damaged.size());
    } else {
      for (int flip = 0; flip < 200; ++flip)
        damaged[random() % damaged.size()] ^= static_cast<char>(0xff);
    }
    write_file_atomically(path, damaged);
    try {
      infer::load_inference_model(path, options);
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << error.what();
      EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << "sample " << sample << " escaped as " << error.what();
    }
  }
}

}  // namespace ipj::quant
