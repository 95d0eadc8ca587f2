// Tests of kappa/tokenize/chat_template.hpp: real models' chat templates
// rendered byte for byte as transformers renders them (Jinja2 3.1, committed
// in tests/data/chat_templates/expected.json by
// tests/reference/chat_templates.py), the Jinja subset piece by piece, and
// every error class.
#include "kappa/tokenize/chat_template.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {
namespace chat_template_test {  // (one TU with the area's other files)

using kappa::tokenize::ChatMessage;
using kappa::tokenize::ChatOptions;
using kappa::tokenize::ChatTemplate;
using kappa::tokenize::ChatTemplateError;
using Kind = ChatTemplateError::Kind;
using ojson = nlohmann::ordered_json;

const std::string kDir = std::string(KAPPA_TEST_DATA_DIR) + "/chat_templates/";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Renders `source` over `vars` (messages and options in one JSON object).
std::string render(const std::string& source, const ojson& vars = ojson::object(),
                   bool add = false) {
  ChatOptions opt;
  opt.add_generation_prompt = add;
  opt.variables = vars;
  return ChatTemplate::parse(source).render(ojson::array(), opt);
}

// The kind and message of the error `fn` throws.
template <class Fn>
std::pair<Kind, std::string> error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ChatTemplateError& e) {
    return {e.kind(), e.what()};
  }
  ADD_FAILURE() << "no ChatTemplateError";
  return {Kind::Runtime, ""};
}

TEST(ChatTemplate, RealTemplatesMatchTransformers) {
  const ojson golden = ojson::parse(slurp(kDir + "expected.json"));
  std::map<std::string, ChatTemplate> parsed;
  int passed = 0;
  int errors = 0;
  for (const auto& c : golden["cases"]) {
    const std::string file = c["template"].get<std::string>();
    if (!parsed.count(file)) parsed.emplace(file, ChatTemplate::parse(slurp(kDir + file)));
    const ojson& info = golden["templates"][file];
    const ojson& conv = golden["conversations"][c["conversation"].get<std::string>()];
    ChatOptions opt;
    opt.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (info["bos_token"].is_string()) opt.bos_token = info["bos_token"].get<std::string>();
    if (info["eos_token"].is_string()) opt.eos_token = info["eos_token"].get<std::string>();
    if (conv.contains("variables")) opt.variables = conv["variables"];
    opt.now = golden["now"].get<std::int64_t>();
    const std::string where = file + " / " + c["conversation"].get<std::string>() +
                              (opt.add_generation_prompt ? " / add_generation_prompt" : "");
    if (c.contains("output")) {
      std::string got;
      try {
        got = parsed.at(file).render(conv["messages"], opt);
      } catch (const std::exception& e) {
        ADD_FAILURE() << where << ": " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["output"].get<std::string>()) << where;
      passed += got == c["output"].get<std::string>();
    } else {
      const auto [kind, what] =
          error_of([&] { (void)parsed.at(file).render(conv["messages"], opt); });
      if (c["raised"].get<bool>()) {
        EXPECT_EQ(kind, Kind::Raised) << where << ": " << what;
        EXPECT_NE(what.find(c["error"].get<std::string>()), std::string::npos)
            << where << ": " << what;
      } else {
        EXPECT_EQ(kind, Kind::Runtime) << where << ": " << what;
      }
      ++errors;
    }
  }
  EXPECT_GE(parsed.size(), 15u);
  EXPECT_GE(passed, 300);
  EXPECT_GE(errors, 20);
}

TEST(ChatTemplate, PlainMessagesAndRenderManyTimes) {
  const ChatTemplate t = ChatTemplate::parse(slurp(kDir + "chatml.jinja"));
  ChatOptions opt;
  opt.add_generation_prompt = true;
  const std::vector<ChatMessage> msgs{{"system", "S"}, {"user", "U"}};
  const std::string want =
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(t.render(msgs, opt), want);
  EXPECT_EQ(t.render(msgs, opt), want);
  EXPECT_EQ(t.render(std::vector<ChatMessage>{}, {}), "");
}

