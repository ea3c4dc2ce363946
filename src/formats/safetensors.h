// Safetensors reader (single file, and sharded checkpoints through model.safetensors.index.json)
// and a small writer (used for `hearth logits -o`). Header sizes, offsets, dtypes and shapes are
// all checked against the file; tensors are zero-copy views into the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped-file.h"
#include "base/status.h"
#include "tensor/tensor-view.h"

namespace hearth {

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);
  static Result<SafetensorsFile> parse(const uint8_t* data, uint64_t size, const std::string& name);

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return name_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::string name_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// All weights of a Hugging Face directory: model.safetensors, or the shards listed in
// model.safetensors.index.json (every listed shard must exist; a tensor's shard must hold it).
class SafetensorsCheckpoint {
 public:
  static Result<SafetensorsCheckpoint> open_dir(const std::string& dir);
  const TensorView* find_tensor(std::string_view name) const;
  std::vector<const TensorView*> tensors() const;
  // A vision-language checkpoint's language model alone, under the names a text-only checkpoint
  // of its family uses: "language_model.model.X" (transformers 4 saves) and
  // "model.language_model.X" (transformers 5) become "model.X", "language_model.lm_head.weight"
  // becomes "lm_head.weight"; the vision tower's and the projector's tensors leave the index.
  // wrapper: the checkpoint's model_type (HfConfig::text_of), for the messages; an error when
  // no tensor is left.
  Status keep_language_model(const std::string& wrapper, const std::string& dir);

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> index_;
  std::vector<std::unique_ptr<TensorView>> renamed_;  // views under their new names
};

struct OwnedTensor {
  std::string name;
  DType dtype;  // F32, F16, BF16, I32, I64
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
Status write_safetensors(const std::string& path, const std::vector<OwnedTensor>& tensors);

}  // namespace hearth
