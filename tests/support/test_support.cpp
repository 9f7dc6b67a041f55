// Test helpers: temp folders, synthetic data files, child processes, the CLI failure contract.
#include "support/test_support.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "ipj/data/idx_reader.hpp"
#include "ipj/device/cpu_info.hpp"

namespace ipj::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/ipj-test-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = buffer.data();
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  if (file == nullptr) throw std::runtime_error("cannot open " + path);
  if (!bytes.empty()) gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(file);
}

std::uint64_t write_gzip_bomb(const std::string& path, const std::vector<std::uint8_t>& header,
                              std::uint64_t zero_bytes) {
  // gzip members may be concatenated (RFC 1952): one compressed block of zeros, written many times, inflates
  // to gigabytes from a few megabytes without ever holding them.
  constexpr std::size_t kBlock = std::size_t{64} << 20;
  const std::string block_path = path + ".block";
  write_gzip(block_path, std::vector<std::uint8_t>(kBlock, 0));
  std::ifstream block_file(block_path, std::ios::binary);
  const std::string block((std::istreambuf_iterator<char>(block_file)), std::istreambuf_iterator<char>());
  std::filesystem::remove(block_path);
  write_gzip(path, header);
  std::ofstream out(path, std::ios::binary | std::ios::app);
  std::uint64_t inflated = header.size();
  for (std::uint64_t written = 0; written < zero_bytes; written += kBlock) {
    out.write(block.data(), static_cast<std::streamsize>(block.size()));
    inflated += kBlock;
  }
  if (!out) throw std::runtime_error("cannot write " + path);
  return inflated;
}

void write_synthetic_idx_dataset(const std::string& directory, std::int64_t train_count,
                                 std::int64_t test_count, bool gzip, int height, int width) {
  std::filesystem::create_directories(directory);
  std::mt19937 generator(1234);
  std::uniform_int_distribution<int> noise(0, 60);
  auto write_split = [&](const std::string& prefix, std::int64_t count) {
    data::IdxArray images{{count, height, width}, {}};
    data::IdxArray labels{{count}, {}};
    for (std::int64_t sample = 0; sample < count; ++sample) {
      const int label = static_cast<int>(sample % 10);
      labels.values.push_back(static_cast<std::uint8_t>(label));
      const int band = 2 + label * (height - 4) / 10;
      for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x)
          images.values.push_back(
              static_cast<std::uint8_t>((std::abs(y - band) <= 1 ? 190 : 0) + noise(generator)));
    }
    const std::string suffix = gzip ? ".gz" : "";
    auto write = gzip ? write_gzip : write_bytes;
    write(directory + "/" + prefix + "-images-idx3-ubyte" + suffix, data::encode_idx(images));
    write(directory + "/" + prefix + "-labels-idx1-ubyte" + suffix, data::encode_idx(labels));
  };
  write_split("train", train_count);
  write_split("t10k", test_count);
}

void write_png(const std::string& path, int height, int width, int channels,
               const std::vector<std::uint8_t>& interleaved) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&image, path.c_str(), 0, interleaved.data(), 0, nullptr))
    throw std::runtime_error("cannot write " + path + ": " + image.message);
}

void write_synthetic_cifar_batch(const std::string& path, std::int64_t count) {
  std::vector<std::uint8_t> bytes;
  for (std::int64_t record = 0; record < count; ++record) {
    bytes.push_back(static_cast<std::uint8_t>(record % 10));
    for (int index = 0; index < 3072; ++index)
      bytes.push_back(static_cast<std::uint8_t>((record * 7 + index) % 256));
  }
  write_bytes(path, bytes);
}

ProcessResult run_process(const std::string& command) {
  TempDir capture;
  const std::string out_path = capture.file("stdout"), err_path = capture.file("stderr");
  const int status = std::system((command + " >" + out_path + " 2>" + err_path + " </dev/null").c_str());
  ProcessResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  };
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  return result;
}

ProcessResult run_process_measured(const std::string& command, ProcessUsage& usage) {
  TempDir capture;
  const std::string out_path = capture.file("stdout"), err_path = capture.file("stderr");
  const std::string line = "exec " + command;  // nothing allocates between fork and exec
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(126);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  rusage resources{};
  while (::wait4(pid, &status, 0, &resources) < 0 && errno == EINTR) {
  }
  usage.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  usage.max_rss_kib = resources.ru_maxrss;
  usage.cpu_s = static_cast<double>(resources.ru_utime.tv_sec + resources.ru_stime.tv_sec) +
                static_cast<double>(resources.ru_utime.tv_usec + resources.ru_stime.tv_usec) * 1e-6;
  usage.term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  ProcessResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto slurp = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  };
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  return result;
}

namespace {
// Thread plans that follow the machine's load change float summation order from run to run on a loaded CI
// machine (ctest -j2): the suite's bit-exactness tests (same seed, resume) need static plans. Set before any
// test runs, in this process and its children; the tests of the load-following plan unset it.
const bool kStaticThreadPlans = ::setenv("IPJ_STATIC_THREADS", "1", /*overwrite=*/0) == 0;
}  // namespace

std::string ipj_binary() {
  // ipj starts itself a second time with OMP_WAIT_POLICY=PASSIVE unless it is set (apps/ipj/main.cpp): set
  // here for every child, so that the suite's hundreds of short runs load LibTorch once. CliThreads.* unsets
  // it. With the user's policy set ipj leaves OpenBLAS's idle workers alone, so the children get the passive
  // choice's OPENBLAS_THREAD_TIMEOUT=4 here too (sleep at once, not OpenBLAS's ~0.1 s yield loop, which also
  // made a server's own CPU look like a neighbour's in ServeThreads).
  static const bool passive_waiting = ::setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0) == 0 &&
                                      ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", /*overwrite=*/0) == 0;
  (void)passive_waiting;
  return IPJ_BINARY;
}

std::string test_source_dir() {
  return IPJ_TEST_SOURCE_DIR;
}

std::string python_path() {
  return IPJ_PYTHON;
}

ProcessResult ipj(const std::string& arguments) {
  return run_process(ipj_binary() + " " + arguments);
}

void expect_cli_failure(const ProcessResult& result, int exit_code, const std::string& fragment) {
  EXPECT_EQ(result.exit_code, exit_code) << result.err;
  EXPECT_NE(result.err.find(fragment), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_TRUE(result.out.empty()) << result.out;
}

bool onednn_refuses_bf16() {
  return device::bf16_held_back_by_onednn_cap(device::probe_cpu());
}

}  // namespace ipj::testing
