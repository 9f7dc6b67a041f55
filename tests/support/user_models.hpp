// Users' TorchScript models for tests, made at test time by tests/models/python/user_models.py with Debian's
// python3-torch and python3-torchvision (names and architectures are listed in that script).
#pragma once

#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace ipj::testing {

// Writes DIRECTORY/NAME.pt for every name (e.g. "mlp_scripted", "resnet18_traced", "garbage").
ProcessResult make_user_models(const std::string& directory, const std::vector<std::string>& names);

// `user_models.py COMMAND MANIFEST` (check | train): the script's JSON answer on stdout.
ProcessResult run_user_models_script(const std::string& command, const std::string& manifest_path);

// Saves at `path` a TorchScript model that reshapes every input to a batch of one (x.view([1, -1]), then a
// linear layer of weight [3, 4]): a [1, 1, 2, 2] sample works, any larger batch fails in the model.
void save_batch_one_model(const std::string& path);

}  // namespace ipj::testing
