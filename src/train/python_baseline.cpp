// The Python seed loop as a child process: posix_spawn with its stdout on a pipe, the last line parsed.
#include "ipj/train/python_baseline.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/device/wait_policy.hpp"
#include "ipj/models/catalog.hpp"

extern char** environ;

namespace ipj::train {
namespace {

struct ChildOutput {
  int exit_code = 0;  // 128 + N when killed by signal N
  std::string out;
};

// Runs `command` (argv[0] a path) with its stdout captured and ipj's stdin and stderr.
ChildOutput run_capturing_stdout(const std::vector<std::string>& command) {
  int pipe_ends[2];
  if (::pipe(pipe_ends) != 0) fail(ErrorCategory::runtime, std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[0]);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_ends[1]);
  std::vector<char*> arguments;
  for (const auto& argument : command)
    arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  // The user's environment, without the OpenMP wait settings ipj chose for itself: the reference side runs as
  // the user's Python would.
  std::vector<std::string> environment = device::environment_without_ipj_wait_policy(environ);
  std::vector<char*> environment_pointers;
  for (auto& entry : environment)
    environment_pointers.push_back(entry.data());
  environment_pointers.push_back(nullptr);
  pid_t pid = 0;
  const int spawn_error =
      ::posix_spawn(&pid, arguments[0], &actions, nullptr, arguments.data(), environment_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_ends[1]);
  if (spawn_error != 0) {
    ::close(pipe_ends[0]);
    fail(ErrorCategory::usage, "--python-baseline: cannot run '" + command[0] +
                                   "': " + std::strerror(spawn_error) +
                                   " (pass an interpreter with torch: --python)");
  }
  ChildOutput output;
  char buffer[4096];
  for (;;) {
    const ssize_t count = ::read(pipe_ends[0], buffer, sizeof buffer);
    if (count > 0) {
      output.out.append(buffer, static_cast<std::size_t>(count));
    } else if (count == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(pipe_ends[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return output;
}

std::string joined(const std::vector<std::string>& command) {
  std::string text;
  for (const auto& part : command)
    text += (text.empty() ? "" : " ") + part;
  return text;
}

}  // namespace

Json run_python_seed_loop(const PythonBaseline& baseline, const TrainConfig& recipe,
                          const data::Dataset& dataset) {
  const std::string model = recipe.model.is_file() ? "" : recipe.model.zoo_name;
  const models::ModelEntry* entry = models::find_model_entry(model);
  if (entry == nullptr || !entry->python_seed_loop)
    fail(ErrorCategory::usage, "--python-baseline: the Python seed loop has the zoo " +
                                   models::model_names_where([](const models::ModelEntry& known) {
                                     return known.python_seed_loop;
                                   }) +
                                   " only, not '" + recipe.model.label() +
                                   "'; drop --python-baseline for this model");
  if (dataset.format != "idx")
    fail(ErrorCategory::usage, "--python-baseline: the Python seed loop reads IDX data only, not " +
                                   dataset.format + " ('" + dataset.directory + "')");
  if (!std::filesystem::is_regular_file(baseline.script))
    fail(ErrorCategory::usage,
         "--python-baseline: no seed loop script at '" + baseline.script +
             "' (bench/python/seed_train_loop.py of the source tree; set IPJ_SEED_TRAIN_LOOP)");
  const std::vector<std::string> command = {baseline.python, baseline.script,
                                            "--model",       model,
                                            "--data",        dataset.directory,
                                            "--limit",       std::to_string(recipe.limit),
                                            "--test-limit",  std::to_string(recipe.test_limit),
                                            "--seed",        std::to_string(recipe.seed),
                                            "--batch",       std::to_string(recipe.batch_size),
                                            "--threads",     std::to_string(recipe.threads),
                                            "--epochs",      "1"};
  const ChildOutput output = run_capturing_stdout(command);
  if (output.exit_code != 0)
    fail(ErrorCategory::runtime, "--python-baseline: the Python seed loop exited with status " +
                                     std::to_string(output.exit_code) +
                                     " (its error is above); command: " + joined(command));
  const std::size_t line_start =
      output.out.find_last_of('\n', output.out.size() >= 2 ? output.out.size() - 2 : 0);
  const std::string last_line = output.out.substr(line_start == std::string::npos ? 0 : line_start + 1);
  try {
    Json result = Json::parse(last_line);
    if (!result.contains("samples_per_s") || !result["samples_per_s"].is_number())
      fail(ErrorCategory::runtime,
           "--python-baseline: the seed loop's output has no samples_per_s: " + last_line);
    return result;
  } catch (const Json::exception&) {
    fail(ErrorCategory::runtime,
         "--python-baseline: the seed loop printed no JSON line: '" + last_line + "'");
  }
}

}  // namespace ipj::train
