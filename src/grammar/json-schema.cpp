// json-schema.h: a visitor over the schema that writes one GBNF rule per object, array and
// $ref target, and inline expressions for scalars. Every value is followed by optional
// whitespace inside its container; the root value ends the output.
#include "grammar/json-schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/printable.h"
#include "grammar/json-schema-parts.h"

namespace hearth {
namespace {

using Json = nlohmann::ordered_json;

// Keywords that only describe (no effect on which instances are valid) or hold definitions.
const std::set<std::string> kAnnotations = {"title",    "description", "default",  "examples",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly",   "$defs",    "definitions"};
const std::set<std::string> kKeywords = {"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "items",
                                         "prefixItems",
                                         "minItems",
                                         "maxItems",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "format",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "enum",
                                         "const",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "uniqueItems"};
const std::set<std::string> kObjectKeys = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeys = {"items", "prefixItems", "minItems", "maxItems",
                                          "uniqueItems"};
const std::set<std::string> kStringKeys = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum",
                                           "exclusiveMaximum"};
const char* const kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};

std::string json_type_of(const Json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  // A float with no fraction is an integer (JSON Schema); std::trunc, not a cast to int64_t,
  // which is undefined past 2^63 (an enum's 4.5e46 was).
  const auto integral = [](double d) { return std::isfinite(d) && std::trunc(d) == d; };
  return v.is_number_integer() || v.is_number_unsigned() ||
                 (v.is_number_float() && integral(v.get<double>()))
             ? "integer"
             : "number";
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

class SchemaConverter {
 public:
  explicit SchemaConverter(const Json& root) : root_(root) {}

  Result<std::string> convert() {
    HEARTH_ASSIGN_OR_RETURN(std::string expr, visit(root_, "#"));
    std::string out = "root ::= " + expr + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

  std::string any_object() {
    any_value();
    return "json-object";
  }

 private:
  Status error(const std::string& path, const std::string& what) const {
    return Status::error("JSON Schema: " + what + " at " + path);
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string name;
    for (char c : hint) name += std::isalnum(uint8_t(c)) ? char(std::tolower(c)) : '-';
    if (name.empty() || name.size() > 40) name = "rule";
    const std::string base = name;
    for (int n = 1; rules_.count(name) || name == "root"; ++n)
      name = base + "-" + std::to_string(n);
    rules_[name] = body;
    return name;
  }
  void set_rule(const std::string& name, const std::string& body) { rules_[name] = body; }
  std::string ws() {
    if (!rules_.count("ws")) rules_["ws"] = "| \" \" | \"\\n\" [ ]{0,16}";
    return "ws";
  }
  std::string any_char() {
    if (!rules_.count("char")) rules_["char"] = schema::json_any_char();
    return "char";
  }
  std::string any_value() {
    if (rules_.count("json-value")) return "json-value";
    const std::string w = ws(), ch = any_char();
    rules_["json-value"] =
        "json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"";
    rules_["json-object"] = "\"{\" " + w + " (json-string " + w + " \":\" " + w + " json-value " +
                            w + " (\",\" " + w + " json-string " + w + " \":\" " + w +
                            " json-value " + w + ")*)? \"}\"";
    rules_["json-array"] =
        "\"[\" " + w + " (json-value " + w + " (\",\" " + w + " json-value " + w + ")*)? \"]\"";
    rules_["json-string"] = "\"\\\"\" " + ch + "* \"\\\"\"";
    rules_["json-number"] =
        "\"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?";
    return "json-value";
  }

  Status check_keywords(const Json& s, const std::string& path) {
    for (const auto& [key, value] : s.items()) {
      if (kAnnotations.count(key)) continue;
      if (!kKeywords.count(key)) return error(path, "unsupported keyword '" + key + "'");
      if (key == "uniqueItems" && value != false)
        return error(path, "unsupported keyword 'uniqueItems' (only false)");
    }
    return Status::ok();
  }

  // Every nested schema passes here: a bound keeps a hostile one (a CLI file; an HTTP body
  // is held to 64 levels of JSON before it gets here) from overflowing the stack.
  static constexpr int kMaxDepth = 100;
  Result<std::string> visit(const Json& s, const std::string& path) {
    if (depth_ >= kMaxDepth)
      return error(path, "the schema nests deeper than " + std::to_string(kMaxDepth) + " levels");
    ++depth_;
    auto expr = visit_schema(s, path);
    --depth_;
    return expr;
  }

  Result<std::string> visit_schema(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      return error(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) return error(path, "a schema must be an object or a boolean");
    HEARTH_TRY(check_keywords(s, path));
    if (s.contains("$ref")) {
      for (const auto& [key, v] : s.items())
        if (key != "$ref" && !kAnnotations.count(key))
          return error(path, "'" + key + "' next to '$ref' is not supported (use allOf)");
      if (!s["$ref"].is_string()) return error(path, "'$ref' must be a string");
      return visit_ref(s["$ref"].get<std::string>(), path);
    }
    if (s.contains("allOf")) return visit_all_of(s, path);
    if (s.contains("anyOf") || s.contains("oneOf")) return visit_any_of(s, path);
    if (s.contains("const")) return visit_values({s["const"]}, s, path + "/const");
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        return error(path, "'enum' must be a non-empty array");
      return visit_values(std::vector<Json>(s["enum"].begin(), s["enum"].end()), s, path + "/enum");
    }
    HEARTH_ASSIGN_OR_RETURN(std::vector<std::string> types, schema_types(s, path));
    if (types.empty()) return any_value();
    std::vector<std::string> alts;
    for (const auto& t : types) {
      HEARTH_ASSIGN_OR_RETURN(std::string e, visit_type(t, s, path));
      alts.push_back(e);
    }
    return alternatives(alts);
  }

  // The types a schema allows: its "type", else the ones its keywords imply (a keyword of
  // another type does not restrict, so generating only these is a subset of the valid values).
  Result<std::vector<std::string>> schema_types(const Json& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      std::vector<Json> list =
          t.is_array() ? std::vector<Json>(t.begin(), t.end()) : std::vector<Json>{t};
      for (const auto& v : list) {
        if (!v.is_string() || std::find(std::begin(kTypes), std::end(kTypes),
                                        v.get<std::string>()) == std::end(kTypes))
          return Status(error(path + "/type", "unknown type " + v.dump()));
        types.push_back(v.get<std::string>());
      }
      if (types.empty()) return Status(error(path + "/type", "an empty type list matches nothing"));
      return types;
    }
    auto has_any = [&](const std::set<std::string>& keys) {
      for (const auto& k : keys)
        if (s.contains(k)) return true;
      return false;
    };
    if (has_any(kObjectKeys)) types.push_back("object");
    if (has_any(kArrayKeys)) types.push_back("array");
    if (has_any(kStringKeys)) types.push_back("string");
    if (has_any(kNumberKeys)) types.push_back("number");
    return types;
  }

  Result<std::string> visit_type(const std::string& type, const Json& s, const std::string& path) {
    if (type == "object") return visit_object(s, path);
    if (type == "array") return visit_array(s, path);
    if (type == "string") return visit_string(s, path);
    if (type == "number" || type == "integer") return visit_number(type == "integer", s, path);
    if (type == "boolean") return std::string("(\"true\" | \"false\")");
    return std::string("\"null\"");
  }

  Result<std::string> visit_values(const std::vector<Json>& values, const Json& s,
                                   const std::string& path) {
    HEARTH_ASSIGN_OR_RETURN(std::vector<std::string> types, schema_types(s, path));
    std::vector<std::string> alts;
    for (const auto& v : values) {
      const std::string t = json_type_of(v);
      const bool typed_ok =
          types.empty() || std::find(types.begin(), types.end(), t) != types.end() ||
          (t == "integer" && std::find(types.begin(), types.end(), "number") != types.end());
      // Other keywords next to enum/const must hold too; only "type" is checked here.
      for (const auto& [key, unused] : s.items())
        if (key != "enum" && key != "const" && key != "type" && !kAnnotations.count(key))
          return Status(error(path, "'" + key + "' next to enum/const is not supported"));
      if (typed_ok) alts.push_back(schema::gbnf_literal(v.dump()));
    }
    if (alts.empty()) return Status(error(path, "no enum/const value has the schema's type"));
    return alternatives(alts);
  }

  // The node a local reference ("#", "#/a/b~1c/0": a JSON pointer with its ~0 and ~1
  // escapes) names, or null: one walk for every use, and it never throws, whatever the
  // input (a client's schema reaches it).
  const Json* find_ref(const std::string& ref) const {
    if (ref.empty() || ref[0] != '#' || (ref.size() > 1 && ref[1] != '/')) return nullptr;
    const Json* target = &root_;
    const std::string pointer = ref.substr(1);
    for (size_t i = 0; i < pointer.size();) {
      size_t j = pointer.find('/', i + 1);
      if (j == std::string::npos) j = pointer.size();
      std::string token = pointer.substr(i + 1, j - i - 1);
      for (size_t k = 0; (k = token.find('~', k)) != std::string::npos; ++k)
        token.replace(k, 2, token.compare(k, 2, "~1") == 0 ? "/" : "~");
      if (target->is_object() && target->contains(token)) {
        target = &(*target)[token];
      } else if (target->is_array() && !token.empty() && token.size() <= 9 &&
                 token.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoull(token) < target->size()) {
        target = &(*target)[std::stoull(token)];
      } else {
        return nullptr;
      }
      i = j;
    }
    return target;
  }
  // A branch with its $ref chain followed (at most 32 hops); null where a reference is not
  // find_ref's (kBadRef).
  static constexpr const char* kBadRef = "a '$ref' names no schema here (#/... pointer)";
  const Json* follow_refs(const Json* b) const {
    for (int hops = 0; b && b->is_object() && b->contains("$ref") && hops < 32; ++hops)
      b = (*b)["$ref"].is_string() ? find_ref((*b)["$ref"].get<std::string>()) : nullptr;
    return b;
  }

  Result<std::string> visit_ref(const std::string& ref, const std::string& path) {
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    if (ref.empty() || ref[0] != '#')
      return Status(error(path, "'$ref' " + ref + " is not a local reference (#/...)"));
    if (ref.size() > 1 && ref[1] != '/')
      return Status(error(path, "'$ref' " + ref + " is not a JSON pointer"));
    const Json* target = find_ref(ref);
    if (!target) return Status(error(path, "'$ref' " + ref + " points at nothing"));
    // Named before visiting, so a recursive reference finds the rule.
    const size_t slash = ref.rfind('/');
    const std::string name =
        new_rule("ref-" + ref.substr(slash == std::string::npos ? 1 : slash + 1), "");
    ref_rules_[ref] = name;
    HEARTH_ASSIGN_OR_RETURN(std::string body, visit(*target, ref));
    set_rule(name, body);
    return name;
  }

  Result<std::string> visit_any_of(const Json& s, const std::string& path) {
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    if (s.contains("anyOf") && s.contains("oneOf"))
      return Status(error(path, "'anyOf' and 'oneOf' together are not supported"));
    const Json& branches = s[key];
    if (!branches.is_array() || branches.empty())
      return Status(error(path + "/" + key, "must be a non-empty array"));
    for (const auto& [k, unused] : s.items())
      if (k != key && !kAnnotations.count(k))
        return Status(
            error(path, "'" + k + "' next to '" + key + "' is not supported (use allOf)"));
    if (std::string(key) == "oneOf") HEARTH_TRY(check_disjoint(branches, path));
    std::vector<std::string> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      HEARTH_ASSIGN_OR_RETURN(std::string e,
                              visit(branches[i], path + "/" + key + "/" + std::to_string(i)));
      alts.push_back(e);
    }
    return alternatives(alts);
  }

