// A real `ipj serve` process started the ways daemons and log pipelines start it: with standard descriptors
// closed (the signal pipe took their numbers, and the server's first log line "signalled" it to drain), and
// with its stderr going to a reader that goes away (SIGPIPE killed it).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "raw_http.hpp"
#include "running_server.hpp"

namespace ipj::serve {
namespace {

// Two seconds after start (the drain began within one before), the server still answers and stops on SIGTERM.
void expect_serving_after_two_seconds(testing::ServeProcess& server) {
  ASSERT_GT(server.port(), 0) << server.error_output();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  testing::RawConnection probe(server.port());
  ASSERT_TRUE(probe.connected());
  ASSERT_TRUE(probe.send(testing::get_request("/v2/health/ready")));
  EXPECT_EQ(testing::status_of(probe.read_response(5.0)), 200);
  EXPECT_EQ(server.signal_and_wait(SIGTERM, 30.0), 0);
}

TEST(ServeStreams, ClosedStandardDescriptorsDoNotDrainTheServer) {
  testing::TempDir work;
  write_repository(work.file("repo"), kContractConfig);
  int run = 0;
  for (const std::string closed : {"<&- 2>&- ", "<&- "}) {  // stdout carries "listening on": kept
    SCOPED_TRACE(closed);
    const std::string folder = work.file("run" + std::to_string(++run));  // its own serve.out
    std::filesystem::create_directories(folder);
    testing::ServeProcess server("--model-repo " + work.file("repo") + " --port 0 --no-energy", folder, 60.0,
                                 closed);
    expect_serving_after_two_seconds(server);
  }
}

TEST(ServeStreams, AStderrReaderThatGoesAwayDoesNotKillTheServer) {
  testing::TempDir work;
  write_repository(work.file("repo"), kContractConfig);
  const std::string fifo = work.file("log.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The reader takes one byte and exits; the server's later log lines (at the latest the drain's, after
  // SIGTERM) meet a pipe without a reader. It opens the FIFO first: the server's shell waits for it.
  std::thread reader([&] { testing::run_process("head -c 1 " + fifo + " >/dev/null"); });
  testing::ServeProcess server("--model-repo " + work.file("repo") + " --port 0 --no-energy", work.path(),
                               60.0, "2>" + fifo + " ");
  expect_serving_after_two_seconds(server);
  reader.join();
}

}  // namespace
}  // namespace ipj::serve
