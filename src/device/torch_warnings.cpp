// The once-per-warning LibTorch handler: a set of "file:line message" keys under a mutex, spdlog for output.
// Thread-local installation (LibTorch's rule); the handler object itself lives for the whole process.
#include "ipj/device/torch_warnings.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>

#include "ipj/core/torch_compat.hpp"

namespace ipj::device {
namespace {

constexpr const char* kResizedOutputWarning = "An output with one or more elements was resized";

class ShowOnceHandler : public compat::WarningHandlerBase {
 public:
  std::size_t seen() const { return seen_.load(); }

 protected:
  void handle(const c10::SourceLocation& location, const std::string& message) override {
    ++seen_;
    const std::string key = std::string(location.file) + ":" + std::to_string(location.line) + " " + message;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!shown_.insert(key).second) return;
    }
    // A warning raised from a caught c10::Error (e.g. OMP_NUM_THREADS=0) carries its C++ backtrace: 13 frames
    // on stderr for one bad variable. Shown without it; the whole message at debug level.
    const std::size_t backtrace = message.find("\nException raised from ");
    if (backtrace != std::string::npos) spdlog::debug("LibTorch: {}", message);
    // LibTorch's own out= kernels resizing a non-empty output (a deprecation inside its ops, one message per
    // shape: four lines when a MobileNetV3 loaded): nothing a user can change, the results are right
    if (message.rfind(kResizedOutputWarning, 0) == 0) {
      spdlog::debug("LibTorch: {}", message);
      return;
    }
    spdlog::warn("LibTorch: {} (repeats of this warning are not shown)", message.substr(0, backtrace));
  }

 private:
  std::mutex mutex_;
  std::set<std::string> shown_;
  std::atomic<std::size_t> seen_{0};
};

ShowOnceHandler& handler() {
  static ShowOnceHandler* instance = new ShowOnceHandler;  // never destroyed: threads may warn at exit
  return *instance;
}

}  // namespace

void show_each_torch_warning_once() {
  compat::set_warning_handler(&handler());
}

std::size_t torch_warnings_seen() {
  return handler().seen();
}

}  // namespace ipj::device
