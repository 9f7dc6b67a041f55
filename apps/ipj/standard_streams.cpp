// Standard descriptors at start and stdout's fate at exit (standard_streams.hpp). Linux and glibc; a stream
// error flag set by a write, not by a later read, is what standard_output_failure reports.
#include "standard_streams.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace ipj::cli {

void fill_closed_standard_descriptors() {
  for (int descriptor = STDIN_FILENO; descriptor <= STDERR_FILENO; ++descriptor) {
    if (::fcntl(descriptor, F_GETFD) != -1 || errno != EBADF) continue;
    // open() returns the lowest free number: this one, as the lower ones are open by now
    const int opened = ::open("/dev/null", descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != descriptor) {
      ::dup2(opened, descriptor);
      ::close(opened);
    }
  }
}

std::optional<std::string> standard_output_failure() {
  errno = 0;
  std::cout.flush();
  const bool cpp_failed = !std::cout.good();
  const bool c_failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0;
  if (!cpp_failed && !c_failed) return std::nullopt;
  const int cause = errno;
  return std::string("cannot write standard output") +
         (cause != 0 ? std::string(": ") + std::strerror(cause) : std::string()) +
         "; what ipj printed there is incomplete: send stdout where it fits (a full disk, /dev/full)";
}

}  // namespace ipj::cli
