// Resolution of -m/--repo-id to a local model path: a path that exists wins; ORG/NAME[:QUANT]
// goes through the Hugging Face cache (downloading unless HF_HUB_OFFLINE=1) via hearth_hub.
#include "model-arg.h"

#include <unistd.h>

#include "base/mapped-file.h"
#include "hub/progress.h"
#include "hub/pull.h"

namespace hearth::cli {

void add_model_options(CLI::App* cmd, ModelArg* arg) {
  cmd->add_option("-m,--model", arg->model,
                  "GGUF file, Hugging Face directory, or Hub repo id ORG/NAME[:QUANT]");
  cmd->add_option("--repo-id", arg->repo_id,
                  "Hugging Face Hub repo id ORG/NAME[:QUANT] (fetched into the HF cache)");
}

Result<std::string> resolve_model(const ModelArg& arg) {
  if (!arg.model.empty() && !arg.repo_id.empty())
    return Status::error("give either -m MODEL or --repo-id REPO, not both");
  if (!arg.model.empty() && (file_exists(arg.model) || is_directory(arg.model))) return arg.model;
  if (arg.model.empty() && arg.repo_id.empty())
    return Status::error(
        "no model given: use -m MODEL (a .gguf file or a model directory) or --repo-id ORG/NAME");
  const std::string& name = arg.repo_id.empty() ? arg.model : arg.repo_id;
  // -m only treats its value as a repo id when it has that shape, so a mistyped path still says
  // "no such file" instead of trying the network.
  if (arg.repo_id.empty() && !hub::looks_like_repo_spec(name))
    return Status::error(name + ": no such file or directory");
  auto spec = hub::parse_repo_spec(name);
  if (!spec.is_ok()) {
    if (arg.repo_id.empty()) return Status::error(name + ": no such file or directory");
    return spec.status();
  }
  const hub::HubEnv env = hub::hub_env_from_environment();
  // Progress goes to stderr so stdout stays the model's output.
  hub::Progress progress(hub::Progress::pick_mode(stderr, /*quiet=*/false), stderr);
  HEARTH_ASSIGN_OR_RETURN(hub::PullResult pulled, hub::pull(env, spec.value(), {}, &progress));
  return pulled.model_path;
}

}  // namespace hearth::cli
