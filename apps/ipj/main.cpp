// `ipj` entry point: parses the subcommand, runs it, maps ipj::Error categories to exit codes and prints
// one-line error messages on stderr.
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <utility>

#include "cli_support.hpp"
#include "ipj/core/crash_report.hpp"
#include "ipj/core/environment.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/device/address_space_limit.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/openmp_binding.hpp"
#include "ipj/device/task_limit.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/device/torch_warnings.hpp"
#include "ipj/device/wait_policy.hpp"
#include "standard_streams.hpp"

namespace {

// libgomp (ATen's OpenMP pool) and OpenBLAS read their wait settings once, when they are loaded, before
// main(): by default an idle worker spins for milliseconds (OpenBLAS: ~0.1 s of sched_yield) before it
// sleeps, which burns a neighbour's CPU (and our joules) on a shared machine. Unless the user set
// OMP_WAIT_POLICY or GOMP_SPINCOUNT, ipj runs itself again once with the policy device::choose_wait_policy
// picks from the load at start: a short spin on a quiet machine, passive waiting when busy, on one CPU or for
// `serve` (IPJ_WAIT_POLICY=auto|passive|short-spin overrides it; IPJ_REEXEC marks the second run;
// IPJ_NO_REEXEC=1 turns this off). docs/PERFORMANCE.md has the measurements. The commands that run LibTorch
// kernels for long enough to be worth a second start (~0.6 s: LibTorch loads twice); help, version, usage
// errors and the quick commands start once.
const char* kernel_command(int argc, char** argv) {
  static const std::set<std::string> commands{"train", "compare",  "bench", "serve",
                                              "tune",  "quantize", "prune", "distill"};
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--help" || argument == "-h" || argument == "--version") return nullptr;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--log-level") ++i;  // its value
    if (argument.empty() || argument[0] == '-') continue;
    return commands.count(argument) > 0 ? argv[i] : nullptr;
  }
  return nullptr;
}

// What the libraries print while they load (libgomp: "Invalid value for environment variable OMP_PLACES"),
// the first start has already shown; the second start would print it again before main(). Its stderr is
// /dev/null until main() restores the descriptor saved here (IPJ_STDERR_FD; the same environment loads the
// same way, so nothing else is lost). Returns the saved descriptor, -1 where nothing was changed.
int silence_stderr_until_second_main() {
  const int saved = ::fcntl(STDERR_FILENO, F_DUPFD, 3);  // kept across exec (no FD_CLOEXEC)
  const int null_device = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (saved < 0 || null_device < 0 || ::dup2(null_device, STDERR_FILENO) < 0) {
    if (saved >= 0) ::close(saved);
    if (null_device >= 0) ::close(null_device);
    return -1;
  }
  ::close(null_device);
  ::setenv("IPJ_STDERR_FD", std::to_string(saved).c_str(), 1);
  return saved;
}

void restore_stderr(int saved) {
  ::unsetenv("IPJ_STDERR_FD");
  if (saved <= STDERR_FILENO) return;
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
}

void reexec_with_wait_policy(int argc, char** argv) {
  if (std::getenv("IPJ_REEXEC") != nullptr) return;
  const char* command = kernel_command(argc, argv);
  if (command == nullptr) return;
  const char* requested = std::getenv("IPJ_WAIT_POLICY");
  const auto request = ipj::device::parse_wait_policy_request(ipj::environment_choice("IPJ_WAIT_POLICY"));
  const bool user_policy = ipj::device::wait_policy_set_by_environment();
  if (user_policy || ipj::device::second_start_disabled()) {
    if (request != ipj::device::WaitPolicyRequest::automatic)
      std::cerr << "ipj: warning: IPJ_WAIT_POLICY=" << requested << " not applied: "
                << (user_policy ? "OMP_WAIT_POLICY or GOMP_SPINCOUNT is set, and that runs"
                                : "IPJ_NO_REEXEC keeps libgomp's own default")
                << std::endl;
    return;
  }
  if (ipj::device::started_through_the_dynamic_loader()) {
    ipj::device::note_second_start_skipped(
        "started through the dynamic loader (/proc/self/exe is ld.so, which cannot run ipj again): no second "
        "start, libgomp's own default");
    return;
  }
  const bool server = std::string(command) == "serve";
  const ipj::device::CpuLimits limits = ipj::device::read_cpu_limits();
  std::optional<ipj::device::LoadSample> load;
  if (request == ipj::device::WaitPolicyRequest::automatic && !server && limits.available_cpus > 1)
    load = ipj::device::sample_machine_load(limits, std::chrono::milliseconds(100));
  const ipj::device::WaitPolicyChoice choice =
      ipj::device::choose_wait_policy(request, server, limits.available_cpus, load ? &*load : nullptr);
  const auto settings = ipj::device::environment_to_apply(choice);
  for (const auto& [name, value] : settings)
    ::setenv(name.c_str(), value.c_str(), 1);
  ::setenv("IPJ_REEXEC", std::to_string(::getpid()).c_str(), 1);  // exec keeps the process id
  ::setenv("IPJ_WAIT_POLICY_SET", choice.reason.c_str(), 1);      // results say who set it, and why
  const int saved_stderr = silence_stderr_until_second_main();
  ::execv("/proc/self/exe", argv);
  // exec failed (no /proc): run on with the libraries' defaults
  restore_stderr(saved_stderr);
  for (const auto& setting : settings)
    ::unsetenv(setting.first.c_str());
  ::unsetenv("IPJ_REEXEC");
  ::unsetenv("IPJ_WAIT_POLICY_SET");
}

