// The torchrun environment, the `ipj launch` launcher (real processes: output prefixes, failure and signal
// policy) and c10d collectives + gradient averaging between real ranks on 127.0.0.1.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "ipj/core/error.hpp"
#include "ipj/dist/environment.hpp"
#include "ipj/dist/launcher.hpp"
#include "support/test_support.hpp"

namespace ipj {
namespace {

using testing::ipj_binary;
using testing::run_process;

dist::EnvironmentLookup lookup_in(std::map<std::string, std::string> variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

ErrorCategory category_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.category();
  }
  return ErrorCategory::internal;
}

TEST(DistributedEnvironment, ReadsTorchrunVariablesWithLocalDefaults) {
  const auto environment = dist::read_distributed_environment(
      lookup_in({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29511"}}));
  EXPECT_EQ(environment.rank, 3);
  EXPECT_EQ(environment.world_size, 4);
  EXPECT_EQ(environment.local_rank, 3);  // one machine unless LOCAL_WORLD_SIZE says otherwise
  EXPECT_EQ(environment.local_world_size, 4);
  EXPECT_EQ(environment.master_addr, "10.0.0.1");
  EXPECT_EQ(environment.master_port, 29511);
  EXPECT_FALSE(environment.agent_store);  // rank 0 hosts the store unless a launcher says it does
  const auto under_launcher =
      dist::read_distributed_environment(lookup_in({{"RANK", "0"},
                                                    {"WORLD_SIZE", "2"},
                                                    {"MASTER_ADDR", "a"},
                                                    {"MASTER_PORT", "1"},
                                                    {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  EXPECT_TRUE(under_launcher.agent_store);
  const auto two_machines = dist::read_distributed_environment(lookup_in({{"RANK", "3"},
                                                                          {"WORLD_SIZE", "4"},
                                                                          {"LOCAL_RANK", "1"},
                                                                          {"LOCAL_WORLD_SIZE", "2"},
                                                                          {"MASTER_ADDR", "a"},
                                                                          {"MASTER_PORT", "1"}}));
  EXPECT_EQ(two_machines.local_rank, 1);
  EXPECT_EQ(two_machines.local_world_size, 2);
}

TEST(DistributedEnvironment, RefusesMissingOrInvalidVariablesNamingThem) {
  std::map<std::string, std::string> good{
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  for (const auto& [name, value] : std::map<std::string, std::string>{{"RANK", "2"},
                                                                      {"RANK", "-1"},
                                                                      {"WORLD_SIZE", "0"},
                                                                      {"WORLD_SIZE", "two"},
                                                                      {"MASTER_PORT", "70000"},
                                                                      {"MASTER_ADDR", ""},
                                                                      {"LOCAL_RANK", "5"}}) {
    auto variables = good;
    variables[name] = value;
    try {
      dist::read_distributed_environment(lookup_in(variables));
      ADD_FAILURE() << name << "=" << value << " accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::usage);
      EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
    }
  }
  auto missing = good;
  missing.erase("MASTER_PORT");
  EXPECT_EQ(category_of([&] { dist::read_distributed_environment(lookup_in(missing)); }),
            ErrorCategory::usage);
}

TEST(Launcher, ValidatesOptions) {
  dist::LaunchOptions options;
  options.command = {"true"};
  options.nproc_per_node = 0;
  EXPECT_EQ(category_of([&] { dist::validate(options); }), ErrorCategory::usage);
  options.nproc_per_node = 2;
  options.nnodes = 2;  // several machines need a fixed port
  EXPECT_EQ(category_of([&] { dist::validate(options); }), ErrorCategory::usage);
  options.master_port = 29500;
  options.node_rank = 2;
  EXPECT_EQ(category_of([&] { dist::validate(options); }), ErrorCategory::usage);
  options.node_rank = 1;
  EXPECT_NO_THROW(dist::validate(options));
}

TEST(Launcher, SetsTorchrunVariablesAndPrefixesOutput) {
  const auto result =
      run_process(ipj_binary() +
                  " launch --nproc-per-node 2 --nnodes 2 --node-rank 1 --master-port 29999 -- "
                  "sh -c 'echo vars $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_PORT; "
                  "echo to-stderr >&2'");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  // Global ranks 2 and 3 on node 1: neither is rank 0, so both stdouts carry a prefix.
  EXPECT_NE(result.out.find("[rank 2] vars 2 4 0 2 29999\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("[rank 3] vars 3 4 1 2 29999\n"), std::string::npos) << result.out;
  EXPECT_NE(result.err.find("[rank 2] to-stderr"), std::string::npos) << result.err;
  const auto single = run_process(ipj_binary() + " launch --nproc-per-node 2 -- sh -c 'echo rank $RANK'");
  EXPECT_EQ(single.exit_code, 0);
  EXPECT_NE(single.out.find("rank 0\n"), std::string::npos);  // rank 0's stdout unchanged
  EXPECT_EQ(single.out.find("[rank 0]"), std::string::npos);
  EXPECT_NE(single.out.find("[rank 1] rank 1\n"), std::string::npos) << single.out;
}

TEST(Launcher, OneFailedRankStopsTheJobWithItsStatus) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_process(ipj_binary() +
                                  " launch --nproc-per-node 3 --grace-s 2 -- sh -c "
                                  "'if [ $RANK = 1 ]; then sleep 0.3; exit 7; fi; exec sleep 100'");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 7) << result.err;
  EXPECT_LT(seconds, 20.0);
  EXPECT_NE(result.err.find("rank 1 exited with status 7"), std::string::npos) << result.err;
}

TEST(Launcher, RankThatIgnoresSigtermIsKilledAfterTheGracePeriod) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_process(ipj_binary() +
                                  " launch --nproc-per-node 2 --grace-s 1 -- sh -c "
                                  "'if [ $RANK = 0 ]; then exit 3; fi; trap \"\" TERM; sleep 100'");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_LT(seconds, 15.0);
}

TEST(Launcher, CommandThatCannotStartFailsClearly) {
  const auto result = run_process(ipj_binary() + " launch --nproc-per-node 2 -- /nonexistent/program");
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_NE(result.err.find("cannot run the command"), std::string::npos) << result.err;
}

TEST(Launcher, ForwardsSigtermToEveryRank) {
  testing::TempDir folder;
  const std::string marker = folder.file("stopped");
  // Each rank records the SIGTERM it receives in a file; the launcher gets SIGTERM once both ranks have set
  // their trap (a busy machine may take seconds to start them), at most 20 s after it starts.
  const std::string rank_script = folder.file("rank.sh");
  const std::string ready = folder.file("ready");
  std::ofstream(rank_script) << "trap 'echo $RANK >> " << marker << "; exit 0' TERM\necho $RANK >> " << ready
                             << "\nsleep 30 &\nwait\n";
  const std::string job_script = folder.file("job.sh");
  std::ofstream(job_script)
      << ipj_binary() << " launch --nproc-per-node 2 -- sh " << rank_script
      << " &\npid=$!\nfor i in $(seq 200); do [ \"$(cat " << ready
      << " 2>/dev/null | wc -l)\" -ge 2 ] && break; sleep 0.1; done\nkill -TERM $pid\nwait "
         "$pid\necho status $?\n";
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_process("sh " + job_script);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.out.find("status 143"), std::string::npos) << result.out << result.err;
  EXPECT_LT(seconds, 40.0);  // the ranks end at the signal, not after their 30 s sleep
  std::ifstream stopped(marker);
  std::string first, second;
  stopped >> first >> second;
  EXPECT_EQ(first + second == "01" || first + second == "10", true) << first << second;
}

TEST(ProcessGroup, CollectivesBetweenTwoRealRanks) {
  const auto result =
      run_process(ipj_binary() + " launch --nproc-per-node 2 -- " + IPJ_DIST_WORKER + " allreduce");
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
}

TEST(Launcher, HoldsTheAutomaticPortForTheWholeJob) {
  // Without --master-port the launcher hosts the rendezvous store itself: while the job runs the port is
  // bound (no other process can take it between choosing and using it) and the ranks are told to join as
  // clients.
  const std::string try_bind =
      "import os, socket\n"
      "s = socket.socket()\n"
      "try:\n"
      "    s.bind(('127.0.0.1', int(os.environ['MASTER_PORT']))); print('free')\n"
      "except OSError as error:\n"
      "    print('held', error.errno, os.environ['TORCHELASTIC_USE_AGENT_STORE'])\n";
  testing::TempDir folder;
  std::ofstream(folder.file("bind.py")) << try_bind;
  const auto automatic =
      run_process(ipj_binary() + " launch --nproc-per-node 1 -- /usr/bin/python3 " + folder.file("bind.py"));
  EXPECT_EQ(automatic.exit_code, 0) << automatic.err;
  EXPECT_NE(automatic.out.find("held 98 True"), std::string::npos) << automatic.out;  // EADDRINUSE
  const int fixed_port = dist::find_free_port("127.0.0.1");
  const auto fixed =
      run_process(ipj_binary() + " launch --nproc-per-node 1 --master-port " + std::to_string(fixed_port) +
                  " -- /usr/bin/python3 " + folder.file("bind.py"));
  EXPECT_EQ(fixed.exit_code, 0) << fixed.err;
  EXPECT_NE(fixed.out.find("free"), std::string::npos) << fixed.out;  // a given port is rank 0's to bind
}

TEST(ProcessGroup, CollectivesUnderAnAgentStoreHostedByPyTorch) {
  // What torchrun's static rendezvous does (Debian's torchrun 1.13 CLI itself fails on Python 3.11 in
  // Std.from_str): PyTorch's TCPStore is hosted by the launching process on MASTER_PORT and the ranks get
  // TORCHELASTIC_USE_AGENT_STORE=True, so rank 0 must join that store rather than bind the port again.
  testing::TempDir folder;
  std::ofstream(folder.file("agent.py"))
      << "import datetime, os, subprocess, sys\n"
         "import torch.distributed as dist\n"
         "store = dist.TCPStore('127.0.0.1', 0, None, True, datetime.timedelta(seconds=60), "
         "wait_for_workers=False)\n"
         "ranks = [subprocess.Popen([sys.argv[1], 'allreduce'], env=dict(os.environ, RANK=str(r), "
         "WORLD_SIZE='2', LOCAL_RANK=str(r), LOCAL_WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', "
         "MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE='True')) for r in range(2)]\n"
         "sys.exit(max(rank.wait() for rank in ranks))\n";
  const auto result = run_process("/usr/bin/python3 " + folder.file("agent.py") + " " + IPJ_DIST_WORKER);
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
}

TEST(ProcessGroup, ReducerAveragesGradientsLikeOneFullBatch) {
  const auto result =
      run_process(ipj_binary() + " launch --nproc-per-node 2 -- " + IPJ_DIST_WORKER + " reducer");
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
}

TEST(ProcessGroup, BroadcastWeightsAndAverageBatchNormStatistics) {
  const auto result =
      run_process(ipj_binary() + " launch --nproc-per-node 2 -- " + IPJ_DIST_WORKER + " module_sync");
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
}

TEST(ProcessGroup, WrongWorldSizeTimesOutWithAClearError) {
  // Two processes started, each told the job has three: rendezvous cannot complete.
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_process(ipj_binary() + " launch --nproc-per-node 2 -- env WORLD_SIZE=3 " +
                                  IPJ_DIST_WORKER + " join 3");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0);
  EXPECT_LT(seconds, 30.0);
  EXPECT_NE(result.err.find("could not join the job"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("WORLD_SIZE=3"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace ipj
