// Running the engine on a test's model on the CPU (two threads): a TinyModel (tiny-model.h)
// written as a Hugging Face directory under the test's temp dir and loaded, or any model path
// loaded and run over a token sequence.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "support/test-data.h"
#include "tiny-model.h"

namespace hearth::test {

// The model at `path` (an HF directory or a GGUF); null (and a test failure) when it fails.
inline std::shared_ptr<Model> load_on_cpu(const std::string& path) {
  LoadOptions opt;
  opt.n_threads = 2;
  auto model = load_model(path, opt);
  EXPECT_TRUE(model.is_ok()) << model.message();
  return model.is_ok() ? model.value() : nullptr;
}

// Every position's logits of `ids` [T, vocab] from the model at `path` with f32 caches of 64
// rows: the first `prompt` ids as one prefill, each later one as a decode step. Empty (and a
// test failure) when something fails.
inline std::vector<float> logits_of(const std::string& path, const std::vector<int32_t>& ids,
                                    size_t prompt) {
  auto model = load_on_cpu(path);
  if (!model) return {};
  auto kv = model->new_kv_cache(64, {DType::F32, DType::F32});
  EXPECT_TRUE(kv.is_ok()) << kv.message();
  if (!kv.is_ok()) return {};
  ForwardScratch scratch;
  std::vector<float> got;
  const std::vector<int32_t> head(ids.begin(), ids.begin() + long(prompt));
  EXPECT_TRUE(model->prefill(*kv, head, scratch, &got, true).is_ok());
  for (size_t t = prompt; t < ids.size(); ++t) {
    std::vector<float> step;
    EXPECT_TRUE(model->decode(*kv, ids[t], scratch, &step).is_ok());
    got.insert(got.end(), step.begin(), step.end());
  }
  return got;
}

// `name`: the directory's name (tests that load several models give each its own); `extra`:
// fields appended to config.json. Null (and a test failure) when the load fails.
inline std::shared_ptr<Model> write_and_load(const TinyModel& m, const std::string& name,
                                             const std::string& extra = "") {
  const std::string dir = temp_dir() + "/" + name;
  std::filesystem::create_directories(dir);
  m.write(dir, extra);
  return load_on_cpu(dir);
}

}  // namespace hearth::test
