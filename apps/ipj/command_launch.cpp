// `ipj launch -- CMD ARGS...`: starts the local ranks of a data-parallel job as torchrun does and exits with
// the job's status (docs/DISTRIBUTED.md).
#include <iostream>

#include "cli_support.hpp"
#include "ipj/dist/launcher.hpp"

namespace ipj::cli {

CLI::App* register_launch_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "launch",
      "Start N local ranks of a data-parallel job with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, "
      "MASTER_ADDR, MASTER_PORT set (torchrun's convention); stop them all when one fails\n"
      "Example: ipj launch --nproc-per-node 2 -- ipj train --distributed --model mlp --epochs 1 --json");
  static dist::LaunchOptions options;
  static bool json = false;
  command->add_option("--nproc-per-node", options.nproc_per_node, "Ranks to start on this machine")
      ->check(positive_integer(1024))
      ->capture_default_str();
  command->add_option("--nnodes", options.nnodes, "Machines in the job")
      ->check(positive_integer(100000))
      ->capture_default_str();
  command->add_option("--node-rank", options.node_rank, "This machine's index, 0 .. nnodes-1")
      ->check(non_negative_integer(99999))
      ->capture_default_str();
  command->add_option("--master-addr", options.master_addr, "Address of the machine that runs rank 0")
      ->capture_default_str();
  command
      ->add_option("--master-port", options.master_port,
                   "Rendezvous port on the master (0: a free port, single machine only)")
      ->check(non_negative_integer(65535))
      ->capture_default_str();
  command
      ->add_option("--grace-s", options.grace_s,
                   "After a failure or a signal: seconds between SIGTERM and SIGKILL to the ranks")
      ->check(finite_range(0.0, 3600.0))
      ->capture_default_str();
  command->add_flag("--json", json, "After the job, print a JSON summary on stderr");
  command->add_option("command", options.command, "The command every rank runs, after --")->required();
  command->callback([&runner] {
    runner = [] {
      const dist::LaunchResult result = dist::run_launch(options);
      if (result.exit_code != 0 || json) std::cerr << result.summary << std::endl;
      if (json)
        std::cerr << Json{{"exit_code", result.exit_code},
                          {"failed_rank", result.failed_rank < 0 ? Json(nullptr) : Json(result.failed_rank)},
                          {"master_port", result.master_port},
                          {"summary", result.summary}}
                         .dump()
                  << std::endl;
      return result.exit_code;
    };
  });
  return command;
}

}  // namespace ipj::cli
