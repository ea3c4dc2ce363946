// Test data locations and a small subprocess runner for CLI tests.
#include "support/test-data.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace hearth::test {

std::string shared_dir() {
  if (const char* env = std::getenv("HEARTH_SHARED"); env && *env) return env;
  return HEARTH_SHARED_DEFAULT_DIR;
}
std::string shared_path(const std::string& rel) {
  return shared_dir() + "/" + rel;
}
std::string source_dir() {
  return HEARTH_SOURCE_DIR;
}
std::string binary_dir() {
  return HEARTH_BINARY_DIR;
}
std::string hearth_cli() {
  return binary_dir() + "/apps/cli/hearth";
}

namespace {
// The test process's folder, removed with everything in it when the process exits (test runs
// left one per process behind, up to 260 MB each: 100 GB of /tmp over a few hundred runs).
// HEARTH_KEEP_TEST_DIR=1 keeps it for a look after a failure; a forked child never removes it.
struct OwnedTempDir {
  std::string path;
  pid_t owner = getpid();
  OwnedTempDir() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/hearth-test-XXXXXX";
    if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  }
  OwnedTempDir(const OwnedTempDir&) = delete;
  OwnedTempDir& operator=(const OwnedTempDir&) = delete;
  ~OwnedTempDir() {
    const char* keep = std::getenv("HEARTH_KEEP_TEST_DIR");
    if (getpid() != owner || (keep && std::string(keep) == "1")) return;
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

std::string temp_dir() {
  static OwnedTempDir dir;
  return dir.path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

CommandResult run_command(const std::vector<std::string>& argv, const std::string& stdin_text) {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe(in_pipe) || pipe(out_pipe) || pipe(err_pipe)) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      close(fd);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  // Write stdin then close; outputs are drained with poll so large outputs cannot deadlock.
  size_t written = 0;
  fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  CommandResult r;
  bool in_open = true, out_open = true, err_open = true;
  if (stdin_text.empty()) {
    close(in_pipe[1]);
    in_open = false;
  }
  char buf[65536];
  while (out_open || err_open) {
    pollfd fds[3];
    int n = 0;
    int out_i = -1, err_i = -1, in_i = -1;
    if (out_open) {
      fds[n] = {out_pipe[0], POLLIN, 0};
      out_i = n++;
    }
    if (err_open) {
      fds[n] = {err_pipe[0], POLLIN, 0};
      err_i = n++;
    }
    if (in_open) {
      fds[n] = {in_pipe[1], POLLOUT, 0};
      in_i = n++;
    }
    if (poll(fds, nfds_t(n), -1) < 0) break;
    if (in_i >= 0 && (fds[in_i].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = write(in_pipe[1], stdin_text.data() + written, stdin_text.size() - written);
      if (w > 0) written += size_t(w);
      if (w < 0 || written == stdin_text.size()) {
        close(in_pipe[1]);
        in_open = false;
      }
    }
    auto drain = [&](int idx, int fd, std::string& dst, bool& open) {
      if (idx < 0 || !(fds[idx].revents & (POLLIN | POLLHUP | POLLERR))) return;
      ssize_t got = read(fd, buf, sizeof buf);
      if (got > 0)
        dst.append(buf, size_t(got));
      else {
        close(fd);
        open = false;
      }
    };
    drain(out_i, out_pipe[0], r.out, out_open);
    drain(err_i, err_pipe[0], r.err, err_open);
  }
  if (in_open) close(in_pipe[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace hearth::test