  // oneOf needs exactly one branch to match. Generated as anyOf, that holds only when no value
  // can match two branches; accepted when the branches' types (or enum/const values) differ.
  Status check_disjoint(const Json& branches, const std::string& path) {
    std::vector<std::set<std::string>> keys;
    for (size_t i = 0; i < branches.size(); ++i) {
      const Json* b = follow_refs(&branches[i]);
      if (!b) return error(path + "/oneOf/" + std::to_string(i), kBadRef);
      std::set<std::string> k;
      if (b->is_object() && (b->contains("const") || b->contains("enum"))) {
        if (b->contains("const"))
          k.insert("=" + (*b)["const"].dump());
        else if ((*b)["enum"].is_array())
          for (const auto& v : (*b)["enum"]) k.insert("=" + v.dump());
      } else if (b->is_object() && b->contains("type")) {
        const Json& t = (*b)["type"];
        for (const auto& v : t.is_array() ? t : Json::array({t}))
          if (v.is_string())
            k.insert(v.get<std::string>() == "integer" ? "number" : v.get<std::string>());
      }
      if (k.empty())
        return error(path + "/oneOf/" + std::to_string(i),
                     "oneOf branches must differ in type or enum/const values (else use anyOf)");
      for (const auto& other : keys)
        for (const auto& x : k)
          if (other.count(x))
            return error(path + "/oneOf/" + std::to_string(i),
                         "oneOf branches overlap (same type or value); use anyOf");
      keys.push_back(std::move(k));
    }
    return Status::ok();
  }

