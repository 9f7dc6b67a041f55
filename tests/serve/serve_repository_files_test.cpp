// Real `ipj serve` processes on hostile model repositories (issue 22): bad config files, links out of the
// repository, huge files, and a signal while models load. Each is refused or stops at once, naming the file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "inference_fixture.hpp"
#include "serve/process_fixture.hpp"

namespace ipj::serve {
namespace {

using Clock = std::chrono::steady_clock;
using process_fixture::kBatchedConfig;
using process_fixture::make_repository;
using testing::seconds_since;

// Issue 22: hostile local files in a model repository. Each is refused at start, before any model loads, with
// exit 3 and one line naming the file (no signal death, no unbounded read, no link followed out).
TEST(ServeRepositoryFiles, HostileConfigFilesExitThreeFastNamingTheFile) {
  testing::TempDir work;
  const std::string good_config = kBatchedConfig;
  struct Case {
    std::string name;
    std::function<void(const std::string& model)> make;  // given the model folder
    std::string file, fragment;
  };
  std::string deep;
  for (int level = 0; level < 200000; ++level)
    deep += "{\"\":";  // 4 bytes a level: 200,000 levels stay under the 1 MiB size limit
  deep += "1" + std::string(200000, '}');
  const std::string outside = work.file("outside");
  std::filesystem::create_directories(outside);
  std::ofstream(outside + "/config.json") << good_config;
  std::ofstream(outside + "/model.pt") << "not a model";
  const std::vector<Case> cases = {
      {"200,000 nested objects (was SIGSEGV)",
       [&](const std::string& m) { std::ofstream(m + "/config.json") << deep; }, "config.json",
       "deeper than 32 levels"},
      {"link to /dev/zero (was read without bound)",
       [](const std::string& m) { std::filesystem::create_symlink("/dev/zero", m + "/config.json"); },
       "config.json", "character device"},
      {"over 1 MiB",
       [](const std::string& m) {
         std::ofstream(m + "/config.json") << "{" << std::string(2 << 20, ' ') << "}";
       },
       "config.json", "more than the 1048576 bytes"},
      {"config.json linked out of the repository",
       [&](const std::string& m) {
         std::filesystem::create_symlink(outside + "/config.json", m + "/config.json");
       },
       "config.json", "outside the model repository"},
      {"model.pt linked out of the repository",
       [&](const std::string& m) {
         std::ofstream(m + "/config.json") << good_config;
         std::filesystem::remove(m + "/1/model.pt");
         std::filesystem::create_symlink(outside + "/model.pt", m + "/1/model.pt");
       },
       "1/model.pt", "outside the model repository"},
      {"model folder linked out of the repository",
       [&](const std::string& m) {
         std::filesystem::remove_all(m);
         std::filesystem::create_directories(outside + "/1");
         std::ofstream(outside + "/1/model.pt") << "x";
         std::filesystem::create_directory_symlink(outside, m);
       },
       "config.json", "outside the model repository"},
  };
  for (const Case& test : cases) {
    testing::TempDir repository;
    const std::string model = repository.file("mlp");
    std::filesystem::create_directories(model + "/1");
    std::ofstream(model + "/1/model.pt") << "never loaded";
    test.make(model);
    const auto start = Clock::now();
    testing::ProcessUsage usage;
    const auto result = testing::run_process_measured(
        testing::ipj_binary() + " serve --port 0 --no-energy --model-repo " + repository.path(), usage);
    EXPECT_EQ(usage.term_signal, 0) << test.name;
    EXPECT_EQ(result.exit_code, 3) << test.name << ": " << result.err;
    EXPECT_NE(result.err.find(model + "/" + test.file + "'"), std::string::npos)
        << test.name << ": " << result.err;
    EXPECT_NE(result.err.find(test.fragment), std::string::npos) << test.name << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << test.name << ": " << result.err;
    EXPECT_LT(seconds_since(start), 5.0) << test.name;
    EXPECT_LT(usage.max_rss_kib, 400 * 1024) << test.name;
  }
}

// Issue 22: a signal while models load stops the process (it used to be swallowed until loading ended, and a
// load that never ends held shutdown forever). 40 models load for long enough to signal in the middle.
TEST(ServeRepositoryFiles, SigtermWhileModelsLoadStopsTheProcessAtOnce) {
  testing::TempDir work;
  const std::string root = make_repository(work);
  for (int index = 0; index < 40; ++index) {
    const std::string model = root + "/m" + std::to_string(100 + index);
    std::filesystem::create_directories(model + "/1");
    std::filesystem::create_hard_link(root + "/mlp/1/model.pt", model + "/1/model.pt");
    std::filesystem::copy_file(root + "/mlp/config.json", model + "/config.json");
  }
  const std::string log = work.file("serve.err");
  const std::string binary = testing::ipj_binary();  // nothing allocates between fork and exec
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, 2);
    ::execl(binary.c_str(), binary.c_str(), "serve", "--port", "0", "--no-energy", "--model-repo",
            root.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto log_text = [&] {
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const auto start = Clock::now();
  while (log_text().find("loading model 'm100'") == std::string::npos && seconds_since(start) < 60.0)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_NE(log_text().find("loading model 'm100'"), std::string::npos) << log_text();
  ::kill(pid, SIGTERM);
  const auto signalled = Clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0 && seconds_since(signalled) < 10.0)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (seconds_since(signalled) >= 10.0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "SIGTERM during loading did not stop ipj serve:\n" << log_text();
  }
  EXPECT_LT(seconds_since(signalled), 2.0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status << "\n"
                                                                  << log_text();
  EXPECT_EQ(log_text().find("loading model 'm139'"), std::string::npos) << "went on loading\n" << log_text();
}

}  // namespace
}  // namespace ipj::serve
