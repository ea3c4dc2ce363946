// Where tests find things: the shared data folder (models, goldens, vocab vectors), the repo
// source, and the built `hearth` binary. Tests that need ../shared and cannot find it FAIL
// (never skip silently): CI always has it.
#pragma once

#include <string>
#include <vector>

namespace hearth::test {

std::string shared_dir();                         // $HEARTH_SHARED or the configured default
std::string shared_path(const std::string& rel);  // shared_dir() + "/" + rel
std::string source_dir();                         // repository root
std::string binary_dir();                         // CMake build root
std::string hearth_cli();                         // path of the built `hearth` executable
std::string temp_dir();  // a fresh folder for this test process, removed when it exits

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs argv (no shell), captures stdout/stderr, optional stdin text.
CommandResult run_command(const std::vector<std::string>& argv, const std::string& stdin_text = "");

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);

}  // namespace hearth::test
