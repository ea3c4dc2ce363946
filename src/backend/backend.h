// The backend seam: where activations live and who runs each op. The generic forward pass
// (model/forward.cpp) is written once against this interface; CPU and CUDA implement it.
// Calls are per op per layer (a few dozen per token), never per element, so virtual dispatch
// costs nothing measurable. All float* arguments point into the backend's own memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "kernels/ops.h"
#include "tensor/tensor-view.h"

namespace hearth {

// A weight matrix or vector as a backend holds it. `host` always views the source bytes (mapped
// file or owned buffer); a backend may attach its own copy (device memory, repacked rows).
struct Weight {
  TensorView host;
  std::shared_ptr<void> backend_data;  // backend-private (device pointer, packed layout, ...)
  explicit operator bool() const { return host.data != nullptr; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Activation and KV memory in this backend's address space.
  virtual float* alloc(int64_t n_floats) = 0;
  virtual void free(float* p) = 0;
  virtual void upload(float* dst, const float* host_src, int64_t n) = 0;
  virtual void download(float* host_dst, const float* src, int64_t n) = 0;
  virtual void copy(float* dst, const float* src, int64_t n) = 0;  // within this backend
  virtual void synchronize() {}

  // Makes `w` usable by matmul/embed on this backend (upload, repack). Idempotent.
  virtual Status prepare_weight(Weight& w) = 0;
  // A small f32 vector (norm weight, bias) in backend memory, converted from any float dtype.
  virtual Result<float*> prepare_vector(const TensorView& v) = 0;

  // Ops: the contract and shapes are kernels/ops.h's.
  virtual void embed(const Weight& table, const int32_t* host_ids, int64_t n_tokens,
                     float* out) = 0;
  virtual void matmul(const Weight& w, const float* x, int64_t n_tokens, float* y) = 0;
  virtual void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n,
                       float eps) = 0;
  virtual void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    const int32_t* host_pos, const float* host_inv_freq,
                    kernels::RopeStyle style) = 0;
  virtual void attention(const float* q, const float* k_cache, const float* v_cache, float* out,
                         int64_t n_tokens, int64_t pos0, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim, float scale) = 0;
  virtual void swiglu(const float* gate, const float* up, float* out, int64_t n) = 0;
  virtual void add_inplace(float* y, const float* x, int64_t n) = 0;
  virtual void add_bias(float* y, const float* bias, int64_t rows, int64_t n) = 0;

  // KV append: rows [n_tokens, row_floats] of src into cache at position `pos`. A backend that
  // replays captured decode steps reads pos from device memory, so the forward pass must store
  // K/V through this (not copy() with a host-computed address).
  virtual void store_kv(float* cache, const float* src, int64_t pos, int64_t row_floats,
                        int64_t n_tokens) {
    copy(cache + pos * row_floats, src, n_tokens * row_floats);
  }

  // Decode-step capture (CUDA graphs). For each single-token decode step the forward pass calls
  //   if (!b.begin_decode_step(token, pos, ctx_capacity)) { ...this backend's ops... }
  //   b.end_decode_step();   // then download/sync as usual
  // begin returns true when it already replayed the recorded step with the new token/pos (skip
  // the ops). Between begin and end the ops must be the same sequence with the same buffers
  // every step; embed's ids, rope's pos, attention's pos0 and store_kv's pos are taken from the
  // step. Call reset_decode_steps() when buffers or the layer split change. Defaults: eager.
  virtual bool begin_decode_step(int32_t token, int64_t pos, int64_t ctx_capacity) { return false; }
  virtual void end_decode_step() {}
  virtual void reset_decode_steps() {}

  // First error an asynchronous backend hit since creation (ops return void); ok for the CPU.
  virtual Status status() const { return Status::ok(); }
};

std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace hearth
