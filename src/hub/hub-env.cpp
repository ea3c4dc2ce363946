// Environment lookup for the Hub client; defaults follow huggingface_hub's constants so both tools
// share one cache and one token file.
#include "hub/hub-env.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace hearth::hub {

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  size_t end = s.find_last_not_of(ws);
  s.erase(end == std::string::npos ? 0 : end + 1);
  return s;
}

std::string default_hf_home() {
  std::string xdg = env_or("XDG_CACHE_HOME", "");
  if (!xdg.empty()) return xdg + "/huggingface";
  return env_or("HOME", "/tmp") + "/.cache/huggingface";
}

}  // namespace

bool env_flag_is_true(const char* value) {
  if (!value) return false;
  std::string v;
  for (const char* p = value; *p; ++p) v += char(std::tolower(static_cast<unsigned char>(*p)));
  v = trim(v);
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

HubEnv hub_env_from_environment() {
  HubEnv env;
  env.endpoint = env_or("HF_ENDPOINT", "https://huggingface.co");
  while (!env.endpoint.empty() && env.endpoint.back() == '/') env.endpoint.pop_back();

  const std::string hf_home = env_or("HF_HOME", default_hf_home());
  env.cache_dir = env_or("HF_HUB_CACHE", env_or("HUGGINGFACE_HUB_CACHE", hf_home + "/hub"));

  if (std::string t = trim(env_or("HF_TOKEN", env_or("HUGGING_FACE_HUB_TOKEN", ""))); !t.empty()) {
    env.token = t;
    env.token_source = "HF_TOKEN";
  } else {
    const std::string path = env_or("HF_TOKEN_PATH", hf_home + "/token");
    std::ifstream in(path);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      env.token = trim(ss.str());
      if (!env.token.empty()) env.token_source = path;
    }
  }
  env.offline = env_flag_is_true(std::getenv("HF_HUB_OFFLINE"));
  return env;
}

}  // namespace hearth::hub