  // allOf of mergeable schemas: keywords in one branch only are copied; "properties" merge per
  // name (a name in several branches becomes an allOf of its schemas), "required" is the union,
  // equal values are kept; anything else in two branches is refused.
  Result<std::string> visit_all_of(const Json& s, const std::string& path) {
    const Json& branches = s["allOf"];
    if (!branches.is_array() || branches.empty())
      return Status(error(path + "/allOf", "must be a non-empty array"));
    Json merged = Json::object();
    std::vector<const Json*> closed;  // branches with additionalProperties other than true
    std::vector<Json> parts;
    for (const auto& [k, v] : s.items())
      if (k != "allOf") parts.push_back(Json{{k, v}});
    for (const auto& b : branches) {
      const Json* r = follow_refs(&b);
      if (!r) return Status(error(path + "/allOf", kBadRef));
      if (r->is_boolean()) {
        if (!r->get<bool>())
          return Status(error(path + "/allOf", "a 'false' branch matches nothing"));
        continue;
      }
      parts.push_back(*r);
    }
    for (const Json& part : parts) {
      if (!part.is_object()) return Status(error(path + "/allOf", "a branch is not a schema"));
      for (const auto& [k, v] : part.items()) {
        if (kAnnotations.count(k)) continue;
        if (k == "allOf" || k == "$ref")
          return Status(error(path + "/allOf", "nested '" + k + "' inside allOf is not supported"));
        if (k == "properties") {
          if (!v.is_object())
            return Status(error(path + "/allOf", "'properties' must be an object"));
          Json& props = merged["properties"];
          if (props.is_null()) props = Json::object();
          for (const auto& [name, sub] : v.items()) {
            if (!props.contains(name))
              props[name] = sub;
            else if (props[name] != sub)
              props[name] = Json{{"allOf", Json::array({props[name], sub})}};
          }
        } else if (k == "required") {
          if (!v.is_array()) return Status(error(path + "/allOf", "'required' must be an array"));
          Json& req = merged["required"];
          if (req.is_null()) req = Json::array();
          for (const auto& name : v)
            if (std::find(req.begin(), req.end(), name) == req.end()) req.push_back(name);
        } else if (!merged.contains(k) || merged[k] == v) {
          merged[k] = v;
        } else {
          return Status(error(path + "/allOf", "'" + k +
                                                   "' in two branches with different values "
                                                   "cannot be merged"));
        }
      }
      if (part.contains("additionalProperties") && part["additionalProperties"] != true)
        closed.push_back(&part);
    }
    // A branch that forbids (or constrains) other properties must know every merged property.
    if (!closed.empty() && merged.contains("properties")) {
      for (const auto& [name, unused] : merged["properties"].items())
        for (const Json* c : closed)
          if (!c->contains("properties") || !(*c)["properties"].contains(name))
            return Status(error(path + "/allOf", "property '" + name +
                                                     "' is not allowed by a branch's "
                                                     "additionalProperties"));
    }
    // Defs stay reachable through the root; the merged schema is visited at the same path.
    return visit(merged, path);
  }

