// StopStringFilter: the text before the first stop string to complete, the same however the text
// arrives (at once, byte by byte, in any pieces); a possible partial match held back until it is
// decided; nothing released after a match.
#include "runtime/stop-strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hearth {
namespace {

// The filter's whole output for `text` pushed in pieces of `piece` bytes (0: at once).
std::string shown(const std::vector<std::string>& stops, const std::string& text, size_t piece,
                  bool* matched = nullptr) {
  StopStringFilter f(stops);
  std::string out;
  if (piece == 0) {
    out = f.push(text);
  } else {
    for (size_t at = 0; at < text.size(); at += piece) out += f.push(text.substr(at, piece));
  }
  out += f.flush();
  if (matched) *matched = f.matched();
  return out;
}

TEST(StopStrings, CutWhereTheStopBeginsAndNothingAfter) {
  StopStringFilter f({"</s>"});
  EXPECT_EQ(f.push("hello </"), "hello ");  // "</" may begin the stop: held
  EXPECT_EQ(f.push("s> more"), "");
  EXPECT_TRUE(f.matched());
  EXPECT_EQ(f.push("after"), "");
  EXPECT_EQ(f.flush(), "");
}

TEST(StopStrings, AHeldPrefixThatIsNotAStopIsReleased) {
  StopStringFilter f({"</s>"});
  EXPECT_EQ(f.push("a </"), "a ");
  EXPECT_EQ(f.push("b"), "</b");
  EXPECT_EQ(f.push("</"), "");
  EXPECT_EQ(f.flush(), "</");
  EXPECT_FALSE(f.matched());
}

// A stop that begins earlier but completes later loses to one inside it: text arriving byte by
// byte can only see the first, and the result must not depend on how it arrives.
TEST(StopStrings, TheFirstStopToCompleteCutsHoweverTheTextArrives) {
  const std::vector<std::string> stops = {"abcd", "bc"};
  for (size_t piece : {0, 1, 2, 3, 5}) {
    bool matched = false;
    EXPECT_EQ(shown(stops, "xabcdy", piece, &matched), "xa") << "pieces of " << piece;
    EXPECT_TRUE(matched);
  }
  // Two completing at once: the longer (earlier) one cuts.
  for (size_t piece : {0, 1, 4}) EXPECT_EQ(shown({"b", "ab"}, "zab!", piece), "z") << piece;
}

TEST(StopStrings, NoStopsOrNoMatchShowEverything) {
  for (size_t piece : {0, 1, 3}) {
    EXPECT_EQ(shown({}, "plain text", piece), "plain text");
    bool matched = true;
    EXPECT_EQ(shown({"zz", "qq"}, "almost z and q", piece, &matched), "almost z and q");
    EXPECT_FALSE(matched);
  }
}

}  // namespace
}  // namespace hearth
