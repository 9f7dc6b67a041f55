// Socket-level loopback HTTP client and /proc readings for the serving tests.
#include "raw_http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "support/test_support.hpp"

namespace ipj::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Waits until fd is readable; false on timeout.
bool readable_within(int fd, double timeout_s) {
  pollfd entry{fd, POLLIN, 0};
  const int milliseconds = static_cast<int>(timeout_s * 1000.0);
  return ::poll(&entry, 1, milliseconds < 0 ? 0 : milliseconds) > 0;
}

}  // namespace

RawConnection::RawConnection(int port, const std::string& source) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  if (!source.empty()) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_port = 0;
    if (::inet_pton(AF_INET, source.c_str(), &local.sin_addr) != 1 ||
        ::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

RawConnection::RawConnection(RawConnection&& other) noexcept
    : fd_(other.fd_), pending_(std::move(other.pending_)) {
  other.fd_ = -1;
}

bool RawConnection::send(const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t written = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (written <= 0) return false;
    sent += static_cast<std::size_t>(written);
  }
  return true;
}

std::string RawConnection::read_response(double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  auto left = [&] { return std::chrono::duration<double>(deadline - Clock::now()).count(); };
  std::size_t header_end = std::string::npos;
  std::size_t total = 0;
  for (;;) {
    if (header_end == std::string::npos) {
      header_end = pending_.find("\r\n\r\n");
      if (header_end != std::string::npos) {
        std::size_t length = 0;
        std::string lower = pending_.substr(0, header_end);
        for (char& c : lower)
          c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const std::size_t at = lower.find("content-length:");
        if (at != std::string::npos) length = std::stoul(lower.substr(at + 15));
        total = header_end + 4 + length;
      }
    }
    if (header_end != std::string::npos && pending_.size() >= total) {
      std::string response = pending_.substr(0, total);
      pending_.erase(0, total);
      return response;
    }
    if (left() <= 0 || !readable_within(fd_, left())) return "";
    char chunk[65536];
    const ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
    if (got <= 0) return "";
    pending_.append(chunk, static_cast<std::size_t>(got));
  }
}

bool RawConnection::closed_within(double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0 || !readable_within(fd_, left)) return false;
    char chunk[4096];
    const ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
    if (got <= 0) return true;
  }
}

int status_of(const std::string& response) {
  if (response.compare(0, 9, "HTTP/1.1 ") != 0 && response.compare(0, 9, "HTTP/1.0 ") != 0) return -1;
  return std::atoi(response.c_str() + 9);
}

double sample_value(const std::string& metrics, const std::string& series) {
  const std::size_t at = metrics.find("\n" + series + " ");
  if (at == std::string::npos) return -1.0;
  return std::stod(metrics.substr(at + series.size() + 2));
}

std::string body_of(const std::string& response) {
  const std::size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

std::string get_request(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
}

std::string post_request(const std::string& path, const std::string& body, const std::string& content_type) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

ServeProcess::ServeProcess(const std::string& arguments, const std::string& folder, double start_timeout_s,
                           const std::string& launcher)
    : folder_(folder) {
  const std::string command = launcher + ipj_binary() + " serve " + arguments;
  pid_ = ::fork();
  if (pid_ == 0) {
    const int out = ::open((folder + "/serve.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open((folder + "/serve.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(start_timeout_s);
  while (Clock::now() < deadline) {
    std::ifstream out(folder + "/serve.out");
    std::string word, address;
    if (out >> word >> word >> address) {
      port_ = std::atoi(address.substr(address.rfind(':') + 1).c_str());
      return;
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string ServeProcess::error_output() const {
  std::ifstream err(folder_ + "/serve.err");
  return std::string(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
}

int ServeProcess::signal_and_wait(int signal, double timeout_s) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, signal);
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

ProcessFigures process_figures(int pid) {
  ProcessFigures figures;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string key;
    long value = -1;
    fields >> key >> value;
    if (key == "VmRSS:") figures.rss_kib = value;
    if (key == "VmHWM:") figures.peak_rss_kib = value;
    if (key == "Threads:") figures.threads = value;
  }
  return figures;
}

}  // namespace ipj::testing
