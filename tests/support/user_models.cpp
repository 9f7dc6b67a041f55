// Runs the Python script that makes and checks users' TorchScript models; a few small models made in C++.
#include "support/user_models.hpp"

#include <torch/script.h>

#include "support/test_cache.hpp"

namespace ipj::testing {
namespace {

std::string script_file() {
  return testing::test_source_dir() + "/models/python/user_models.py";
}

std::string script() {
  return testing::python_path() + " " + script_file();
}

}  // namespace

ProcessResult make_user_models(const std::string& directory, const std::vector<std::string>& names) {
  std::string listed;
  for (const auto& name : names)
    listed += " " + name;
  return run_cached_maker(script() + " make", directory, listed, {script_file()});
}

ProcessResult run_user_models_script(const std::string& command, const std::string& manifest_path) {
  return run_process(script() + " " + command + " " + manifest_path);
}

void save_batch_one_model(const std::string& path) {
  torch::jit::Module module("BatchOne");
  module.register_parameter("w", torch::randn({3, 4}), false);
  module.define(R"(
def forward(self, x: Tensor) -> Tensor:
    return torch.linear(x.view([1, -1]), self.w)
)");
  module.save(path);
}

}  // namespace ipj::testing
