// Shared helpers of the C API tests: the golden model paths, a once-per-process model handle, and
// small wrappers for the size-then-fill buffer calls. Add helpers here, not per test file.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hearth/hearth.h"
#include "support/golden-data.h"
#include "support/test-data.h"

namespace hearth::test {

inline std::string tiny_gguf() {
  return shared_path("goldens/llama2-tiny/llama2-tiny-bf16.gguf");
}
inline const Golden& tiny_golden() {
  static const Golden g = load_golden(shared_path("goldens/llama2-tiny"));
  return g;
}

// One loaded llama2-tiny for the whole test process (the model is immutable and shareable).
inline hearth_model* tiny_model() {
  static hearth_model* model = [] {
    hearth_model* m = nullptr;
    const hearth_status s = hearth_model_load(tiny_gguf().c_str(), nullptr, &m);
    EXPECT_EQ(s, HEARTH_OK) << hearth_last_error();
    return m;
  }();
  return model;
}

inline hearth_session* new_session(hearth_model* model, int32_t n_ctx = 128,
                                   float temperature = 0.0f, uint64_t seed = 1) {
  hearth_sampling_params sp;
  EXPECT_EQ(hearth_sampling_params_init(&sp, sizeof sp), HEARTH_OK);
  sp.temperature = temperature;
  sp.seed = seed;
  hearth_session_params p;
  EXPECT_EQ(hearth_session_params_init(&p, sizeof p), HEARTH_OK);
  p.n_ctx = n_ctx;
  p.sampling = &sp;
  hearth_session* s = nullptr;
  EXPECT_EQ(hearth_session_create(model, &p, &s), HEARTH_OK) << hearth_last_error();
  return s;
}

// Generates up to max_tokens (EOS ignored) after `prompt`, returning the streamed ids.
inline std::vector<int32_t> generate_ids(hearth_session* s, const std::vector<int32_t>& prompt,
                                         int32_t max_tokens) {
  hearth_generate_params gp;
  EXPECT_EQ(hearth_generate_params_init(&gp, sizeof gp), HEARTH_OK);
  gp.max_tokens = max_tokens;
  gp.ignore_eos = 1;
  std::vector<int32_t> ids;
  auto cb = [](int32_t token, const char*, size_t, void* ud) -> int32_t {
    if (token >= 0) static_cast<std::vector<int32_t>*>(ud)->push_back(token);
    return 1;
  };
  const hearth_status st =
      hearth_session_generate(s, prompt.data(), prompt.size(), &gp, cb, &ids, nullptr);
  EXPECT_EQ(st, HEARTH_OK) << hearth_last_error();
  return ids;
}

inline std::vector<unsigned char> save_state(hearth_session* s) {
  size_t size = 0;
  EXPECT_EQ(hearth_session_state_save(s, nullptr, 0, &size), HEARTH_ERR_BUFFER_TOO_SMALL);
  std::vector<unsigned char> blob(size);
  EXPECT_EQ(hearth_session_state_save(s, blob.data(), blob.size(), &size), HEARTH_OK)
      << hearth_last_error();
  return blob;
}

inline std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return std::vector<int32_t>(v.begin() + long(from), v.begin() + long(to));
}

}  // namespace hearth::test
