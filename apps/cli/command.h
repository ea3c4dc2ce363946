// How `hearth` subcommands plug in: each cmd-*.cpp registers a setup function that adds its
// CLI11 subcommand; main.cpp runs whichever was chosen. Adding a command = adding one file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace hearth::cli {

using CommandSetup = void (*)(CLI::App& root);

struct CommandRegistrar {
  CommandRegistrar(int order, CommandSetup setup);
};
std::vector<std::pair<int, CommandSetup>>& command_registry();

// Prints "hearth: error: <message>" (one line) and makes the process exit with `code`.
[[noreturn]] void fail(const Status& status, int code = 1);
[[noreturn]] void fail(const std::string& message, int code = 1);

// Ends the process with `code` once stdio is flushed, skipping every destructor: a command
// whose work is done and written need not wait for the engine's teardown (freeing each device
// allocation, the CUDA context, unmapping the model file: ~200 ms of a 7B start-up run), which
// the kernel reclaims at exit anyway. Files are written with system calls, so nothing pending is
// lost. Returns (the caller then unwinds normally) in sanitizer builds, where LeakSanitizer
// checks the teardown at exit.
void exit_without_teardown(int code);

// Unwraps a Result or fails with its message.
template <class T>
T check(Result<T> r) {
  if (!r.is_ok()) fail(r.status());
  return std::move(r).value();
}
inline void check(const Status& s) {
  if (!s.is_ok()) fail(s);
}

// Parses "1,2,3" (spaces allowed) into token ids; fails with a clear message on junk.
std::vector<int32_t> parse_token_list(const std::string& text);

}  // namespace hearth::cli

// order: position in `hearth --help` (lower first).
#define HEARTH_REGISTER_COMMAND(order, fn) \
  static ::hearth::cli::CommandRegistrar HEARTH_CONCAT(hearth_cmd_, __LINE__)(order, fn)
