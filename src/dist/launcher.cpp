// fork/exec of the local ranks, a poll loop that prefixes their output line by line, and the failure and
// signal policy: the first rank to fail (or a SIGINT/SIGTERM to the launcher) stops every rank, SIGTERM first
// and SIGKILL after the grace period, so that the job never hangs on a dead peer.
#include "ipj/dist/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "ipj/core/error.hpp"
#include "ipj/dist/agent_store.hpp"

extern char** environ;

namespace ipj::dist {
namespace {

using Clock = std::chrono::steady_clock;

int signal_pipe[2] = {-1, -1};
volatile sig_atomic_t received_signal = 0;

void on_signal(int signal_number) {
  received_signal = signal_number;
  const char byte = 1;
  [[maybe_unused]] const ssize_t written = ::write(signal_pipe[1], &byte, 1);
}

// Installs the SIGINT/SIGTERM handlers for the lifetime of the launch and restores the previous ones after.
class SignalForwarding {
 public:
  SignalForwarding() {
    if (::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      fail(ErrorCategory::io, std::string("ipj launch: cannot create a pipe: ") + std::strerror(errno));
    received_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &previous_interrupt_);
    ::sigaction(SIGTERM, &action, &previous_terminate_);
  }
  ~SignalForwarding() {
    ::sigaction(SIGINT, &previous_interrupt_, nullptr);
    ::sigaction(SIGTERM, &previous_terminate_, nullptr);
    ::close(signal_pipe[0]);
    ::close(signal_pipe[1]);
  }

 private:
  struct sigaction previous_interrupt_ {};
  struct sigaction previous_terminate_ {};
};

// One output stream of one rank: the read end of its pipe and the partial line not yet written.
struct Stream {
  int descriptor = -1;
  int target = 1;      // 1 = stdout, 2 = stderr
  std::string prefix;  // "" = pass through unchanged
  std::string pending;
};

struct Rank {
  int global_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int exit_code = 0;
};

void write_all(int descriptor, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t written = ::write(descriptor, text.data() + done, text.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;  // stdout closed: the output is lost, the job goes on
    done += static_cast<std::size_t>(written);
  }
}

// Writes the complete lines of `stream.pending` (all of it when `flush`), each with the stream's prefix.
void emit_lines(Stream& stream, bool flush) {
  if (stream.prefix.empty()) {
    write_all(stream.target, stream.pending);
    stream.pending.clear();
    return;
  }
  std::string out;
  std::size_t start = 0;
  for (std::size_t newline; (newline = stream.pending.find('\n', start)) != std::string::npos;
       start = newline + 1)
    out += stream.prefix + stream.pending.substr(start, newline + 1 - start);
  stream.pending.erase(0, start);
  if (flush && !stream.pending.empty()) {
    out += stream.prefix + stream.pending + "\n";
    stream.pending.clear();
  }
  write_all(stream.target, out);
}

// Reads what is available; closes the stream at end of file.
void drain(Stream& stream) {
  char buffer[65536];
  const ssize_t count = ::read(stream.descriptor, buffer, sizeof buffer);
  if (count > 0) {
    stream.pending.append(buffer, static_cast<std::size_t>(count));
    emit_lines(stream, false);
    return;
  }
  if (count < 0 && (errno == EINTR || errno == EAGAIN)) return;
  emit_lines(stream, true);
  ::close(stream.descriptor);
  stream.descriptor = -1;
}

// agent_store: the launcher hosts the rendezvous store, so rank 0 must join it as a client (torchrun's flag).
std::vector<std::string> rank_environment(const LaunchOptions& options, int local_rank, bool agent_store) {
  const int world_size = options.nnodes * options.nproc_per_node;
  const int global_rank = options.node_rank * options.nproc_per_node + local_rank;
  const std::vector<std::pair<std::string, std::string>> variables = {
      {"RANK", std::to_string(global_rank)},
      {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
      {"GROUP_RANK", std::to_string(options.node_rank)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(options.master_port)},
      {kAgentStoreVariable, agent_store ? "True" : "False"},
      {"TORCHELASTIC_RESTART_COUNT", "0"}};
  std::vector<std::string> environment;
  bool has_omp_threads = false;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    bool replaced = false;
    for (const auto& variable : variables)
      replaced = replaced || variable.first == name;
    has_omp_threads = has_omp_threads || name == "OMP_NUM_THREADS";
    if (!replaced) environment.push_back(text);
  }
  for (const auto& [name, value] : variables)
    environment.push_back(name + "=" + value);
  if (!has_omp_threads) {
    const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    environment.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1L, cores / options.nproc_per_node)));
  }
  return environment;
}

