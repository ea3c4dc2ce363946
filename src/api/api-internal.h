// What the C API's opaque handles hold, and the boundary helpers every hearth_* call uses: the
// thread-local last error, status mapping, and size-tagged struct copying. New handles go here.
#pragma once

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"
#include "hearth/hearth.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "sampling/sampler.h"

struct hearth_model {
  std::shared_ptr<const hearth::Engine> engine;
  std::string arch_name;  // kept here so hearth_model_info can hand out a stable pointer
};

struct hearth_session {
  std::shared_ptr<const hearth::Engine> engine;
  std::unique_ptr<hearth::Session> session;
  hearth::SamplingParams sampling;
  std::unique_ptr<hearth::Sampler> sampler;  // the step-by-step API's sampler
  // Conversation tokens not yet in the KV cache: generate() samples its last token without
  // evaluating it, so it waits here until the next prefill/decode/generate computes it.
  std::vector<int32_t> pending;
  std::vector<float> logits;  // of the last evaluated token
  bool logits_valid = false;
  std::shared_ptr<const hearth::Grammar> output_grammar;  // set_output_format; null: plain text

  // history() + pending: the whole conversation as the app sees it.
  std::vector<int32_t> conversation() const {
    std::vector<int32_t> all = session->history();
    all.insert(all.end(), pending.begin(), pending.end());
    return all;
  }
};

namespace hearth::api {

// The message hearth_last_error() returns on this thread.
void set_last_error(std::string message);

// Records `message` and returns `code` (so `return fail(...)` reads naturally).
inline hearth_status fail(hearth_status code, std::string message) {
  set_last_error(std::move(message));
  return code;
}
inline hearth_status succeed() {
  set_last_error("");
  return HEARTH_OK;
}
// An engine Status as a C status (HEARTH_ERR_FAILED with its message).
inline hearth_status from_status(const Status& s, const char* call) {
  if (s.is_ok()) return succeed();
  return fail(HEARTH_ERR_FAILED, std::string(call) + ": " + s.message());
}

// Runs body() and turns escaping C++ exceptions into status codes: nothing may unwind into C.
template <class F>
hearth_status guarded(const char* call, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(HEARTH_ERR_OUT_OF_MEMORY, std::string(call) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(HEARTH_ERR_INTERNAL, std::string(call) + ": internal error: " + e.what());
  } catch (...) {
    return fail(HEARTH_ERR_INTERNAL, std::string(call) + ": internal error");
  }
}

// Fills a caller's parameter struct with defaults. A newer app's larger struct gets zeros in the
// fields this library does not know; an older app's smaller one (down to the v1 layout, `v1_size`)
// gets the fields it knows; smaller than the v1 layout is an error.
template <class T>
hearth_status init_params(T* params, size_t struct_size, const T& defaults, const char* call,
                          size_t v1_size = sizeof(T)) {
  if (!params) return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(call) + ": params is NULL");
  if (struct_size < v1_size)
    return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(call) + ": struct_size " +
                                                 std::to_string(struct_size) + " is below " +
                                                 std::to_string(v1_size));
  std::memset(static_cast<void*>(params), 0, struct_size);
  std::memcpy(static_cast<void*>(params), &defaults, std::min(struct_size, sizeof(T)));
  params->struct_size = struct_size;
  return succeed();
}

// Reads a caller's size-tagged input struct over `*out` (which holds the defaults): fields past
// the caller's struct_size keep their defaults; fields past ours (a newer header) are ignored.
// The v1 layout (`v1_size`) is the minimum: a smaller struct_size is an error.
template <class T>
hearth_status read_params(const T* in, T* out, const char* call, const char* type,
                          size_t v1_size = sizeof(T)) {
  if (in->struct_size < v1_size)
    return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(call) + ": " + type + ".struct_size is " +
                                                 std::to_string(in->struct_size) +
                                                 ", expected at least " + std::to_string(v1_size) +
                                                 " (call the _init function first)");
  std::memcpy(static_cast<void*>(out), static_cast<const void*>(in),
              std::min<size_t>(in->struct_size, sizeof(T)));
  out->struct_size = sizeof(T);
  return HEARTH_OK;
}

// Writes `value` into a caller's size-tagged output struct (struct_size set by the caller): at
// least the v1 layout, and never past the caller's struct_size.
template <class T>
hearth_status write_result(const T& value, T* out, const char* call, const char* type) {
  const size_t size = out->struct_size;
  if (size < sizeof(T))
    return fail(HEARTH_ERR_INVALID_ARGUMENT, std::string(call) + ": " + type + ".struct_size is " +
                                                 std::to_string(size) + " (set it to sizeof(" +
                                                 type + "))");
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t),
              reinterpret_cast<const char*>(&value) + sizeof(size_t), sizeof(T) - sizeof(size_t));
  return HEARTH_OK;
}

// Copies `items` into a caller buffer under the shared rule: *count is always the full count;
// too small a buffer is HEARTH_ERR_BUFFER_TOO_SMALL.
template <class T>
hearth_status copy_out(const T* items, size_t n, T* buffer, size_t capacity, size_t* count,
                       const char* call) {
  *count = n;
  if (n > capacity)
    return fail(HEARTH_ERR_BUFFER_TOO_SMALL, std::string(call) + ": needs room for " +
                                                 std::to_string(n) + ", buffer holds " +
                                                 std::to_string(capacity));
  if (n > 0) std::memcpy(buffer, items, n * sizeof(T));
  return succeed();
}

// A string into a caller char buffer: NUL-terminated, *length excludes the NUL.
hearth_status copy_string_out(const std::string& s, char* buffer, size_t capacity, size_t* length,
                              const char* call);

// Builds a hearth::SamplingParams from the C struct (validated).
hearth_status to_sampling(const hearth_sampling_params* in, SamplingParams* out, const char* call);

}  // namespace hearth::api
