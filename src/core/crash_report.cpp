// Fatal-signal report: signal name, thread id and the frames glibc's backtrace() finds, written with write(2)
// only (no allocation: the heap may be what broke). Frames of ipj itself carry names because the ipj binary
// exports its symbols (apps/ipj/CMakeLists.txt); otherwise `addr2line -e ipj +offset` on the same build.
#include "ipj/core/crash_report.hpp"

#include <execinfo.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>

namespace ipj {
namespace {

const char* crash_program = "ipj";
// Set at install under a finite `ulimit -v`: there a stack or a library mapping that cannot grow ends in
// SIGSEGV or SIGABRT with no bug involved, and the report says so instead of asking for a bug report.
char address_space_note[256] = "";

void write_text(const char* text) {
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, text, std::strlen(text));
}

void write_number(long value) {
  char digits[24];
  int length = 0;
  const bool negative = value < 0;
  unsigned long magnitude =
      negative ? 0UL - static_cast<unsigned long>(value) : static_cast<unsigned long>(value);
  do {
    digits[length++] = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude > 0 && length < 22);
  if (negative) digits[length++] = '-';
  char text[24];
  for (int index = 0; index < length; ++index)
    text[index] = digits[length - 1 - index];
  text[length] = '\0';
  write_text(text);
}

const char* signal_name(int signal_number) {
  switch (signal_number) {
    case SIGSEGV:
      return "SIGSEGV (invalid memory access)";
    case SIGBUS:
      return "SIGBUS (bus error)";
    case SIGFPE:
      return "SIGFPE (arithmetic error)";
    case SIGILL:
      return "SIGILL (illegal instruction: a kernel built for another CPU?)";
    case SIGABRT:
      return "SIGABRT (abort: an assertion or std::terminate)";
    default:
      return "fatal signal";
  }
}

void on_fatal_signal(int signal_number) {
  write_text("\n");
  write_text(crash_program);
  write_text(": crashed: ");
  write_text(signal_name(signal_number));
  write_text(" in thread ");
  write_number(static_cast<long>(::syscall(SYS_gettid)));
  write_text(" of process ");
  write_number(static_cast<long>(::getpid()));
  if (address_space_note[0] != '\0') {
    write_text(address_space_note);
  } else {
    write_text(". This is a bug in ipj or a library under it; please report it with this backtrace:\n");
  }
  void* frames[64];  // the innermost frames: this handler, the signal trampoline, then the faulting code
  const int count = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, count, STDERR_FILENO);
  write_text("(end of backtrace)\n");
  // SA_RESETHAND restored the default action: dying by the same signal keeps the exit status and core.
  ::raise(signal_number);
}

}  // namespace

void install_crash_report(const char* program) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  (void)program;
#else
  static bool installed = false;
  if (installed) return;
  installed = true;
  if (program != nullptr) crash_program = program;
  rlimit address_space{};
  if (::getrlimit(RLIMIT_AS, &address_space) == 0 && address_space.rlim_cur != RLIM_INFINITY) {
    std::snprintf(
        address_space_note, sizeof address_space_note,
        ". ulimit -v (RLIMIT_AS) holds this process to %llu MiB of address space, and a stack or "
        "mapping that cannot grow under it ends like this: raise ulimit -v (or unset it) and retry; "
        "report it with this backtrace if it recurs without the limit:\n",
        static_cast<unsigned long long>(address_space.rlim_cur >> 20));
  }
  void* warm_up[1];
  ::backtrace(warm_up, 1);  // loads libgcc's unwinder now: the first call allocates, a handler must not
  // Its own stack, so a stack overflow in the main thread is reported too.
  static char alternate_stack[64 * 1024];
  stack_t stack{};
  stack.ss_sp = alternate_stack;
  stack.ss_size = sizeof alternate_stack;
  ::sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  action.sa_flags = SA_RESETHAND | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  for (const int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    ::sigaction(signal_number, &action, nullptr);
#endif
}

}  // namespace ipj
