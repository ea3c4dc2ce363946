// Progress output modes: bars redraw in place with size/speed/ETA, plain lines carry no terminal
// escapes, quiet prints nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "hub/progress.h"

namespace hearth::hub {
namespace {

std::string capture(Progress::Mode mode) {
  std::FILE* f = std::tmpfile();
  {
    Progress p(mode, f);
    p.start("model.gguf", 4u << 20, 0);
    p.update("model.gguf", 1u << 20);
    p.message("a note");
    p.finish("model.gguf", true, "done, sha256 verified");
    p.finish("config.json", true, "already in the cache");
  }
  std::string out;
  std::rewind(f);
  for (int c; (c = std::fgetc(f)) != EOF;) out += char(c);
  std::fclose(f);
  return out;
}

TEST(Progress, Bars) {
  const std::string out = capture(Progress::Mode::kBars);
  EXPECT_NE(out.find("model.gguf"), std::string::npos);
  EXPECT_NE(out.find("] "), std::string::npos) << out;       // the bar
  EXPECT_NE(out.find("ETA"), std::string::npos) << out;      // time left
  EXPECT_NE(out.find("4.0 MiB"), std::string::npos) << out;  // total size
  EXPECT_NE(out.find("\x1b[1F"), std::string::npos) << out;  // redrawn in place
  EXPECT_NE(out.find("a note"), std::string::npos);
  EXPECT_NE(out.find("already in the cache"), std::string::npos);
}

TEST(Progress, LinesAndQuiet) {
  const std::string out = capture(Progress::Mode::kLines);
  EXPECT_NE(out.find("pulling model.gguf (4.0 MiB)\n"), std::string::npos) << out;
  EXPECT_NE(out.find("model.gguf done, sha256 verified\n"), std::string::npos) << out;
  EXPECT_NE(out.find("config.json already in the cache\n"), std::string::npos) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(capture(Progress::Mode::kQuiet), "");
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
}

}  // namespace
}  // namespace hearth::hub
