// A last word from a crashing process: on SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT, ipj writes the signal, the
// thread and a backtrace to stderr, then dies by the same signal (same exit status, a core where enabled).
// Only async-signal-safe calls in the handler; off in sanitizer builds (theirs report better).
#pragma once

namespace ipj {

// Installs the handlers for the process (idempotent). `program` names the binary in the first line.
void install_crash_report(const char* program);

}  // namespace ipj
