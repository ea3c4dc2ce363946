// File selection rules for `hearth pull` and --repo-id. Split GGUFs are grouped by their
// "-NNNNN-of-MMMMM.gguf" suffix and must be complete in the listing to be chosen.
#include "hub/file-select.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>

namespace hearth::hub {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string basename(const std::string& p) {
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool is_gguf(const std::string& p) {
  return ends_with(lower(p), ".gguf");
}

// Projector and other auxiliary GGUFs that ship beside the model and are never "the" model.
bool is_auxiliary_gguf(const std::string& p) {
  const std::string b = lower(basename(p));
  return b.rfind("mmproj", 0) == 0 || b.find("imatrix") != std::string::npos;
}

struct GgufGroup {
  std::string key;                 // path without the split suffix
  std::vector<std::string> parts;  // sorted; one entry when not split
  int expected = 1;
};

const std::regex& split_re() {
  static const std::regex re("^(.*)-([0-9]{5})-of-([0-9]{5})\\.gguf$", std::regex::icase);
  return re;
}

std::vector<GgufGroup> group_ggufs(const std::vector<std::string>& files) {
  std::map<std::string, GgufGroup> groups;
  for (const auto& f : files) {
    std::smatch m;
    if (std::regex_match(f, m, split_re())) {
      auto& g = groups[m[1].str()];
      g.key = m[1].str();
      g.expected = std::stoi(m[3].str());
      g.parts.push_back(f);
    } else {
      auto& g = groups[f];
      g.key = f;
      g.parts.push_back(f);
    }
  }
  std::vector<GgufGroup> out;
  for (auto& [k, g] : groups) {
    std::sort(g.parts.begin(), g.parts.end());
    out.push_back(std::move(g));
  }
  return out;
}

std::string available_quants(const std::vector<GgufGroup>& groups) {
  std::set<std::string> tags;
  for (const auto& g : groups) {
    std::string t = gguf_quant_tag(g.parts.front());
    tags.insert(t.empty() ? basename(g.parts.front()) : t);
  }
  std::string out;
  for (const auto& t : tags) out += (out.empty() ? "" : ", ") + t;
  return out;
}

Result<Selection> pick_gguf_group(const std::vector<GgufGroup>& groups, const std::string& what,
                                  const std::string& repo_id) {
  if (groups.size() != 1) {
    std::string names;
    for (const auto& g : groups) names += (names.empty() ? "" : ", ") + g.parts.front();
    return Status::error(repo_id + ": " + what + " matches several GGUF files (" + names +
                         "); name the one you want with " + repo_id + ":QUANT or --include");
  }
  const GgufGroup& g = groups.front();
  if (int(g.parts.size()) != g.expected)
    return Status::error(repo_id + ": split GGUF " + g.key + " lists " +
                         std::to_string(g.parts.size()) + " of " + std::to_string(g.expected) +
                         " parts");
  Selection sel;
  sel.files = g.parts;
  sel.primary = g.parts.front();
  return sel;
}

bool is_safetensors_model_file(const std::string& f) {
  if (f.find('/') != std::string::npos) return false;  // only the top-level model
  static const std::set<std::string> names = {"config.json",
                                              "generation_config.json",
                                              "model.safetensors.index.json",
                                              "tokenizer.json",
                                              "tokenizer.model",
                                              "tokenizer_config.json",
                                              "special_tokens_map.json",
                                              "added_tokens.json",
                                              "vocab.json",
                                              "merges.txt",
                                              "chat_template.jinja",
                                              "chat_template.json"};
  return names.count(f) || ends_with(f, ".safetensors");
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative matcher with single-star backtracking: linear-ish and bounded, no recursion.
  size_t p = 0, t = 0, star = std::string::npos, star_t = 0;
  auto class_match = [&](size_t& pi, char c) -> int {  // -1 malformed, 0 no, 1 yes
    size_t i = pi + 1;
    bool negate = i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^');
    if (negate) ++i;
    bool matched = false, first = true;
    for (; i < pattern.size() && (pattern[i] != ']' || first); ++i, first = false) {
      if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
        if (c >= pattern[i] && c <= pattern[i + 2]) matched = true;
        i += 2;
      } else if (pattern[i] == c) {
        matched = true;
      }
    }
    if (i >= pattern.size()) return -1;
    pi = i + 1;
    return matched != negate ? 1 : 0;
  };
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
      continue;
    }
    if (p < pattern.size() && pattern[p] == '[') {
      size_t np = p;
      int r = class_match(np, text[t]);
      if (r == 1) {
        p = np;
        ++t;
        continue;
      }
      if (r == -1 && pattern[p] == text[t]) {  // a lone '[' is literal
        ++p;
        ++t;
        continue;
      }
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
      continue;
    }
    if (star == std::string::npos) return false;
    p = star + 1;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string gguf_quant_tag(const std::string& path) {
  std::string stem = basename(path);
  std::smatch m;
  if (std::regex_match(stem, m, split_re()))
    stem = m[1].str();
  else if (ends_with(lower(stem), ".gguf"))
    stem = stem.substr(0, stem.size() - 5);
  static const std::regex tag_re("^(I?Q[0-9][A-Z0-9_]*|BF16|F16|F32|FP16|FP32)$",
                                 std::regex::icase);
  // The tag is the last '-' or '.' separated token that looks like one.
  std::string best;
  size_t start = 0;
  for (size_t i = 0; i <= stem.size(); ++i) {
    if (i == stem.size() || stem[i] == '-' || stem[i] == '.') {
      std::string tok = stem.substr(start, i - start);
      if (std::regex_match(tok, tag_re)) best = upper(tok);
      start = i + 1;
    }
  }
  return best;
}

bool name_has_quant(const std::string& path, const std::string& quant) {
  if (quant.empty()) return false;
  const std::string hay = lower(path), needle = lower(quant);
  auto is_sep = [](char c) { return c == '-' || c == '.' || c == '_' || c == '/'; };
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) {
    const bool left_ok = pos == 0 || is_sep(hay[pos - 1]);
    const size_t end = pos + needle.size();
    // '_' on the right would make Q4_K match Q4_K_M, so only '-', '.' and '/' end a tag.
    const bool right_ok =
        end == hay.size() || hay[end] == '-' || hay[end] == '.' || hay[end] == '/';
    if (left_ok && right_ok) return true;
  }
  return false;
}

