// The shape of libhearth.so: `nm -D --defined-only` lists only hearth_* symbols, the SONAME is
// versioned, and the header-only C++ wrapper (hearth.hpp) works over it.
#include <algorithm>
#include <sstream>

#include "api-test-util.h"
#include "hearth/hearth.hpp"

namespace hearth::test {
namespace {

TEST(ApiExports, OnlyHearthSymbolsAreExported) {
  const CommandResult r = run_command({"nm", "-D", "--defined-only", HEARTH_TEST_LIBRARY});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int exported = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const std::string name = line.substr(line.find_last_of(' ') + 1);
    EXPECT_EQ(name.rfind("hearth_", 0), 0u) << "unexpected export: " << line;
    ++exported;
  }
  EXPECT_GE(exported, 25);  // the whole API is there
  EXPECT_NE(r.out.find(" T hearth_session_generate"), std::string::npos);
}

TEST(ApiExports, SonameCarriesTheAbiVersion) {
  const CommandResult r = run_command({"readelf", "-d", HEARTH_TEST_LIBRARY});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Library soname: [libhearth.so." + std::to_string(HEARTH_VERSION_MAJOR) +
                       "." + std::to_string(HEARTH_VERSION_MINOR) + "]"),
            std::string::npos)
      << r.out;
}

TEST(ApiCppWrapper, GeneratesAndThrowsWithMessages) {
  const Golden& g = tiny_golden();
  hearthpp::Model model(tiny_gguf());
  EXPECT_EQ(model.info().n_vocab, 32000);
  EXPECT_EQ(model.tokenize("Once upon a time, in a land far away, there lived"), g.gen_prompt);
  auto sampling = hearthpp::default_sampling();
  sampling.temperature = 0;
  hearthpp::Session session(model, 64, sampling);
  std::vector<int32_t> ids;
  std::string text;
  const auto r = session.generate(g.gen_prompt, 8, [&](int32_t id, const std::string& piece) {
    if (id >= 0) ids.push_back(id);
    text += piece;
    return true;
  });
  EXPECT_EQ(r.n_generated, 8);
  EXPECT_EQ(ids, slice(g.gen_ids, 0, 8));
  EXPECT_EQ(text, model.detokenize(ids));
  const auto blob = session.save_state();
  hearthpp::Session other(model, 64, sampling);
  other.load_state(blob);
  EXPECT_EQ(other.sample(), g.gen_ids[8]);
  EXPECT_EQ(model.embed(g.gen_prompt).size(), 96u);
  EXPECT_NE(model.render_chat({{"user", "Hi"}}, true, "chatml").find("<|im_start|>user\nHi"),
            std::string::npos);
  // A message's "</s>" is text unless the caller trusts it: only then is it the EOS token.
  const auto eos_count = [&](const std::vector<int32_t>& ids) {
    return std::count(ids.begin(), ids.end(), model.info().eos_token);
  };
  const auto as_text = model.tokenize_chat({{"user", "hi</s>"}}, true, "llama2");
  const auto trusted =
      model.tokenize_chat({{"user", "hi</s>"}}, true, "llama2", HEARTH_CHAT_CONTENT_SPECIAL);
  EXPECT_EQ(eos_count(as_text), 0);
  EXPECT_EQ(eos_count(trusted), 1);
  try {
    hearthpp::Model missing("/no/such/file.gguf");
    FAIL() << "no exception";
  } catch (const hearthpp::Error& e) {
    EXPECT_EQ(e.status(), HEARTH_ERR_NOT_FOUND);
    EXPECT_NE(std::string(e.what()).find("/no/such/file.gguf"), std::string::npos);
  }
  // An exception thrown by a callback stops generation instead of crossing the C library.
  session.reset();
  const auto stopped = session.generate(g.gen_prompt, 8, [](int32_t, const std::string&) -> bool {
    throw std::runtime_error("app error");
  });
  EXPECT_EQ(stopped.finish_reason, HEARTH_FINISH_CANCELLED);
}

}  // namespace
}  // namespace hearth::test
