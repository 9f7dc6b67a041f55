// Loopback HTTP at the socket level for the serving tests: what well-behaved clients (cpp-httplib) cannot do
// on purpose (pipelining, trickling, idling, half-sent bodies), plus /proc readings of a server process.
#pragma once

#include <string>
#include <vector>

namespace ipj::testing {

// A blocking TCP connection to 127.0.0.1:port (every read bounded by a timeout); closed on destruction.
// `source`: the local address to connect from, e.g. "127.0.0.2" (all of 127/8 is loopback on Linux), so one
// test can act as several clients; empty = the kernel's choice (127.0.0.1).
class RawConnection {
 public:
  explicit RawConnection(int port, const std::string& source = "");
  ~RawConnection();
  RawConnection(RawConnection&& other) noexcept;
  RawConnection& operator=(RawConnection&&) = delete;
  RawConnection(const RawConnection&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Sends all bytes; false when the peer closed or reset.
  bool send(const std::string& bytes);
  // Reads one HTTP response (headers + Content-Length body); "" on close, reset or timeout.
  std::string read_response(double timeout_s = 5.0);
  // True when the server closes the connection (EOF or reset) within timeout_s; data it sends is skipped.
  bool closed_within(double timeout_s);

 private:
  int fd_ = -1;
  std::string pending_;  // bytes read past the last response
};

// "HTTP/1.1 200 OK\r\n..." -> 200; -1 when it is not a status line.
int status_of(const std::string& response);
// The body of a response read by read_response().
std::string body_of(const std::string& response);
// The value of the sample named `series` (name and labels, e.g. `x{a="b"}`) in Prometheus text, or -1 if
// absent.
double sample_value(const std::string& metrics, const std::string& series);
// A GET request (keep-alive).
std::string get_request(const std::string& path);
// A POST request with a JSON body (keep-alive).
std::string post_request(const std::string& path, const std::string& body,
                         const std::string& content_type = "application/json");

// A real `ipj serve` process (stdout and stderr to files in `folder`); the constructor waits until it prints
// "listening on HOST:PORT" (port() > 0) or exits (port() == 0, see error_output()).
class ServeProcess {
 public:
  // `launcher`: words before the binary (e.g. "env -u IPJ_STATIC_THREADS taskset -c 0,1 "), each exec'ing the
  // next, so pid() is the server's.
  ServeProcess(const std::string& arguments, const std::string& folder, double start_timeout_s = 60.0,
               const std::string& launcher = "");
  ~ServeProcess();  // SIGKILL if still running
  int pid() const { return pid_; }
  int port() const { return port_; }
  std::string error_output() const;
  // Sends `signal` and waits for the exit; the exit code, or -1 if still running after timeout_s.
  int signal_and_wait(int signal, double timeout_s);

 private:
  int pid_ = -1, port_ = 0;
  std::string folder_;
};

// From /proc/<pid>/status: resident set (VmRSS) and its peak (VmHWM) in KiB, and the thread count.
struct ProcessFigures {
  long rss_kib = -1, peak_rss_kib = -1, threads = -1;
};
ProcessFigures process_figures(int pid);

}  // namespace ipj::testing
