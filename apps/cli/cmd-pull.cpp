// `hearth pull REPO[:QUANT]`: fetch a model from the Hugging Face Hub into the shared HF cache
// and print the local path to load. Transfer logic lives in src/hub; this file is only flags.
#include <cstdio>

#include "command.h"
#include "hub/progress.h"
#include "hub/pull.h"

namespace hearth::cli {
namespace {

struct PullArgs {
  std::string repo;
  std::string revision = "main";
  std::vector<std::string> include;
  bool quiet = false;
  int parallel = 4;
};

void run_pull(const PullArgs& a) {
  const hub::RepoSpec spec = check(hub::parse_repo_spec(a.repo));
  const hub::HubEnv env = hub::hub_env_from_environment();
  hub::PullOptions options;
  options.revision = a.revision;
  options.include = a.include;
  options.parallel = a.parallel;
  hub::PullResult result;
  {
    hub::Progress progress(hub::Progress::pick_mode(stderr, a.quiet), stderr);
    result = check(hub::pull(env, spec, options, &progress));
  }
  if (!a.quiet) {
    std::fprintf(stderr, "%s@%s: %zu file%s in %s%s\n", spec.repo_id.c_str(),
                 result.commit.substr(0, 12).c_str(), result.files.size(),
                 result.files.size() == 1 ? "" : "s", result.snapshot_dir.c_str(),
                 result.offline ? " (from the cache, offline)" : "");
  }
  // stdout: just the path to load, so `hearth run -m "$(hearth pull X)"` works.
  std::printf("%s\n", result.model_path.c_str());
}

void setup(CLI::App& root) {
  static PullArgs args;  // one per process, like the CLI11 app that refers to it
  auto* a = &args;
  auto* cmd = root.add_subcommand(
      "pull", "download a model from the Hugging Face Hub into the HF cache (HF_HUB_CACHE)");
  cmd->add_option("repo", a->repo, "ORG/NAME[:QUANT], e.g. TheBloke/Llama-2-7B-GGUF:Q4_K_M")
      ->required();
  cmd->add_option("--revision", a->revision, "branch, tag or commit (default main)");
  cmd->add_option("--include", a->include, "only files matching this glob (repeatable)");
  cmd->add_option("--parallel", a->parallel, "files downloaded at once (default 4)")
      ->check(CLI::Range(1, 16));
  cmd->add_flag("-q,--quiet", a->quiet, "no progress output");
  cmd->callback([a] { run_pull(*a); });
}

}  // namespace

HEARTH_REGISTER_COMMAND(80, setup);

}  // namespace hearth::cli