Result<Selection> select_files(const std::vector<std::string>& listing, const std::string& quant,
                               const std::vector<std::string>& include,
                               const std::string& repo_id) {
  std::vector<std::string> ggufs;
  for (const auto& f : listing) {
    if (is_gguf(f) && !is_auxiliary_gguf(f)) ggufs.push_back(f);
  }

  Selection sel;
  if (!quant.empty()) {
    std::vector<std::string> matching;
    for (const auto& f : ggufs) {
      if (name_has_quant(f, quant)) matching.push_back(f);
    }
    if (matching.empty()) {
      const auto all = group_ggufs(ggufs);
      return Status::error(repo_id + ": no GGUF file for quantization '" + quant + "'" +
                           (all.empty() ? std::string(" (the repo has no GGUF files)")
                                        : " (available: " + available_quants(all) + ")"));
    }
    HEARTH_ASSIGN_OR_RETURN(sel,
                            pick_gguf_group(group_ggufs(matching), "'" + quant + "'", repo_id));
  }

  if (!include.empty()) {
    std::set<std::string> chosen(sel.files.begin(), sel.files.end());
    bool any = false;
    for (const auto& f : listing) {
      for (const auto& pat : include) {
        if (glob_match(pat, f)) {
          chosen.insert(f);
          any = true;
          break;
        }
      }
    }
    if (!any) {
      std::string pats;
      for (const auto& p : include) pats += (pats.empty() ? "'" : ", '") + p + "'";
      return Status::error(repo_id + ": no file matches --include " + pats);
    }
    sel.files.assign(chosen.begin(), chosen.end());
    if (sel.primary.empty()) {
      std::vector<std::string> picked;
      for (const auto& f : sel.files) {
        if (is_gguf(f) && !is_auxiliary_gguf(f)) picked.push_back(f);
      }
      auto groups = group_ggufs(picked);
      if (groups.size() == 1) sel.primary = groups.front().parts.front();
    }
    return sel;
  }
  if (!quant.empty()) return sel;

  const bool has_config = std::find(listing.begin(), listing.end(), "config.json") != listing.end();
  const bool has_safetensors =
      std::any_of(listing.begin(), listing.end(), [](const std::string& f) {
        return f.find('/') == std::string::npos && ends_with(f, ".safetensors");
      });
  if (has_config && has_safetensors) {
    for (const auto& f : listing) {
      if (is_safetensors_model_file(f)) sel.files.push_back(f);
    }
    std::sort(sel.files.begin(), sel.files.end());
    return sel;
  }
  auto groups = group_ggufs(ggufs);
  if (groups.empty())
    return Status::error(repo_id + ": no GGUF or safetensors model files in the repo");
  if (groups.size() > 1) {
    // Several quantizations and none named: Q4_K_M is the common default (as in Ollama).
    std::vector<GgufGroup> preferred;
    for (const auto& g : groups) {
      if (gguf_quant_tag(g.parts.front()) == "Q4_K_M") preferred.push_back(g);
    }
    if (preferred.size() == 1) return pick_gguf_group(preferred, "Q4_K_M", repo_id);
    return Status::error(repo_id + " has several GGUF files; pick one with " + repo_id +
                         ":QUANT (available: " + available_quants(groups) + ")");
  }
  return pick_gguf_group(groups, "the repo", repo_id);
}

}  // namespace hearth::hub
