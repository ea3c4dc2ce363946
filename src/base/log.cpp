// Logging: level from HEARTH_LOG_LEVEL, one line per message, stderr only (stdout is data).
#include "base/log.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace hearth {

namespace {
LogLevel level_from_env() {
  const char* v = std::getenv("HEARTH_LOG_LEVEL");
  if (!v) return LogLevel::kInfo;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(v, "warn")) return LogLevel::kWarn;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  if (!std::strcmp(v, "quiet")) return LogLevel::kQuiet;
  return LogLevel::kInfo;
}
std::atomic<int> g_level{int(level_from_env())};
std::mutex g_mutex;
}  // namespace

LogLevel log_level() {
  return LogLevel(g_level.load());
}
void set_log_level(LogLevel level) {
  g_level.store(int(level));
}

void log_message(LogLevel level, const std::string& message) {
  if (int(level) < g_level.load()) return;
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "hearth %s: %s\n", names[int(level)], message.c_str());
}

}  // namespace hearth
