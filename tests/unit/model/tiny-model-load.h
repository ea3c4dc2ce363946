// A TinyModel (tiny-model.h) written as a Hugging Face directory under the test's temp dir and
// loaded on the CPU (two threads), for the tests that run the engine on one.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "model/model.h"
#include "support/test-data.h"
#include "tiny-model.h"

namespace hearth::test {

// `name`: the directory's name (tests that load several models give each its own); `extra`:
// fields appended to config.json. Null (and a test failure) when the load fails.
inline std::shared_ptr<Model> write_and_load(const TinyModel& m, const std::string& name,
                                             const std::string& extra = "") {
  const std::string dir = temp_dir() + "/" + name;
  std::filesystem::create_directories(dir);
  m.write(dir, extra);
  LoadOptions opt;
  opt.n_threads = 2;
  auto model = load_model(dir, opt);
  EXPECT_TRUE(model.is_ok()) << model.message();
  return model.is_ok() ? model.value() : nullptr;
}

}  // namespace hearth::test
