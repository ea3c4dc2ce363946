// A small JSON Schema validator for the tests, written from the specification and sharing no
// code with the converter: what generated outputs are checked against.
#pragma once

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace hearth::test {

using ordered_json = nlohmann::ordered_json;

class SchemaValidator {
 public:
  explicit SchemaValidator(const ordered_json& root) : root_(root) {}
  // "" when valid, else where and why not.
  std::string check(const ordered_json& v) const { return check(v, root_, "$"); }

 private:
  static size_t codepoints(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }
  static bool is_integer(const ordered_json& v) {
    return v.is_number_integer() || v.is_number_unsigned() ||
           (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
  }
  static bool has_type(const ordered_json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number() && is_integer(v);
    return false;
  }

  std::string check(const ordered_json& v, const ordered_json& s, const std::string& at) const {
    if (s.is_boolean()) return s.get<bool>() ? "" : at + ": schema false";
    if (s.contains("$ref")) {
      const std::string ref = s["$ref"];
      return check(v, root_[ordered_json::json_pointer(ref.substr(1))], at);
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_array()) {
        for (const auto& t : s["type"]) ok = ok || has_type(v, t);
      } else {
        ok = has_type(v, s["type"]);
      }
      if (!ok) return at + ": not of type " + s["type"].dump();
    }
    if (s.contains("const") && v != s["const"]) return at + ": not the const";
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s["enum"]) found = found || e == v;
      if (!found) return at + ": not in the enum";
    }
    if (s.contains("anyOf")) {
      bool any = false;
      for (const auto& b : s["anyOf"]) any = any || check(v, b, at).empty();
      if (!any) return at + ": matches no anyOf branch";
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const auto& b : s["oneOf"]) n += check(v, b, at).empty();
      if (n != 1) return at + ": matches " + std::to_string(n) + " oneOf branches";
    }
    if (s.contains("allOf")) {
      for (const auto& b : s["allOf"]) {
        const std::string e = check(v, b, at);
        if (!e.empty()) return e;
      }
    }
    if (v.is_object()) {
      if (s.contains("required"))
        for (const auto& r : s["required"])
          if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
      for (const auto& [k, x] : v.items()) {
        const bool listed = s.contains("properties") && s["properties"].contains(k);
        if (listed) {
          const std::string e = check(x, s["properties"][k], at + "." + k);
          if (!e.empty()) return e;
        } else if (s.contains("additionalProperties")) {
          const std::string e = check(x, s["additionalProperties"], at + "." + k);
          if (!e.empty()) return e;
        }
      }
    }
    if (v.is_array()) {
      size_t prefix = 0;
      if (s.contains("prefixItems")) {
        prefix = s["prefixItems"].size();
        for (size_t i = 0; i < std::min(prefix, v.size()); ++i) {
          const std::string e =
              check(v[i], s["prefixItems"][i], at + "[" + std::to_string(i) + "]");
          if (!e.empty()) return e;
        }
      }
      if (s.contains("items"))
        for (size_t i = prefix; i < v.size(); ++i) {
          const std::string e = check(v[i], s["items"], at + "[" + std::to_string(i) + "]");
          if (!e.empty()) return e;
        }
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": too few";
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>())
        return at + ": too many";
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      if (s.contains("minLength") && codepoints(str) < s["minLength"].get<size_t>())
        return at + ": too short";
      if (s.contains("maxLength") && codepoints(str) > s["maxLength"].get<size_t>())
        return at + ": too long";
      if (s.contains("pattern") &&
          !std::regex_search(str,
                             std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript)))
        return at + ": does not match " + s["pattern"].get<std::string>();
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum";
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum";
      if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>())
        return at + ": not above exclusiveMinimum";
      if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>())
        return at + ": not below exclusiveMaximum";
    }
    return "";
  }

  const ordered_json& root_;
};

}  // namespace hearth::test
