// Download progress for people: one redrawn bar per file (size, speed, ETA) on a terminal, plain
// lines every few seconds when stderr is a pipe or log, nothing with --quiet. Thread-safe: the
// parallel downloaders all report into one reporter. Another style = another Mode.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace hearth::hub {

class Progress {
 public:
  enum class Mode { kBars, kLines, kQuiet };
  // kBars when `out` is a terminal, else kLines; `quiet` forces kQuiet.
  static Mode pick_mode(std::FILE* out, bool quiet);

  explicit Progress(Mode mode, std::FILE* out = stderr);
  ~Progress();

  // total may be 0 when unknown; already = bytes resumed from a partial file.
  void start(const std::string& file, uint64_t total, uint64_t already);
  void update(const std::string& file, uint64_t done);
  void finish(const std::string& file, bool ok, const std::string& note = "");
  void message(const std::string& line);  // a one-off note ("waiting for another process")

 private:
  struct Entry {
    std::string file;
    uint64_t total = 0, done = 0, resumed = 0;
    std::chrono::steady_clock::time_point started, last_line;
    bool finished = false;
    std::string status;
  };
  Entry* find(const std::string& file);
  Entry* find_or_add(const std::string& file);  // a new entry starts its clock now
  std::string render(const Entry& e) const;
  void redraw_locked(bool force);

  Mode mode_;
  std::FILE* out_;
  std::mutex mu_;
  std::vector<Entry> entries_;
  int drawn_lines_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

// "12.3 MiB" style sizes for messages.
std::string human_bytes(double bytes);

}  // namespace hearth::hub