TEST(ChatTemplate, WhitespaceControl) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: spaces before it.
  EXPECT_EQ(render("{% if true %}\n  a\n{% endif %}\nb"), "  a\nb");
  EXPECT_EQ(render("x\n    {% if true %}\ny\n    {% endif %}\nz"), "x\ny\nz");
  // Not after a variable tag; not before one.
  EXPECT_EQ(render("{{ 1 }}\n  {{ 2 }}\n"), "1\n  2");
  // '-' strips all whitespace on its side, newlines included.
  EXPECT_EQ(render("a  \n {{- 1 -}} \n\n b"), "a1b");
  EXPECT_EQ(render("a\n\n{%- if true -%}\n\n  b  \n{%- endif %}"), "ab");
  // '+' keeps them.
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  // Comments behave like block tags.
  EXPECT_EQ(render("a\n  {# c #}\nb{#- c -#}  c"), "a\nbc");
  // One trailing newline of the template is dropped, as Jinja does.
  EXPECT_EQ(render("a\n\n"), "a\n");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(ChatTemplate, ExpressionsAndValues) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 1 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} "
                   "{{ 1e20 }}"),
            "3 -4 2 0.5 2.0 1024 1e+20");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1.5e-7 }} {{ 3 ~ none }} {{ 'a' ~ 1.0 }}"),
            "0.30000000000000004 1.5e-07 3None a1.0");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }}"),
            "[1, 'a', None, True, 1.5, {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ (1, 2) }} {{ 'abc'[::-1] }} {{ [1, 2, 3][-1] }} {{ [1, 2, 3][1:] }} {{ "
                   "'héllo'[1] }}"),
            "(1, 2) cba 3 [2, 3] é");
  EXPECT_EQ(render("{{ 'yes' if 1 < 2 < 3 else 'no' }} {{ 'a' in 'cat' }} {{ 'x' not in ['x'] }} "
                   "{{ 1 == 1.0 }}"),
            "yes True False True");
  EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ "
                   "'x'.upper() }}"),
            "a b|['a', 'b', '', 'c']|['a', 'b']|X");
  EXPECT_EQ(render("{{ 'ab'.startswith('a') }} {{ 'ab'.endswith(('x', 'b')) }} {{ "
                   "'aXbX'.replace('X', '-') }}"),
            "True True a-b-");
  EXPECT_EQ(render("{{ undefined_name }}|{{ undefined_name is defined }}|{{ none is none }}|{{ x.y "
                   "is defined }}",
                   {{"x", ojson::object()}}),
            "|False|True|False");
  EXPECT_EQ(
      render("{{ d.get('a') }} {{ d.get('z', 0) }} {{ d['b'] }} {{ d.b }} {{ d.keys() | list }}",
             {{"d", {{"a", 1}, {"b", 2}}}}),
      "1 0 2 2 ['a', 'b']");
}

TEST(ChatTemplate, Statements) {
  // Loop variables, the loop filter, else, unpacking, break/continue.
  EXPECT_EQ(render("{% for x in xs if x != 2 %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ "
                   "loop.last }}"
                   "{{ loop.length }};{% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            "01TrueFalse2;12FalseTrue2;");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;");
  EXPECT_EQ(render("{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", {{"d", {{"z", 1}}}}),
            "z1");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% "
                   "continue %}"
                   "{% endif %}{{ i }}{% endfor %}"),
            "02");
  // A loop body's set does not leak; a namespace carries state out.
  EXPECT_EQ(
      render("{% set c = 0 %}{% for i in range(3) %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}"),
      "1110");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i "
                   "%}{% endfor %}"
                   "{{ ns.n }}"),
            "3");
  // elif/else, set blocks, macros with defaults and keywords.
  EXPECT_EQ(render("{% if x == 1 %}a{% elif x == 2 %}b{% else %}c{% endif %}", {{"x", 2}}), "b");
  EXPECT_EQ(render("{% set s %}[{{ 1 + 1 }}]{% endset %}{{ s }}{{ s }}"), "[2][2]");
  EXPECT_EQ(render("{% macro m(a, b=2) %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, b=3) }}{{ "
                   "m('x', 'y') }}"),
            "<12><13><xy>");
  EXPECT_EQ(render("{% generation %}g{% endgeneration %}"), "g");
}

