// Tool calls in a model's output: the family's call syntax (tool-call-family.h) parsed into
// names and JSON arguments, with the text before the first call kept as content. Anything that is
// not a complete, well-formed call of a declared function (partial JSON, an unknown name, a
// marker with junk after it) leaves the whole output as content: a client sees what the model
// wrote rather than a call that was never made.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/tool-calls/tool-call-family.h"

namespace hearth {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, compact, keys in the model's order
};

struct ToolCallParse {
  std::string content;  // text outside the calls (all of it when there are none)
  std::vector<ToolCall> calls;
};

// Parses `text` (the answer: reasoning already split off) in `family`'s syntax. `declared` holds
// the request's function names; a call of any other name is not a call.
ToolCallParse parse_tool_calls(ToolCallFamily family, std::string_view text,
                               const std::vector<std::string>& declared);

// Streaming: passes through text that cannot be part of a call and holds back everything from
// the first call marker on (and a tail that may be the start of one, as stop strings are held).
// At the end, finish() returns what is held for parse_tool_calls(); what push() returned plus the
// parse of finish() equals the parse of the whole text.
class ToolCallStreamGate {
 public:
  explicit ToolCallStreamGate(ToolCallFamily family);
  // New text; returns the part that is content for certain.
  std::string push(std::string_view text);
  // Whether a call marker has been seen (the rest of the output is held).
  bool in_call() const { return in_call_; }
  // End of output: the held text.
  std::string finish();

 private:
  ToolCallFamily family_;
  std::vector<std::string_view> markers_;  // a call may start where one of these appears
  bool start_only_json_ = false;           // a '{' as the first non-space byte starts a call
  bool hold_all_ = false;                  // nothing is content before the end (functionary v3.2)
  bool at_start_ = true;                   // only whitespace has been seen
  bool in_call_ = false;
  std::string held_;
};

}  // namespace hearth
