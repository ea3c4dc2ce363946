// The published chat templates (fixtures/published/*.jinja, as the models ship them) rendered
// over conversations with tools, tool calls, tool results and documents
// (fixtures/conversations/*.json) by Hearth and by Python's jinja2 with Hugging Face's settings
// (jinja2-render.py, run at test time): the bytes must be identical, and a template that raises
// in jinja2 must fail in Hearth too.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/chat/chat-template.h"
#include "support/test-data.h"

namespace hearth {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr int64_t kFixedTime = 1738195200;  // 2025-01-30, so strftime_now agrees on both sides

std::vector<std::pair<std::string, std::string>> files_in(const std::string& dir,
                                                          const std::string& ext) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ext) continue;
    out.emplace_back(e.path().stem().string(), test::read_file(e.path().string()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Case {
  std::string name;
  std::string tmpl;
  json conversation;
  bool add_generation_prompt;
};

Result<std::string> render_hearth(const Case& c) {
  HEARTH_ASSIGN_OR_RETURN(auto messages,
                          parse_chat_messages_json(c.conversation["messages"].dump(), c.name));
  jinja::Variables extra;
  if (c.conversation.contains("extra")) {
    for (const auto& [k, v] : c.conversation["extra"].items()) {
      HEARTH_ASSIGN_OR_RETURN(jinja::Value value, json_to_value(v.dump(), c.name + ": " + k));
      extra.emplace_back(k, std::move(value));
    }
  }
  jinja::Limits limits;
  limits.fixed_time = kFixedTime;
  return render_chat_template(c.tmpl, messages, c.add_generation_prompt, "<|bos|>", "<|eos|>",
                              extra, limits);
}

json run_jinja2(const json& request) {
  const auto py = test::run_command(
      {"/usr/bin/python3", test::source_dir() + "/tests/unit/chat/jinja2-render.py"},
      request.dump());
  EXPECT_EQ(py.exit_code, 0) << py.err;
  return py.exit_code == 0 ? json::parse(py.out) : json::array();
}

json jinja2_case(const std::string& tmpl, const json& conversation, bool gen) {
  json r;
  r["template"] = tmpl;
  r["messages"] = conversation["messages"];
  r["extra"] = conversation.value("extra", json::object());
  r["add_generation_prompt"] = gen;
  r["bos_token"] = "<|bos|>";
  r["eos_token"] = "<|eos|>";
  r["time"] = kFixedTime;
  return r;
}

TEST(Jinja2Compat, PublishedTemplatesRenderAsJinja2) {
  const std::string root = test::source_dir() + "/tests/unit/chat/fixtures/";
  const auto templates = files_in(root + "published", ".jinja");
  const auto conversations = files_in(root + "conversations", ".json");
  ASSERT_GE(templates.size(), 18u);
  ASSERT_GE(conversations.size(), 8u);
  std::vector<Case> cases;
  json request = json::array();
  for (const auto& [tname, ttext] : templates) {
    for (const auto& [cname, ctext] : conversations) {
      for (bool gen : {true, false}) {
        Case c{tname + " x " + cname + (gen ? " +gen" : ""), ttext, json::parse(ctext), gen};
        request.push_back(jinja2_case(ttext, c.conversation, gen));
        cases.push_back(std::move(c));
      }
    }
  }
  const json expected = run_jinja2(request);
  ASSERT_EQ(expected.size(), cases.size());
  int rendered = 0, both_failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto got = render_hearth(cases[i]);
    const json& want = expected[i];
    if (!want["ok"].get<bool>()) {
      EXPECT_FALSE(got.is_ok()) << cases[i].name << ": jinja2 raised "
                                << want["error"].get<std::string>() << "\nHearth rendered:\n"
                                << (got.is_ok() ? got.value() : "");
      ++both_failed;
      continue;
    }
    ASSERT_TRUE(got.is_ok()) << cases[i].name << ": " << got.message();
    EXPECT_EQ(got.value(), want["text"].get<std::string>()) << cases[i].name;
    ++rendered;
  }
  std::printf("%d renders identical to jinja2, %d refused by both\n", rendered, both_failed);
  // Most pairs render; the failures are templates refusing a conversation (roles, tools).
  EXPECT_GT(rendered, static_cast<int>(cases.size()) * 2 / 3) << both_failed << " refused";
}

// Filters, tests and operators on none / undefined / markup values, each compared with jinja2:
// the same text, or an error on both sides. `messages` is bound to two messages.
TEST(Jinja2Compat, NoneAndUndefinedAsJinja2) {
  const std::vector<std::string> snippets = {
      "{{ none | selectattr('a') | list }}",
      "{{ none | rejectattr('a', 'none') | list }}",
      "{{ none | select | list }}",
      "{{ none | reject('none') | list }}",
      "{{ none | map('upper') | list }}",
      "{{ nope | map(attribute='x') | list }}",
      "{{ nope | selectattr('a') | list }}",
      "{{ none | list }}",
      "{{ nope | list }}",
      "{{ nope | length }}",
      "{{ none | length }}",
      "{{ nope | join(',') }}",
      "{{ none | join(',') }}",
      "{{ none | default('d') }}",
      "{{ none | default('d', true) }}",
      "{{ nope | default('d') }}",
      "{{ nope | tojson }}",
      "{{ none | tojson }}",
      "{{ [] | first }}|",
      "{{ nope | first }}|",
      "{{ none | first }}",
      "{{ none | last }}",
      "{{ none | string }}",
      "{{ nope | string }}|",
      "{{ none ~ 'x' }}",
      "{{ nope ~ 'x' }}",
      "{{ none | trim }}",
      "{{ nope | trim }}|",
      "{{ nope | upper }}|",
      "{{ none | capitalize }}",
      "{{ none | replace('o', '0') }}",
      "{{ none | int }}",
      "{{ nope | int }}",
      "{{ none | float }}",
      "{{ 'x' | int }}",
      "{{ none | unique | list }}",
      "{{ nope | sort }}",
      "{{ none | sort }}",
      "{{ none | sum }}",
      "{{ nope | sum }}",
      "{{ none | items | list }}",
      "{{ nope | items | list }}",
      "{{ none | dictsort }}",
      "{{ none is none }}",
      "{{ nope is defined }}",
      "{{ nope is none }}",
      "{{ none is defined }}",
      "{{ none is iterable }}",
      "{{ nope is iterable }}",
      "{{ nope is sequence }}",
      "{{ nope | float }}",
      "{{ none is string }}",
      "{{ none is mapping }}",
      "{{ nope == none }}",
      "{{ none == none }}",
      "{{ none or 'x' }}",
      "{{ none and 'x' }}",
      "{{ 'a' in none }}",
      "{{ 'a' in nope }}",
      "{{ none.x }}|",
      "{{ none['x'] }}|",
      "{{ nope.x }}",
      "{{ {'a': 1}.b }}|",
      "{{ 'abc'.x }}|",
      "{% for x in none %}a{% endfor %}",
      "{% for x in nope %}a{% else %}b{% endfor %}",
      "{{ (none or []) | list }}",
      "{{ none | default([]) | list }}",
      "{{ none | safe }}",
      "{{ 'a<b' | safe + '<c>' }}",
      "{{ '<c>' + 'a<b' | safe }}",
      "{{ 'a<b' | safe ~ '<c>' }}",
      "{{ '<x>' | escape }}",
      "{{ '<x>' | escape | escape }}",
      "{{ '<x>' | e | forceescape }}",
      "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}",
      "{{ messages | map(attribute='role') | join(',') }}",
      "{{ messages | map(attribute='nope', default='-') | join(',') }}",
      "{{ messages[0].tool_calls | default([]) | length }}",
      "{{ messages[5] is defined }}",
      "{{ messages[0].content is none }}",
      "{{ tools is none }}{{ documents is none }}",
      "{{ nope is undefined }}",
  };
  const json conversation = json::parse(
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}]})");
  json request = json::array();
  for (const auto& t : snippets) request.push_back(jinja2_case(t, conversation, false));
  const json expected = run_jinja2(request);
  ASSERT_EQ(expected.size(), snippets.size());
  for (size_t i = 0; i < snippets.size(); ++i) {
    Case c{snippets[i], snippets[i], conversation, false};
    const auto got = render_hearth(c);
    if (!expected[i]["ok"].get<bool>()) {
      EXPECT_FALSE(got.is_ok()) << snippets[i] << ": jinja2 raised "
                                << expected[i]["error"].get<std::string>() << ", Hearth gave \""
                                << (got.is_ok() ? got.value() : "") << "\"";
      continue;
    }
    EXPECT_TRUE(got.is_ok()) << snippets[i] << ": " << got.message() << " (jinja2 gave \""
                             << expected[i]["text"].get<std::string>() << "\")";
    if (got.is_ok()) EXPECT_EQ(got.value(), expected[i]["text"].get<std::string>()) << snippets[i];
  }
}

}  // namespace
}  // namespace hearth
