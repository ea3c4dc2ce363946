// FixtureHub process management. Waits are bounded (the port file must appear within 15 s) and
// the server is stopped by its own pid only.
#include "fixture-hub.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/test-data.h"

namespace fs = std::filesystem;

namespace hearth::test {

std::string fresh_dir(const std::string& name) {
  const std::string dir = temp_dir() + "/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void make_repo(const std::string& root, const std::string& repo_id,
               const std::map<std::string, std::string>& files) {
  for (const auto& [name, src] : files) {
    const fs::path dst = fs::path(root) / repo_id / name;
    fs::create_directories(dst.parent_path());
    std::error_code ec;
    fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
    ASSERT_FALSE(ec) << "copy " << src << " -> " << dst << ": " << ec.message();
  }
}

std::unique_ptr<FixtureHub> FixtureHub::start(const std::string& root,
                                              const std::vector<std::string>& args) {
  static int serial = 0;
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(++serial);
  const std::string port_file = temp_dir() + "/hub-port-" + tag;
  auto hub = std::unique_ptr<FixtureHub>(new FixtureHub());
  hub->log_path_ = temp_dir() + "/hub-log-" + tag;
  std::vector<std::string> argv = {"/usr/bin/python3",
                                   source_dir() + "/tests/e2e/hub/fixture-hub.py",
                                   "--root",
                                   root,
                                   "--port-file",
                                   port_file,
                                   "--log",
                                   hub->log_path_};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  hub->pid_ = pid;
  for (int i = 0; i < 300; ++i) {  // up to 15 s for python to start
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      hub->endpoint_ = "http://127.0.0.1:" + std::to_string(port);
      return hub;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      hub->pid_ = -1;
      ADD_FAILURE() << "fixture hub exited at start (status " << status << ")";
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "fixture hub did not report its port within 15 s";
  return nullptr;
}

FixtureHub::~FixtureHub() {
  stop();
}

void FixtureHub::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::vector<std::string> FixtureHub::log_lines() const {
  std::vector<std::string> lines;
  std::ifstream in(log_path_);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int FixtureHub::count(const std::string& method, const std::string& path_prefix) const {
  int n = 0;
  const std::string want = method + " " + path_prefix;
  for (const auto& l : log_lines()) {
    if (l.rfind(want, 0) == 0) ++n;
  }
  return n;
}

CommandResult run_hearth(const std::map<std::string, std::string>& env,
                         const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/env"};
  for (const auto& [k, v] : env) argv.push_back(k + "=" + v);
  argv.push_back(hearth_cli());
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv);
}

}  // namespace hearth::test