// Starts one rank in its own process group with its stdout/stderr on pipes.
Rank start_rank(const LaunchOptions& options, int local_rank, bool agent_store,
                std::vector<Stream>& streams) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    fail(ErrorCategory::io, std::string("ipj launch: cannot create a pipe: ") + std::strerror(errno));
  std::vector<std::string> environment = rank_environment(options, local_rank, agent_store);
  std::vector<char*> environment_pointers, arguments;
  for (auto& entry : environment)
    environment_pointers.push_back(entry.data());
  environment_pointers.push_back(nullptr);
  std::vector<std::string> command = options.command;
  for (auto& argument : command)
    arguments.push_back(argument.data());
  arguments.push_back(nullptr);

  Rank rank;
  rank.global_rank = options.node_rank * options.nproc_per_node + local_rank;
  rank.pid = ::fork();
  if (rank.pid < 0) fail(ErrorCategory::io, std::string("ipj launch: fork failed: ") + std::strerror(errno));
  if (rank.pid == 0) {  // child: async-signal-safe calls only
    ::setpgid(0, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    ::sigaction(SIGINT, &default_action, nullptr);
    ::sigaction(SIGTERM, &default_action, nullptr);
    ::execvpe(arguments[0], arguments.data(), environment_pointers.data());
    const char message[] = "ipj launch: cannot run the command (not found or not executable)\n";
    [[maybe_unused]] const ssize_t written = ::write(2, message, sizeof message - 1);
    ::_exit(127);
  }
  ::setpgid(rank.pid, rank.pid);  // also here, so that a signal sent right away reaches the group
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  rank.running = true;
  const std::string prefix = "[rank " + std::to_string(rank.global_rank) + "] ";
  streams.push_back({out_pipe[0], 1, rank.global_rank == 0 ? "" : prefix, ""});
  streams.push_back({err_pipe[0], 2, prefix, ""});
  return rank;
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void signal_all(const std::vector<Rank>& ranks, int signal_number) {
  for (const Rank& rank : ranks)
    if (rank.running) ::kill(-rank.pid, signal_number);
}

}  // namespace

void validate(const LaunchOptions& options) {
  if (options.nproc_per_node < 1 || options.nproc_per_node > 1024)
    fail(ErrorCategory::usage, "--nproc-per-node must be in [1, 1024]");
  if (options.nnodes < 1 || options.nnodes > 65536)
    fail(ErrorCategory::usage, "--nnodes must be in [1, 65536]");
  if (options.node_rank < 0 || options.node_rank >= options.nnodes)
    fail(ErrorCategory::usage, "--node-rank must be in [0, --nnodes - 1]");
  if (options.master_port < 0 || options.master_port > 65535)
    fail(ErrorCategory::usage, "--master-port must be in [0, 65535]");
  if (options.master_port == 0 && options.nnodes > 1)
    fail(
        ErrorCategory::usage,
        "--master-port: a job over several machines needs the same fixed port on every machine (e.g. 29500)");
  if (options.master_addr.empty()) fail(ErrorCategory::usage, "--master-addr must not be empty");
  if (!std::isfinite(options.grace_s) || options.grace_s < 0.0 || options.grace_s > 3600.0)
    fail(ErrorCategory::usage, "--grace-s must be in [0, 3600] seconds");
  if (options.command.empty())
    fail(ErrorCategory::usage, "no command given: use ipj launch [options] -- CMD ARGS...");
}