TEST(ChatTemplate, Filters) {
  EXPECT_EQ(
      render(
          "{{ '  a  ' | trim }}|{{ [1, 2] | length }}|{{ 'héé' | length }}|{{ x | default('d') }}"),
      "a|2|3|d");
  EXPECT_EQ(render("{{ [1, 2, 3] | join(', ') }}|{{ [3, 1, 2] | sort | first }}|{{ [3, 1] | last "
                   "}}|{{ '7' | int + 1 }}"),
            "1, 2, 3|1|1|8");
  EXPECT_EQ(
      render("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join }}",
             {{"msgs",
               {{{"role", "user"}, {"content", "a"}},
                {{"role", "bot"}, {"content", "b"}},
                {{"role", "user"}, {"content", "c"}}}}}),
      "ac");
  EXPECT_EQ(render("{{ msgs | rejectattr('role', 'equalto', 'user') | list | length }}",
                   {{"msgs", {{{"role", "user"}}, {{"role", "bot"}}}}}),
            "1");
  // tojson as transformers': ensure_ascii=False, insertion order, indent.
  const ojson d = ojson::parse(R"({"b": [1, 2.5], "a": {}, "é": "\"q\"\n", "n": null, "t": true})");
  EXPECT_EQ(render("{{ d | tojson }}", {{"d", d}}),
            R"({"b": [1, 2.5], "a": {}, "é": "\"q\"\n", "n": null, "t": true})");
  EXPECT_EQ(render("{{ d.b | tojson(indent=2) }}", {{"d", d}}), "[\n  1,\n  2.5\n]");
  EXPECT_EQ(render("{{ 'é' | tojson(true) }}"), "\"\\u00e9\"");
  EXPECT_EQ(render("{{ 'x' | upper }}{{ 'Ab' | lower }}{{ 5 | string }}{{ 'a b' | title }}"),
            "Xab5A B");
}

TEST(ChatTemplate, StrftimeNowUsesTheGivenTime) {
  ChatOptions opt;
  opt.now = 1721995200;  // 2024-07-26 12:00 UTC
  EXPECT_EQ(ChatTemplate::parse("{{ strftime_now('%Y-%m-%d') }}").render(ojson::array(), opt),
            "2024-07-26");
  const std::string now = ChatTemplate::parse("{{ strftime_now('%Y') }}").render(ojson::array());
  EXPECT_EQ(now.size(), 4u);
}

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  auto [kind, what] =
      error_of([] { (void)ChatTemplate::parse("ok\n{% if x %}\n{{ x + }}\n{% endif %}"); });
  EXPECT_EQ(kind, Kind::Syntax);
  EXPECT_NE(what.find("line 3, column 8: expected an expression, got '}}'"), std::string::npos)
      << what;
  std::tie(kind, what) = error_of([] { (void)ChatTemplate::parse("{% for x in y %}\nabc"); });
  EXPECT_EQ(kind, Kind::Syntax);
  EXPECT_NE(what.find("expected '{% else %}' or '{% endfor %}'"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)ChatTemplate::parse("a {{ 'x' "); });
  EXPECT_NE(what.find("line 1, column 3: unexpected end of template, expected '}}'"),
            std::string::npos)
      << what;
  std::tie(kind, what) = error_of([] { (void)ChatTemplate::parse("{% endif %}"); });
  EXPECT_NE(what.find("unexpected '{% endif %}'"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)ChatTemplate::parse("{{ 'abc }}"); });
  EXPECT_NE(what.find("unterminated string"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)ChatTemplate::parse("{# never closed"); });
  EXPECT_NE(what.find("unterminated comment"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)ChatTemplate::parse("{% break %}"); });
  EXPECT_NE(what.find("'break' outside a loop"), std::string::npos) << what;
  EXPECT_THROW((void)ChatTemplate::parse("{{ a ? b }}"), kappa::FormatError);
}

TEST(ChatTemplate, UnsupportedConstructsAreNamed) {
  for (const char* src :
       {"{% raw %}x{% endraw %}", "{% filter upper %}x{% endfilter %}", "{% include 'x' %}",
        "{% for x in y recursive %}{% endfor %}", "{{ '%s' % 1 }}", "{{ 99999999999999999999 }}"}) {
    const auto [kind, what] = error_of([&] { (void)render(src); });
    EXPECT_EQ(kind, Kind::Unsupported) << src << ": " << what;
    EXPECT_NE(what.find("not supported"), std::string::npos) << what;
  }
}

TEST(ChatTemplate, RuntimeErrors) {
  auto [kind, what] =
      error_of([] { (void)render("{{ raise_exception('Roles must alternate') }}"); });
  EXPECT_EQ(kind, Kind::Raised);
  EXPECT_NE(what.find("Roles must alternate"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)render("\n{{ 'a' | no_such_filter }}"); });
  EXPECT_EQ(kind, Kind::Runtime);
  EXPECT_NE(what.find("line 2: unknown filter \"no_such_filter\""), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)render("{{ 'a'() }}"); });
  EXPECT_NE(what.find("'str' object is not callable"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)render("{{ x + 'a' }}"); });
  EXPECT_NE(what.find("'x' is undefined"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)render("{{ 1 + 'a' }}"); });
  EXPECT_NE(what.find("unsupported operand type(s) for +: 'int' and 'str'"), std::string::npos)
      << what;
  std::tie(kind, what) = error_of([] { (void)render("{{ 1 // 0 }}"); });
  EXPECT_NE(what.find("division or modulo by zero"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)render("{% set x = 1 %}{% set x.a = 2 %}"); });
  EXPECT_NE(what.find("non-namespace"), std::string::npos) << what;
  std::tie(kind, what) = error_of([] { (void)render("{{ 9223372036854775807 + 1 }}"); });
  EXPECT_NE(what.find("integer overflow"), std::string::npos) << what;
}

