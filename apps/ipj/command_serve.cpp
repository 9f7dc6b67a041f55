// `ipj serve` (KServe v2 server over a model repository) and `ipj load` (closed-loop load generator).
#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <atomic>
#include <cerrno>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli_support.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/serve/inference_server.hpp"
#include "ipj/serve/load_generator.hpp"

namespace ipj::cli {

CLI::App* register_serve_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "serve",
      "Serve a model repository over the KServe v2 REST protocol with Triton-style dynamic batching;\n"
      "Prometheus metrics with joules per inference at /metrics. SIGTERM/SIGINT drain and exit 0\n"
      "Example: ipj serve --model-repo models --port 8000 --usd-per-kwh 0.30");
  static serve::ServeOptions options;
  static bool no_energy = false;
  command
      ->add_option("--model-repo", options.model_repository,
                   "DIR/<model>/config.json + DIR/<model>/<version>/model.pt")
      ->required();
  command->add_option("--host", options.host, "Address to bind (127.0.0.1: this machine only)")
      ->capture_default_str();
  command->add_option("--port", options.port, "TCP port (0 = any free port, printed at start)")
      ->capture_default_str();
  command->add_option("--http-threads", options.http_threads, "Connections served at once")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  command->add_option("--max-body-bytes", options.max_body_bytes, "Largest request body (413 above)")
      ->capture_default_str();
  command->add_option("--drain-s", options.drain_s, "On SIGTERM: seconds to let in-flight requests finish")
      ->capture_default_str();
  command->add_option("--usd-per-kwh", options.usd_per_kwh,
                      "Electricity price: adds cost per 1000 inferences to /metrics");
  command->add_option("--cpu-tdp-w", options.cpu_tdp_w, "CPU power at full load for the energy estimate");
  command->add_flag("--no-energy", no_energy, "Do not measure energy");
  command->callback([&runner] {
    runner = [] {
      options.measure_energy = !no_energy;
      // SIGTERM/SIGINT: the handler only writes a byte to a pipe; a waiter thread reads it and drains.
      static int wake_pipe[2] = {-1, -1};
      if (pipe(wake_pipe) != 0) fail(ErrorCategory::io, "cannot create the signal pipe");
      struct sigaction action {};
      action.sa_handler = [](int) {
        const char byte = 1;
        [[maybe_unused]] const auto written = write(wake_pipe[1], &byte, 1);
      };
      sigemptyset(&action.sa_mask);
      sigaction(SIGTERM, &action, nullptr);
      sigaction(SIGINT, &action, nullptr);
      serve::InferenceServer server(options);
      const int port = server.bind();
      std::atomic<bool> serving{true};
      std::thread waiter([&server, &serving] {
        char byte = 0;
        while (read(wake_pipe[0], &byte, 1) < 0 && errno == EINTR) {
        }
        if (!serving) return;
        spdlog::info("signal received: draining (ready -> 503, in-flight requests finish)");
        server.drain();
      });
      spdlog::info("serving {} model(s) on http://{}:{} (ready: GET /v2/health/ready)",
                   server.models().size(), options.host, port);
      std::printf("listening on %s:%d\n", options.host.c_str(), port);
      std::fflush(stdout);
      server.serve();
      serving = false;
      const char byte = 0;
      [[maybe_unused]] const auto written =
          write(wake_pipe[1], &byte, 1);  // wakes the waiter if no signal came
      waiter.join();
      spdlog::info("stopped");
      return 0;
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
      ->capture_default_str();
  command->add_option("--max-windows", options.max_windows, "Windows before giving up on stability")
      ->capture_default_str();
  command->add_option("--batch", options.batch, "Rows per request")->capture_default_str();
  command->add_flag("--binary", options.binary, "Send and receive tensors with the binary extension");
  command->callback([&runner] {
    runner = [] {
      options.concurrency.clear();
      std::stringstream stream(concurrency_text);
      std::string part;
      while (std::getline(stream, part, ',')) {
        try {
          options.concurrency.push_back(std::stoi(part));
        } catch (const std::exception&) {
          fail(ErrorCategory::usage,
               "--concurrency '" + concurrency_text + "': expected integers, e.g. 1,8,64");
        }
      }
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
      TextTable table(
          {"concurrency", "req/s", "inferences/s", "p50 ms", "p90 ms", "p99 ms", "errors", "stable"});
      for (const auto& level : levels) {
        char rps[32], ips[32], p50[32], p90[32], p99[32];
        std::snprintf(rps, sizeof rps, "%.0f", level.requests_per_s);
        std::snprintf(ips, sizeof ips, "%.0f", level.inferences_per_s);
        std::snprintf(p50, sizeof p50, "%.3f", level.p50_ms);
        std::snprintf(p90, sizeof p90, "%.3f", level.p90_ms);
        std::snprintf(p99, sizeof p99, "%.3f", level.p99_ms);
        table.add_row({std::to_string(level.concurrency), rps, ips, p50, p90, p99,
                       std::to_string(level.errors), level.stable ? "yes" : "no"});
      }
      std::cout << table.render();
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