  Result<std::string> visit_object(const Json& s, const std::string& path);
  Result<std::string> visit_array(const Json& s, const std::string& path);
  Result<std::string> visit_string(const Json& s, const std::string& path);
  Result<std::string> visit_number(bool integer, const Json& s, const std::string& path);
  Result<std::string> key_not_in(const std::vector<std::string>& names);
  Result<int64_t> count_keyword(const Json& s, const char* key, const std::string& path);

  const Json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  int depth_ = 0;  // schemas being visited around the current one
};

Result<int64_t> SchemaConverter::count_keyword(const Json& s, const char* key,
                                               const std::string& path) {
  if (!s.contains(key)) return int64_t(-1);
  const Json& v = s[key];
  if (!v.is_number_integer() && !v.is_number_unsigned())
    return Status(error(path + "/" + key, "must be a non-negative integer"));
  if (v.is_number_integer() && v.get<int64_t>() < 0)
    return Status(error(path + "/" + key, "must be a non-negative integer"));
  const uint64_t n = v.get<uint64_t>();
  if (n > 10000) return Status(error(path + "/" + key, "above 10000 is not supported"));
  return int64_t(n);
}

// A key string equal to none of `names` (the decoded property names): a trie of the names,
// where each step either leaves the trie (any other character, then anything) or follows it.
// Only raw characters are generated, so an escape can never spell a listed name.
Result<std::string> SchemaConverter::key_not_in(const std::vector<std::string>& names) {
  struct Node {
    std::map<uint32_t, int> next;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const auto& name : names) {
    int node = 0;
    for (size_t i = 0; i < name.size();) {
      uint32_t cp = 0;
      if (!decode_utf8(name, &i, &cp))
        return Status::error("JSON Schema: invalid UTF-8 in a property name");
      auto it = trie[size_t(node)].next.find(cp);
      if (it == trie[size_t(node)].next.end()) {
        trie.emplace_back();
        it = trie[size_t(node)].next.emplace(cp, int(trie.size() - 1)).first;
      }
      node = it->second;
    }
    trie[size_t(node)].terminal = true;
  }
  const std::string raw_any =
      schema::json_char(normalize_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true));
  std::vector<std::string> names_of(trie.size());
  for (size_t i = 0; i < trie.size(); ++i) names_of[i] = new_rule("key-not-in", "");
  for (size_t i = 0; i < trie.size(); ++i) {
    std::vector<std::string> alts;
    if (!trie[i].terminal) alts.push_back("\"\"");
    std::vector<CodepointRange> taken = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (const auto& [cp, child] : trie[i].next) {
      taken.push_back({cp, cp});
      alts.push_back(schema::json_char({{cp, cp}}) + " " + names_of[size_t(child)]);
    }
    const auto other = normalize_ranges(taken, true);
    if (!other.empty()) alts.push_back(schema::json_char(other) + " " + raw_any + "*");
    set_rule(names_of[i], alternatives(alts));
  }
  return "\"\\\"\" " + names_of[0] + " \"\\\"\"";
}

