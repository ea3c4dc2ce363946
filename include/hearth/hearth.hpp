// hearth.hpp: a thin header-only C++17 wrapper over hearth.h in namespace hearthpp: RAII handles,
// vector/string buffers, std::function streaming, hearthpp::Error exceptions. Wrap new calls alike.
#ifndef HEARTH_HEARTH_HPP_
#define HEARTH_HEARTH_HPP_

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hearth/hearth.h"

namespace hearthpp {

// Thrown for any status other than HEARTH_OK; what() is hearth_last_error() of the failed call.
class Error : public std::runtime_error {
 public:
  Error(hearth_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  hearth_status status() const { return status_; }

 private:
  hearth_status status_;
};

inline void check(hearth_status s) {
  if (s != HEARTH_OK) throw Error(s, hearth_last_error());
}

namespace detail {
// Calls fill(buffer, capacity, &size) once to size the buffer and again to fill it.
template <class T, class F>
std::vector<T> fetch(F&& fill, size_t extra = 0) {
  size_t n = 0;
  hearth_status s = fill(static_cast<T*>(nullptr), size_t(0), &n);
  if (s != HEARTH_OK && s != HEARTH_ERR_BUFFER_TOO_SMALL) check(s);
  std::vector<T> out(n + extra);
  check(fill(out.data(), out.size(), &n));
  out.resize(n);
  return out;
}
inline std::string fetch_string(const std::function<hearth_status(char*, size_t, size_t*)>& fill) {
  std::vector<char> v = fetch<char>(fill, 1);
  return std::string(v.begin(), v.end());
}
}  // namespace detail

inline hearth_sampling_params default_sampling() {
  hearth_sampling_params p;
  check(hearth_sampling_params_init(&p, sizeof p));
  return p;
}

class Model {
 public:
  explicit Model(const std::string& path_or_repo, const hearth_model_params* params = nullptr) {
    check(hearth_model_load(path_or_repo.c_str(), params, &m_));
  }
  Model(Model&& o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
  Model& operator=(Model&& o) noexcept {
    std::swap(m_, o.m_);
    return *this;
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() { hearth_model_free(m_); }

  hearth_model* get() const { return m_; }
  hearth_model_info info() const {
    hearth_model_info i{};
    i.struct_size = sizeof i;
    check(hearth_model_get_info(m_, &i));
    return i;
  }
  std::vector<int32_t> tokenize(const std::string& text,
                                uint32_t flags = HEARTH_TOKENIZE_ADD_SPECIAL) const {
    return detail::fetch<int32_t>([&](int32_t* b, size_t c, size_t* n) {
      return hearth_tokenize(m_, text.data(), text.size(), flags, b, c, n);
    });
  }
  std::string detokenize(const std::vector<int32_t>& ids, uint32_t flags = 0) const {
    return detail::fetch_string([&](char* b, size_t c, size_t* n) {
      return hearth_detokenize(m_, ids.data(), ids.size(), flags, b, c, n);
    });
  }
  std::vector<float> embed(const std::vector<int32_t>& ids) const {
    return detail::fetch<float>([&](float* b, size_t c, size_t* n) {
      return hearth_embed(m_, ids.data(), ids.size(), b, c, n);
    });
  }
  // messages: {role, content} pairs; chat_template as in hearth_chat_render (empty = model's).
  std::string render_chat(const std::vector<std::pair<std::string, std::string>>& messages,
                          bool add_generation_prompt = true,
                          const std::string& chat_template = "") const {
    std::vector<hearth_chat_message> msgs;
    for (const auto& m : messages) msgs.push_back({m.first.c_str(), m.second.c_str()});
    const char* tmpl = chat_template.empty() ? nullptr : chat_template.c_str();
    return detail::fetch_string([&](char* b, size_t c, size_t* n) {
      return hearth_chat_render(m_, tmpl, msgs.data(), msgs.size(), add_generation_prompt ? 1 : 0,
                                b, c, n);
    });
  }
  // render_chat's prompt as tokens, with special-token texts in messages kept as text (the
  // safe way to tokenize untrusted messages; flags: HEARTH_CHAT_CONTENT_SPECIAL to trust them).
  std::vector<int32_t> tokenize_chat(
      const std::vector<std::pair<std::string, std::string>>& messages,
      bool add_generation_prompt = true, const std::string& chat_template = "",
      uint32_t flags = 0) const {
    std::vector<hearth_chat_message> msgs;
    for (const auto& m : messages) msgs.push_back({m.first.c_str(), m.second.c_str()});
    const char* tmpl = chat_template.empty() ? nullptr : chat_template.c_str();
    return detail::fetch<int32_t>([&](int32_t* b, size_t c, size_t* n) {
      return hearth_chat_tokenize(m_, tmpl, msgs.data(), msgs.size(), add_generation_prompt ? 1 : 0,
                                  flags, b, c, n);
    });
  }

 private:
  hearth_model* m_ = nullptr;
};

// Return false from the callback to stop generating.
using TokenFn = std::function<bool(int32_t token, const std::string& piece)>;

class Session {
 public:
  explicit Session(const Model& model, int32_t n_ctx = 0,
                   const hearth_sampling_params& sampling = default_sampling()) {
    hearth_session_params p;
    check(hearth_session_params_init(&p, sizeof p));
    p.n_ctx = n_ctx;
    p.sampling = &sampling;
    check(hearth_session_create(model.get(), &p, &s_));
  }
  Session(Session&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Session& operator=(Session&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() { hearth_session_free(s_); }

  hearth_session* get() const { return s_; }
  void set_sampling(const hearth_sampling_params& p) { check(hearth_session_set_sampling(s_, &p)); }
  void reset() { check(hearth_session_reset(s_)); }
  void prefill(const std::vector<int32_t>& ids) {
    check(hearth_session_prefill(s_, ids.data(), ids.size()));
  }
  void decode(int32_t token) { check(hearth_session_decode(s_, token)); }
  int32_t sample() {
    int32_t t = -1;
    check(hearth_session_sample(s_, &t));
    return t;
  }
  std::vector<int32_t> history() const {
    return detail::fetch<int32_t>(
        [&](int32_t* b, size_t c, size_t* n) { return hearth_session_history(s_, b, c, n); });
  }
  // Streams through on_token (may be empty); returns the finish details.
  hearth_generate_result generate(const std::vector<int32_t>& prompt, int32_t max_tokens = -1,
                                  const TokenFn& on_token = nullptr,
                                  const std::vector<std::string>& stop = {}) {
    hearth_generate_params p;
    check(hearth_generate_params_init(&p, sizeof p));
    p.max_tokens = max_tokens;
    std::vector<const char*> stops;
    for (const auto& s : stop) stops.push_back(s.c_str());
    p.stop = stops.data();
    p.n_stop = stops.size();
    hearth_generate_result r{};
    r.struct_size = sizeof r;
    struct Ctx {
      const TokenFn* fn;
    } ctx{&on_token};
    auto trampoline = [](int32_t token, const char* piece, size_t len, void* ud) -> int32_t {
      const Ctx* c = static_cast<const Ctx*>(ud);
      try {
        return (*c->fn)(token, std::string(piece, len)) ? 1 : 0;
      } catch (...) {
        return 0;  // an exception must not cross the C library; stop generating instead
      }
    };
    check(hearth_session_generate(s_, prompt.data(), prompt.size(), &p,
                                  on_token ? +trampoline : nullptr, &ctx, &r));
    return r;
  }
  std::vector<unsigned char> save_state() {
    return detail::fetch<unsigned char>([&](unsigned char* b, size_t c, size_t* n) {
      return hearth_session_state_save(s_, b, c, n);
    });
  }
  void load_state(const std::vector<unsigned char>& blob) {
    check(hearth_session_state_load(s_, blob.data(), blob.size()));
  }

 private:
  hearth_session* s_ = nullptr;
};

}  // namespace hearthpp

#endif  // HEARTH_HEARTH_HPP_