// The first start's marks, read once at the top of main(): the second start is the process whose
// IPJ_REEXEC holds its own id (the first start wrote it; exec keeps the id). There the process takes the name
// the user ran (exec through /proc/self/exe names it "exe", which ps, pgrep -x and killall see); anywhere
// else IPJ_REEXEC, IPJ_WAIT_POLICY_SET and IPJ_BLAS_WAIT_SET from the environment (a parent ipj's, or stray
// ones) are not this run's.
void settle_second_start_marks(char** argv) {
  const char* mark = std::getenv("IPJ_REEXEC");
  if (mark == nullptr || std::to_string(::getpid()) != mark) {
    ::unsetenv("IPJ_REEXEC");
    ::unsetenv("IPJ_WAIT_POLICY_SET");
    ::unsetenv("IPJ_BLAS_WAIT_SET");
    ::unsetenv("IPJ_STDERR_FD");  // not ours: its number names none of our descriptors
    return;
  }
  const char* saved_stderr = std::getenv("IPJ_STDERR_FD");
  restore_stderr(saved_stderr != nullptr ? std::atoi(saved_stderr) : -1);
  const std::string name = std::filesystem::path(argv[0]).filename().string().substr(0, 15);
  if (name.empty()) return;
  ::prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);
  // Threads the libraries started while loading (OpenBLAS's pool) took the name "exe" too (top -H shows them)
  std::error_code ignored;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ignored))
    std::ofstream(task.path() / "comm") << name;
}

// What would stop a kernel command's first LibTorch work without a word (a hang, an internal enforce
// failure): checked before it starts, each stopping with exit 5/6 and the fix.
void check_before_kernels(int argc, char** argv) {
  if (kernel_command(argc, argv) == nullptr) return;
  ipj::device::check_proc_is_mounted();         // LibTorch's thread pool cannot start without it
  ipj::device::check_task_limit_for_threads();  // pids.max: a thread pool's start hung without tasks left
  // ulimit -v: OpenBLAS hangs where it cannot map its GEMM buffers; fail now, or map them while they fit
  ipj::device::check_address_space_for_blas();
}

}  // namespace