Result<std::string> SchemaConverter::visit_object(const Json& s, const std::string& path) {
  struct Member {
    std::string name, value_expr;
    bool required;
  };
  std::vector<Member> members;
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return Status(error(path + "/required", "must be an array"));
    for (const auto& r : s["required"]) {
      if (!r.is_string()) return Status(error(path + "/required", "must list strings"));
      required.insert(r.get<std::string>());
    }
  }
  std::set<std::string> listed;
  if (s.contains("properties")) {
    if (!s["properties"].is_object())
      return Status(error(path + "/properties", "must be an object"));
    for (const auto& [name, sub] : s["properties"].items()) {
      HEARTH_ASSIGN_OR_RETURN(std::string e, visit(sub, path + "/properties/" + name));
      members.push_back({name, e, required.count(name) > 0});
      listed.insert(name);
    }
  }
  for (const auto& r : required)  // required but not described: any value
    if (!listed.count(r)) members.push_back({r, any_value(), true}), listed.insert(r);

  // Other properties: false -> none; true -> any value; a schema -> that schema; absent -> none
  // when "properties" lists some (a subset of the valid objects, and what a caller listing
  // properties wants), any when it lists none ({"type":"object"} is any object).
  std::string extra;
  const Json additional = s.contains("additionalProperties") ? s["additionalProperties"]
                          : s.contains("properties")         ? Json(false)
                                                             : Json(true);
  if (additional != false) {
    HEARTH_ASSIGN_OR_RETURN(std::string value, visit(additional, path + "/additionalProperties"));
    HEARTH_ASSIGN_OR_RETURN(std::string key,
                            key_not_in(std::vector<std::string>(listed.begin(), listed.end())));
    extra = new_rule("extra-kv", key + " " + ws() + " \":\" " + ws() + " " + value + " " + ws());
  }
  const std::string w = ws();
  // first_i: members i.. when none was written yet; next_i: after one was (leading ",").
  std::string first = extra.empty() ? "\"\"" : "(" + extra + " (\",\" " + w + " " + extra + ")*)?";
  std::string next = extra.empty() ? "\"\"" : "(\",\" " + w + " " + extra + ")*";
  for (size_t i = members.size(); i-- > 0;) {
    const Member& m = members[i];
    const std::string kv =
        new_rule("kv-" + m.name, schema::gbnf_literal(Json(m.name).dump()) + " " + w + " \":\" " +
                                     w + " " + m.value_expr + " " + w);
    const std::string next_rule = new_rule("after-" + m.name, next);
    const std::string first_rule = new_rule("from-" + m.name, first);
    if (m.required) {
      set_rule(next_rule, "\",\" " + w + " " + kv + " " + next);
      set_rule(first_rule, kv + " " + next);
    } else {
      set_rule(next_rule, "(\",\" " + w + " " + kv + ")? " + next);
      set_rule(first_rule, kv + " " + next + " | " + first);
    }
    next = next_rule;
    first = first_rule;
  }
  return new_rule("object", "\"{\" " + w + " " + first + " \"}\"");
}

