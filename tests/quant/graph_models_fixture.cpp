// Runs make_graph_models.py once per test process (see graph_models_fixture.hpp).
#include "graph_models_fixture.hpp"

#include <stdexcept>

#include "support/test_cache.hpp"

namespace ipj::testing {

GraphModels::GraphModels() {
  const std::string script = testing::test_source_dir() + "/quant/make_graph_models.py";
  const auto result = run_cached_maker(testing::python_path() + " " + script, dir.path(), "", {script});
  if (result.exit_code != 0) throw std::runtime_error("model script failed: " + result.err);
  golden = torch::jit::load(dir.file("golden.pt"));
}

torch::Tensor GraphModels::tensor(const std::string& name) const {
  return golden.attr(name).toTensor();
}

const GraphModels& graph_models() {
  static const GraphModels instance;
  return instance;
}

quant::ImportOptions graph_model_import_options(const std::string& model) {
  quant::ImportOptions options;
  options.input_shape = {1, 28, 28};
  if (model != "cnn_bn") {
    options.mean = {kGraphModelMean};
    options.std = {kGraphModelStd};
  }
  return options;
}

}  // namespace ipj::testing
