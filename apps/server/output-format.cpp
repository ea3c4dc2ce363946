// output-format.h: the fields are checked here and compiled once per request; the grammar text
// a schema becomes never reaches the client, only the converter's message (keyword and pointer).
#include "output-format.h"

#include "runtime/structured-output.h"

namespace hearth::server {

namespace {

std::string field_name(const std::string& param) {
  return "'" + param + "'";
}

// response_format -> *format (kind kText when absent or {"type":"text"}).
bool read_response_format(const nlohmann::json& j, OutputFormat* format, ApiError* err) {
  auto it = j.find("response_format");
  if (it == j.end() || it->is_null()) return true;
  const std::string p = "response_format";
  if (!it->is_object()) return invalid_request(err, p, field_name(p) + " must be an object");
  auto type = it->find("type");
  if (type == it->end())
    return invalid_request(err, p + ".type", field_name(p + ".type") + " is required");
  if (*type == "text") return true;
  if (*type == "json_object") {
    format->kind = OutputFormat::Kind::kJsonObject;
    return true;
  }
  if (*type != "json_schema")
    return invalid_request(err, p + ".type",
                           field_name(p + ".type") + " is " + json_text(*type) +
                               "; it must be \"text\", \"json_object\" or \"json_schema\"");
  const std::string js = p + ".json_schema";
  auto spec = it->find("json_schema");
  if (spec == it->end() || spec->is_null())
    return invalid_request(err, js,
                           field_name(js) + " is required when the type is \"json_schema\"");
  if (!spec->is_object()) return invalid_request(err, js, field_name(js) + " must be an object");
  if (auto name = spec->find("name"); name != spec->end() && !name->is_string())
    return invalid_request(err, js + ".name", field_name(js + ".name") + " must be a string");
  if (auto strict = spec->find("strict");
      strict != spec->end() && !strict->is_null() && !strict->is_boolean())
    return invalid_request(err, js + ".strict", field_name(js + ".strict") + " must be a boolean");
  auto schema = spec->find("schema");
  if (schema == spec->end() || schema->is_null())
    return invalid_request(err, js + ".schema", field_name(js + ".schema") + " is required");
  if (!schema->is_object())
    return invalid_request(err, js + ".schema",
                           field_name(js + ".schema") + " must be a JSON Schema object");
  // strict or not, the output is held to the schema (a non-strict schema is a superset).
  format->kind = OutputFormat::Kind::kJsonSchema;
  format->text = json_text(*schema);
  return true;
}

}  // namespace

bool parse_output_format(const nlohmann::json& j, const ApiLimits& limits, const Engine& engine,
                         Job* job, ApiError* err) {
  OutputFormat format;
  if (!read_response_format(j, &format, err)) return false;
  std::string param = "response_format";
  if (format.kind == OutputFormat::Kind::kJsonSchema) param = "response_format.json_schema.schema";
  if (auto g = j.find("grammar"); g != j.end() && !g->is_null()) {
    if (!g->is_string())
      return invalid_request(err, "grammar", "'grammar' must be a string (GBNF)");
    const std::string& text = g->get_ref<const std::string&>();
    if (text.size() > limits.max_string_bytes)
      return invalid_request(err, "grammar",
                             "'grammar' is " + std::to_string(text.size()) +
                                 " bytes; the limit is " + std::to_string(limits.max_string_bytes));
    if (format.kind != OutputFormat::Kind::kText)
      return invalid_request(
          err, "grammar",
          "'grammar' cannot be combined with a JSON 'response_format'; give one of them");
    if (!text.empty()) {
      format = {OutputFormat::Kind::kGbnf, text};
      param = "grammar";
    }
  }
  if (format.kind == OutputFormat::Kind::kText) return true;
  auto grammar = compile_output_format(format);
  if (!grammar)
    return invalid_request(err, param, field_name(param) + ": " + grammar.message(),
                           param == "grammar" ? "invalid_grammar" : "invalid_json_schema");
  job->generate.constraint = make_constraint(engine, std::move(grammar.value()));
  return true;
}

}  // namespace hearth::server