Result<std::string> SchemaConverter::visit_array(const Json& s, const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(int64_t min_items, count_keyword(s, "minItems", path));
  HEARTH_ASSIGN_OR_RETURN(int64_t max_items, count_keyword(s, "maxItems", path));
  min_items = std::max<int64_t>(min_items, 0);
  std::vector<std::string> prefix;
  const Json* prefix_items = s.contains("prefixItems")                        ? &s["prefixItems"]
                             : (s.contains("items") && s["items"].is_array()) ? &s["items"]
                                                                              : nullptr;
  if (prefix_items) {
    if (!prefix_items->is_array()) return Status(error(path + "/prefixItems", "must be an array"));
    for (size_t i = 0; i < prefix_items->size(); ++i) {
      HEARTH_ASSIGN_OR_RETURN(
          std::string e, visit((*prefix_items)[i], path + "/prefixItems/" + std::to_string(i)));
      prefix.push_back(e);
    }
  }
  // Items after the prefix: "items" (a schema), none when it is false, any value when absent.
  std::string rest;
  const bool items_is_schema = s.contains("items") && !s["items"].is_array();
  if (items_is_schema && s["items"] != false) {
    HEARTH_ASSIGN_OR_RETURN(rest, visit(s["items"], path + "/items"));
  } else if (!items_is_schema) {
    rest = any_value();
  }
  const int64_t k = int64_t(prefix.size());
  if (max_items >= 0 && max_items < min_items)
    return Status(error(path, "maxItems is below minItems"));
  if (rest.empty() && min_items > k)
    return Status(error(path, "minItems needs more items than prefixItems allows"));
  const std::string w = ws();
  // Items beyond the prefix, each with a leading comma: between max(0, min - k) and max - k.
  std::string tail;
  if (!rest.empty() && (max_items < 0 || max_items > k)) {
    const int64_t lo = std::max<int64_t>(0, min_items - k);
    const std::string item = new_rule("item", "\",\" " + w + " " + rest + " " + w);
    tail = "(" + item + "){" + std::to_string(lo) + "," +
           (max_items < 0 ? "" : std::to_string(max_items - k)) + "}";
  }
  if (k == 0) {
    if (rest.empty() || max_items == 0) return new_rule("array", "\"[\" " + w + " \"]\"");
    // The first item has no comma: one fewer from the tail's counts.
    const int64_t lo = std::max<int64_t>(0, min_items - 1);
    const std::string item = new_rule("item", "\",\" " + w + " " + rest + " " + w);
    const std::string more = "(" + item + "){" + std::to_string(lo) + "," +
                             (max_items < 0 ? "" : std::to_string(max_items - 1)) + "}";
    const std::string items = rest + " " + w + " " + more;
    return new_rule("array",
                    "\"[\" " + w + " " + (min_items > 0 ? items : "(" + items + ")?") + " \"]\"");
  }
  // after_i: the array after i prefix items; it may stop once i >= minItems.
  const int64_t limit = max_items < 0 ? k : std::min(k, max_items);
  if (limit == 0) return new_rule("array", "\"[\" " + w + " \"]\"");
  std::string after = tail.empty() || limit < k ? "\"\"" : tail;  // after the last prefix item
  for (int64_t i = limit - 1; i >= 1; --i) {
    const std::string cont = "\",\" " + w + " " + prefix[size_t(i)] + " " + w + " " + after;
    after = new_rule("after-item-" + std::to_string(i), i >= min_items ? "(" + cont + ")?" : cont);
  }
  const std::string body = prefix[0] + " " + w + " " + after;
  return new_rule("array", "\"[\" " + w + " " +
                               (min_items > 0 && limit > 0 ? body : "(" + body + ")?") + " \"]\"");
}

