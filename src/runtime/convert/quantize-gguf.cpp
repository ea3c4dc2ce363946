// GGUF -> GGUF requantization (`hearth quantize`): every weight matrix is decoded to f32 and
// encoded with llama-quantize's per-tensor type; everything else is copied byte for byte.
// Streaming: one tensor's f32 copy and encoding live in memory at a time.
#include <algorithm>
#include <thread>

#include "formats/gguf.h"
#include "runtime/convert/convert.h"
#include "runtime/convert/gguf-stream.h"
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
  for (const auto& t : src.tensors())
    if (t.name.size() > 14 && t.name.compare(t.name.size() - 14, 14, ".attn_v.weight") == 0)
      ++facts.n_layer;

  struct Job {
    const TensorView* src;
    bool requantize;
    bool fell_back;
    DType preferred;
  };
  std::vector<Job> jobs;
  std::vector<TensorInfo> infos;
  for (const auto& t : src.tensors()) {
    Job j{&t, false, false, t.dtype};
    TensorInfo info{t.name, t.dtype, t.shape, 0};
    if (is_weight_matrix(t.name, t.shape)) {
      const TypeChoice c = choose_type(type, t.name, t.shape, facts);
      info.dtype = c.dtype;
      // A tensor already in its target type is copied as is, as llama-quantize does.
      j.requantize = c.dtype != t.dtype;
      j.fell_back = c.fell_back;
      j.preferred = c.preferred;
    }
    jobs.push_back(j);
    infos.push_back(std::move(info));
  }

  Metadata meta(src.metadata().begin(), src.metadata().end());
  put(meta, "general.file_type", value_u32(type.file_type));
  put(meta, "general.quantization_version", value_u32(2));
  HEARTH_ASSIGN_OR_RETURN(GgufStream stream, GgufStream::open(out_path, meta, std::move(infos)));
  uint64_t total = 0, done = 0;
  for (const auto& t : stream.tensors()) total += t.nbytes;

  ThreadPool pool(n_threads > 0 ? n_threads
                                : int(std::max(1u, std::thread::hardware_concurrency())));
  std::vector<float> f32;
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& j = jobs[i];
    const TensorInfo& info = stream.tensors()[i];
    if (j.requantize) {
      HEARTH_TRY(decode_to_f32(*j.src, f32).with_context(in));
      HEARTH_TRY(encode_from_f32(info.dtype, f32.data(), j.src->rows(), j.src->cols(), bytes, &pool)
                     .with_context(out_path + ": tensor " + info.name));
      HEARTH_TRY(stream.write_tensor(i, bytes.data(), bytes.size()));
    } else {
      HEARTH_TRY(stream.write_tensor(i, j.src->data, j.src->nbytes));
    }
    done += info.nbytes;
    if (progress) {
      std::string type_text = dtype_name(info.dtype);
      if (j.fell_back)
        type_text += std::string(" (row ") + std::to_string(info.shape.back()) + " does not fit " +
                     dtype_name(j.preferred) + ")";
      progress({int64_t(i), int64_t(jobs.size()), info.name, type_text, shape_string(info.shape),
                done, total});
    }
  }
  return stream.finish();
}

}  // namespace hearth
