// The Hub client's entry points: pull a model (list the repo, pick files, fetch them in
// parallel into the shared cache) or resolve it from the cache alone (HF_HUB_OFFLINE).
// Callers get a local path to load: the GGUF file, or the snapshot folder of a safetensors model.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "hub/file-fetch.h"
#include "hub/hub-env.h"
#include "hub/repo-spec.h"

namespace hearth::hub {

class Progress;

struct PullOptions {
  std::string revision = "main";
  std::vector<std::string> include;  // glob patterns; empty = the model's own files
  int parallel = 4;                  // files downloaded at once
  RetryPolicy retry;
};

struct PullResult {
  std::string commit;
  std::string snapshot_dir;
  std::vector<std::string> files;  // repo-relative paths now present in the snapshot
  std::string model_path;          // GGUF file, or snapshot_dir for a safetensors model
  bool offline = false;            // resolved from the cache without the network
};

struct RepoListing {
  std::string commit;
  std::vector<std::string> files;
};

// GET {endpoint}/api/models/{repo}/revision/{rev}: the commit sha and siblings[].rfilename.
Result<RepoListing> list_repo_files(const HubEnv& env, const std::string& repo_id,
                                    const std::string& revision, const RetryPolicy& retry);

// Online pull (falls back to the cache, with a note, when the endpoint cannot be reached and the
// revision is cached). With env.offline it is resolve_from_cache.
Result<PullResult> pull(const HubEnv& env, const RepoSpec& spec, const PullOptions& options,
                        Progress* progress);

// Cache-only resolution: refs/<revision> (or the commit itself) -> snapshot -> same selection
// rules over the files present there. Clear error when the repo or a needed file is absent.
Result<PullResult> resolve_from_cache(const HubEnv& env, const RepoSpec& spec,
                                      const PullOptions& options);

}  // namespace hearth::hub
