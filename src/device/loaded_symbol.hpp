// A function of a library already loaded in the process (libgomp, OpenBLAS), found through dlsym with no
// link-time dependency on it; nullptr where no loaded library defines `name`. Internal to src/device.
#pragma once

#include <dlfcn.h>

namespace ipj::device {

template <typename Function>
Function loaded_symbol(const char* name) {
  return reinterpret_cast<Function>(::dlsym(RTLD_DEFAULT, name));
}

}  // namespace ipj::device