TEST(ChatTemplate, HostileTemplatesAreBounded) {
  // Deep nesting: a syntax error, not a stack overflow.
  EXPECT_THROW((void)ChatTemplate::parse("{{ " + std::string(100000, '(') + "1" +
                                         std::string(100000, ')') + " }}"),
               ChatTemplateError);
  EXPECT_THROW((void)ChatTemplate::parse("{{ " + std::string(100000, '-') + "1 }}"),
               ChatTemplateError);
  std::string chain = "{{ 1";
  for (int i = 0; i < 50000; ++i) chain += " + 1";
  EXPECT_THROW((void)ChatTemplate::parse(chain + " }}"), ChatTemplateError);
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if true %}";
  EXPECT_THROW((void)ChatTemplate::parse(ifs), ChatTemplateError);
  // Unbounded recursion, loops, sizes and nesting at render time: errors.
  const auto runtime = [](const std::string& src) {
    const auto [kind, what] = error_of([&] { (void)render(src); });
    EXPECT_EQ(kind, Kind::Runtime) << src << ": " << what;
  };
  runtime("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  runtime("{% for i in range(5000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}");
  runtime("{{ range(9223372036854775807) }}");
  runtime("{{ 'x' * 9223372036854775807 }}");
  runtime(
      "{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% "
      "endfor %}");
  runtime(
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor "
      "%}");
  runtime("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  runtime(
      "{{ [1][::-9223372036854775807 - 1] }}x{{ range(0, 9223372036854775807, 4611686018427387904) "
      "}}{{ x.y }}");
  EXPECT_EQ(render("{{ [1, 2, 3][::-9223372036854775807] }}"), "[3]");
}

TEST(ChatTemplate, TokenizerConfig) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::temp_directory_path() / ("kappa_chat_template_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  // The string form, with bos/eos as {"content": ...} objects and strings.
  const std::string s = write(
      "string.json",
      R"({"chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}",
      "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})");
  const ChatTemplate t = ChatTemplate::from_tokenizer_config(s);
  EXPECT_EQ(t.bos_token().value_or(""), "<s>");
  EXPECT_EQ(t.render(std::vector<ChatMessage>{{"user", "hi"}}), "<s>hi</s>");
  ChatOptions opt;
  opt.eos_token = "<e>";
  EXPECT_EQ(t.render(std::vector<ChatMessage>{{"user", "hi"}}, opt), "<s>hi<e>");
  // The list form: "default" unless a name is given.
  const std::string l =
      write("list.json", R"({"chat_template": [{"name": "default", "template": "D"},
      {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(l).render(std::vector<ChatMessage>{}), "D");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(l, "tool_use").render(std::vector<ChatMessage>{}),
            "T");
  try {
    (void)ChatTemplate::from_tokenizer_config(l, "rag");
    ADD_FAILURE();
  } catch (const kappa::FormatError& e) {
    EXPECT_NE(
        std::string(e.what()).find("no template named \"rag\" (have \"default\", \"tool_use\")"),
        std::string::npos)
        << e.what();
  }
  // Missing (GPT-2's tokenizer_config has none), malformed, broken template.
  const std::string m = write("missing.json", R"({"model_max_length": 1024})");
  try {
    (void)ChatTemplate::from_tokenizer_config(m);
    ADD_FAILURE();
  } catch (const kappa::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(m + ": no \"chat_template\""), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      (void)ChatTemplate::from_tokenizer_config(write("bad.json", R"({"chat_template": 3})")),
      kappa::FormatError);
  try {
    (void)ChatTemplate::from_tokenizer_config(
        write("syntax.json", R"({"chat_template": "{% if %}"})"));
    ADD_FAILURE();
  } catch (const ChatTemplateError& e) {
    EXPECT_EQ(e.kind(), Kind::Syntax);
    EXPECT_NE(std::string(e.what()).find("syntax.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)ChatTemplate::from_tokenizer_config((dir / "absent.json").string()),
               kappa::FormatError);
  fs::remove_all(dir);
}

}  // namespace chat_template_test
}  // namespace
