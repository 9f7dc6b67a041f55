// Runs the Python script that makes and checks users' TorchScript models.
#include "support/user_models.hpp"

namespace ipj::testing {
namespace {

std::string script() {
  return testing::python_path() + " " + testing::test_source_dir() + "/models/python/user_models.py";
}

}  // namespace

ProcessResult make_user_models(const std::string& directory, const std::vector<std::string>& names) {
  std::string command = script() + " make " + directory;
  for (const auto& name : names)
    command += " " + name;
  return run_process(command);
}

ProcessResult run_user_models_script(const std::string& command, const std::string& manifest_path) {
  return run_process(script() + " " + command + " " + manifest_path);
}

}  // namespace ipj::testing
