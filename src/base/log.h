// Minimal leveled logging to stderr. HEARTH_LOG_LEVEL=debug|info|warn|error (default info).
#pragma once

#include <cstdio>
#include <string>

namespace hearth {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kQuiet = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, const std::string& message);

inline void log_debug(const std::string& m) {
  log_message(LogLevel::kDebug, m);
}
inline void log_info(const std::string& m) {
  log_message(LogLevel::kInfo, m);
}
inline void log_warn(const std::string& m) {
  log_message(LogLevel::kWarn, m);
}
inline void log_error(const std::string& m) {
  log_message(LogLevel::kError, m);
}

}  // namespace hearth