Result<std::string> SchemaConverter::visit_string(const Json& s, const std::string& path) {
  HEARTH_ASSIGN_OR_RETURN(int64_t min_len, count_keyword(s, "minLength", path));
  HEARTH_ASSIGN_OR_RETURN(int64_t max_len, count_keyword(s, "maxLength", path));
  const bool bounded = min_len >= 0 || max_len >= 0;
  if (s.contains("format")) {
    if (!s["format"].is_string()) return Status(error(path + "/format", "must be a string"));
    if (bounded || s.contains("pattern"))
      return Status(error(path, "'format' with minLength/maxLength/pattern is not supported"));
    auto f = schema::string_format(s["format"].get<std::string>());
    if (!f) return Status(error(path + "/format", f.message()));
    return f;
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) return Status(error(path + "/pattern", "must be a string"));
    if (bounded) return Status(error(path, "'pattern' with minLength/maxLength is not supported"));
    auto p = schema::pattern_to_gbnf(s["pattern"].get<std::string>());
    if (!p) return Status(error(path + "/pattern", p.message()));
    return new_rule("pattern", "\"\\\"\" " + p.value() + " \"\\\"\"");
  }
  if (max_len >= 0 && max_len < std::max<int64_t>(min_len, 0))
    return Status(error(path, "maxLength is below minLength"));
  const std::string ch = any_char();
  if (!bounded) return "(\"\\\"\" " + ch + "* \"\\\"\")";
  return "(\"\\\"\" " + ch + "{" + std::to_string(std::max<int64_t>(min_len, 0)) + "," +
         (max_len < 0 ? "" : std::to_string(max_len)) + "} \"\\\"\")";
}

Result<std::string> SchemaConverter::visit_number(bool integer, const Json& s,
                                                  const std::string& path) {
  schema::NumericBounds b;
  for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (!s.contains(key)) continue;
    const Json& v = s[key];
    const bool is_min =
        key[0] == 'm' ? std::string(key) == "minimum" : std::string(key) == "exclusiveMinimum";
    std::optional<double>& bound = is_min ? b.min : b.max;
    bool& exclusive = is_min ? b.min_exclusive : b.max_exclusive;
    if (v.is_boolean()) {  // draft 4: exclusiveMinimum: true applies to minimum
      if (key[0] != 'e') return Status(error(path + "/" + key, "must be a number"));
      if (v.get<bool>()) exclusive = true;
      continue;
    }
    if (!v.is_number()) return Status(error(path + "/" + key, "must be a number"));
    const double x = v.get<double>();
    const bool excl = key[0] == 'e';
    // Two bounds on one side: the tighter one wins.
    const bool tighter = !bound || (is_min ? x > *bound || (x == *bound && excl)
                                           : x < *bound || (x == *bound && excl));
    if (tighter) {
      bound = x;
      exclusive = excl;
    }
  }
  if (!b.min && !b.max) {
    if (integer) return std::string("(\"-\"? (\"0\" | [1-9] [0-9]{0,15}))");
    any_value();
    return std::string("json-number");
  }
  auto r = integer ? schema::integer_range(b) : schema::number_range(b);
  if (!r) return Status(error(path, r.message()));
  return new_rule(integer ? "integer" : "number", r.value());
}

}  // namespace

Result<std::string> json_schema_to_gbnf(std::string_view schema_json) {
  Json schema = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return Status::error("JSON Schema: not valid JSON");
  auto gbnf = SchemaConverter(schema).convert();
  // Errors quote the schema (keys, patterns): one line, whatever they hold.
  if (!gbnf.is_ok()) return Status::error(printable(gbnf.message()));
  return gbnf;
}

std::string json_object_gbnf() {
  const Json empty = Json::object();
  SchemaConverter c(empty);
  auto g = c.convert();  // the any-value rules, then a root that is an object
  std::string text = g.value();
  return "root ::= json-object\n" + text.substr(text.find('\n') + 1);
}

}  // namespace hearth
