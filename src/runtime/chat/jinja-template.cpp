// The public face of the Jinja engine (jinja.h): a template parsed once and rendered with
// variables by a fresh Interpreter each time. Errors leave here as one bounded line
// (base/printable.h): they quote what the template wrote, and reach logs and HTTP bodies.
#include "base/printable.h"
#include "runtime/chat/jinja-interpreter.h"

namespace hearth::jinja {

struct NodeListHolder {
  NodeList nodes;
};

Result<Template> Template::parse(std::string_view source, const Limits& limits) {
  if (source.size() > limits.max_template_bytes)
    return Status::error("template is " + std::to_string(source.size()) +
                         " bytes, over the limit of " + std::to_string(limits.max_template_bytes));
  ParseLimits pl;
  pl.max_nesting = limits.max_nesting;
  auto nodes = parse_template(source, pl);
  if (!nodes.is_ok()) return Status::error(printable(nodes.message()));
  auto holder = std::make_shared<NodeListHolder>();
  holder->nodes = std::move(*nodes);
  Template t;
  t.nodes_ = std::move(holder);
  t.limits_ = limits;
  return t;
}

Result<std::string> Template::render(const Variables& vars) const {
  Interpreter in(limits_, vars);
  auto out = in.run(nodes_->nodes);
  if (!out.is_ok()) return Status::error(printable(out.message()));
  return out;
}

Result<std::string> render(std::string_view source, const Variables& vars, const Limits& limits) {
  HEARTH_ASSIGN_OR_RETURN(Template t, Template::parse(source, limits));
  return t.render(vars);
}

}  // namespace hearth::jinja
