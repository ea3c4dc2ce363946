// The process clock of process-clock.h: one time point taken during static initialisation.
#include "process-clock.h"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

namespace hearth::cli {

namespace {

const std::chrono::steady_clock::time_point g_start = std::chrono::steady_clock::now();

// Seconds since boot at static initialisation minus the process's start time (field 22 of
// /proc/self/stat, in clock ticks since boot).
double measure_exec_to_start_ms() {
  timespec now{};
  if (clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i)
    if (i == 22) {
      const long hz = sysconf(_SC_CLK_TCK);
      if (hz <= 0) return -1;
      const double started = double(std::stoull(f)) / double(hz);
      return (double(now.tv_sec) + double(now.tv_nsec) * 1e-9 - started) * 1000.0;
    }
  return -1;
}

const double g_exec_to_start_ms = measure_exec_to_start_ms();

}  // namespace

double ms_since_start() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - g_start)
      .count();
}

double exec_to_start_ms() {
  return g_exec_to_start_ms;
}

}  // namespace hearth::cli
