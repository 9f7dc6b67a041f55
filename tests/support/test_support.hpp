// Helpers shared by the test executables: temporary folders, gzip writing, synthetic IDX/CIFAR data sets,
// and running the ipj binary as a real process.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ipj::testing {

// A fresh folder under $TMPDIR, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes);
void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes);

// A gzip file that inflates to `header` followed by at least `zero_bytes` zeros (in 64 MiB members): ~1 KB of
// file per MiB inflated. Returns the inflated size.
std::uint64_t write_gzip_bomb(const std::string& path, const std::vector<std::uint8_t>& header,
                              std::uint64_t zero_bytes);

// Writes the four IDX files of an MNIST-format data set (28x28 unless given): image pixels depend on the
// label (a bright horizontal band at a label-specific row) plus noise, so that models can learn it quickly.
void write_synthetic_idx_dataset(const std::string& directory, std::int64_t train_count,
                                 std::int64_t test_count, bool gzip, int height = 28, int width = 28);

// An 8-bit PNG (libpng's simplified API) from interleaved pixels [height, width, channels] (1 grey, 3 RGB);
// creates the parent folders.
void write_png(const std::string& path, int height, int width, int channels,
               const std::vector<std::uint8_t>& interleaved);

// One CIFAR-10 batch file with `count` records (labels cycle 0..9).
void write_synthetic_cifar_batch(const std::string& path, std::int64_t count);

struct ProcessResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `command` through /bin/sh, capturing stdout and stderr separately.
ProcessResult run_process(const std::string& command);

// What run_process_measured saw of the process: its wall time, its own peak resident set (wait4's
// ru_maxrss: the command's, as the shell execs it), its CPU time and the signal that ended it (0 if it
// exited).
struct ProcessUsage {
  double wall_s = 0.0;
  long max_rss_kib = 0;
  double cpu_s = 0.0;  // user + system CPU seconds of the command (load-independent, unlike wall_s)
  int term_signal = 0;
};
// run_process for one command (`exec`ed by /bin/sh, so that `usage` is the command's own).
ProcessResult run_process_measured(const std::string& command, ProcessUsage& usage);

// Seconds from `start` to now on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Path of the built `ipj` executable.
std::string ipj_binary();
// Runs the built `ipj` with `arguments` (shell words), capturing its output.
ProcessResult ipj(const std::string& arguments);
// The tests' source folder (fixtures, Python scripts) and the Python with Debian's python3-torch. Functions,
// not macros in every test file: the paths then reach only test_support's own objects, so that ccache reuses
// the other test objects across clones in different folders.
std::string test_source_dir();
std::string python_path();

// True where this CPU has bf16 instructions but ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA caps oneDNN below them
// (scripts/test-as-avx2.sh): Debian's LibTorch then still routes bf16 matmuls to oneDNN, which refuses them,
// so tests that need bf16 to run skip; a real AVX2 CPU runs them (LibTorch's own bf16 kernels).
bool onednn_refuses_bf16();

// The CLI's failure contract (gtest expectations): exit `exit_code`, exactly one line on stderr containing
// `fragment`, nothing on stdout.
void expect_cli_failure(const ProcessResult& result, int exit_code, const std::string& fragment);

// The source ("counter", "integrated", "estimated"; "none" when no meter exists) of energy measured here by
// local rank `local_rank` of `local_world_size` ranks: the weakest in-total channel of the meters that
// energy::discover_meters_for_rank finds on this machine ($IPJ_POWERCAP_ROOT / $IPJ_NVML_LIBRARY honoured).
// "estimated" without RAPL and NVML, "counter" with RAPL: tests assert this, not a fixed label.
std::string machine_energy_source(int local_rank = 0, int local_world_size = 1);

}  // namespace ipj::testing
