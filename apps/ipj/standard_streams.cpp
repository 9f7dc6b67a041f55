// Standard descriptors at start and stdout's fate at exit (standard_streams.hpp). Linux and glibc; a stream
// error flag set by a write, not by a later read, is what standard_output_failure reports.
#include "standard_streams.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace ipj::cli {

void fill_closed_standard_descriptors() {
  for (int descriptor = STDIN_FILENO; descriptor <= STDERR_FILENO; ++descriptor) {
    if (::fcntl(descriptor, F_GETFD) != -1 || errno != EBADF) continue;
    // open() returns the lowest free number: this one, as the lower ones are open by now. A closed stdout
    // gets /dev/full: what a command prints there fails to write (exit 4 at the end) instead of vanishing.
    const char* device = descriptor == STDOUT_FILENO ? "/dev/full" : "/dev/null";
    const int opened = ::open(device, descriptor == STDIN_FILENO ? O_RDONLY : O_WRONLY);
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
  struct stat target {};
  const bool full_device = ::fstat(STDOUT_FILENO, &target) == 0 && S_ISCHR(target.st_mode) &&
                           major(target.st_rdev) == 1 && minor(target.st_rdev) == 7;
  if (full_device)
    return std::string(
               "cannot write standard output: it is /dev/full, or was closed when ipj started (ipj ") +
           "gives a closed stdout /dev/full); what ipj printed there was lost: send stdout to a file or " +
           "/dev/null (>/dev/null) to discard it";
  return std::string("cannot write standard output") +
         (cause != 0 ? std::string(": ") + std::strerror(cause) : std::string()) +
         "; what ipj printed there is incomplete: send stdout where it fits (a full disk, /dev/full)";
}

}  // namespace ipj::cli
