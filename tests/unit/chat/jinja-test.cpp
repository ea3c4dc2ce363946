// The Jinja interpreter construct by construct: whitespace control, statements, expressions,
// filters, tests and methods. Expected strings follow Jinja2 with trim_blocks/lstrip_blocks on.
#include <gtest/gtest.h>

#include "runtime/chat/jinja.h"

namespace hearth::jinja {
namespace {

std::string render_ok(const std::string& tmpl, const Variables& vars = {}, Limits limits = {}) {
  auto r = render(tmpl, vars, limits);
  EXPECT_TRUE(r.is_ok()) << tmpl << "\n-> " << r.message();
  return r.is_ok() ? r.value() : "<error: " + r.message() + ">";
}

std::string render_err(const std::string& tmpl, const Variables& vars = {}, Limits limits = {}) {
  auto r = render(tmpl, vars, limits);
  EXPECT_FALSE(r.is_ok()) << tmpl << "\n-> rendered: " << (r.is_ok() ? r.value() : "");
  return r.message();
}

TEST(JinjaText, PlainTextAndTrailingNewline) {
  EXPECT_EQ(render_ok("hello"), "hello");
  EXPECT_EQ(render_ok("hello\n"), "hello");  // keep_trailing_newline=False drops one
  EXPECT_EQ(render_ok("hello\n\n"), "hello\n");
  EXPECT_EQ(render_ok(""), "");
  EXPECT_EQ(render_ok("a { b } c"), "a { b } c");
}

TEST(JinjaText, Comments) {
  EXPECT_EQ(render_ok("a{# note #}b"), "ab");
  EXPECT_EQ(render_ok("a\n  {# note #}\nb"), "a\nb");  // comments lstrip and trim like blocks
  EXPECT_EQ(render_ok("a {#- note -#} b"), "ab");
}

TEST(JinjaWhitespace, MinusStripsAllWhitespace) {
  EXPECT_EQ(render_ok("a  \n {{- 'b' -}} \n  c"), "abc");
  EXPECT_EQ(render_ok("x\n  {%- if true -%}\n  y\n{%- endif %}"), "xy");
}

TEST(JinjaWhitespace, TrimBlocksRemovesOneNewline) {
  EXPECT_EQ(render_ok("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(render_ok("{% if true %}\n\nyes{% endif %}"), "\nyes");
  // Only after blocks, not after {{ }}.
  EXPECT_EQ(render_ok("{{ 'a' }}\nb"), "a\nb");
  // `+%}` disables it.
  EXPECT_EQ(render_ok("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(JinjaWhitespace, LstripBlocksOnlyAtLineStart) {
  EXPECT_EQ(render_ok("  {% if true %}\n  x\n  {% endif %}\n"), "  x\n");
  EXPECT_EQ(render_ok("\t {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render_ok("a  {% if true %}b{% endif %}"), "a  b");  // text before it on the line
  EXPECT_EQ(render_ok("  {{ 'x' }}"), "  x");                    // not for {{ }}
  EXPECT_EQ(render_ok("  {%+ if true %}x{% endif %}"), "  x");   // `{%+` disables it
}

TEST(JinjaWhitespace, RawBlock) {
  EXPECT_EQ(render_ok("{% raw %}{{ x }}{% if %}{% endraw %}!"), "{{ x }}{% if %}!");
}

TEST(JinjaExpr, Arithmetic) {
  EXPECT_EQ(render_ok("{{ 1 + 2 * 3 }},{{ (1 + 2) * 3 }},{{ 2 ** 10 }},{{ -2 ** 2 }}"),
            "7,9,1024,4");
  EXPECT_EQ(
      render_ok("{{ 7 // 2 }},{{ -7 // 2 }},{{ 7 % 3 }},{{ -7 % 3 }},{{ 7 / 2 }},{{ 4 / 2 }}"),
      "3,-4,1,2,3.5,2.0");
  EXPECT_EQ(render_ok("{{ 1.5 + 1 }},{{ 10 - 0.5 }},{{ 3 * 0.5 }},{{ -(3) }},{{ +4 }}"),
            "2.5,9.5,1.5,-3,4");
  EXPECT_EQ(render_ok("{{ 'ab' ~ 1 ~ none }},{{ 'ab' + 'cd' }},{{ 'ab' * 3 }},{{ [1] + [2] }}"),
            "ab1None,abcd,ababab,[1, 2]");
}

TEST(JinjaExpr, PythonPrinting) {
  EXPECT_EQ(render_ok("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 123456.5 }}"),
            "1.0 0.30000000000000004 1e+20 1.5e-05 123456.5");
  EXPECT_EQ(render_ok("{{ none }} {{ true }} {{ [1, 'a', none, True] }} {{ {'k': \"it's\"} }}"),
            "None True [1, 'a', None, True] {'k': \"it's\"}");
}

TEST(JinjaExpr, StringLiteralEscapes) {
  EXPECT_EQ(render_ok(R"({{ 'a\nb\t"c\'' }})"), "a\nb\t\"c'");
  EXPECT_EQ(render_ok(R"({{ "\u00e9\x41" 'z' }})"),
            "\xc3\xa9"
            "Az");  // adjacent literals join
  EXPECT_EQ(render_ok(R"({{ 'keep \q' }})"), "keep \\q");
}

TEST(JinjaExpr, ComparisonsAndLogic) {
  EXPECT_EQ(render_ok("{{ 1 < 2 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ 1 != 2 }}{{ 2 >= 2 }}"),
            "TrueTrueTrueTrueTrue");
  EXPECT_EQ(render_ok("{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}"), "TrueFalse");
  EXPECT_EQ(render_ok("{{ true and false }}|{{ false or 'x' }}|{{ not 0 }}|{{ 0 and 1 }}"),
            "False|x|True|0");
  EXPECT_EQ(render_ok("{{ not 1 == 2 }}"), "True");  // not binds looser than ==
}

TEST(JinjaExpr, Membership) {
  EXPECT_EQ(render_ok("{{ 'a' in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}"),
            "TrueTrueTrueTrue");
  EXPECT_EQ(render_ok("{{ 'z' in 'cat' }}{{ 'x' in undefined_thing }}"), "FalseFalse");
}

TEST(JinjaExpr, Ternary) {
  EXPECT_EQ(render_ok("{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]"), "yn[]");
  EXPECT_EQ(render_ok("{{ 'a' if false else 'b' if true else 'c' }}"), "b");
}

TEST(JinjaExpr, IndexingAndSlicing) {
  const std::string setup = "{% set l = [1, 2, 3, 4, 5] %}";
  EXPECT_EQ(
      render_ok(setup + "{{ l[0] }}{{ l[-1] }}{{ l[1:3] }}{{ l[:-2] }}{{ l[::2] }}{{ l[::-1] }}"),
      "15[2, 3][1, 2, 3][1, 3, 5][5, 4, 3, 2, 1]");
  EXPECT_EQ(render_ok(setup + "[{{ l[9] }}]{{ l[3:] }}{{ l[-2:] }}{{ l[10:] }}"),
            "[][4, 5][4, 5][]");
  // Strings index by code point, as Python does.
  EXPECT_EQ(render_ok("{{ 'h\xc3\xa9llo'[1:3] }}{{ 'abc'[-1] }}{{ 'abc'[::-1] }}"),
            "\xc3\xa9lccba");
  EXPECT_EQ(render_ok("{% set d = {'a': {'b': [7, 8]}} %}{{ d['a']['b'][1] }}{{ d.a.b.0 }}"), "87");
}

TEST(JinjaExpr, UndefinedBehaviour) {
  EXPECT_EQ(render_ok("[{{ nothing }}]{{ nothing is defined }}{{ {}.missing is defined }}"),
            "[]FalseFalse");
  EXPECT_NE(render_err("{{ nothing.attr }}").find("'nothing' is undefined"), std::string::npos);
  EXPECT_NE(render_err("{{ nothing['x'] }}").find("undefined"), std::string::npos);
  EXPECT_EQ(render_ok("{% for x in nothing %}x{% endfor %}{{ nothing | length }}"), "0");
}

TEST(JinjaStatements, ForLoopVariables) {
  EXPECT_EQ(render_ok("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}"
                      "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}"
                      "{{ loop.length }}{{ x }};{% endfor %}"),
            "1032TrueFalse3a;2121FalseFalse3b;3210FalseTrue3c;");
  EXPECT_EQ(render_ok("{% for x in [1, 2, 3] %}{{ loop.previtem }}{{ loop.cycle('a', 'b') }}"
                      "{% endfor %}"),
            "a1b2a");
}

TEST(JinjaStatements, ForElseFilterUnpackBreakContinue) {
  EXPECT_EQ(render_ok("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render_ok("{% for x in range(6) if x is even %}{{ x }}{{ loop.last }} {% endfor %}"),
            "0False 2False 4True ");
  EXPECT_EQ(render_ok("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }},{% endfor %}"),
            "a=1,b=2,");
  EXPECT_EQ(render_ok("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}"), "ab");
  EXPECT_EQ(render_ok("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}"
                      "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "0134");
  EXPECT_EQ(render_ok("{% for c in 'ab' %}{{ c }}.{% endfor %}"), "a.b.");
  EXPECT_EQ(render_ok("{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }} {% endfor %}"
                      "{% endfor %}"),
            "00 01 10 11 ");
}

TEST(JinjaStatements, IfElifElse) {
  EXPECT_EQ(render_ok("{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two"
                      "{% else %}many{% endif %} {% endfor %}"),
            "one two many ");
}

TEST(JinjaStatements, SetScopingAndNamespace) {
  // A set inside a loop does not leak out of it; namespace() is the escape hatch.
  EXPECT_EQ(render_ok("{% set x = 1 %}{% for i in range(3) %}{% set x = 5 %}{% endfor %}{{ x }}"),
            "1");
  EXPECT_EQ(render_ok("{% set ns = namespace(count=0, found=false) %}{% for i in range(3) %}"
                      "{% set ns.count = ns.count + 1 %}{% if i == 1 %}{% set ns.found = true %}"
                      "{% endif %}{% endfor %}{{ ns.count }}{{ ns.found }}"),
            "3True");
  // An if block is not a scope.
  EXPECT_EQ(render_ok("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
  EXPECT_EQ(render_ok("{% set x %}a{{ 1 }}b{% endset %}[{{ x }}]"), "[a1b]");
  EXPECT_NE(render_err("{% set d = {} %}{% set d.x = 1 %}").find("namespace"), std::string::npos);
}

TEST(JinjaStatements, Macros) {
  EXPECT_EQ(render_ok("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                      "{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Cy') }}"),
            "Hi Bob! Hi Al? Hi Cy!");
  // Macros see top-level variables but not the caller's loop variables.
  EXPECT_EQ(render_ok("{% set top = 'T' %}{% macro m() %}{{ top }}{{ i }}{% endmacro %}"
                      "{% for i in [1] %}{{ m() }}{% endfor %}"),
            "T");
  EXPECT_EQ(render_ok("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}"
                      "{% endif %}{% endmacro %}{{ fact(5) }}"),
            "120");
}

TEST(JinjaStatements, GenerationTagRendersBody) {
  EXPECT_EQ(render_ok("{% generation %}x{% endgeneration %}"), "x");
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(
      render_ok("{{ '  hi  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'aBc' | upper }}|"
                "{{ 'aBc' | lower }}|{{ 'hELLO world' | capitalize }}|{{ 'hello wORLD' | title }}"),
      "hi|hi|ABC|abc|Hello world|Hello World");
  EXPECT_EQ(render_ok("{{ 'a-b-c' | replace('-', '+') }}|{{ 'a-b-c' | replace('-', '', 1) }}"),
            "a+b+c|ab-c");
  EXPECT_EQ(render_ok("{{ '<a href=\"x\">&\\'' | escape }}{{ '<b>' | safe }}"),
            "&lt;a href=&#34;x&#34;&gt;&amp;&#39;<b>");
  EXPECT_EQ(render_ok("{{ 'a\nb' | indent(2) }}|{{ 'a\n\nb' | indent(2, true) }}"),
            "a\n  b|  a\n\n  b");
}

TEST(JinjaFilters, ConversionsAndDefaults) {
  EXPECT_EQ(render_ok("{{ missing | default('dflt') }}|{{ '' | default('e', true) }}|"
                      "{{ '' | default('e') }}|{{ none | d('n') }}"),
            "dflt|e||None");
  EXPECT_EQ(render_ok("{{ 42 | string }}{{ '7' | int + 1 }}|{{ 'x' | int }}|{{ 3.9 | int }}|"
                      "{{ '2.5' | float }}|{{ 2 | float }}"),
            "428|0|3|2.5|2.0");
  EXPECT_EQ(render_ok("{{ 'ab' | list }}|{{ [4, 5] | first }}{{ [4, 5] | last }}|"
                      "{{ 'h\xc3\xa9llo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }}"),
            "['a', 'b']|45|5 2 1");
  EXPECT_EQ(
      render_ok("{{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ [3, 1, 2] | sort }}"
                " {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2] | reverse | list }}"),
      "3 2.57 2.0 [1, 2, 3] [3, 2, 1] [2, 1]");
  EXPECT_EQ(render_ok("{{ ['a', 'A', 'b'] | unique | list }} {{ [1, 2, 3] | sum }} "
                      "{{ [4, 2, 9] | min }}{{ [4, 2, 9] | max }}"),
            "['a', 'b'] 6 29");
}

TEST(JinjaFilters, JoinItemsAndDictsort) {
  EXPECT_EQ(render_ok("{{ [1, 2, 3] | join(', ') }}|{{ ['a', 'b'] | join }}|"
                      "{{ [{'n': 'x'}, {'n': 'y'}] | join('-', attribute='n') }}"),
            "1, 2, 3|ab|x-y");
  EXPECT_EQ(render_ok("{% for k, v in {'x': 1, 'a': 2} | items %}{{ k }}{{ v }}{% endfor %}|"
                      "{% for k, v in {'x': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}"),
            "x1a2|a2x1");
}

TEST(JinjaFilters, ToJson) {
  EXPECT_EQ(render_ok("{{ {'a': [1, 2.5, none, true], 'b': '\xc3\xa9\"\\n'} | tojson }}"),
            "{\"a\": [1, 2.5, null, true], \"b\": \"\xc3\xa9\\\"\\n\"}");
  EXPECT_EQ(render_ok("{{ {'a': [1], 'b': {}, 'c': []} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {},\n  \"c\": []\n}");
  EXPECT_EQ(render_ok("{{ 'x' | tojson }}{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}"),
            "\"x\"{\"a\": 2, \"b\": 1}");
  EXPECT_FALSE(render("{{ missing | tojson }}", {}).is_ok());
}

TEST(JinjaFilters, SelectRejectMap) {
  const std::string ms =
      "{% set ms = [{'role': 'system', 'content': 'S'}, {'role': 'user', 'content': 'U'},"
      " {'role': 'user', 'content': 'V'}] %}";
  EXPECT_EQ(
      render_ok(ms + "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content')"
                     " | join }}|{{ ms | rejectattr('role', 'eq', 'user') | map(attribute="
                     "'content') | list }}|{{ ['a', 'b'] | map('upper') | join }}|"
                     "{{ ms | selectattr('role', 'eq', 'user') | list | length }}"),
      "UV|['S']|AB|2");
  EXPECT_EQ(
      render_ok("{{ [0, 1, 2, 3] | select('odd') | list }}{{ [0, 1, '', 'a'] | select | list }}"
                "{{ [1, 2, 3] | reject('even') | list }}"),
      "[1, 3][1, 'a'][1, 3]");
  EXPECT_EQ(render_ok("{{ [{'a': 1}, {}] | selectattr('a', 'defined') | list | length }}"), "1");
}

TEST(JinjaTests, BuiltinTests) {
  EXPECT_EQ(render_ok("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}"
                      "{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ {} is mapping }}"),
            "FalseTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(
      render_ok(
          "{{ [] is sequence }}{{ [] is iterable }}{{ 3 is odd }}{{ 3 is even }}"
          "{{ 2 is equalto 2 }}{{ 2 is eq(3) }}{{ 1 is not string }}{{ 9 is divisibleby 3 }}"),
      "TrueTrueTrueFalseTrueFalseTrueTrue");
  EXPECT_EQ(render_ok("{{ true is boolean }}{{ range is callable }}{{ 'a' is in 'abc' }}"
                      "{{ 'abc' is lower }}{{ 2 is gt 1 }}"),
            "TrueTrueTrueTrueTrue");
  EXPECT_NE(render_err("{{ 1 is frobnicated }}").find("unknown test"), std::string::npos);
}

TEST(JinjaMethods, StringMethods) {
  EXPECT_EQ(
      render_ok("{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|"
                "{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}"),
      "a b|axx|xxa|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']");
  EXPECT_EQ(render_ok("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}"
                      "{{ 'hello'.startswith(('x', 'h')) }}{{ 'hello'.endswith('x') }}"),
            "TrueTrueTrueFalse");
  EXPECT_EQ(
      render_ok("{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}{{ 'ab cd'.title() }}{{ 'aB'.capitalize() }}|"
                "{{ 'aaa'.replace('a', 'b', 2) }}|{{ '{} and {name}'.format(1, name='x') }}|"
                "{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}|{{ '-'.join(['a', 'b']) }}"),
      "ABabAb CdAb|bba|1 and x|12|a-b");
  EXPECT_NE(render_err("{{ 'a'.nosuch() }}").find("undefined"), std::string::npos);
}

TEST(JinjaMethods, DictMethods) {
  EXPECT_EQ(render_ok("{% set d = {'a': 1, 'b': 2} %}{{ d.get('a') }}{{ d.get('z', 9) }}"
                      "{{ d.get('z') }}{{ d.keys() | list }}{{ d.values() | list }}"
                      "{{ d['b'] }}{{ d.b }}"),
            "19None['a', 'b'][1, 2]22");
}

TEST(JinjaGlobals, RangeNamespaceDict) {
  EXPECT_EQ(render_ok("{{ range(3) }}{{ range(1, 4) }}{{ range(5, 0, -2) }}{{ range(0) }}"),
            "[0, 1, 2][1, 2, 3][5, 3, 1][]");
  EXPECT_EQ(render_ok("{{ dict(a=1)['a'] }}"), "1");
}

TEST(JinjaGlobals, RaiseException) {
  const std::string msg = render_err("line one\n{{ raise_exception('boom: ' ~ 2) }}");
  EXPECT_NE(msg.find("raise_exception: boom: 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("template line 2"), std::string::npos) << msg;
}

TEST(JinjaGlobals, StrftimeNow) {
  Limits l;
  l.fixed_time = 86400 * 365 + 3600 * 5;  // 1971-01-01 05:00 UTC
  EXPECT_EQ(render_ok("{{ strftime_now('%Y-%m-%d %H') }}|{{ strftime_now('%d %b %Y') }}", {}, l),
            "1971-01-01 05|01 Jan 1971");
  // Without a fixed time it is today's date: a four-digit year.
  const std::string year = render_ok("{{ strftime_now('%Y') }}");
  EXPECT_EQ(year.size(), 4u);
}

TEST(JinjaGlobals, VariablesFromCaller) {
  Dict msg;
  msg.set("role", Value::string("user"));
  Variables vars = {{"messages", Value::list({Value::dict(msg)})}, {"flag", Value::boolean(true)}};
  EXPECT_EQ(render_ok("{{ messages[0].role }}{{ messages[0]['role'] }}{{ flag }}", vars),
            "useruserTrue");
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  EXPECT_NE(render_err("{% if x %}never closed").find("endif"), std::string::npos);
  EXPECT_NE(render_err("a\n{{ 1 + }}").find("template line 2"), std::string::npos);
  EXPECT_NE(render_err("{% endfor %}").find("unexpected"), std::string::npos);
  EXPECT_NE(render_err("{% include 'x.j2' %}").find("unsupported tag 'include'"),
            std::string::npos);
  EXPECT_NE(render_err("{{ 'abc }}").find("unterminated"), std::string::npos);
  EXPECT_NE(render_err("{{ x").find("unclosed"), std::string::npos);
  EXPECT_NE(render_err("{% break %}").find("outside a for loop"), std::string::npos);
  EXPECT_NE(render_err("{{ [1, 2) }}").find("expected"), std::string::npos);
  EXPECT_NE(render_err("{{ 1 $ 2 }}").find("unexpected character"), std::string::npos);
  EXPECT_NE(render_err("{{ 99999999999999999999 }}").find("too large"), std::string::npos);
}

TEST(JinjaErrors, RuntimeTypeErrors) {
  EXPECT_NE(render_err("{{ 'a' + 1 }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(render_err("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(render_err("{{ 1 // 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(render_err("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
  EXPECT_NE(render_err("{{ 2 ** 64 }}").find("overflow"), std::string::npos);
  EXPECT_NE(render_err("{{ 1 < 'a' }}").find("not supported"), std::string::npos);
  EXPECT_NE(render_err("{% for x in 5 %}{% endfor %}").find("not iterable"), std::string::npos);
  EXPECT_NE(render_err("{{ x.__class__ }}", {{"x", Value::string("s")}}).find("not allowed"),
            std::string::npos);
  EXPECT_NE(render_err("{{ 1 | nosuchfilter }}").find("unknown filter"), std::string::npos);
}

// {% filter %} blocks (firefunction v2's template trims its system text with one).
TEST(JinjaFilterBlock, AppliesTheChainToTheRenderedBody) {
  EXPECT_EQ(render_ok("{% filter trim %}  a {{ 'b' }}  {% endfilter %}|"), "a b|");
  EXPECT_EQ(render_ok("{%- filter upper | replace('A', 'x') -%} abc {%- endfilter %}"), "xBC");
  EXPECT_EQ(render_ok("{% set s %}{% filter trim %}\n q \n{% endfilter %}{% endset %}[{{ s }}]"),
            "[q]");
  EXPECT_EQ(render_ok("{% filter replace('b', 'B') %}abc{% endfilter %}"), "aBc");
  EXPECT_FALSE(render_err("{% filter nope %}x{% endfilter %}").empty());
  EXPECT_FALSE(render_err("{% filter trim %}x").empty());
}

}  // namespace
}  // namespace hearth::jinja
