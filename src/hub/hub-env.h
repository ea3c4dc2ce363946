// Where the Hub and its cache are, read from the same environment variables huggingface_hub uses
// (HF_ENDPOINT, HF_HUB_CACHE, HF_HOME, HF_TOKEN, HF_HUB_OFFLINE). Add a variable here, not ad hoc.
#pragma once

#include <string>

namespace hearth::hub {

struct HubEnv {
  std::string endpoint;      // e.g. https://huggingface.co, no trailing slash
  std::string cache_dir;     // the hub cache root holding models--ORG--NAME folders
  std::string token;         // bearer token, empty when none is configured
  std::string token_source;  // "HF_TOKEN" or the token file path; for error messages
  bool offline = false;      // HF_HUB_OFFLINE: never touch the network
};

// Reads the environment: HF_ENDPOINT (default https://huggingface.co); HF_HUB_CACHE (legacy
// HUGGINGFACE_HUB_CACHE), default $HF_HOME/hub with HF_HOME defaulting to
// $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface; HF_TOKEN, else the file $HF_TOKEN_PATH or
// $HF_HOME/token; HF_HUB_OFFLINE in {1, true, yes, on}.
HubEnv hub_env_from_environment();

// True for the spellings huggingface_hub accepts as "on".
bool env_flag_is_true(const char* value);

}  // namespace hearth::hub
