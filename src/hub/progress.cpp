// Progress rendering. Bars redraw in place with ANSI cursor-up at most ten times a second; line
// mode prints one line per file every 5 s plus a final line, so CI logs stay short.
#include "hub/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace hearth::hub {

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string format_eta(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  long v = long(s + 0.5);
  char buf[32];
  if (v >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", v / 3600, v / 60 % 60, v % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", v / 60, v % 60);
  return buf;
}
}  // namespace

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

Progress::Mode Progress::pick_mode(std::FILE* out, bool quiet) {
  if (quiet) return Mode::kQuiet;
  return ::isatty(::fileno(out)) ? Mode::kBars : Mode::kLines;
}

Progress::Progress(Mode mode, std::FILE* out) : mode_(mode), out_(out) {}

Progress::~Progress() {
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ == Mode::kBars && drawn_lines_ > 0) redraw_locked(true);
}

Progress::Entry* Progress::find(const std::string& file) {
  for (auto& e : entries_) {
    if (e.file == file) return &e;
  }
  return nullptr;
}

Progress::Entry* Progress::find_or_add(const std::string& file) {
  if (Entry* e = find(file)) return e;
  entries_.push_back(Entry{});
  entries_.back().file = file;
  entries_.back().started = Clock::now();
  return &entries_.back();
}

std::string Progress::render(const Entry& e) const {
  const double elapsed = std::max(1e-3, seconds_since(e.started));
  const double speed = double(e.done - std::min(e.done, e.resumed)) / elapsed;
  std::string name = e.file.size() > 40 ? "..." + e.file.substr(e.file.size() - 37) : e.file;
  char buf[256];
  if (e.finished) {
    if (e.total == 0 && e.done == 0)  // nothing moved: a cached file
      std::snprintf(buf, sizeof buf, "%-40s %s", name.c_str(), e.status.c_str());
    else
      std::snprintf(buf, sizeof buf, "%-40s %s %s", name.c_str(),
                    human_bytes(double(std::max(e.done, e.total))).c_str(), e.status.c_str());
    return buf;
  }
  if (e.total == 0) {
    std::snprintf(buf, sizeof buf, "%-40s %s %s/s", name.c_str(),
                  human_bytes(double(e.done)).c_str(), human_bytes(speed).c_str());
    return buf;
  }
  const double frac = std::min(1.0, double(e.done) / double(e.total));
  const double eta = speed > 0 ? double(e.total - std::min(e.total, e.done)) / speed : NAN;
  if (mode_ == Mode::kBars) {
    const int width = 24;
    std::string bar(size_t(frac * width), '#');
    bar.resize(width, '.');
    std::snprintf(buf, sizeof buf, "%-40s [%s] %3.0f%% %s/%s %s/s ETA %s", name.c_str(),
                  bar.c_str(), frac * 100, human_bytes(double(e.done)).c_str(),
                  human_bytes(double(e.total)).c_str(), human_bytes(speed).c_str(),
                  format_eta(eta).c_str());
  } else {
    std::snprintf(buf, sizeof buf, "pulling %s: %.0f%% (%s of %s, %s/s, ETA %s)", e.file.c_str(),
                  frac * 100, human_bytes(double(e.done)).c_str(),
                  human_bytes(double(e.total)).c_str(), human_bytes(speed).c_str(),
                  format_eta(eta).c_str());
  }
  return buf;
}

void Progress::redraw_locked(bool force) {
  if (!force && seconds_since(last_draw_) < 0.1) return;
  last_draw_ = Clock::now();
  std::string out;
  if (drawn_lines_ > 0) out += "\x1b[" + std::to_string(drawn_lines_) + "F";  // back to the top
  for (const auto& e : entries_) out += "\x1b[2K" + render(e) + "\n";
  drawn_lines_ = int(entries_.size());
  std::fputs(out.c_str(), out_);
  std::fflush(out_);
}

void Progress::start(const std::string& file, uint64_t total, uint64_t already) {
  if (mode_ == Mode::kQuiet) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = find_or_add(file);
  e->total = total;
  e->done = e->resumed = already;
  e->started = e->last_line = Clock::now();
  e->finished = false;
  if (mode_ == Mode::kBars) {
    redraw_locked(true);
  } else {
    std::fprintf(out_, "pulling %s (%s%s)\n", file.c_str(),
                 total ? human_bytes(double(total)).c_str() : "size unknown",
                 already ? (", resuming at " + human_bytes(double(already))).c_str() : "");
    std::fflush(out_);
  }
}

void Progress::update(const std::string& file, uint64_t done) {
  if (mode_ == Mode::kQuiet) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = find(file);
  if (!e) return;
  e->done = done;
  if (mode_ == Mode::kBars) {
    redraw_locked(false);
  } else if (seconds_since(e->last_line) >= 5.0) {
    e->last_line = Clock::now();
    std::fprintf(out_, "%s\n", render(*e).c_str());
    std::fflush(out_);
  }
}

void Progress::finish(const std::string& file, bool ok, const std::string& note) {
  if (mode_ == Mode::kQuiet) return;
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = find_or_add(file);
  e->finished = true;
  e->status = !note.empty() ? note : (ok ? "done" : "failed");
  if (mode_ == Mode::kBars) {
    redraw_locked(true);
  } else {
    std::fprintf(out_, "%s %s\n", file.c_str(), e->status.c_str());
    std::fflush(out_);
  }
}

void Progress::message(const std::string& line) {
  if (mode_ == Mode::kQuiet) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ == Mode::kBars && drawn_lines_ > 0) {
    // Print above the bars: move up, write the note, then redraw the bars below it.
    std::fprintf(out_, "\x1b[%dF\x1b[2K%s\n", drawn_lines_, line.c_str());
    drawn_lines_ = 0;
    redraw_locked(true);
    return;
  }
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace hearth::hub
