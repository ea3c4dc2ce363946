// GGUF -> GGUF requantization (`hearth quantize`): every weight matrix is decoded to f32 and
// encoded with llama-quantize's per-tensor type; everything else is copied byte for byte.
// Streaming: one tensor's f32 copy and encoding live in memory at a time.
#include "formats/gguf.h"
#include "runtime/convert/convert.h"
#include "runtime/convert/quant-plan.h"
#include "runtime/convert/tensor-encode.h"

namespace hearth {

using namespace convert;

Status quantize_gguf(const std::string& in, const std::string& out_path,
                     const std::string& type_name, const ConvertProgressFn& progress,
                     int n_threads) {
  HEARTH_ASSIGN_OR_RETURN(OutputType type, parse_output_type(type_name));
  HEARTH_ASSIGN_OR_RETURN(GgufFile src, GgufFile::open(in));

  ModelFacts facts;
  facts.has_output = src.find_tensor("output.weight") != nullptr;
  // One attn_norm per layer in every family (fused Phi-3 files have no attn_v to count).
  for (const auto& t : src.tensors())
    if (t.name.size() > 17 && t.name.compare(t.name.size() - 17, 17, ".attn_norm.weight") == 0)
      ++facts.n_layer;

  struct Job {
    const TensorView* src;
    bool requantize;
  };
  GgufWriter w;
  for (const auto& [key, value] : src.metadata()) w.set_value(key, value);
  w.set_u32("general.file_type", type.file_type);
  w.set_u32("general.quantization_version", 2);
  std::vector<Job> jobs;
  std::vector<TypeChoice> choices;
  for (const auto& t : src.tensors()) {
    Job j{&t, false};
    TypeChoice c{t.dtype, false, t.dtype};
    if (is_weight_matrix(t.name, t.shape)) {
      c = choose_type(type, t.name, t.shape, facts);
      // A tensor already in its target type is copied as is, as llama-quantize does.
      j.requantize = c.dtype != t.dtype;
    }
    jobs.push_back(j);
    choices.push_back(c);
    w.declare_tensor(t.name, c.dtype, t.shape);
  }
  std::vector<float> f32;
  std::vector<uint8_t> bytes;
  return write_tensors(
      w, out_path, choices, n_threads, progress,
      [&](size_t i, const GgufTensorInfo& info, ThreadPool& pool, GgufTensorStream& out) {
        const Job& j = jobs[i];
        if (!j.requantize) return out.write_tensor(j.src->data, j.src->nbytes);
        HEARTH_TRY(decode_to_f32(*j.src, f32).with_context(in));
        HEARTH_TRY(
            encode_from_f32(info.dtype, f32.data(), j.src->rows(), j.src->cols(), bytes, &pool)
                .with_context(out_path + ": tensor " + info.name));
        return out.write_tensor(bytes.data(), bytes.size());
      });
}

}  // namespace hearth
