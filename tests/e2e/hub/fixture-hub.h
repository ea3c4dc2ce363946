// Test-side handle on fixture-hub.py: builds repos from ../shared files in a temp folder, starts
// the server on a free loopback port with fault switches, reads its request log, stops it.
// A new fault = a new flag in fixture-hub.py, passed through `args`.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/test-data.h"

namespace hearth::test {

class FixtureHub {
 public:
  // root holds ORG/NAME/<files>. Returns nullptr (after a gtest failure) when it cannot start.
  static std::unique_ptr<FixtureHub> start(const std::string& root,
                                           const std::vector<std::string>& args = {});
  ~FixtureHub();
  void stop();

  const std::string& endpoint() const { return endpoint_; }
  std::vector<std::string> log_lines() const;
  // Requests whose log line starts with "METHOD /prefix".
  int count(const std::string& method, const std::string& path_prefix) const;

 private:
  pid_t pid_ = -1;
  std::string endpoint_, log_path_;
};

// Makes ROOT/ORG/NAME and copies files into it: {name in repo -> source path}.
void make_repo(const std::string& root, const std::string& repo_id,
               const std::map<std::string, std::string>& files);

// A fresh empty folder under the test temp dir.
std::string fresh_dir(const std::string& name);

// Runs the hearth CLI with extra environment variables (through /usr/bin/env).
CommandResult run_hearth(const std::map<std::string, std::string>& env,
                         const std::vector<std::string>& args);

}  // namespace hearth::test
