// A small sandboxed Jinja interpreter for chat templates: parse once, render with variables.
// Every render is bounded (steps, output bytes, call depth), so a hostile template is an error.
// Rendering recurses natively: give the rendering thread at least 2 MiB of stack.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "runtime/chat/jinja-value.h"

namespace hearth::jinja {

struct Limits {
  uint64_t max_steps = 5'000'000;       // evaluation steps (nodes, expressions, loop turns)
  size_t max_output_bytes = 16u << 20;  // rendered text and any single string built
  size_t max_list_items = 100'000;      // any single list built (range, +, *)
  int max_call_depth = 64;              // macro recursion
  int max_nesting = 200;                // syntax nesting (parser recursion)
  size_t max_template_bytes = 4u << 20;
  // strftime_now uses this Unix time when set (tests); the wall clock otherwise.
  std::optional<int64_t> fixed_time;
};

using Variables = std::vector<std::pair<std::string, Value>>;

struct NodeListHolder;  // the parsed tree (jinja-ast.h), kept opaque to users

class Template {
 public:
  static Result<Template> parse(std::string_view source, const Limits& limits = {});
  // Renders with `vars` as globals (on top of range, namespace, dict, raise_exception and
  // strftime_now). Errors name the template line.
  Result<std::string> render(const Variables& vars) const;

 private:
  std::shared_ptr<const NodeListHolder> nodes_;
  Limits limits_;
};

// One-shot parse + render.
Result<std::string> render(std::string_view source, const Variables& vars,
                           const Limits& limits = {});

}  // namespace hearth::jinja
