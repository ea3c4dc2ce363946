// `hearth`: the command-line front end. Subcommands live in cmd-*.cpp and register themselves.
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/gpu-backend.h"
#include "base/cpu-features.h"
#include "base/log.h"
#include "base/process-memory.h"
#include "command.h"
#include "kernels/cpu/kernel-table.h"

namespace hearth::cli {

namespace {
struct ExitRequest {
  int code;
};
}  // namespace

CommandRegistrar::CommandRegistrar(int order, CommandSetup setup) {
  command_registry().emplace_back(order, setup);
}

std::vector<std::pair<int, CommandSetup>>& command_registry() {
  static std::vector<std::pair<int, CommandSetup>> registry;
  return registry;
}

void fail(const Status& status, int code) {
  fail(status.message(), code);
}

void fail(const std::string& message, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "hearth: error: %s\n", message.c_str());
  throw ExitRequest{code};
}

// LeakSanitizer's check runs from an atexit handler, which _exit would skip.
#if defined(__SANITIZE_ADDRESS__)
#define HEARTH_CLI_LEAK_CHECKED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define HEARTH_CLI_LEAK_CHECKED 1
#endif
#endif

void exit_without_teardown(int code) {
#ifndef HEARTH_CLI_LEAK_CHECKED
  std::fflush(nullptr);
  _exit(code);
#else
  (void)code;
#endif
}

std::vector<int32_t> parse_token_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',' || text[i] == '\n')) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    while (j < text.size() && text[j] != ',' && text[j] != ' ' && text[j] != '\n') ++j;
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (errno || !end || *end || v < 0 || v > INT32_MAX)
      fail("--tokens: '" + item + "' is not a token id (expected comma-separated integers)");
    ids.push_back(int32_t(v));
    i = j;
  }
  if (ids.empty()) fail("--tokens: no token ids given");
  return ids;
}

namespace {

// llama.cpp's multi-letter single-dash spellings, which CLI11 does not accept as names, as the
// long options they stand for (an argument that is exactly one of these tokens).
void map_llama_aliases(int argc, char** argv) {
  static char cache_type_k[] = "--cache-type-k";
  static char cache_type_v[] = "--cache-type-v";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return;
    if (std::strcmp(argv[i], "-ctk") == 0) argv[i] = cache_type_k;
    if (std::strcmp(argv[i], "-ctv") == 0) argv[i] = cache_type_v;
  }
}

}  // namespace

}  // namespace hearth::cli

int main(int argc, char** argv) {
  using namespace hearth::cli;
  hearth::log_debug(hearth::limit_huge_pages_to_advised_regions());
  CLI::App app{"hearth: run large language models locally"};
  app.require_subcommand(1);
  // What a bug report needs beside the version: the CPU's features, the kernel table this
  // process runs (HEARTH_ISA may cap it) and whether the CUDA backend is built in.
  app.set_version_flag("--version", [] {
    return std::string("hearth 0.1.0\ncpu: ") + hearth::cpu_features().summary() +
           "; kernels: " + hearth::kernels::active_kernel_table().name +
           "\ncuda: " + (hearth::gpu_backend_compiled() ? "built in" : "not built");
  });
  auto& registry = command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : registry) setup(app);
  map_llama_aliases(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ExitRequest& r) {
    return r.code;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "hearth: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
