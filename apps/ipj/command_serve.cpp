// `ipj serve` (KServe v2 server over a model repository) and `ipj load` (closed-loop load generator).
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli_support.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/device/wait_policy.hpp"
#include "ipj/serve/inference_server.hpp"
#include "ipj/serve/load_generator.hpp"

namespace ipj::cli {

namespace {

// Every `ipj serve` flag, into `options` (and `no_energy`).
void add_serve_flags(CLI::App& app, serve::ServeOptions& options, bool& no_energy) {
  CLI::App* command = &app;
  // Shared checks (cli_support): NaN and non-numbers refused, the range named in the message.
  const CLI::Validator positive_seconds = positive_number(86400.0);
  const CLI::Validator drain_seconds = finite_range(0.0, 3600.0);
  command
      ->add_option("--model-repo", options.model_repository,
                   "DIR/<model>/config.json + DIR/<model>/<version>/model.pt")
      ->required();
  command->add_option("--host", options.host, "Address to bind (127.0.0.1: this machine only)")
      ->capture_default_str();
  command->add_option("--port", options.port, "TCP port, 0..65535 (0 = any free port, printed at start)")
      ->check(non_negative_integer(65535))
      ->capture_default_str();
  command
      ->add_option("--max-connections", options.http.max_connections,
                   "Open connections at most; more are answered 503 and closed")
      ->check(positive_integer(1000000))
      ->capture_default_str();
  command
      ->add_option("--max-connections-per-client", options.http.max_connections_per_client,
                   "Open connections from one client IP address at most, in [0, 1000000]; more are answered "
                   "503 and closed (0 = --max-connections / 8, at least 8; raise it behind a proxy)")
      ->check(non_negative_integer(1000000))
      ->capture_default_str();
  command
      ->add_option("--io-threads", options.http.io_threads,
                   "HTTP threads (event loops; batches never run there)")
      ->check(positive_integer(64))
      ->capture_default_str();
  command
      ->add_option("--header-timeout-s", options.http.header_timeout_s,
                   "A request's first byte -> end of its headers")
      ->check(positive_seconds)
      ->capture_default_str();
  command
      ->add_option("--body-timeout-s", options.http.body_timeout_s, "End of the headers -> end of the body")
      ->check(positive_seconds)
      ->capture_default_str();
  command
      ->add_option("--idle-timeout-s", options.http.idle_timeout_s,
                   "Keep-alive: end of a response -> the next request's first byte")
      ->check(positive_seconds)
      ->capture_default_str();
  command->add_option("--write-timeout-s", options.http.write_timeout_s, "Writing one response to the client")
      ->check(positive_seconds)
      ->capture_default_str();
  command->add_option("--max-body-bytes", options.http.max_body_bytes, "Largest request body (413 above)")
      ->check(positive_integer(std::int64_t{1} << 40))
      ->capture_default_str();
  command
      ->add_option("--max-tensor-bytes", options.request.max_tensor_bytes,
                   "Largest FP32 input tensor a request may declare (413 above)")
      ->check(positive_integer(std::int64_t{1} << 40))
      ->capture_default_str();
  command
      ->add_option("--drain-s", options.drain_s,
                   "On SIGTERM: seconds to let in-flight requests finish, in [0, 3600]")
      ->check(drain_seconds)
      ->capture_default_str();
  command
      ->add_option("--usd-per-kwh", options.usd_per_kwh,
                   "Electricity price: adds cost per 1000 inferences to /metrics")
      ->check(finite_range(0.0, 1e5));
  command->add_option("--cpu-tdp-w", options.cpu_tdp_w, "CPU power at full load for the energy estimate")
      ->check(finite_range(0.0, 1e5));
  command->add_flag("--no-energy", no_energy, "Do not measure energy");
  command
      ->add_option("--threads", options.threads,
                   "Threads per batch (0 = ipj's plan from the models and the CPUs available, re-planned "
                   "when other work comes and goes; N = N, fixed)")
      ->check(non_negative_integer(1024))
      ->capture_default_str();
}

// Serves until SIGTERM/SIGINT (then drains) or until the server stops; returns the exit code.
int run_server(const serve::ServeOptions& options) {
  // SIGTERM/SIGINT: the handler only writes a byte to a pipe; a waiter thread reads it and drains. It is
  // installed once the models are loaded: until then a signal stops the process as by default (reading
  // the repository and loading models cannot hold shutdown back; there is nothing to drain yet).
  // A log reader that goes away (a collector restarting, `2>&1 | tee` killed) must not stop the server:
  // writes to a closed pipe fail with EPIPE instead of killing the process (sockets are handled by Asio).
  std::signal(SIGPIPE, SIG_IGN);
  static int wake_pipe[2] = {-1, -1};
  if (pipe(wake_pipe) != 0) fail(ErrorCategory::io, "cannot create the signal pipe");
  serve::InferenceServer server(options);  // binds (a port in use fails before any model loads)
  struct sigaction action {};
  action.sa_handler = [](int) {
    const char byte = 1;
    [[maybe_unused]] const auto written = write(wake_pipe[1], &byte, 1);
  };
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  const int port = server.port();
  std::atomic<bool> serving{true};
  std::thread waiter([&server, &serving] {
    char byte = 0;
    while (read(wake_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    if (!serving) return;
    spdlog::info("signal received: draining (ready -> 503, in-flight requests finish)");
    server.drain();
  });
  spdlog::info("serving {} model(s) on http://{}:{} (ready: GET /v2/health/ready)", server.models().size(),
               options.host, port);
  spdlog::info("OpenMP wait policy: {}; OpenBLAS workers: {}; {}", device::omp_wait_policy_description(),
               device::blas_wait_description(), device::wait_policy_reason());
  std::printf("listening on %s:%d\n", options.host.c_str(), port);
  std::fflush(stdout);
  server.serve();
  serving = false;
  const char byte = 0;
  [[maybe_unused]] const auto written = write(wake_pipe[1], &byte, 1);  // wakes the waiter if no signal came
  waiter.join();
  spdlog::info("stopped");
  // Drained, and nothing is left to write. A runtime for a shrunk thread plan still being built in the
  // background (seconds for a ResNet on one busy core; it gives up only between its steps) would hold the
  // exit until it ended: leave now, without tearing the models down (a hostile pass, 12-07: exit 2-9 s after
  // "stopped").
  spdlog::shutdown();
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace

CLI::App* register_serve_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "serve",
      "Serve a model repository over the KServe v2 REST protocol with Triton-style dynamic batching;\n"
      "Prometheus metrics with joules per inference at /metrics. SIGTERM/SIGINT drain and exit 0\n"
      "Example: ipj serve --model-repo models --port 8000 --usd-per-kwh 0.30");
  static serve::ServeOptions options;
  static bool no_energy = false;
  add_serve_flags(*command, options, no_energy);
  command->callback([&runner] {
    runner = [] {
      options.measure_energy = !no_energy;
      return run_server(options);
    };
  });
  return command;
}

CLI::App* register_load_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "load",
      "Closed-loop load on a KServe v2 server: per concurrency, windows until 3 agree within 10%;\n"
      "p50/p90/p99 latency, throughput and errors\n"
      "Example: ipj load --url http://127.0.0.1:8000 --model mlp --concurrency 1,8,64 --duration 6");
  static CommonOutputFlags flags;
  static serve::LoadOptions options;
  static std::string concurrency_text = "1";
  add_output_flags(*command, flags);
  command->add_option("--url", options.url, "Server base URL")->capture_default_str();
  command->add_option("--model", options.model, "Model name")->required();
  command->add_option("--concurrency", concurrency_text, "Comma list of client counts")
      ->capture_default_str();
  command->add_option("--duration", options.duration_s, "Seconds per concurrency level (three windows)")
      ->check(positive_number(86400.0))
      ->capture_default_str();
  command->add_option("--max-windows", options.max_windows, "Windows before giving up on stability")
      ->check(positive_integer(10000))
      ->capture_default_str();
  command->add_option("--batch", options.batch, "Rows per request")
      ->check(positive_integer(kMaxBatch))
      ->capture_default_str();
  command->add_flag("--binary", options.binary, "Send and receive tensors with the binary extension");
  command->callback([&runner] {
    runner = [] {
      options.concurrency.clear();
      for (const std::int64_t clients : parse_integer_list(concurrency_text, "--concurrency", 1, 4096))
        options.concurrency.push_back(static_cast<int>(clients));
      const auto levels = serve::run_load(options, !flags.quiet && !flags.json);
      Json rows = Json::array();
      for (const auto& level : levels)
        rows.push_back(serve::to_json(level));
      if (flags.json) {
        print_json({{"schema_version", kResultsSchemaVersion},
                    {"kind", "load"},
                    {"url", options.url},
                    {"model", options.model},
                    {"batch", options.batch},
                    {"binary", options.binary},
                    {"levels", rows}});
        return 0;
      }
      TextTable table({"concurrency", "req/s", "inferences/s", "p50 ms", "p90 ms", "p99 ms", "errors",
                       "stable", "J/req mean", "J/req p50", "J/req p99"});
      std::string energy_sources;
      for (const auto& level : levels) {
        const bool energy = level.energy_requests > 0;
        table.add_row({std::to_string(level.concurrency), format_number("%.0f", level.requests_per_s),
                       format_number("%.0f", level.inferences_per_s), format_number("%.3f", level.p50_ms),
                       format_number("%.3f", level.p90_ms), format_number("%.3f", level.p99_ms),
                       std::to_string(level.errors), level.stable ? "yes" : "no",
                       energy ? format_number("%.3g", level.energy_mean_j) : "-",
                       energy ? format_number("%.3g", level.energy_p50_j) : "-",
                       energy ? format_number("%.3g", level.energy_p99_j) : "-"});
        if (energy && energy_sources.find(level.energy_source) == std::string::npos)
          energy_sources += (energy_sources.empty() ? "" : ", ") + level.energy_source;
      }
      std::cout << table.render();
      std::cout << (energy_sources.empty()
                        ? "energy: the answers carried no energy_j (server without energy_in_response)\n"
                        : "energy per request from the answers' parameters.energy_j (source: " +
                              energy_sources + ")\n");
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