static int run_command(int argc, char** argv) {
  ipj::install_crash_report("ipj");
  settle_second_start_marks(argv);
  // Before any thread starts: OMP_PROC_BIND pinned this thread to one OpenMP place at load
  const auto& binding = ipj::device::widen_threads_bound_by_openmp();
  CLI::App app{
      "ipj - intelligence per joule: train and serve deep-learning models with less energy, and measure it.\n"
      "Example: ipj train --model mlp --epochs 2 --json"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "ipj 0.1.0");
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "trace|debug|info|warn|error|off (default: $IPJ_LOG_LEVEL or info)");

  ipj::cli::CommandRunner runner;
  ipj::cli::register_devices_command(app, runner);
  ipj::cli::register_models_command(app, runner);
  ipj::cli::register_train_command(app, runner);
  ipj::cli::register_measure_command(app, runner);
  ipj::cli::register_compare_command(app, runner);
  ipj::cli::register_tune_command(app, runner);
  ipj::cli::register_quantize_command(app, runner);
  ipj::cli::register_prune_command(app, runner);
  ipj::cli::register_distill_command(app, runner);
  ipj::cli::register_export_command(app, runner);
  ipj::cli::register_bench_command(app, runner);
  ipj::cli::register_serve_command(app, runner);
  ipj::cli::register_load_command(app, runner);
  ipj::cli::register_launch_command(app, runner);
  ipj::cli::register_report_command(app, runner);
  ipj::cli::register_gate_command(app, runner);

  std::string known;
  bool is_known = false;
  for (const auto* command : app.get_subcommands([](const CLI::App*) { return true; })) {
    known += (known.empty() ? "" : ", ") + command->get_name();
    is_known = is_known || (argc > 1 && command->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !is_known) {
    std::cerr << "ipj: error: unknown command '" << argv[1] << "' (commands: " << known << "; see ipj --help)"
              << std::endl;
    return ipj::exit_code_for(ipj::ErrorCategory::usage);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    std::cerr << "ipj: error: " << error.what() << " (see ipj --help)" << std::endl;
    return ipj::exit_code_for(ipj::ErrorCategory::usage);
  }
  try {
    ipj::check_environment();  // a bad IPJ_* value is a usage error before anything runs
    // After parsing, which runs no kernels: a usage error starts LibTorch once, not twice.
    reexec_with_wait_policy(argc, argv);
    ::unsetenv("IPJ_REEXEC");  // children (ipj launch's ranks) see the policy set and run once
    ipj::init_logging(log_level);
    ipj::device::show_each_torch_warning_once();  // a model that warns on every forward must not flood stderr
    ipj::device::limit_openmp_to_team();          // OMP_THREAD_LIMIT / OMP_DYNAMIC / OMP_MAX_ACTIVE_LEVELS=0
    if (!binding.reason.empty()) spdlog::debug("{}", binding.reason);  // results' threads.reason has it
    check_before_kernels(argc, argv);
    return runner ? runner() : 0;
  } catch (const ipj::Error& error) {
    std::cerr << "ipj: error: " << error.what() << std::endl;
    return ipj::exit_code_for(error.category());
  } catch (const std::filesystem::filesystem_error& error) {
    // A path the library did not check (a symbolic-link loop, a folder without permission): an I/O error.
    std::cerr << "ipj: error: " << error.code().message() << ": '" << error.path1().string()
              << "'; check the path and its permissions" << std::endl;
    return ipj::exit_code_for(ipj::ErrorCategory::io);
  } catch (const std::bad_alloc&) {
    std::cerr << "ipj: error: out of memory; use a smaller --batch (or model, or data set)" << std::endl;
    return ipj::exit_code_for(ipj::ErrorCategory::runtime);
  } catch (const std::system_error& error) {
    // The system refused a thread, a lock or a descriptor (a process or memory limit, a busy machine).
    std::cerr << "ipj: error: the system refused a resource: " << error.what()
              << "; check ulimit -u / -n and the container's process limit, then retry"
              << ipj::device::task_limit_hint() << std::endl;
    return ipj::exit_code_for(ipj::ErrorCategory::runtime);
  } catch (const std::exception& error) {
    // LibTorch errors carry multi-line backtraces: keep the line naming the cause; IPJ_LOG_LEVEL=debug shows
    // all.
    const std::string message = error.what();
    if (message.find("can't allocate memory") != std::string::npos) {  // LibTorch's CPU allocator
      std::cerr << "ipj: error: out of memory (" << message.substr(0, message.find('\n'))
                << "); use a smaller --batch (or model, or data set)" << std::endl;
      return ipj::exit_code_for(ipj::ErrorCategory::runtime);
    }
    spdlog::debug("{}", message);
    std::cerr << "ipj: internal error: " << ipj::error_cause(message) << std::endl;
    return ipj::exit_code_for(ipj::ErrorCategory::internal);
  }
}

int main(int argc, char** argv) {
  ipj::cli::fill_closed_standard_descriptors();  // before any pipe, socket or file takes 0, 1 or 2
  int code = run_command(argc, argv);
  ipj::cli::remove_reserved_run_folders_left_empty();
  if (const auto failure = ipj::cli::standard_output_failure(); failure && code == 0) {
    std::cerr << "ipj: error: " << *failure << std::endl;
    code = ipj::exit_code_for(ipj::ErrorCategory::io);
  }
  // Under ulimit -v a failed run can leave an OpenBLAS thread retrying an allocation for ever, which
  // OpenBLAS's exit handler then joins (the process hung after printing its error): skip the libraries' exit
  // handlers. Results are written atomically and closed before this point; only the streams need flushing.
  rlimit address_space{};
  if (code != 0 && ::getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}