int find_free_port(const std::string& address) {
  const int socket_descriptor = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in socket_address{};
  socket_address.sin_family = AF_INET;
  socket_address.sin_port = 0;
  if (::inet_pton(AF_INET, address.c_str(), &socket_address.sin_addr) != 1)
    socket_address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof socket_address;
  if (socket_descriptor < 0 ||
      ::bind(socket_descriptor, reinterpret_cast<sockaddr*>(&socket_address), sizeof socket_address) != 0 ||
      ::getsockname(socket_descriptor, reinterpret_cast<sockaddr*>(&socket_address), &length) != 0) {
    if (socket_descriptor >= 0) ::close(socket_descriptor);
    fail(ErrorCategory::io, "ipj launch: cannot find a free port on " + address + ": " +
                                std::strerror(errno) + " (give one with --master-port)");
  }
  ::close(socket_descriptor);
  return ntohs(socket_address.sin_port);
}

LaunchResult run_launch(const LaunchOptions& requested) {
  validate(requested);
  LaunchOptions options = requested;
  // A port chosen here and bound later by rank 0 could be taken in between (by any process's outgoing
  // connection): the launcher binds it itself and keeps it for the whole job.
  std::unique_ptr<AgentStore> agent_store;
  if (options.master_port == 0) {
    agent_store = std::make_unique<AgentStore>(options.master_addr, options.nnodes * options.nproc_per_node);
    options.master_port = agent_store->port();
  }
  SignalForwarding signals;
  std::vector<Stream> streams;
  std::vector<Rank> ranks;
  for (int local_rank = 0; local_rank < options.nproc_per_node; ++local_rank)
    ranks.push_back(start_rank(options, local_rank, agent_store != nullptr, streams));

  LaunchResult result;
  result.master_port = options.master_port;
  bool stopping = false;
  Clock::time_point kill_at{};
  auto stop_all = [&](int signal_number) {
    if (stopping) return;
    stopping = true;
    signal_all(ranks, signal_number);
    kill_at = Clock::now() + std::chrono::milliseconds(static_cast<long>(options.grace_s * 1000.0));
  };
  int running = options.nproc_per_node;
  Clock::time_point output_deadline = Clock::time_point::max();
  while (true) {
    std::vector<pollfd> polled{{signal_pipe[0], POLLIN, 0}};
    std::vector<Stream*> polled_streams;
    for (Stream& stream : streams)
      if (stream.descriptor >= 0) {
        polled.push_back({stream.descriptor, POLLIN, 0});
        polled_streams.push_back(&stream);
      }
    if (running == 0 && (polled_streams.empty() || Clock::now() > output_deadline)) break;
    ::poll(polled.data(), polled.size(), 100);
    if (polled[0].revents & POLLIN) {
      char bytes[16];
      while (::read(signal_pipe[0], bytes, sizeof bytes) > 0) {
      }
      if (received_signal != 0 && result.exit_code == 0) {
        result.exit_code = 128 + received_signal;
        result.summary = std::string("ipj launch: received ") + ::strsignal(received_signal) +
                         "; forwarded it to every rank";
        stopping = false;  // forward this very signal even if a failure already started the stop
        stop_all(received_signal);
      }
    }
    for (std::size_t index = 1; index < polled.size(); ++index)
      if (polled[index].revents & (POLLIN | POLLHUP | POLLERR)) drain(*polled_streams[index - 1]);
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      for (Rank& rank : ranks) {
        if (rank.pid != pid || !rank.running) continue;
        rank.running = false;
        rank.exit_code = exit_code_of(status);
        --running;
        if (rank.exit_code != 0 && result.failed_rank < 0 && result.exit_code == 0) {
          result.failed_rank = rank.global_rank;
          result.exit_code = rank.exit_code;
          result.summary = "ipj launch: rank " + std::to_string(rank.global_rank) + " exited with status " +
                           std::to_string(rank.exit_code) + "; stopped the other ranks";
          stop_all(SIGTERM);
        }
      }
    }
    if (running == 0 && output_deadline == Clock::time_point::max())
      output_deadline = Clock::now() + std::chrono::seconds(2);  // descendants that kept a pipe open
    if (stopping && running > 0 && Clock::now() > kill_at) signal_all(ranks, SIGKILL);
  }
  for (Stream& stream : streams)
    if (stream.descriptor >= 0) {
      emit_lines(stream, true);
      ::close(stream.descriptor);
    }
  if (result.summary.empty())
    result.summary = "ipj launch: " + std::to_string(options.nproc_per_node) + " rank(s) finished";
  return result;
}

}  // namespace ipj::dist
