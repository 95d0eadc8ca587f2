// kappa/tokenize/chat_template.hpp - Hugging Face chat templates: the Jinja
// template a model ships in tokenizer_config.json ("chat_template"), rendered
// over a conversation exactly as transformers'
// tokenizer.apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) renders it.
//
// The renderer is kappa's own implementation of the part of Jinja 3 that
// real model templates use, under transformers' environment settings:
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), the
// loopcontrols extension, a tojson filter that is Python's json.dumps with
// ensure_ascii=False, and the globals raise_exception(msg) and
// strftime_now(fmt). The variables are those transformers passes: messages,
// add_generation_prompt, tools and documents (none unless given), bos_token
// and eos_token (when set), plus any extra variables of the caller.
//
// Supported
//   * text, {{ expr }}, {% stmt %}, {# comment #}; whitespace control with
//     `-` on either side of any tag and `+` (disable lstrip/trim); a single
//     trailing newline of the template is dropped (keep_trailing_newline off)
//   * {% if %}/{% elif %}/{% else %}, {% for a[, b] in xs [if cond] %} with
//     {% else %}, loop.index/index0/revindex/revindex0/first/last/length/
//     previtem/nextitem/cycle(), {% break %}/{% continue %}; {% set x = e %},
//     {% set a, b = e %}, {% set ns.attr = e %}, {% set x %}...{% endset %};
//     {% macro name(a, b=default) %} called with positional and keyword
//     arguments; {% generation %} (rendered as its body, as transformers does)
//   * literals: strings (Python escapes, adjacent ones concatenated), int,
//     float, true/false/none (any case), lists, tuples, dicts
//   * operators by Jinja's precedence: `a if c else b`, or, and, not,
//     == != < <= > >= in `not in` (chained comparisons), + -, ~, * / // %,
//     **, unary - +, `.attr`, `[key]`, slices `[a:b:c]`, calls, filters
//     `|f(args)` and tests `is [not] t(args)`
//   * Python semantics for values: str/int/float/bool/None/list/dict, with
//     Jinja's Undefined (prints as "", is false, iterates as empty, fails on
//     arithmetic and attribute access); strings index, slice and count by code
//     point; printing follows Python's str()/repr()
//   * methods: str.strip/lstrip/rstrip/split/rsplit/startswith/endswith/upper/
//     lower/title/capitalize/replace/find/count/join/isdigit/isspace/...,
//     dict.items/keys/values/get
//   * filters: abs, capitalize, count, default/d, dictsort, e/escape, first,
//     float, indent, int, items, join, last, length, list, lower, map, max,
//     min, reject, rejectattr, replace, reverse, round, safe, select,
//     selectattr, sort, string, sum, title, tojson (indent, separators,
//     sort_keys), trim, unique, upper, wordcount
//   * tests: boolean, callable, defined, divisibleby, eq/equalto/==, even,
//     false, float, ge/>=, gt/>, in, integer, iterable, le/<=, lower, lt/<,
//     mapping, ne/!=, none, number, odd, sameas, sequence, string, true,
//     undefined, upper
//   * globals: range, namespace, dict, raise_exception, strftime_now (local
//     time, C strftime)
//
// Rejected with a ChatTemplateError of kind Unsupported (never rendered
// differently): {% raw %}, {% filter %}, {% call %}, {% with %},
// {% include/import/extends/block %}, recursive loops, macro varargs/kwargs/
// caller, `%` string formatting, dict keys that are not strings, integers
// beyond 64 bits. Differences from Python: upper/lower/title/capitalize change
// ASCII letters only.
//
// Errors: a syntax error is a ChatTemplateError (a kappa::FormatError) of kind
// Syntax naming the line, the column and what was expected; a runtime error
// (undefined value in arithmetic, unknown filter, calling a non-callable) is of
// kind Runtime; raise_exception(msg) is of kind Raised and carries msg.
// Rendering is bounded: nesting of expressions and statements, macro
// recursion, loop iterations, string and list sizes all have limits whose
// breach is a Runtime error, never a crash.
//
// Example:
//   auto tpl = kappa::tokenize::ChatTemplate::from_tokenizer_config(
//       "Qwen2.5-7B-Instruct/tokenizer_config.json");
//   const std::vector<kappa::tokenize::ChatMessage> chat{{"system", "Be brief."},
//                                                        {"user", "Hi!"}};
//   std::string prompt = tpl.render(chat, {.add_generation_prompt = true});
#pragma once

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kappa/core/error.hpp"
#include "kappa/core/json.hpp"
#include "kappa/tokenize/chat_message.hpp"
#include "kappa/tokenize/utf8.hpp"

namespace kappa::tokenize {

/// An error in a chat template or while rendering one. A FormatError, so
/// code that catches kappa's input errors catches it too; kind() tells which.
class ChatTemplateError : public FormatError {
 public:
  enum class Kind {
    Syntax,       ///< the template does not parse (line, column, what was expected)
    Unsupported,  ///< a Jinja construct outside kappa's subset
    Runtime,      ///< rendering failed (undefined value, bad operand, limit)
    Raised,       ///< the template called raise_exception(message)
  };
  ChatTemplateError(Kind kind, const std::string& what) : FormatError(what), kind_(kind) {}
  [[nodiscard]] Kind kind() const noexcept { return kind_; }

 private:
  Kind kind_;
};

/// What a template sees besides the messages.
struct ChatOptions {
  /// Append the opening of an assistant turn (add_generation_prompt).
  bool add_generation_prompt = false;
  /// bos_token / eos_token; absent means undefined in the template, as in
  /// transformers when the tokenizer has none.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  /// Further variables (tools, documents, enable_thinking, date_string, ...),
  /// a JSON object; they override the ones above of the same name.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  /// The time strftime_now() formats (seconds since the epoch, shown in local
  /// time); absent means now. Set it for reproducible prompts.
  std::optional<std::int64_t> now;
};

namespace chat_detail {

inline constexpr std::size_t kMaxStringBytes = std::size_t{64} << 20;  // any string, the output
inline constexpr std::size_t kMaxListItems = std::size_t{1} << 22;     // any list or range
inline constexpr int kMaxValueDepth = 128;                             // nesting of lists/dicts
inline constexpr int kMaxParseDepth = 200;             // parser recursion and AST height
inline constexpr int kMaxEvalDepth = 600;              // evaluator recursion (all nodes)
inline constexpr int kMaxMacroDepth = 40;              // macro calls in progress
inline constexpr std::uint64_t kMaxSteps = 1'000'000;  // loop iterations + calls

[[noreturn]] inline void fail(ChatTemplateError::Kind kind, int line, const std::string& what) {
  std::string msg = "kappa: chat template";
  if (line > 0) msg += ": line " + std::to_string(line);
  msg += ": " + what;
  throw ChatTemplateError(kind, msg);
}
[[noreturn]] inline void runtime_error(int line, const std::string& what) {
  fail(ChatTemplateError::Kind::Runtime, line, what);
}

// ---------------------------------------------------------------- values --

struct ListObj;
struct DictObj;
struct NsObj;
struct FnObj;

struct Value {
  enum class Kind : std::uint8_t {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    String,
    List,
    Dict,
    Namespace,
    Function
  };
  Kind kind = Kind::Undefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  std::string s;  // String; for Undefined: the description used in errors
  std::shared_ptr<const ListObj> list;
  std::shared_ptr<const DictObj> dict;
  NsObj* ns = nullptr;  // owned by the render's arena
  std::shared_ptr<const FnObj> fn;

  static Value undefined(std::string what = {}) {
    Value v;
    v.s = std::move(what);
    return v;
  }
  static Value none() {
    Value v;
    v.kind = Kind::None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::Bool;
    v.b = x;
    return v;
  }
  static Value integer(std::int64_t x) {
    Value v;
    v.kind = Kind::Int;
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v;
    v.kind = Kind::Float;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.kind = Kind::String;
    v.s = std::move(x);
    return v;
  }
  static Value make_list(std::vector<Value> items, bool tuple = false);
  static Value make_dict(std::vector<std::pair<std::string, Value>> items);
  [[nodiscard]] bool is(Kind k) const noexcept { return kind == k; }
  [[nodiscard]] bool is_number() const noexcept {
    return kind == Kind::Bool || kind == Kind::Int || kind == Kind::Float;
  }
};

struct ListObj {
  std::vector<Value> items;
  bool tuple = false;
  int depth = 1;
};
struct DictObj {
  std::vector<std::pair<std::string, Value>> items;
  int depth = 1;
  [[nodiscard]] const Value* find(std::string_view key) const {
    for (const auto& kv : items)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
};
struct NsObj {
  std::vector<std::pair<std::string, Value>> attrs;
};
struct Node;
struct FnObj {
  enum class Type : std::uint8_t { Global, Macro, Method, Cycle };
  Type type = Type::Global;
  std::string name;
  Value self;                   // Method: the receiver; Cycle: index0
  const Node* macro = nullptr;  // Macro
};

inline int value_depth(const Value& v) {
  switch (v.kind) {
    case Value::Kind::List:
      return v.list->depth;
    case Value::Kind::Dict:
      return v.dict->depth;
    case Value::Kind::Function:
      return 1 + value_depth(v.fn->self);
    default:
      return 0;
  }
}

inline Value Value::make_list(std::vector<Value> items, bool tuple) {
  if (items.size() > kMaxListItems)
    runtime_error(0, "a list of " + std::to_string(items.size()) + " items exceeds the limit of " +
                         std::to_string(kMaxListItems));
  auto obj = std::make_shared<ListObj>();
  int depth = 0;
  for (const Value& x : items) depth = std::max(depth, value_depth(x));
  if (depth + 1 > kMaxValueDepth)
    runtime_error(
        0, "lists and dicts nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  obj->items = std::move(items);
  obj->tuple = tuple;
  obj->depth = depth + 1;
  Value v;
  v.kind = Kind::List;
  v.list = std::move(obj);
  return v;
}

inline Value Value::make_dict(std::vector<std::pair<std::string, Value>> items) {
  auto obj = std::make_shared<DictObj>();
  int depth = 0;
  for (const auto& kv : items) depth = std::max(depth, value_depth(kv.second));
  if (depth + 1 > kMaxValueDepth)
    runtime_error(
        0, "lists and dicts nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  // Python dicts keep the last value of a repeated key at the first key's place.
  for (auto& kv : items) {
    bool replaced = false;
    for (auto& old : obj->items)
      if (old.first == kv.first) {
        old.second = std::move(kv.second);
        replaced = true;
        break;
      }
    if (!replaced) obj->items.push_back(std::move(kv));
  }
  obj->depth = depth + 1;
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::move(obj);
  return v;
}

inline Value from_json(const nlohmann::ordered_json& j, int depth = 0) {
  if (depth > kMaxValueDepth)
    runtime_error(0, "a variable nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(ChatTemplateError::Kind::Unsupported, 0, "integers beyond 64 bits are not supported");
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, depth + 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(it.key(), from_json(it.value(), depth + 1));
      return Value::make_dict(std::move(items));
    }
    default:
      fail(ChatTemplateError::Kind::Unsupported, 0, "binary JSON values are not supported");
  }
}

inline const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return v.list->tuple ? "tuple" : "list";
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Namespace:
      return "Namespace";
    case Value::Kind::Function:
      return "function";
  }
  return "?";
}

inline bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.b;
    case Value::Kind::Int:
      return v.i != 0;
    case Value::Kind::Float:
      return v.f != 0.0;
    case Value::Kind::String:
      return !v.s.empty();
    case Value::Kind::List:
      return !v.list->items.empty();
    case Value::Kind::Dict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

// Python's repr(float): the shortest digits that round-trip, fixed notation
// for exponents in [-4, 16), else d.ddde+XX.
inline std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const std::size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (!mant.empty() && mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exp - 1), '0') + digits;
    } else {
      const auto point = static_cast<std::size_t>(exp) + 1;
      if (digits.size() <= point) {
        out = digits + std::string(point - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, point) + "." + digits.substr(point);
      }
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += exp < 0 ? "e-" : "e+";
  const std::string ed = std::to_string(exp < 0 ? -exp : exp);
  if (ed.size() < 2) out += "0";
  return sign + out + ed;
}

inline bool is_py_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 ||
         c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// Code point boundaries of s: offsets of each character's first byte, then s.size().
inline std::vector<std::size_t> char_offsets(std::string_view s) {
  std::vector<std::size_t> off;
  for (std::size_t i = 0; i < s.size(); i += decode_utf8(s, i).length) off.push_back(i);
  off.push_back(s.size());
  return off;
}

inline std::string py_str_repr(std::string_view s) {
  const bool use_double =
      s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  static constexpr char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char ch = decode_utf8(s, i);
    const char32_t c = ch.code_point;
    if (!ch.valid) {
      out += "\\udc";
      out += kHex[(c >> 4) & 15];
      out += kHex[c & 15];
    } else if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0xA0) || c == 0xAD) {
      out += "\\x";
      out += kHex[(c >> 4) & 15];
      out += kHex[c & 15];
    } else {
      out.append(s.substr(i, ch.length));
    }
    i += ch.length;
  }
  out += q;
  return out;
}

inline void check_size(std::size_t n, int line) {
  if (n > kMaxStringBytes)
    runtime_error(line, "a string of " + std::to_string(n) + " bytes exceeds the limit of " +
                            std::to_string(kMaxStringBytes));
}

inline std::string to_str(const Value& v, int depth = 0);

inline std::string repr(const Value& v, int depth = 0) {
  if (depth > kMaxValueDepth) runtime_error(0, "a value nests too deeply to print");
  switch (v.kind) {
    case Value::Kind::String:
      return py_str_repr(v.s);
    case Value::Kind::List: {
      const bool tuple = v.list->tuple;
      std::string out = tuple ? "(" : "[";
      for (std::size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += ", ";
        out += repr(v.list->items[k], depth + 1);
        check_size(out.size(), 0);
      }
      if (tuple && v.list->items.size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Value::Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(kv.first) + ": " + repr(kv.second, depth + 1);
        check_size(out.size(), 0);
      }
      return out + "}";
    }
    case Value::Kind::Namespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& kv : v.ns->attrs) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(kv.first) + ": " + repr(kv.second, depth + 1);
        check_size(out.size(), 0);
      }
      return out + "}>";
    }
    default:
      return to_str(v, depth);
  }
}

inline std::string to_str(const Value& v, int depth) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.b ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.i);
    case Value::Kind::Float:
      return py_float(v.f);
    case Value::Kind::String:
      return v.s;
    case Value::Kind::Function:
      return v.fn->type == FnObj::Type::Macro ? "<Macro '" + v.fn->name + "'>"
                                              : "<built-in function " + v.fn->name + ">";
    default:
      return repr(v, depth);
  }
}

// Python's json.dumps(x, ensure_ascii=False, indent, separators, sort_keys).
struct JsonStyle {
  std::optional<std::string> indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

inline void json_string(std::string& out, std::string_view s, bool ensure_ascii = false) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto u16 = [&](char32_t c) {
    out += "\\u";
    for (int sh = 12; sh >= 0; sh -= 4) out += kHex[(c >> sh) & 15];
  };
  out += '"';
  for (std::size_t k = 0; k < s.size(); ++k) {
    const char ch = s[k];
    const auto c = static_cast<unsigned char>(ch);
    if (ensure_ascii && c >= 0x80) {
      const Utf8Char d = decode_utf8(s, k);
      char32_t cp = d.valid ? d.code_point : 0xDC00 + c;  // Python's surrogateescape
      if (cp >= 0x10000) {
        cp -= 0x10000;
        u16(0xD800 + (cp >> 10));
        u16(0xDC00 + (cp & 0x3FF));
      } else {
        u16(cp);
      }
      k += d.length - 1u;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

inline void json_dump(std::string& out, const Value& v, const JsonStyle& st, int level, int line) {
  if (level > kMaxValueDepth) runtime_error(line, "tojson: a value nests too deeply");
  check_size(out.size(), line);
  const auto newline = [&](int lv) {
    if (!st.indent) return;
    out += '\n';
    for (int k = 0; k < lv; ++k) out += *st.indent;
  };
  switch (v.kind) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.i);
      return;
    case Value::Kind::Float:
      if (std::isnan(v.f)) {
        out += "NaN";
      } else if (std::isinf(v.f)) {
        out += v.f < 0 ? "-Infinity" : "Infinity";
      } else {
        out += py_float(v.f);
      }
      return;
    case Value::Kind::String:
      json_string(out, v.s, st.ensure_ascii);
      return;
    case Value::Kind::List: {
      if (v.list->items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(level + 1);
        json_dump(out, v.list->items[k], st, level + 1, line);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      bool first = true;
      for (const auto* kv : items) {
        if (!first) out += st.item_sep;
        first = false;
        newline(level + 1);
        json_string(out, kv->first, st.ensure_ascii);
        out += st.key_sep;
        json_dump(out, kv->second, st, level + 1, line);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      runtime_error(line, std::string("tojson: Object of type ") + type_name(v) +
                              " is not JSON serializable");
  }
}

inline double as_double(const Value& v) {
  return v.kind == Value::Kind::Float ? v.f
         : v.kind == Value::Kind::Int ? static_cast<double>(v.i)
                                      : (v.b ? 1.0 : 0.0);
}
inline std::int64_t as_int(const Value& v) {
  return v.kind == Value::Kind::Int ? v.i : (v.b ? 1 : 0);
}

inline bool equal(const Value& a, const Value& b, int depth = 0) {
  if (depth > kMaxValueDepth) runtime_error(0, "a value nests too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float)
      return as_double(a) == as_double(b);
    return as_int(a) == as_int(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.s == b.s;
    case Value::Kind::List: {
      if (a.list->tuple != b.list->tuple || a.list->items.size() != b.list->items.size())
        return false;
      for (std::size_t k = 0; k < a.list->items.size(); ++k)
        if (!equal(a.list->items[k], b.list->items[k], depth + 1)) return false;
      return true;
    }
    case Value::Kind::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* other = b.dict->find(kv.first);
        if (!other || !equal(kv.second, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace:
      return a.ns == b.ns;
    case Value::Kind::Function:
      return a.fn == b.fn;
    default:
      return false;
  }
}

// Python's a < b (or b < a when `swap`); a TypeError for unordered types.
inline bool less(const Value& a, const Value& b, int line, int depth = 0) {
  if (depth > kMaxValueDepth) runtime_error(line, "a value nests too deeply to compare");
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float)
      return as_double(a) < as_double(b);
    return as_int(a) < as_int(b);
  }
  if (a.kind == Value::Kind::String && b.kind == Value::Kind::String) return a.s < b.s;
  if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (std::size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equal(x[k], y[k], depth + 1)) continue;
      return less(x[k], y[k], line, depth + 1);
    }
    return x.size() < y.size();
  }
  if (a.kind == Value::Kind::Undefined || b.kind == Value::Kind::Undefined)
    runtime_error(line, (a.kind == Value::Kind::Undefined ? a.s : b.s).empty()
                            ? std::string("a comparison with an undefined value")
                            : (a.kind == Value::Kind::Undefined ? a.s : b.s));
  runtime_error(line, std::string("'<' not supported between instances of '") + type_name(a) +
                          "' and '" + type_name(b) + "'");
}

// ------------------------------------------------------------- lexer --

enum class Tok : std::uint8_t {
  Text,
  BlockBegin,
  BlockEnd,
  VarBegin,
  VarEnd,
  Name,
  String,
  Int,
  Float,
  Op,
  End
};

struct Token {
  Tok type;
  std::string text;  // Text/Name/String (decoded)/Op; number spelling
  int line;
  int col;
};

class Lexer {
 public:
  explicit Lexer(std::string_view src) {
    // Jinja turns \r\n and \r into \n and drops one trailing newline.
    src_.reserve(src.size());
    for (std::size_t k = 0; k < src.size(); ++k) {
      if (src[k] == '\r') {
        src_ += '\n';
        if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
      } else {
        src_ += src[k];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      std::size_t start = pos_;
      std::size_t tag = std::string::npos;
      char kind = 0;
      for (std::size_t k = pos_; k + 1 < src_.size(); ++k) {
        if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) {
          tag = k;
          kind = src_[k + 1];
          break;
        }
      }
      std::string text = src_.substr(start, (tag == std::string::npos ? src_.size() : tag) - start);
      if (tag == std::string::npos) {
        emit_text(std::move(text), start);
        pos_ = src_.size();
        break;
      }
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '+' && kind == '{') sign = '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: spaces between the start of a line and a block or comment tag.
        const std::size_t nl = text.rfind('\n');
        const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(l_pos), text.end(),
                        [](char c) { return is_space(c); }))
          text.resize(l_pos);
      }
      emit_text(std::move(text), start);
      advance_to(tag);
      const int tag_line = line_;
      const int tag_col = col();
      advance_to(tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0));
      if (kind == '#') {
        const std::size_t end = src_.find("#}", pos_);
        if (end == std::string::npos)
          error_at(tag_line, tag_col, "unterminated comment: expected '#}'");
        const bool strip = end > pos_ && src_[end - 1] == '-';
        const bool keep = end > pos_ && src_[end - 1] == '+';
        advance_to(end + 2);
        line_starting = finish_tag(strip, !keep);
        continue;
      }
      if (kind == '%') check_raw(tag_line, tag_col);
      tokens_.push_back({kind == '%' ? Tok::BlockBegin : Tok::VarBegin, {}, tag_line, tag_col});
      line_starting = lex_tag(kind == '%', tag_line, tag_col);
    }
    tokens_.push_back({Tok::End, {}, line_, col()});
    return std::move(tokens_);
  }

 private:
  static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  }
  [[noreturn]] static void error_at(int line, int column, const std::string& what) {
    fail(ChatTemplateError::Kind::Syntax, 0,
         "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
  }
  int col() const { return static_cast<int>(pos_ - line_start_) + 1; }
  void advance_to(std::size_t p) {
    for (; pos_ < p && pos_ < src_.size(); ++pos_)
      if (src_[pos_] == '\n') {
        ++line_;
        line_start_ = pos_ + 1;
      }
  }
  void emit_text(std::string text, std::size_t start) {
    if (text.empty()) return;
    tokens_.push_back(
        {Tok::Text, std::move(text), line_, static_cast<int>(start - line_start_) + 1});
  }
  // After a tag's closing: '-' strips all following whitespace, otherwise
  // trim_blocks removes one newline. Returns whether the consumed text ended
  // with a newline (Jinja's line_starting).
  bool finish_tag(bool strip, bool trim) {
    bool nl = false;
    if (strip) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        nl = src_[pos_] == '\n';
        advance_to(pos_ + 1);
      }
    } else if (trim && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
      nl = true;
    }
    return nl;
  }
  void check_raw(int line, int column) {
    std::size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") == 0) {
      std::size_t q = p + 3;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+' || src_[q] == '%'))
        fail(ChatTemplateError::Kind::Unsupported, 0,
             "line " + std::to_string(line) + ", column " + std::to_string(column) +
                 ": {% raw %} is not supported by kappa's chat templates");
    }
  }

  bool lex_tag(bool block, int tag_line, int tag_col) {
    std::vector<char> brackets;
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        error_at(tag_line, tag_col,
                 std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") +
                     "' to close the tag opened here");
      const std::string_view rest = std::string_view(src_).substr(pos_);
      if (brackets.empty()) {
        const std::string_view close = block ? "%}" : "}}";
        const bool minus = rest.size() > 2 && rest[0] == '-' && rest.substr(1, 2) == close;
        const bool plus = block && rest.size() > 2 && rest[0] == '+' && rest.substr(1, 2) == close;
        if (minus || plus || rest.substr(0, 2) == close) {
          tokens_.push_back({block ? Tok::BlockEnd : Tok::VarEnd, {}, line_, col()});
          advance_to(pos_ + (minus || plus ? 3 : 2));
          return finish_tag(minus, block && !plus);
        }
      }
      const int tl = line_;
      const int tc = col();
      const char c = rest[0];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t n = 1;
        while (n < rest.size() &&
               (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
          ++n;
        tokens_.push_back({Tok::Name, std::string(rest.substr(0, n)), tl, tc});
        advance_to(pos_ + n);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(rest, tl, tc);
      } else if (c == '\'' || c == '"') {
        lex_string(rest, tl, tc);
      } else {
        static constexpr std::string_view kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (auto o : kOps2)
          if (rest.substr(0, 2) == o) op = std::string(o);
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=.,:|()[]{}").find(c) == std::string_view::npos)
            error_at(tl, tc, "unexpected character " + kappa::quoted(std::string(1, c)));
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') brackets.push_back(c);
          if (c == ')' || c == ']' || c == '}') {
            const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (brackets.empty() || brackets.back() != want)
              error_at(tl, tc, "unexpected '" + op + "'");
            brackets.pop_back();
          }
        }
        tokens_.push_back({Tok::Op, op, tl, tc});
        advance_to(pos_ + op.size());
      }
    }
  }

  void lex_number(std::string_view rest, int tl, int tc) {
    std::size_t n = 0;
    bool is_float = false;
    const auto digits = [&] {
      while (n < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[n])) ||
                                 (rest[n] == '_' && n + 1 < rest.size() &&
                                  std::isdigit(static_cast<unsigned char>(rest[n + 1])))))
        ++n;
    };
    digits();
    if (n + 1 < rest.size() && rest[n] == '.' &&
        std::isdigit(static_cast<unsigned char>(rest[n + 1]))) {
      is_float = true;
      ++n;
      digits();
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      std::size_t m = n + 1;
      if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
      if (m < rest.size() && std::isdigit(static_cast<unsigned char>(rest[m]))) {
        is_float = true;
        n = m;
        digits();
      }
    }
    std::string spelled;
    for (char ch : rest.substr(0, n))
      if (ch != '_') spelled += ch;
    tokens_.push_back({is_float ? Tok::Float : Tok::Int, spelled, tl, tc});
    advance_to(pos_ + n);
  }

  void lex_string(std::string_view rest, int tl, int tc) {
    const char q = rest[0];
    std::string out;
    std::size_t n = 1;
    const auto hex = [&](std::size_t at, std::size_t count) -> std::optional<char32_t> {
      if (at + count > rest.size()) return std::nullopt;
      char32_t v = 0;
      for (std::size_t k = 0; k < count; ++k) {
        const char h = rest[at + k];
        const int d = h >= '0' && h <= '9'   ? h - '0'
                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                             : -1;
        if (d < 0) return std::nullopt;
        v = v * 16 + static_cast<char32_t>(d);
      }
      return v;
    };
    for (;;) {
      if (n >= rest.size()) error_at(tl, tc, "unterminated string literal");
      const char c = rest[n];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        ++n;
        continue;
      }
      if (n + 1 >= rest.size()) error_at(tl, tc, "unterminated string literal");
      const char e = rest[n + 1];
      n += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const std::size_t count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          const auto v = hex(n, count);
          if (!v || *v > 0x10FFFF)
            error_at(tl, tc, std::string("invalid \\") + e + " escape in a string literal");
          if (*v >= 0xD800 && *v <= 0xDFFF)
            fail(ChatTemplateError::Kind::Unsupported, 0,
                 "line " + std::to_string(tl) + ": surrogate escapes in strings are not supported");
          append_utf8(out, *v);
          n += count;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && n < rest.size() && rest[n] >= '0' && rest[n] <= '7'; ++k, ++n)
              v = v * 8 + static_cast<char32_t>(rest[n] - '0');
            append_utf8(out, v);
          } else if (e == 'N') {
            fail(ChatTemplateError::Kind::Unsupported, 0,
                 "line " + std::to_string(tl) + ": \\N{...} escapes are not supported");
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({Tok::String, std::move(out), tl, tc});
    advance_to(pos_ + n + 1);
  }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::size_t line_start_ = 0;
  std::vector<Token> tokens_;
};

// --------------------------------------------------------------- AST --

enum class EK : std::uint8_t {
  Literal,
  Name,
  List,
  Tuple,
  Dict,
  Attr,
  Item,
  Slice,
  Call,
  Filter,
  Test,
  Neg,
  Pos,
  Not,
  And,
  Or,
  Binary,
  Compare,
  Cond,
  Concat
};

struct Expr {
  EK kind;
  int line = 0;
  int height = 1;
  std::string name;  // Name, Attr, Filter, Test, Binary op
  Value literal;     // Literal
  std::vector<std::unique_ptr<Expr>>
      kids;                      // operands; Slice: obj, start|null, stop|null, step|null
  std::size_t npos = 0;          // Call/Filter/Test: positional args after kids[0]
  std::vector<std::string> kw;   // names of the trailing keyword args
  std::vector<std::string> ops;  // Compare
  bool negated = false;          // Test
};
using ExprPtr = std::unique_ptr<Expr>;

enum class NK : std::uint8_t {
  Text,
  Emit,
  If,
  For,
  Set,
  SetAttr,
  SetBlock,
  Macro,
  Break,
  Continue,
  Block
};

struct Node {
  NK kind;
  int line = 0;
  std::string text;                // Text; Set: -; Macro: name; SetAttr: attribute
  std::vector<std::string> names;  // For/Set targets; Macro params; SetBlock name; SetAttr: object
  std::vector<ExprPtr>
      exprs;  // If: conditions; For: iter, filter|null; Set: value; Macro: defaults|null
  std::vector<std::vector<std::unique_ptr<Node>>> bodies;
  bool unpack = false;    // Set/For: a tuple target
  bool uses_loop = true;  // For: the body or filter names `loop`
};
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// ------------------------------------------------------------ parser --

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != Tok::End) expected("the end of the template");
    return body;
  }

 private:
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxParseDepth)
        p.error("the template nests deeper than " + std::to_string(kMaxParseDepth) + " levels");
    }
    ~DepthGuard() { --p.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Text:
        return "template text";
      case Tok::BlockBegin:
        return "'{%'";
      case Tok::BlockEnd:
        return "'%}'";
      case Tok::VarBegin:
        return "'{{'";
      case Tok::VarEnd:
        return "'}}'";
      case Tok::Name:
        return "name " + kappa::quoted(t.text, 40);
      case Tok::String:
        return "a string";
      case Tok::Int:
      case Tok::Float:
        return "number " + t.text;
      case Tok::Op:
        return "'" + t.text + "'";
      case Tok::End:
        return "the end of the template";
    }
    return "?";
  }
  [[noreturn]] void error(const std::string& what) const {
    fail(ChatTemplateError::Kind::Syntax, 0,
         "line " + std::to_string(cur().line) + ", column " + std::to_string(cur().col) + ": " +
             what);
  }
  [[noreturn]] void expected(const std::string& what) const {
    error("expected " + what + ", got " + describe(cur()));
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    fail(ChatTemplateError::Kind::Unsupported, 0,
         "line " + std::to_string(cur().line) + ", column " + std::to_string(cur().col) + ": " +
             what + " is not supported by kappa's chat templates");
  }
  bool is_op(std::string_view op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::Name && cur().text == n; }
  void expect_op(std::string_view op) {
    if (!is_op(op)) expected("'" + std::string(op) + "'");
    next();
  }
  std::string expect_name(const std::string& what) {
    if (cur().type != Tok::Name) expected(what);
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) expected("'%}'");
    next();
  }

  ExprPtr make(EK kind, int line, std::vector<ExprPtr> kids = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    int h = 0;
    for (const auto& k : kids)
      if (k) h = std::max(h, k->height);
    e->height = h + 1;
    if (e->height > kMaxParseDepth)
      error("an expression nests deeper than " + std::to_string(kMaxParseDepth) + " levels");
    e->kids = std::move(kids);
    return e;
  }

  // Parses statements until a block tag whose keyword is in `ends` (left unconsumed, after '{%').
  Body parse_body(const std::vector<std::string_view>& ends) {
    DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.type == Tok::End) {
        if (!ends.empty()) {
          std::string list;
          for (auto e : ends)
            list += (list.empty() ? "" : " or ") + std::string("'{% ") + std::string(e) + " %}'";
          expected(list);
        }
        return body;
      }
      if (t.type == Tok::Text) {
        auto n = std::make_unique<Node>();
        n->kind = NK::Text;
        n->line = t.line;
        n->text = t.text;
        body.push_back(std::move(n));
        next();
      } else if (t.type == Tok::VarBegin) {
        next();
        auto n = std::make_unique<Node>();
        n->kind = NK::Emit;
        n->line = t.line;
        n->exprs.push_back(parse_tuple_expr());
        if (cur().type != Tok::VarEnd) expected("'}}'");
        next();
        body.push_back(std::move(n));
      } else if (t.type == Tok::BlockBegin) {
        const Token& kw = peek();
        if (kw.type == Tok::Name && std::find(ends.begin(), ends.end(), kw.text) != ends.end()) {
          next();
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        expected("template text or a tag");
      }
    }
  }

  NodePtr parse_statement() {
    const int line = cur().line;
    if (cur().type != Tok::Name) expected("a statement keyword");
    const std::string kw = cur().text;
    auto n = std::make_unique<Node>();
    n->line = line;
    if (kw == "if") {
      next();
      n->kind = NK::If;
      n->exprs.push_back(parse_tuple_expr());
      expect_block_end();
      for (;;) {
        n->bodies.push_back(parse_body({"elif", "else", "endif"}));
        const std::string end = expect_name("'elif', 'else' or 'endif'");
        if (end == "elif") {
          n->exprs.push_back(parse_tuple_expr());
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          n->bodies.push_back(parse_body({"endif"}));
          next();
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (kw == "for") {
      next();
      n->kind = NK::For;
      n->names.push_back(expect_name("a loop variable"));
      while (is_op(",")) {
        next();
        if (is_name("in")) break;
        n->names.push_back(expect_name("a loop variable"));
        n->unpack = true;
      }
      if (n->names.size() > 1) n->unpack = true;
      if (!is_name("in")) expected("'in'");
      next();
      n->exprs.push_back(parse_or_expr_no_cond());
      if (is_name("if")) {
        next();
        n->exprs.push_back(parse_expr());
      } else {
        n->exprs.push_back(nullptr);
      }
      if (is_name("recursive")) unsupported("a recursive loop");
      expect_block_end();
      ++loop_depth_;
      const std::size_t refs = loop_refs_;
      n->bodies.push_back(parse_body({"else", "endfor"}));
      n->uses_loop = loop_refs_ != refs;
      --loop_depth_;
      if (expect_name("'else' or 'endfor'") == "else") {
        expect_block_end();
        n->bodies.push_back(parse_body({"endfor"}));
        next();
      }
      expect_block_end();
    } else if (kw == "set") {
      next();
      const std::string first = expect_name("a variable name");
      if (is_op(".")) {
        next();
        n->kind = NK::SetAttr;
        n->names.push_back(first);
        n->text = expect_name("an attribute name");
        expect_op("=");
        n->exprs.push_back(parse_tuple_expr());
        expect_block_end();
      } else {
        n->names.push_back(first);
        while (is_op(",")) {
          next();
          n->names.push_back(expect_name("a variable name"));
          n->unpack = true;
        }
        if (is_op("=")) {
          next();
          n->kind = NK::Set;
          n->exprs.push_back(parse_tuple_expr());
          expect_block_end();
        } else if (cur().type == Tok::BlockEnd && !n->unpack) {
          next();
          n->kind = NK::SetBlock;
          n->bodies.push_back(parse_body({"endset"}));
          next();
          expect_block_end();
        } else {
          if (is_op("|")) unsupported("a filtered {% set %} block");
          expected("'=' or '%}'");
        }
      }
    } else if (kw == "macro") {
      next();
      n->kind = NK::Macro;
      n->text = expect_name("a macro name");
      expect_op("(");
      while (!is_op(")")) {
        if (is_op("*")) unsupported("macro varargs");
        n->names.push_back(expect_name("a parameter name"));
        if (is_op("=")) {
          next();
          n->exprs.push_back(parse_expr());
        } else {
          n->exprs.push_back(nullptr);
        }
        if (!is_op(",")) break;
        next();
      }
      expect_op(")");
      expect_block_end();
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;
      n->bodies.push_back(parse_body({"endmacro"}));
      loop_depth_ = saved_loops;
      next();
      if (cur().type == Tok::Name && cur().text == n->text) next();
      expect_block_end();
    } else if (kw == "break" || kw == "continue") {
      next();
      n->kind = kw == "break" ? NK::Break : NK::Continue;
      if (loop_depth_ == 0) error("'" + kw + "' outside a loop");
      expect_block_end();
    } else if (kw == "generation") {
      next();
      expect_block_end();
      n->kind = NK::Block;
      n->bodies.push_back(parse_body({"endgeneration"}));
      next();
      expect_block_end();
    } else if (kw == "raw" || kw == "filter" || kw == "call" || kw == "with" || kw == "include" ||
               kw == "import" || kw == "from" || kw == "extends" || kw == "block" ||
               kw == "autoescape" || kw == "do" || kw == "trans") {
      unsupported("{% " + kw + " %}");
    } else if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else") {
      error("unexpected '{% " + kw + " %}': no open block to close or continue");
    } else {
      error("unknown tag " + kappa::quoted(kw, 40) +
            " (expected a statement such as 'if', 'for', 'set', 'macro')");
    }
    return n;
  }

  // A top-level expression; `a, b` is a tuple.
  ExprPtr parse_tuple_expr() {
    const int line = cur().line;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    std::vector<ExprPtr> items;
    items.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (cur().type == Tok::BlockEnd || cur().type == Tok::VarEnd) break;
      items.push_back(parse_expr());
    }
    return make(EK::Tuple, line, std::move(items));
  }

  ExprPtr parse_expr() {
    DepthGuard guard(*this);
    const int line = cur().line;
    ExprPtr body = parse_or();
    while (is_name("if")) {
      next();
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = parse_expr();
      }
      std::vector<ExprPtr> kids;
      kids.push_back(std::move(body));
      kids.push_back(std::move(cond));
      kids.push_back(std::move(other));
      body = make(EK::Cond, line, std::move(kids));
    }
    return body;
  }
  ExprPtr parse_or_expr_no_cond() { return parse_or(); }

  ExprPtr binary(EK kind, int line, ExprPtr a, ExprPtr b, std::string name = {}) {
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(a));
    kids.push_back(std::move(b));
    ExprPtr e = make(kind, line, std::move(kids));
    e->name = std::move(name);
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr a = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      a = binary(EK::Or, line, std::move(a), parse_and());
    }
    return a;
  }
  ExprPtr parse_and() {
    ExprPtr a = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      a = binary(EK::And, line, std::move(a), parse_not());
    }
    return a;
  }
  ExprPtr parse_not() {
    DepthGuard guard(*this);
    if (is_name("not")) {
      const int line = cur().line;
      next();
      std::vector<ExprPtr> kids;
      kids.push_back(parse_not());
      return make(EK::Not, line, std::move(kids));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<ExprPtr> kids;
    std::vector<std::string> ops;
    for (;;) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      ops.push_back(op);
      kids.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    kids.insert(kids.begin(), std::move(first));
    ExprPtr e = make(EK::Compare, line, std::move(kids));
    e->ops = std::move(ops);
    return e;
  }
  ExprPtr parse_math1() {
    ExprPtr a = parse_concat();
    while (is_op("+") || is_op("-")) {
      const int line = cur().line;
      std::string op = cur().text;
      next();
      a = binary(EK::Binary, line, std::move(a), parse_concat(), op);
    }
    return a;
  }
  ExprPtr parse_concat() {
    ExprPtr a = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      a = binary(EK::Concat, line, std::move(a), parse_math2());
    }
    return a;
  }
  ExprPtr parse_math2() {
    ExprPtr a = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const int line = cur().line;
      std::string op = cur().text;
      next();
      a = binary(EK::Binary, line, std::move(a), parse_pow(), op);
    }
    return a;
  }
  ExprPtr parse_pow() {
    ExprPtr a = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      a = binary(EK::Binary, line, std::move(a), parse_unary(true), "**");
    }
    return a;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const int line = cur().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const bool neg = is_op("-");
      next();
      std::vector<ExprPtr> kids;
      kids.push_back(parse_unary(false));
      node = make(neg ? EK::Neg : EK::Pos, line, std::move(kids));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }
  ExprPtr parse_primary() {
    DepthGuard guard(*this);
    const Token& t = cur();
    const int line = t.line;
    if (t.type == Tok::Name) {
      std::string n = t.text;
      next();
      ExprPtr e = make(EK::Literal, line);
      if (n == "true" || n == "True") {
        e->literal = Value::boolean(true);
      } else if (n == "false" || n == "False") {
        e->literal = Value::boolean(false);
      } else if (n == "none" || n == "None") {
        e->literal = Value::none();
      } else {
        e->kind = EK::Name;
        if (n == "loop") ++loop_refs_;
        e->name = std::move(n);
      }
      return e;
    }
    if (t.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) {
        s += cur().text;
        next();
      }
      ExprPtr e = make(EK::Literal, line);
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      ExprPtr e = make(EK::Literal, line);
      if (t.type == Tok::Int) {
        std::int64_t v = 0;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc() || r.ptr != t.text.data() + t.text.size())
          unsupported("the integer " + t.text + " (beyond 64 bits)");
        e->literal = Value::integer(v);
      } else {
        double v = 0;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec == std::errc::result_out_of_range) {
          v = std::strtod(t.text.c_str(), nullptr);
        } else if (r.ec != std::errc()) {
          error("invalid number " + t.text);
        }
        e->literal = Value::real(v);
      }
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        return make(EK::Tuple, line);
      }
      ExprPtr first = parse_expr();
      if (is_op(")")) {
        next();
        return first;
      }
      std::vector<ExprPtr> items;
      items.push_back(std::move(first));
      while (is_op(",")) {
        next();
        if (is_op(")")) break;
        items.push_back(parse_expr());
      }
      expect_op(")");
      return make(EK::Tuple, line, std::move(items));
    }
    if (is_op("[")) {
      next();
      std::vector<ExprPtr> items;
      while (!is_op("]")) {
        items.push_back(parse_expr());
        if (!is_op(",")) break;
        next();
      }
      expect_op("]");
      return make(EK::List, line, std::move(items));
    }
    if (is_op("{")) {
      next();
      std::vector<ExprPtr> items;
      while (!is_op("}")) {
        items.push_back(parse_expr());
        expect_op(":");
        items.push_back(parse_expr());
        if (!is_op(",")) break;
        next();
      }
      expect_op("}");
      return make(EK::Dict, line, std::move(items));
    }
    expected("an expression");
  }
  ExprPtr parse_postfix(ExprPtr node) {
    for (;;) {
      const int line = cur().line;
      if (is_op(".")) {
        next();
        std::vector<ExprPtr> kids;
        kids.push_back(std::move(node));
        if (cur().type == Tok::Int) {
          ExprPtr idx = make(EK::Literal, line);
          idx->literal = Value::integer(std::stoll(cur().text));
          next();
          kids.push_back(std::move(idx));
          node = make(EK::Item, line, std::move(kids));
        } else {
          std::string n = expect_name("an attribute name");
          node = make(EK::Attr, line, std::move(kids));
          node->name = std::move(n);
        }
      } else if (is_op("[")) {
        next();
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node), EK::Call, {});
      } else {
        return node;
      }
    }
  }
  ExprPtr parse_subscript(ExprPtr obj, int line) {
    DepthGuard guard(*this);
    std::vector<ExprPtr> parts;  // start, stop, step
    bool slice = false;
    ExprPtr cur_part;
    if (!is_op(":")) cur_part = parse_expr();
    while (is_op(":")) {
      slice = true;
      next();
      parts.push_back(std::move(cur_part));
      cur_part = nullptr;
      if (!is_op(":") && !is_op("]")) cur_part = parse_expr();
      if (parts.size() == 2) break;
    }
    parts.push_back(std::move(cur_part));
    if (is_op(",")) unsupported("a tuple subscript");
    expect_op("]");
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(obj));
    if (!slice) {
      kids.push_back(std::move(parts[0]));
      return make(EK::Item, line, std::move(kids));
    }
    while (parts.size() < 3) parts.push_back(nullptr);
    for (auto& p : parts) kids.push_back(std::move(p));
    return make(EK::Slice, line, std::move(kids));
  }
  // Parses "(args)" after `callee`, into a Call/Filter/Test node.
  ExprPtr parse_call(ExprPtr callee, EK kind, std::string name) {
    DepthGuard guard(*this);
    const int line = cur().line;
    expect_op("(");
    std::vector<ExprPtr> pos;
    std::vector<ExprPtr> kwv;
    std::vector<std::string> kwn;
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) unsupported("argument unpacking");
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        kwn.push_back(cur().text);
        next();
        next();
        kwv.push_back(parse_expr());
      } else {
        if (!kwn.empty()) error("a positional argument after a keyword argument");
        pos.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
    return make_call(kind, line, std::move(callee), std::move(pos), std::move(kwv), std::move(kwn),
                     std::move(name));
  }
  ExprPtr make_call(EK kind, int line, ExprPtr callee, std::vector<ExprPtr> pos,
                    std::vector<ExprPtr> kwv, std::vector<std::string> kwn, std::string name) {
    std::vector<ExprPtr> kids;
    kids.push_back(std::move(callee));
    const std::size_t npos = pos.size();
    for (auto& p : pos) kids.push_back(std::move(p));
    for (auto& k : kwv) kids.push_back(std::move(k));
    ExprPtr e = make(kind, line, std::move(kids));
    e->npos = npos;
    e->kw = std::move(kwn);
    e->name = std::move(name);
    return e;
  }
  ExprPtr parse_filter_expr(ExprPtr node) {
    for (;;) {
      const int line = cur().line;
      if (is_op("|")) {
        next();
        std::string n = expect_name("a filter name");
        while (is_op(".")) {
          next();
          n += '.';  // (two appends: GCC 12 -O3 warns falsely on "." + string&&)
          n += expect_name("a filter name");
        }
        if (is_op("(")) {
          node = parse_call(std::move(node), EK::Filter, n);
        } else {
          node = make_call(EK::Filter, line, std::move(node), {}, {}, {}, n);
        }
      } else if (is_name("is")) {
        next();
        bool negated = false;
        if (is_name("not")) {
          negated = true;
          next();
        }
        std::string n;
        if (cur().type == Tok::Name ||
            (cur().type == Tok::Op &&
             (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
              cur().text == ">" || cur().text == ">="))) {
          n = cur().text;
          next();
        } else {
          expected("a test name");
        }
        if (is_op("(")) {
          node = parse_call(std::move(node), EK::Test, n);
        } else if ((cur().type == Tok::Name && cur().text != "else" && cur().text != "or" &&
                    cur().text != "and" && cur().text != "if" && cur().text != "is" &&
                    cur().text != "not" && cur().text != "in") ||
                   cur().type == Tok::String || cur().type == Tok::Int ||
                   cur().type == Tok::Float || is_op("[") || is_op("{")) {
          std::vector<ExprPtr> pos;
          pos.push_back(parse_postfix(parse_primary()));
          node = make_call(EK::Test, line, std::move(node), std::move(pos), {}, {}, n);
        } else {
          node = make_call(EK::Test, line, std::move(node), {}, {}, {}, n);
        }
        node->negated = negated;
      } else if (is_op("(")) {
        node = parse_call(std::move(node), EK::Call, {});
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::size_t loop_refs_ = 0;  // names `loop` parsed so far
};

// ----------------------------------------------------------- renderer --

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  Value* find(std::string_view name) {
    for (Scope* s = this; s; s = s->parent)
      for (auto& kv : s->vars)
        if (kv.first == name) return &kv.second;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& kv : vars)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow : std::uint8_t { Normal, Break, Continue };

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* get(std::size_t index, std::string_view name) const {
    for (const auto& kv : kw)
      if (kv.first == name) return &kv.second;
    return index < pos.size() ? &pos[index] : nullptr;
  }
};

class Renderer {
 public:
  Renderer(Scope& globals, std::optional<std::int64_t> now) : globals_(globals), now_(now) {}

  void run(const Body& body, std::string& out) {
    if (exec(body, globals_, out) != Flow::Normal)
      runtime_error(0, "'break' or 'continue' outside a loop");
  }

 private:
  struct Guard {
    int& d;
    Guard(int& depth, int line) : d(depth) {
      if (++d > kMaxEvalDepth) runtime_error(line, "the template recurses too deeply");
    }
    ~Guard() { --d; }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
  };
  void step(int line) {
    if (++steps_ > kMaxSteps)
      runtime_error(line, "the template runs more than " + std::to_string(kMaxSteps) +
                              " loop iterations and calls");
  }
  static void append(std::string& out, std::string_view s, int line) {
    check_size(out.size() + s.size(), line);
    out.append(s);
  }

  Flow exec(const Body& body, Scope& scope, std::string& out) {
    for (const auto& n : body) {
      const Flow f = exec(*n, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n, Scope& scope, std::string& out) {
    Guard guard(depth_, n.line);
    switch (n.kind) {
      case NK::Text:
        append(out, n.text, n.line);
        return Flow::Normal;
      case NK::Emit: {
        const Value v = eval(*n.exprs[0], scope);
        append(out, to_str(v), n.line);
        return Flow::Normal;
      }
      case NK::If:
        for (std::size_t k = 0; k < n.exprs.size(); ++k)
          if (truthy(eval(*n.exprs[k], scope))) return exec(n.bodies[k], scope, out);
        if (n.bodies.size() > n.exprs.size()) return exec(n.bodies.back(), scope, out);
        return Flow::Normal;
      case NK::For:
        exec_for(n, scope, out);
        return Flow::Normal;
      case NK::Set: {
        Value v = eval(*n.exprs[0], scope);
        if (!n.unpack) {
          scope.set(n.names[0], std::move(v));
        } else {
          const std::vector<Value> items = unpack(v, n.names.size(), n.line);
          for (std::size_t k = 0; k < items.size(); ++k) scope.set(n.names[k], items[k]);
        }
        return Flow::Normal;
      }
      case NK::SetAttr: {
        Value* target = scope.find(n.names[0]);
        if (!target || target->kind != Value::Kind::Namespace)
          runtime_error(n.line, "cannot assign attribute on non-namespace object " +
                                    kappa::quoted(n.names[0], 40));
        Value v = eval(*n.exprs[0], scope);
        NsObj* ns = target->ns;
        for (auto& kv : ns->attrs)
          if (kv.first == n.text) {
            kv.second = std::move(v);
            return Flow::Normal;
          }
        ns->attrs.emplace_back(n.text, std::move(v));
        return Flow::Normal;
      }
      case NK::SetBlock: {
        std::string body;
        if (exec(n.bodies[0], scope, body) != Flow::Normal)
          runtime_error(n.line, "'break' or 'continue' inside {% set %}...{% endset %}");
        scope.set(n.names[0], Value::string(std::move(body)));
        return Flow::Normal;
      }
      case NK::Macro: {
        auto fn = std::make_shared<FnObj>();
        fn->type = FnObj::Type::Macro;
        fn->name = n.text;
        fn->macro = &n;
        Value v;
        v.kind = Value::Kind::Function;
        v.fn = std::move(fn);
        scope.set(n.text, std::move(v));
        return Flow::Normal;
      }
      case NK::Break:
        return Flow::Break;
      case NK::Continue:
        return Flow::Continue;
      case NK::Block:
        return exec(n.bodies[0], scope, out);
    }
    return Flow::Normal;
  }

  std::vector<Value> iterate(const Value& v, int line) {
    switch (v.kind) {
      case Value::Kind::Undefined:
        return {};
      case Value::Kind::List:
        return v.list->items;
      case Value::Kind::Dict: {
        std::vector<Value> keys;
        for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
        return keys;
      }
      case Value::Kind::String: {
        std::vector<Value> chars;
        for (std::size_t k = 0; k < v.s.size();) {
          const std::size_t len = decode_utf8(v.s, k).length;
          chars.push_back(Value::string(v.s.substr(k, len)));
          k += len;
        }
        return chars;
      }
      default:
        runtime_error(line, std::string("'") + type_name(v) + "' object is not iterable");
    }
  }

  std::vector<Value> unpack(const Value& v, std::size_t n, int line) {
    if (v.kind != Value::Kind::List && v.kind != Value::Kind::String && v.kind != Value::Kind::Dict)
      runtime_error(line, std::string("cannot unpack a '") + type_name(v) + "' into " +
                              std::to_string(n) + " names");
    std::vector<Value> items = iterate(v, line);
    if (items.size() != n)
      runtime_error(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                              std::to_string(n) + " names");
    return items;
  }

  void exec_for(const Node& n, Scope& scope, std::string& out) {
    const Value seq = eval(*n.exprs[0], scope);
    std::vector<Value> all = iterate(seq, n.line);
    const auto bind = [&](Scope& s, const Value& item) {
      if (!n.unpack) {
        s.set(n.names[0], item);
      } else {
        const std::vector<Value> parts = unpack(item, n.names.size(), n.line);
        for (std::size_t k = 0; k < parts.size(); ++k) s.set(n.names[k], parts[k]);
      }
    };
    if (n.exprs[1]) {
      std::vector<Value> kept;
      for (const Value& item : all) {
        step(n.line);
        Scope s{&scope, {}};
        bind(s, item);
        if (truthy(eval(*n.exprs[1], s))) kept.push_back(item);
      }
      all = std::move(kept);
    }
    if (all.empty()) {
      if (n.bodies.size() > 1) {
        Scope s{&scope, {}};
        if (exec(n.bodies[1], s, out) != Flow::Normal)
          runtime_error(n.line, "'break' or 'continue' outside a loop");
      }
      return;
    }
    const auto len = static_cast<std::int64_t>(all.size());
    for (std::size_t k = 0; k < all.size(); ++k) {
      step(n.line);
      Scope s{&scope, {}};
      if (!n.uses_loop) {
        bind(s, all[k]);
        if (exec(n.bodies[0], s, out) == Flow::Break) break;
        continue;
      }
      const auto k64 = static_cast<std::int64_t>(k);
      auto cycle = std::make_shared<FnObj>();
      cycle->type = FnObj::Type::Cycle;
      cycle->name = "loop.cycle";
      cycle->self = Value::integer(k64);
      Value cycle_v;
      cycle_v.kind = Value::Kind::Function;
      cycle_v.fn = std::move(cycle);
      std::vector<std::pair<std::string, Value>> loop{
          {"index0", Value::integer(k64)},
          {"index", Value::integer(k64 + 1)},
          {"revindex", Value::integer(len - k64)},
          {"revindex0", Value::integer(len - k64 - 1)},
          {"first", Value::boolean(k == 0)},
          {"last", Value::boolean(k + 1 == all.size())},
          {"length", Value::integer(len)},
          {"depth", Value::integer(1)},
          {"depth0", Value::integer(0)},
          {"previtem", k > 0 ? all[k - 1] : Value::undefined("loop.previtem is undefined")},
          {"nextitem",
           k + 1 < all.size() ? all[k + 1] : Value::undefined("loop.nextitem is undefined")},
          {"cycle", std::move(cycle_v)},
      };
      s.vars.emplace_back("loop", Value::make_dict(std::move(loop)));
      bind(s, all[k]);
      if (exec(n.bodies[0], s, out) == Flow::Break) break;
    }
  }

  // ---- expressions ----

  [[noreturn]] static void undefined_error(const Value& v, int line) {
    runtime_error(line, v.s.empty() ? std::string("an undefined value was used") : v.s);
  }

  Value eval(const Expr& e, Scope& scope) {
    Guard guard(depth_, e.line);
    switch (e.kind) {
      case EK::Literal:
        return e.literal;
      case EK::Name: {
        if (const Value* v = scope.find(e.name)) return *v;
        if (e.name == "range" || e.name == "namespace" || e.name == "raise_exception" ||
            e.name == "strftime_now" || e.name == "dict") {
          auto fn = std::make_shared<FnObj>();
          fn->name = e.name;
          Value v;
          v.kind = Value::Kind::Function;
          v.fn = std::move(fn);
          return v;
        }
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case EK::List:
      case EK::Tuple: {
        std::vector<Value> items;
        for (const auto& k : e.kids) items.push_back(eval(*k, scope));
        return Value::make_list(std::move(items), e.kind == EK::Tuple);
      }
      case EK::Dict: {
        std::vector<std::pair<std::string, Value>> items;
        for (std::size_t k = 0; k + 1 < e.kids.size(); k += 2) {
          Value key = eval(*e.kids[k], scope);
          if (key.kind != Value::Kind::String)
            fail(ChatTemplateError::Kind::Unsupported, e.line,
                 "dict keys that are not strings are not supported");
          items.emplace_back(std::move(key.s), eval(*e.kids[k + 1], scope));
        }
        return Value::make_dict(std::move(items));
      }
      case EK::Attr:
        return get_attr(eval(*e.kids[0], scope), e.name, e.line);
      case EK::Item:
        return get_item(eval(*e.kids[0], scope), eval(*e.kids[1], scope), e.line);
      case EK::Slice:
        return eval_slice(e, scope);
      case EK::Call:
        return eval_call(e, scope);
      case EK::Filter:
        return eval_filter(e, scope);
      case EK::Test: {
        const Value v = eval(*e.kids[0], scope);
        const Args args = eval_args(e, scope);
        const bool r = test(e.name, v, args, e.line);
        return Value::boolean(e.negated ? !r : r);
      }
      case EK::Neg:
      case EK::Pos: {
        const Value v = eval(*e.kids[0], scope);
        if (v.kind == Value::Kind::Undefined) undefined_error(v, e.line);
        if (!v.is_number())
          runtime_error(e.line, std::string("bad operand type for unary ") +
                                    (e.kind == EK::Neg ? "-" : "+") + ": '" + type_name(v) + "'");
        if (e.kind == EK::Pos) return v.kind == Value::Kind::Bool ? Value::integer(as_int(v)) : v;
        if (v.kind == Value::Kind::Float) return Value::real(-v.f);
        const std::int64_t x = as_int(v);
        if (x == std::numeric_limits<std::int64_t>::min())
          runtime_error(e.line, "integer overflow");
        return Value::integer(-x);
      }
      case EK::Not:
        return Value::boolean(!truthy(eval(*e.kids[0], scope)));
      case EK::And: {
        Value a = eval(*e.kids[0], scope);
        return truthy(a) ? eval(*e.kids[1], scope) : a;
      }
      case EK::Or: {
        Value a = eval(*e.kids[0], scope);
        return truthy(a) ? a : eval(*e.kids[1], scope);
      }
      case EK::Cond:
        if (truthy(eval(*e.kids[1], scope))) return eval(*e.kids[0], scope);
        if (e.kids[2]) return eval(*e.kids[2], scope);
        return Value::undefined("the else branch of a conditional expression is undefined");
      case EK::Concat: {
        std::string s = to_str(eval(*e.kids[0], scope));
        const std::string t = to_str(eval(*e.kids[1], scope));
        check_size(s.size() + t.size(), e.line);
        return Value::string(s + t);
      }
      case EK::Binary:
        return binary(e.name, eval(*e.kids[0], scope), eval(*e.kids[1], scope), e.line);
      case EK::Compare: {
        Value left = eval(*e.kids[0], scope);
        for (std::size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.kids[k + 1], scope);
          if (!compare(e.ops[k], left, right, e.line)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
    }
    return Value::undefined();
  }

  bool compare(const std::string& op, const Value& a, const Value& b, int line) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "<") return less(a, b, line);
    if (op == ">") return less(b, a, line);
    if (op == "<=") return less(a, b, line) || equal(a, b);
    if (op == ">=") return less(b, a, line) || equal(a, b);
    const bool in = contains(b, a, line);
    return op == "in" ? in : !in;
  }

  static bool contains(const Value& container, const Value& x, int line) {
    switch (container.kind) {
      case Value::Kind::String:
        if (x.kind != Value::Kind::String)
          runtime_error(line, std::string("'in <string>' requires string as left operand, not ") +
                                  type_name(x));
        return container.s.find(x.s) != std::string::npos;
      case Value::Kind::List:
        return std::any_of(container.list->items.begin(), container.list->items.end(),
                           [&](const Value& y) { return equal(x, y); });
      case Value::Kind::Dict:
        return x.kind == Value::Kind::String && container.dict->find(x.s) != nullptr;
      case Value::Kind::Undefined:
        return false;
      default:
        runtime_error(
            line, std::string("argument of type '") + type_name(container) + "' is not iterable");
    }
  }

  static Value binary(const std::string& op, const Value& a, const Value& b, int line) {
    if (a.kind == Value::Kind::Undefined) undefined_error(a, line);
    if (b.kind == Value::Kind::Undefined) undefined_error(b, line);
    const auto type_error = [&]() -> Value {
      if (op == "%" && a.kind == Value::Kind::String)
        fail(ChatTemplateError::Kind::Unsupported, line, "'%' string formatting is not supported");
      runtime_error(line, "unsupported operand type(s) for " + op + ": '" + type_name(a) +
                              "' and '" + type_name(b) + "'");
    };
    if (a.is_number() && b.is_number()) {
      const bool fl = a.kind == Value::Kind::Float || b.kind == Value::Kind::Float;
      if (op == "/") {
        if (as_double(b) == 0.0) runtime_error(line, "division by zero");
        return Value::real(as_double(a) / as_double(b));
      }
      if (op == "**") {
        if (!fl && as_int(b) >= 0) {
          const std::int64_t base = as_int(a);
          const std::int64_t ex = as_int(b);
          if (base == 0) return Value::integer(ex == 0 ? 1 : 0);
          if (base == 1) return Value::integer(1);
          if (base == -1) return Value::integer(ex % 2 == 0 ? 1 : -1);
          std::int64_t r = 1;
          for (std::int64_t k = 0; k < ex; ++k)
            if (__builtin_mul_overflow(r, base, &r))
              runtime_error(line, "integer overflow (kappa's integers are 64-bit)");
          return Value::integer(r);
        }
        return Value::real(std::pow(as_double(a), as_double(b)));
      }
      if (fl) {
        const double x = as_double(a);
        const double y = as_double(b);
        if (op == "+") return Value::real(x + y);
        if (op == "-") return Value::real(x - y);
        if (op == "*") return Value::real(x * y);
        if (y == 0.0) runtime_error(line, "float division by zero");
        if (op == "//") return Value::real(std::floor(x / y));
        double m = std::fmod(x, y);
        if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
        return Value::real(m);
      }
      const std::int64_t x = as_int(a);
      const std::int64_t y = as_int(b);
      std::int64_t r = 0;
      bool overflow = false;
      if (op == "+") {
        overflow = __builtin_add_overflow(x, y, &r);
      } else if (op == "-") {
        overflow = __builtin_sub_overflow(x, y, &r);
      } else if (op == "*") {
        overflow = __builtin_mul_overflow(x, y, &r);
      } else {
        if (y == 0) runtime_error(line, "integer division or modulo by zero");
        if (x == std::numeric_limits<std::int64_t>::min() && y == -1)
          runtime_error(line, "integer overflow (kappa's integers are 64-bit)");
        std::int64_t q = x / y;
        std::int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        r = op == "//" ? q : m;
      }
      if (overflow) runtime_error(line, "integer overflow (kappa's integers are 64-bit)");
      return Value::integer(r);
    }
    if (op == "+") {
      if (a.kind == Value::Kind::String && b.kind == Value::Kind::String) {
        check_size(a.s.size() + b.s.size(), line);
        return Value::string(a.s + b.s);
      }
      if (a.kind == Value::Kind::List && b.kind == Value::Kind::List &&
          a.list->tuple == b.list->tuple) {
        std::vector<Value> items = a.list->items;
        items.insert(items.end(), b.list->items.begin(), b.list->items.end());
        return Value::make_list(std::move(items), a.list->tuple);
      }
      return type_error();
    }
    if (op == "*") {
      const bool a_seq = a.kind == Value::Kind::String || a.kind == Value::Kind::List;
      const Value& seq = a_seq ? a : b;
      const Value& count = a_seq ? b : a;
      if ((seq.kind == Value::Kind::String || seq.kind == Value::Kind::List) &&
          (count.kind == Value::Kind::Int || count.kind == Value::Kind::Bool)) {
        const std::int64_t c = std::max<std::int64_t>(0, as_int(count));
        if (seq.kind == Value::Kind::String) {
          if (!seq.s.empty() && static_cast<std::uint64_t>(c) > kMaxStringBytes / seq.s.size())
            check_size(kMaxStringBytes + 1, line);
          std::string out;
          for (std::int64_t k = 0; k < c && !seq.s.empty(); ++k) out += seq.s;
          return Value::string(std::move(out));
        }
        const std::size_t n = seq.list->items.size();
        if (n && static_cast<std::uint64_t>(c) > kMaxListItems / n)
          runtime_error(line, "a list of more than " + std::to_string(kMaxListItems) + " items");
        std::vector<Value> items;
        for (std::int64_t k = 0; k < c && n; ++k)
          items.insert(items.end(), seq.list->items.begin(), seq.list->items.end());
        return Value::make_list(std::move(items), seq.list->tuple);
      }
    }
    return type_error();
  }

  // Python's slice.indices(n) followed by the selected positions.
  static std::vector<std::size_t> slice_positions(std::size_t n, const Value& start,
                                                  const Value& stop, const Value& step, int line) {
    const auto num = [&](const Value& v, const char* what) -> std::optional<std::int64_t> {
      if (v.kind == Value::Kind::None || v.kind == Value::Kind::Undefined) return std::nullopt;
      if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
        runtime_error(line, std::string("slice ") + what + " must be an integer or none, not " +
                                type_name(v));
      return as_int(v);
    };
    const std::int64_t len = static_cast<std::int64_t>(n);
    const std::int64_t st = num(step, "step").value_or(1);
    if (st == 0) runtime_error(line, "slice step cannot be zero");
    const auto clamp = [&](std::optional<std::int64_t> v, std::int64_t dflt) -> std::int64_t {
      if (!v) return dflt;
      std::int64_t x = *v;
      if (x < 0) {
        x = x < -len ? (st < 0 ? -1 : 0) : x + len;
      } else if (x >= len) {
        x = st < 0 ? len - 1 : len;
      }
      return x;
    };
    const std::int64_t b = clamp(num(start, "start"), st < 0 ? len - 1 : 0);
    const std::int64_t e = clamp(num(stop, "stop"), st < 0 ? -1 : len);
    std::vector<std::size_t> out;
    if (st > 0) {
      for (std::int64_t k = b; k < e; k += st) {
        out.push_back(static_cast<std::size_t>(k));
        if (st > len) break;
      }
    } else {
      for (std::int64_t k = b; k > e; k += st) {
        out.push_back(static_cast<std::size_t>(k));
        if (st < -len) break;
      }
    }
    return out;
  }

  Value eval_slice(const Expr& e, Scope& scope) {
    const Value obj = eval(*e.kids[0], scope);
    const Value start = e.kids[1] ? eval(*e.kids[1], scope) : Value::none();
    const Value stop = e.kids[2] ? eval(*e.kids[2], scope) : Value::none();
    const Value stp = e.kids[3] ? eval(*e.kids[3], scope) : Value::none();
    if (obj.kind == Value::Kind::List) {
      std::vector<Value> items;
      for (std::size_t p : slice_positions(obj.list->items.size(), start, stop, stp, e.line))
        items.push_back(obj.list->items[p]);
      return Value::make_list(std::move(items), obj.list->tuple);
    }
    if (obj.kind == Value::Kind::String) {
      const std::vector<std::size_t> off = char_offsets(obj.s);
      std::string out;
      for (std::size_t p : slice_positions(off.size() - 1, start, stop, stp, e.line))
        out.append(obj.s, off[p], off[p + 1] - off[p]);
      return Value::string(std::move(out));
    }
    if (obj.kind == Value::Kind::Undefined) undefined_error(obj, e.line);
    runtime_error(e.line, std::string("'") + type_name(obj) + "' object is not subscriptable");
  }

  static bool is_method(const Value& obj, std::string_view name) {
    static constexpr std::string_view kStr[] = {
        "strip",   "lstrip",     "rstrip",  "split",      "rsplit",  "startswith", "endswith",
        "upper",   "lower",      "title",   "capitalize", "replace", "find",       "rfind",
        "count",   "join",       "isdigit", "isalpha",    "isalnum", "isspace",    "islower",
        "isupper", "splitlines", "index",   "rindex"};
    static constexpr std::string_view kDict[] = {"items", "keys", "values", "get"};
    static constexpr std::string_view kList[] = {"index", "count"};
    if (obj.kind == Value::Kind::String)
      return std::find(std::begin(kStr), std::end(kStr), name) != std::end(kStr);
    if (obj.kind == Value::Kind::Dict)
      return std::find(std::begin(kDict), std::end(kDict), name) != std::end(kDict);
    if (obj.kind == Value::Kind::List)
      return std::find(std::begin(kList), std::end(kList), name) != std::end(kList);
    return false;
  }
  static Value method(const Value& obj, std::string_view name) {
    auto fn = std::make_shared<FnObj>();
    fn->type = FnObj::Type::Method;
    fn->name = std::string(name);
    fn->self = obj;
    Value v;
    v.kind = Value::Kind::Function;
    v.fn = std::move(fn);
    return v;
  }

  static Value get_attr(const Value& obj, const std::string& name, int line) {
    switch (obj.kind) {
      case Value::Kind::Undefined:
        undefined_error(obj, line);
      case Value::Kind::Dict:
        if (is_method(obj, name)) return method(obj, name);
        if (const Value* v = obj.dict->find(name)) return *v;
        break;
      case Value::Kind::Namespace:
        for (const auto& kv : obj.ns->attrs)
          if (kv.first == name) return kv.second;
        break;
      default:
        if (is_method(obj, name)) return method(obj, name);
        if (obj.kind == Value::Kind::Function && obj.fn->type == FnObj::Type::Macro &&
            name == "name")
          return Value::string(obj.fn->name);
    }
    return Value::undefined("'" + std::string(type_name(obj)) + " object' has no attribute " +
                            kappa::quoted(name, 40));
  }

  static Value get_item(const Value& obj, const Value& key, int line) {
    switch (obj.kind) {
      case Value::Kind::Undefined:
        undefined_error(obj, line);
      case Value::Kind::Dict:
        if (key.kind == Value::Kind::String) {
          if (const Value* v = obj.dict->find(key.s)) return *v;
          if (is_method(obj, key.s)) return method(obj, key.s);
        }
        break;
      case Value::Kind::Namespace:
        if (key.kind == Value::Kind::String) return get_attr(obj, key.s, line);
        break;
      case Value::Kind::List:
      case Value::Kind::String:
        if (key.kind == Value::Kind::Int || key.kind == Value::Kind::Bool) {
          std::int64_t k = as_int(key);
          if (obj.kind == Value::Kind::List) {
            const auto n = static_cast<std::int64_t>(obj.list->items.size());
            if (k < 0) k += n;
            if (k >= 0 && k < n) return obj.list->items[static_cast<std::size_t>(k)];
          } else {
            const std::vector<std::size_t> off = char_offsets(obj.s);
            const auto n = static_cast<std::int64_t>(off.size() - 1);
            if (k < 0) k += n;
            if (k >= 0 && k < n) {
              const auto p = static_cast<std::size_t>(k);
              return Value::string(obj.s.substr(off[p], off[p + 1] - off[p]));
            }
          }
          return Value::undefined(std::string(type_name(obj)) + " index " +
                                  std::to_string(as_int(key)) + " out of range");
        }
        if (key.kind == Value::Kind::String && is_method(obj, key.s)) return method(obj, key.s);
        break;
      default:
        break;
    }
    return Value::undefined(
        "'" + std::string(type_name(obj)) + " object' has no item " +
        (key.kind == Value::Kind::String ? kappa::quoted(key.s, 40) : repr(key)));
  }

  Args eval_args(const Expr& e, Scope& scope) {
    Args args;
    for (std::size_t k = 0; k < e.npos; ++k) args.pos.push_back(eval(*e.kids[1 + k], scope));
    for (std::size_t k = 0; k < e.kw.size(); ++k)
      args.kw.emplace_back(e.kw[k], eval(*e.kids[1 + e.npos + k], scope));
    return args;
  }

  static void arity(const Args& a, std::size_t lo, std::size_t hi, const std::string& what,
                    int line) {
    if (a.pos.size() < lo || a.pos.size() > hi)
      runtime_error(line, what + " takes " +
                              (lo == hi ? std::to_string(lo)
                                        : std::to_string(lo) + " to " + std::to_string(hi)) +
                              " positional arguments, got " + std::to_string(a.pos.size()));
  }
  static const std::string& str_arg(const Value* v, const std::string& what, int line) {
    if (!v || v->kind != Value::Kind::String)
      runtime_error(line, what + " expects a string, got " + (v ? type_name(*v) : "nothing"));
    return v->s;
  }
  static std::int64_t int_arg(const Value* v, const std::string& what, int line) {
    if (!v || (v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool))
      runtime_error(line, what + " expects an integer, got " + (v ? type_name(*v) : "nothing"));
    return as_int(*v);
  }

  Value eval_call(const Expr& e, Scope& scope) {
    const Value callee = eval(*e.kids[0], scope);
    Args args = eval_args(e, scope);
    return call(callee, args, e.line);
  }

  Value call(const Value& callee, const Args& args, int line) {
    step(line);
    if (callee.kind != Value::Kind::Function) {
      if (callee.kind == Value::Kind::Undefined) undefined_error(callee, line);
      runtime_error(line, std::string("'") + type_name(callee) + "' object is not callable");
    }
    const FnObj& fn = *callee.fn;
    switch (fn.type) {
      case FnObj::Type::Macro:
        return call_macro(fn, args, line);
      case FnObj::Type::Method:
        return call_method(fn.self, fn.name, args, line);
      case FnObj::Type::Cycle: {
        if (args.pos.empty()) runtime_error(line, "loop.cycle() needs at least one argument");
        return args.pos[static_cast<std::size_t>(fn.self.i) % args.pos.size()];
      }
      case FnObj::Type::Global:
        break;
    }
    if (fn.name == "raise_exception") {
      const Value* msg = args.get(0, "message");
      fail(ChatTemplateError::Kind::Raised, line,
           "raise_exception: " + printable(msg ? to_str(*msg) : std::string()));
    }
    if (fn.name == "range") {
      arity(args, 1, 3, "range()", line);
      std::int64_t lo = 0;
      std::int64_t hi = 0;
      std::int64_t st = 1;
      if (args.pos.size() == 1) {
        hi = int_arg(args.pos.data(), "range()", line);
      } else {
        lo = int_arg(args.pos.data(), "range()", line);
        hi = int_arg(&args.pos[1], "range()", line);
        if (args.pos.size() == 3) st = int_arg(&args.pos[2], "range()", line);
      }
      if (st == 0) runtime_error(line, "range() arg 3 must not be zero");
      const double count =
          std::ceil((static_cast<double>(hi) - static_cast<double>(lo)) / static_cast<double>(st));
      if (count > static_cast<double>(kMaxListItems))
        runtime_error(line, "range() of more than " + std::to_string(kMaxListItems) + " items");
      std::vector<Value> items;
      for (std::int64_t k = lo; st > 0 ? k < hi : k > hi;) {
        items.push_back(Value::integer(k));
        if (__builtin_add_overflow(k, st, &k)) break;
      }
      return Value::make_list(std::move(items));
    }
    if (fn.name == "namespace" || fn.name == "dict") {
      std::vector<std::pair<std::string, Value>> attrs;
      if (!args.pos.empty()) {
        if (args.pos.size() > 1 || args.pos[0].kind != Value::Kind::Dict)
          runtime_error(line, fn.name + "() takes keyword arguments or one dict");
        attrs = args.pos[0].dict->items;
      }
      for (const auto& kv : args.kw) attrs.push_back(kv);
      if (fn.name == "dict") return Value::make_dict(std::move(attrs));
      namespaces_.push_back(std::make_unique<NsObj>());
      Value v;
      v.kind = Value::Kind::Namespace;
      v.ns = namespaces_.back().get();
      for (auto& kv : attrs) {
        bool found = false;
        for (auto& old : v.ns->attrs)
          if (old.first == kv.first) {
            old.second = kv.second;
            found = true;
          }
        if (!found) v.ns->attrs.push_back(kv);
      }
      return v;
    }
    if (fn.name == "strftime_now") {
      arity(args, 1, 1, "strftime_now()", line);
      const std::string& fmt = str_arg(args.pos.data(), "strftime_now()", line);
      if (fmt.empty()) return Value::string({});
      const std::time_t now = now_ ? static_cast<std::time_t>(*now_) : std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      std::string buf(fmt.size() * 32 + 64, '\0');
      const std::size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
      buf.resize(n);
      return Value::string(std::move(buf));
    }
    runtime_error(line, "unknown function " + kappa::quoted(fn.name, 40));
  }

  Value call_macro(const FnObj& fn, const Args& args, int line) {
    const Node& m = *fn.macro;
    if (args.pos.size() > m.names.size())
      runtime_error(line, "macro " + kappa::quoted(fn.name, 40) + " takes not more than " +
                              std::to_string(m.names.size()) + " arguments");
    if (++macro_depth_ > kMaxMacroDepth) {
      --macro_depth_;
      runtime_error(line, "macro calls nested deeper than " + std::to_string(kMaxMacroDepth));
    }
    struct Dec {
      int& d;
      ~Dec() { --d; }
    } dec{macro_depth_};
    Scope s{&globals_, {}};
    for (const auto& kv : args.kw)
      if (std::find(m.names.begin(), m.names.end(), kv.first) == m.names.end())
        fail(ChatTemplateError::Kind::Unsupported, line,
             "macro " + kappa::quoted(fn.name, 40) + " got keyword argument " +
                 kappa::quoted(kv.first, 40) +
                 " that it does not declare (macro kwargs are not supported)");
    for (std::size_t k = 0; k < m.names.size(); ++k) {
      const Value* given = args.get(k, m.names[k]);
      if (given) {
        s.vars.emplace_back(m.names[k], *given);
      } else if (m.exprs[k]) {
        s.vars.emplace_back(m.names[k], eval(*m.exprs[k], s));
      } else {
        s.vars.emplace_back(m.names[k],
                            Value::undefined("parameter '" + m.names[k] + "' of macro '" + fn.name +
                                             "' is undefined"));
      }
    }
    std::string out;
    if (exec(m.bodies[0], s, out) != Flow::Normal)
      runtime_error(line, "'break' or 'continue' outside a loop");
    return Value::string(std::move(out));
  }

  static std::vector<char32_t> decode(std::string_view s) {
    std::vector<char32_t> cps;
    for (std::size_t k = 0; k < s.size();) {
      const Utf8Char c = decode_utf8(s, k);
      cps.push_back(c.code_point);
      k += c.length;
    }
    return cps;
  }
  // str.strip/lstrip/rstrip with Python's whitespace or a set of characters.
  static std::string strip(const std::string& s, const Value* chars, bool left, bool right,
                           int line) {
    std::vector<char32_t> set;
    const bool ws = !chars || chars->kind == Value::Kind::None;
    if (!ws) set = decode(str_arg(chars, "strip()", line));
    const auto drop = [&](char32_t c) {
      return ws ? is_py_space(c) : std::find(set.begin(), set.end(), c) != set.end();
    };
    const std::vector<std::size_t> off = char_offsets(s);
    std::size_t b = 0;
    std::size_t e = off.size() - 1;
    if (left)
      while (b < e && drop(decode_utf8(s, off[b]).code_point)) ++b;
    if (right)
      while (e > b && drop(decode_utf8(s, off[e - 1]).code_point)) --e;
    return s.substr(off[b], off[e] - off[b]);
  }
  static std::string ascii_case(std::string s,
                                int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
    bool prev_alpha = false;
    bool first = true;
    for (char& c : s) {
      const auto u = static_cast<unsigned char>(c);
      const bool alpha = std::isalpha(u) != 0;
      if (mode == 2) {
        c = static_cast<char>(prev_alpha ? std::tolower(u) : std::toupper(u));
      } else if (mode == 0 || (mode == 3 && !first)) {
        c = static_cast<char>(std::tolower(u));
      } else {  // upper, and the first character under capitalize
        c = static_cast<char>(std::toupper(u));
      }
      prev_alpha = alpha || (u >= 0x80);
      first = false;
    }
    return s;
  }
  static std::vector<Value> split(const std::string& s, const Value* sep, std::int64_t maxsplit,
                                  bool from_right, int line) {
    std::vector<Value> out;
    if (!sep || sep->kind == Value::Kind::None) {
      const std::vector<std::size_t> off = char_offsets(s);
      std::vector<std::pair<std::size_t, std::size_t>> words;
      std::size_t k = 0;
      const std::size_t n = off.size() - 1;
      while (k < n) {
        while (k < n && is_py_space(decode_utf8(s, off[k]).code_point)) ++k;
        if (k >= n) break;
        std::size_t j = k;
        while (j < n && !is_py_space(decode_utf8(s, off[j]).code_point)) ++j;
        words.emplace_back(off[k], off[j]);
        k = j;
      }
      if (maxsplit >= 0 && words.size() > static_cast<std::size_t>(maxsplit) + 1) {
        const auto m = static_cast<std::size_t>(maxsplit);
        if (!from_right) {
          std::vector<std::pair<std::size_t, std::size_t>> w(
              words.begin(), words.begin() + static_cast<std::ptrdiff_t>(m));
          std::string rest = strip(s.substr(words[m].first), nullptr, false, true, line);
          for (auto& p : w) out.push_back(Value::string(s.substr(p.first, p.second - p.first)));
          out.push_back(Value::string(rest));
        } else {
          const std::size_t keep = words.size() - m;
          out.push_back(Value::string(
              strip(s.substr(0, words[keep - 1].second), nullptr, true, false, line)));
          for (std::size_t q = keep; q < words.size(); ++q)
            out.push_back(
                Value::string(s.substr(words[q].first, words[q].second - words[q].first)));
        }
        return out;
      }
      for (auto& p : words) out.push_back(Value::string(s.substr(p.first, p.second - p.first)));
      return out;
    }
    const std::string& d = str_arg(sep, "split()", line);
    if (d.empty()) runtime_error(line, "split(): empty separator");
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
      const std::size_t p = s.find(d, start);
      if (p == std::string::npos) break;
      parts.push_back(s.substr(start, p - start));
      start = p + d.size();
    }
    parts.push_back(s.substr(start));
    if (maxsplit >= 0 && parts.size() > static_cast<std::size_t>(maxsplit) + 1) {
      const auto m = static_cast<std::size_t>(maxsplit);
      std::vector<std::string> merged;
      if (!from_right) {
        merged.assign(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(m));
        std::string rest = parts[m];
        for (std::size_t q = m + 1; q < parts.size(); ++q) rest += d + parts[q];
        merged.push_back(rest);
      } else {
        const std::size_t keep = parts.size() - m;
        std::string head = parts[0];
        for (std::size_t q = 1; q < keep; ++q) head += d + parts[q];
        merged.push_back(head);
        merged.insert(merged.end(), parts.begin() + static_cast<std::ptrdiff_t>(keep), parts.end());
      }
      parts = std::move(merged);
    }
    for (auto& p : parts) out.push_back(Value::string(std::move(p)));
    return out;
  }

  Value call_method(const Value& self, const std::string& name, const Args& a, int line) {
    const std::string what = type_name(self) + std::string(".") + name + "()";
    if (self.kind == Value::Kind::Dict) {
      if (name == "get") {
        arity(a, 1, 2, what, line);
        const Value* k = a.pos.data();
        if (k->kind == Value::Kind::String)
          if (const Value* v = self.dict->find(k->s)) return *v;
        return a.pos.size() > 1 ? a.pos[1] : Value::none();
      }
      arity(a, 0, 0, what, line);
      std::vector<Value> items;
      for (const auto& kv : self.dict->items) {
        if (name == "keys") {
          items.push_back(Value::string(kv.first));
        } else if (name == "values") {
          items.push_back(kv.second);
        } else {
          items.push_back(Value::make_list({Value::string(kv.first), kv.second}, true));
        }
      }
      return Value::make_list(std::move(items));
    }
    if (self.kind == Value::Kind::List) {
      arity(a, 1, 1, what, line);
      std::int64_t count = 0;
      for (std::size_t k = 0; k < self.list->items.size(); ++k)
        if (equal(self.list->items[k], a.pos[0])) {
          if (name == "index") return Value::integer(static_cast<std::int64_t>(k));
          ++count;
        }
      if (name == "index") runtime_error(line, "list.index(x): x not in list");
      return Value::integer(count);
    }
    const std::string& s = self.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      arity(a, 0, 1, what, line);
      return Value::string(strip(s, a.get(0, "chars"), name != "rstrip", name != "lstrip", line));
    }
    if (name == "split" || name == "rsplit") {
      arity(a, 0, 2, what, line);
      const Value* ms = a.get(1, "maxsplit");
      return Value::make_list(
          split(s, a.get(0, "sep"), ms ? int_arg(ms, what, line) : -1, name == "rsplit", line));
    }
    if (name == "splitlines") {
      arity(a, 0, 0, what, line);
      std::vector<Value> out;
      std::size_t start = 0;
      while (start < s.size()) {
        std::size_t p = s.find_first_of("\n\r", start);
        if (p == std::string::npos) {
          out.push_back(Value::string(s.substr(start)));
          break;
        }
        out.push_back(Value::string(s.substr(start, p - start)));
        start = p + ((s[p] == '\r' && p + 1 < s.size() && s[p + 1] == '\n') ? 2 : 1);
      }
      return Value::make_list(std::move(out));
    }
    if (name == "startswith" || name == "endswith") {
      arity(a, 1, 1, what, line);
      std::vector<Value> options;
      if (a.pos[0].kind == Value::Kind::List) {
        options = a.pos[0].list->items;
      } else {
        options.push_back(a.pos[0]);
      }
      for (const Value& o : options) {
        const std::string& p = str_arg(&o, what, line);
        if (p.size() <= s.size() &&
            (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                  : s.compare(s.size() - p.size(), p.size(), p) == 0))
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      arity(a, 0, 0, what, line);
      return Value::string(ascii_case(s, name == "lower"   ? 0
                                         : name == "upper" ? 1
                                         : name == "title" ? 2
                                                           : 3));
    }
    if (name == "replace") {
      arity(a, 2, 3, what, line);
      return Value::string(replace(s, str_arg(a.pos.data(), what, line),
                                   str_arg(&a.pos[1], what, line),
                                   a.pos.size() > 2 ? int_arg(&a.pos[2], what, line) : -1, line));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex" ||
        name == "count") {
      arity(a, 1, 1, what, line);
      const std::string& sub = str_arg(a.pos.data(), what, line);
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<std::int64_t>(char_offsets(s).size()));
        std::int64_t c = 0;
        for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size()))
          ++c;
        return Value::integer(c);
      }
      const std::size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
      if (p == std::string::npos) {
        if (name == "index" || name == "rindex") runtime_error(line, "substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<std::int64_t>(char_offsets(s.substr(0, p)).size() - 1));
    }
    if (name == "join") {
      arity(a, 1, 1, what, line);
      std::string out;
      bool first = true;
      for (const Value& x : iterate(a.pos[0], line)) {
        if (!first) out += s;
        first = false;
        out += str_arg(&x, what, line);
        check_size(out.size(), line);
      }
      return Value::string(std::move(out));
    }
    arity(a, 0, 0, what, line);
    bool r = !s.empty();
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (c >= 0x80) {
        if (name != "islower" && name != "isupper")
          fail(ChatTemplateError::Kind::Unsupported, line,
               what + " on non-ASCII text is not supported");
        continue;
      }
      if (name == "isdigit") r = r && std::isdigit(c);
      if (name == "isalpha") r = r && std::isalpha(c);
      if (name == "isalnum") r = r && std::isalnum(c);
      if (name == "isspace") r = r && std::isspace(c);
      if (name == "islower") r = r && !std::isupper(c);
      if (name == "isupper") r = r && !std::islower(c);
    }
    if (name == "islower" || name == "isupper")
      r = r && std::any_of(s.begin(), s.end(),
                           [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
    return Value::boolean(r);
  }

  static std::string replace(const std::string& s, const std::string& from, const std::string& to,
                             std::int64_t count, int line) {
    std::string out;
    if (from.empty()) {
      const std::vector<std::size_t> off = char_offsets(s);
      std::int64_t done = 0;
      for (std::size_t k = 0; k + 1 < off.size(); ++k) {
        if (count < 0 || done < count) {
          out += to;
          ++done;
        }
        out.append(s, off[k], off[k + 1] - off[k]);
        check_size(out.size(), line);
      }
      if (count < 0 || done < count) out += to;
      return out;
    }
    std::size_t start = 0;
    std::int64_t done = 0;
    for (;;) {
      const std::size_t p = (count >= 0 && done >= count) ? std::string::npos : s.find(from, start);
      if (p == std::string::npos) break;
      out.append(s, start, p - start);
      out += to;
      check_size(out.size(), line);
      start = p + from.size();
      ++done;
    }
    out.append(s, start);
    return out;
  }

  // ---- tests ----
  bool test(const std::string& name, const Value& v, const Args& a, int line) {
    using K = Value::Kind;
    if (name == "defined") return v.kind != K::Undefined;
    if (name == "undefined") return v.kind == K::Undefined;
    if (name == "none") return v.kind == K::None;
    if (name == "string") return v.kind == K::String;
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == K::Int;
    if (name == "float") return v.kind == K::Float;
    if (name == "boolean") return v.kind == K::Bool;
    if (name == "true") return v.kind == K::Bool && v.b;
    if (name == "false") return v.kind == K::Bool && !v.b;
    if (name == "mapping") return v.kind == K::Dict;
    if (name == "iterable")
      return v.kind == K::String || v.kind == K::List || v.kind == K::Dict ||
             v.kind == K::Undefined;
    if (name == "sequence") return v.kind == K::String || v.kind == K::List || v.kind == K::Dict;
    if (name == "callable") return v.kind == K::Function;
    if (name == "lower" || name == "upper") {
      if (v.kind != K::String) runtime_error(line, "the test '" + name + "' expects a string");
      return truthy(call_method(v, name == "lower" ? "islower" : "isupper", {}, line));
    }
    if (name == "even" || name == "odd") {
      if (v.kind != K::Int && v.kind != K::Bool)
        runtime_error(line, "the test '" + name + "' expects an integer");
      return (as_int(v) % 2 == 0) == (name == "even");
    }
    const Value* arg = a.get(0, "other");
    if (!arg) arg = a.get(0, "value");
    if (!arg) arg = a.get(0, "seq");
    if (!arg) arg = a.get(0, "num");
    if (!arg)
      runtime_error(line,
                    "the test " + kappa::quoted(name, 40) + " needs an argument (or is unknown)");
    if (name == "divisibleby") {
      const std::int64_t d = int_arg(arg, "divisibleby", line);
      if (d == 0) runtime_error(line, "divisibleby(0)");
      return as_int(v) % d == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==") return equal(v, *arg);
    if (name == "ne" || name == "!=") return !equal(v, *arg);
    if (name == "lt" || name == "lessthan" || name == "<") return less(v, *arg, line);
    if (name == "gt" || name == "greaterthan" || name == ">") return less(*arg, v, line);
    if (name == "le" || name == "<=") return less(v, *arg, line) || equal(v, *arg);
    if (name == "ge" || name == ">=") return less(*arg, v, line) || equal(v, *arg);
    if (name == "in") return contains(*arg, v, line);
    if (name == "sameas") {
      if (v.kind != arg->kind) return false;
      if (v.kind == K::None || v.kind == K::Undefined) return true;
      if (v.kind == K::Bool) return v.b == arg->b;
      if (v.kind == K::Namespace) return v.ns == arg->ns;
      if (v.kind == K::List) return v.list == arg->list;
      if (v.kind == K::Dict) return v.dict == arg->dict;
      return equal(v, *arg);
    }
    runtime_error(line, "unknown test " + kappa::quoted(name, 40));
  }

  // ---- filters ----
  Value eval_filter(const Expr& e, Scope& scope) {
    if (e.name == "default" || e.name == "d") {
      const Value v = eval(*e.kids[0], scope);
      const Args a = eval_args(e, scope);
      const Value* dflt = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      const bool use = boolean && truthy(*boolean) ? !truthy(v) : v.kind == Value::Kind::Undefined;
      return use ? (dflt ? *dflt : Value::string({})) : v;
    }
    const Value v = eval(*e.kids[0], scope);
    const Args a = eval_args(e, scope);
    return filter(e.name, v, a, e.line);
  }

  std::vector<Value> to_list(const Value& v, int line) { return iterate(v, line); }

  // The attribute path "a.b" or index of selectattr/map/sort/join.
  Value attr_path(const Value& v, const Value& path, int line) {
    if (path.kind == Value::Kind::Int) return get_item(v, path, line);
    const std::string& p = str_arg(&path, "attribute", line);
    Value cur = v;
    std::size_t start = 0;
    for (;;) {
      const std::size_t dot = p.find('.', start);
      const std::string part =
          p.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      });
      if (cur.kind == Value::Kind::Undefined) return cur;
      cur = digits && part.size() < 18 ? get_item(cur, Value::integer(std::stoll(part)), line)
                                       : get_item(cur, Value::string(part), line);
      if (dot == std::string::npos) return cur;
      start = dot + 1;
    }
  }

  Value filter(const std::string& name, const Value& v, const Args& a, int line) {
    using K = Value::Kind;
    const std::string what = "the filter '" + name + "'";
    if (name == "safe" || (name == "list" && v.kind == K::List && !v.list->tuple)) return v;
    if (name == "trim") {
      return Value::string(strip(to_str(v), a.get(0, "chars"), true, true, line));
    }
    if (name == "string") return Value::string(to_str(v));
    if (name == "length" || name == "count") {
      switch (v.kind) {
        case K::Undefined:
          return Value::integer(0);
        case K::String:
          return Value::integer(static_cast<std::int64_t>(char_offsets(v.s).size() - 1));
        case K::List:
          return Value::integer(static_cast<std::int64_t>(v.list->items.size()));
        case K::Dict:
          return Value::integer(static_cast<std::int64_t>(v.dict->items.size()));
        default:
          runtime_error(line, std::string("object of type '") + type_name(v) + "' has no len()");
      }
    }
    if (name == "tojson") {
      // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
      JsonStyle st;
      if (const Value* ea = a.get(0, "ensure_ascii")) st.ensure_ascii = truthy(*ea);
      if (const Value* ind = a.get(1, "indent"); ind && ind->kind != K::None) {
        if (ind->kind == K::String) {
          st.indent = ind->s;
        } else {
          st.indent = std::string(
              static_cast<std::size_t>(std::clamp<std::int64_t>(int_arg(ind, what, line), 0, 1024)),
              ' ');
        }
        st.item_sep = ",";
      }
      if (const Value* sep = a.get(2, "separators"); sep && sep->kind != K::None) {
        if (sep->kind != K::List || sep->list->items.size() != 2)
          runtime_error(line, "tojson: separators must be a pair of strings");
        st.item_sep = str_arg(sep->list->items.data(), what, line);
        st.key_sep = str_arg(&sep->list->items[1], what, line);
      }
      if (const Value* sk = a.get(3, "sort_keys")) st.sort_keys = truthy(*sk);
      if (a.pos.size() > 4) runtime_error(line, "tojson takes at most 4 arguments");
      for (const auto& kv : a.kw)
        if (kv.first != "indent" && kv.first != "separators" && kv.first != "sort_keys" &&
            kv.first != "ensure_ascii")
          runtime_error(line, "tojson: unexpected keyword argument " + kappa::quoted(kv.first, 40));
      std::string out;
      json_dump(out, v, st, 0, line);
      return Value::string(std::move(out));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
      return Value::string(ascii_case(to_str(v), name == "lower"   ? 0
                                                 : name == "upper" ? 1
                                                 : name == "title" ? 2
                                                                   : 3));
    if (name == "join") {
      const Value* sep = a.get(0, "d");
      const Value* attr = a.get(1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& x : to_list(v, line)) {
        if (!first && sep) out += to_str(*sep);
        first = false;
        out += to_str(attr ? attr_path(x, *attr, line) : x);
        check_size(out.size(), line);
      }
      return Value::string(std::move(out));
    }
    if (name == "first" || name == "last") {
      const std::vector<Value> items = to_list(v, line);
      if (items.empty()) return Value::undefined("no " + name + " item, the sequence was empty");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value::make_list(to_list(v, line));
    if (name == "reverse") {
      if (v.kind == K::String) {
        const std::vector<std::size_t> off = char_offsets(v.s);
        std::string out;
        for (std::size_t k = off.size() - 1; k > 0; --k)
          out.append(v.s, off[k - 1], off[k] - off[k - 1]);
        return Value::string(std::move(out));
      }
      std::vector<Value> items = to_list(v, line);
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    }
    if (name == "items") {
      if (v.kind == K::Undefined) return Value::make_list({});
      if (v.kind != K::Dict)
        runtime_error(line,
                      "the filter 'items' expects a mapping, got " + std::string(type_name(v)));
      return call_method(v, "items", {}, line);
    }
    if (name == "dictsort") {
      if (v.kind != K::Dict) runtime_error(line, "the filter 'dictsort' expects a mapping");
      std::vector<Value> items = call_method(v, "items", {}, line).list->items;
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return less(x.list->items[0], y.list->items[0], line);
      });
      return Value::make_list(std::move(items));
    }
    if (name == "int") {
      const Value* dflt = a.get(0, "default");
      Value fallback = dflt ? *dflt : Value::integer(0);
      if (v.kind == K::Int) return v;
      if (v.kind == K::Bool) return Value::integer(as_int(v));
      if (v.kind == K::Float) {
        if (!std::isfinite(v.f) || std::fabs(v.f) >= 9.2e18) return fallback;
        return Value::integer(static_cast<std::int64_t>(v.f));
      }
      if (v.kind == K::String) {
        const std::string t = strip(v.s, nullptr, true, true, line);
        std::int64_t x = 0;
        const auto r = std::from_chars(t.data(), t.data() + t.size(), x);
        if (r.ec == std::errc() && r.ptr == t.data() + t.size() && !t.empty())
          return Value::integer(x);
        char* end = nullptr;
        const double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && end == t.c_str() + t.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
          return Value::integer(static_cast<std::int64_t>(d));
      }
      return fallback;
    }
    if (name == "float") {
      if (v.is_number()) return Value::real(as_double(v));
      if (v.kind == K::String) {
        const std::string t = strip(v.s, nullptr, true, true, line);
        char* end = nullptr;
        const double d = std::strtod(t.c_str(), &end);
        if (!t.empty() && end == t.c_str() + t.size()) return Value::real(d);
      }
      const Value* dflt = a.get(0, "default");
      return dflt ? *dflt : Value::real(0.0);
    }
    if (name == "abs") {
      if (v.kind == K::Float) return Value::real(std::fabs(v.f));
      if (v.kind == K::Int || v.kind == K::Bool) {
        if (as_int(v) == std::numeric_limits<std::int64_t>::min())
          runtime_error(line, "integer overflow");
        return Value::integer(std::abs(as_int(v)));
      }
      runtime_error(line, std::string("bad operand type for abs(): '") + type_name(v) + "'");
    }
    if (name == "round") {
      if (!v.is_number()) runtime_error(line, "round expects a number");
      const Value* prec = a.get(0, "precision");
      const Value* method_v = a.get(1, "method");
      const std::int64_t p =
          prec ? std::clamp<std::int64_t>(int_arg(prec, what, line), -300, 300) : 0;
      const std::string m = method_v ? str_arg(method_v, what, line) : "common";
      const double scale = std::pow(10.0, static_cast<double>(p));
      const double x = as_double(v) * scale;
      const double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::round(x);
      return Value::real(r / scale);
    }
    if (name == "replace") {
      const std::string s = to_str(v);
      if (a.pos.size() < 2) runtime_error(line, "replace needs two arguments");
      const Value* cnt = a.get(2, "count");
      return Value::string(replace(s, to_str(a.pos[0]), to_str(a.pos[1]),
                                   cnt && cnt->kind != K::None ? int_arg(cnt, what, line) : -1,
                                   line));
    }
    if (name == "e" || name == "escape") {
      std::string out;
      for (char c : to_str(v)) {
        switch (c) {
          case '&':
            out += "&amp;";
            break;
          case '<':
            out += "&lt;";
            break;
          case '>':
            out += "&gt;";
            break;
          case '"':
            out += "&#34;";
            break;
          case '\'':
            out += "&#39;";
            break;
          default:
            out += c;
        }
      }
      return Value::string(std::move(out));
    }
    if (name == "indent") {
      const Value* w = a.get(0, "width");
      const Value* first_v = a.get(1, "first");
      const Value* blank_v = a.get(2, "blank");
      const std::string pad =
          w ? (w->kind == K::String ? w->s
                                    : std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(
                                                      int_arg(w, what, line), 0, 1024)),
                                                  ' '))
            : std::string(4, ' ');
      const bool first = first_v && truthy(*first_v);
      const bool blank = blank_v && truthy(*blank_v);
      std::string s = to_str(v);
      std::string out;
      std::size_t start = 0;
      bool is_first = true;
      for (;;) {
        const std::size_t nl = s.find('\n', start);
        const std::string ln =
            s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if ((is_first ? first : true) && (blank || !ln.empty() || is_first)) out += pad;
        if (is_first && !first && !out.empty() && out.size() == pad.size() && ln.empty())
          out.clear();
        out += ln;
        check_size(out.size(), line);
        if (nl == std::string::npos) break;
        out += '\n';
        start = nl + 1;
        is_first = false;
      }
      return Value::string(std::move(out));
    }
    if (name == "wordcount")
      return Value::integer(
          static_cast<std::int64_t>(split(to_str(v), nullptr, -1, false, line).size()));
    if (name == "unique") {
      std::vector<Value> out;
      for (const Value& x : to_list(v, line))
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); }))
          out.push_back(x);
      return Value::make_list(std::move(out));
    }
    if (name == "sum") {
      Value total = a.get(1, "start") ? *a.get(1, "start") : Value::integer(0);
      const Value* attr = a.get(0, "attribute");
      for (const Value& x : to_list(v, line))
        total = binary("+", total, attr ? attr_path(x, *attr, line) : x, line);
      return total;
    }
    if (name == "min" || name == "max") {
      const std::vector<Value> items = to_list(v, line);
      if (items.empty()) return Value::undefined("no " + name + " item, the sequence was empty");
      const Value* attr = a.get(1, "attribute");
      Value best = items[0];
      for (const Value& x : items) {
        const Value kx = attr ? attr_path(x, *attr, line) : x;
        const Value kb = attr ? attr_path(best, *attr, line) : best;
        if (name == "min" ? less(kx, kb, line) : less(kb, kx, line)) best = x;
      }
      return best;
    }
    if (name == "sort") {
      std::vector<Value> items = to_list(v, line);
      const Value* rev = a.get(0, "reverse");
      const Value* attr = a.get(2, "attribute");
      const bool reverse = rev && truthy(*rev);
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        const Value kx = attr ? attr_path(x, *attr, line) : x;
        const Value ky = attr ? attr_path(y, *attr, line) : y;
        return reverse ? less(ky, kx, line) : less(kx, ky, line);
      });
      return Value::make_list(std::move(items));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attr = name == "selectattr" || name == "rejectattr";
      const bool keep_if = name == "select" || name == "selectattr";
      std::size_t k = 0;
      const Value* attr = nullptr;
      if (by_attr) {
        if (a.pos.empty()) runtime_error(line, what + " needs an attribute name");
        attr = a.pos.data();
        k = 1;
      }
      std::string test_name;
      Args test_args;
      if (a.pos.size() > k) {
        test_name = str_arg(&a.pos[k], what, line);
        test_args.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k) + 1, a.pos.end());
      }
      std::vector<Value> out;
      for (const Value& x : to_list(v, line)) {
        const Value subject = attr ? attr_path(x, *attr, line) : x;
        const bool r =
            test_name.empty() ? truthy(subject) : test(test_name, subject, test_args, line);
        if (r == keep_if) out.push_back(x);
      }
      return Value::make_list(std::move(out));
    }
    if (name == "map") {
      std::vector<Value> out;
      const Value* attr = a.get(99, "attribute");
      if (attr) {
        const Value* dflt = a.get(99, "default");
        for (const Value& x : to_list(v, line)) {
          Value r = attr_path(x, *attr, line);
          out.push_back(r.kind == K::Undefined && dflt ? *dflt : r);
        }
      } else {
        if (a.pos.empty()) runtime_error(line, "map needs a filter name or attribute=");
        const std::string f = str_arg(a.pos.data(), what, line);
        Args rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        rest.kw = a.kw;
        for (const Value& x : to_list(v, line)) {
          step(line);
          out.push_back(filter(f, x, rest, line));
        }
      }
      return Value::make_list(std::move(out));
    }
    if (name == "batch" || name == "slice" || name == "format" || name == "groupby" ||
        name == "pprint" || name == "urlencode" || name == "xmlattr" || name == "truncate" ||
        name == "wordwrap" || name == "filesizeformat" || name == "striptags" || name == "urlize" ||
        name == "center" || name == "forceescape" || name == "attr")
      fail(ChatTemplateError::Kind::Unsupported, line,
           "the filter " + kappa::quoted(name, 40) + " is not supported by kappa's chat templates");
    runtime_error(line, "unknown filter " + kappa::quoted(name, 40));
  }

  Scope& globals_;
  int depth_ = 0;
  int macro_depth_ = 0;
  std::uint64_t steps_ = 0;
  std::deque<std::unique_ptr<NsObj>> namespaces_;
  std::optional<std::int64_t> now_;
};

struct Program {
  Body body;
};

}  // namespace chat_detail

/// A parsed chat template: parse once, render many times (render is const
/// and may run concurrently from several threads).
class ChatTemplate {
 public:
  /// Parses Jinja `source`. \throws ChatTemplateError (a FormatError) of kind
  /// Syntax naming the line, column and what was expected, or of kind
  /// Unsupported naming the construct outside kappa's subset.
  static ChatTemplate parse(std::string_view source) {
    chat_detail::Lexer lexer(source);
    chat_detail::Parser parser(lexer.run());
    auto program = std::make_shared<chat_detail::Program>();
    program->body = parser.parse_template();
    ChatTemplate t;
    t.program_ = std::move(program);
    t.source_ = std::string(source);
    return t;
  }

  /// The template of a parsed tokenizer_config.json (`config`; `file` names
  /// it in messages): "chat_template" as a string, or as a list of
  /// {"name", "template"} objects of which `name` is taken. Its bos_token and
  /// eos_token (strings, or {"content": ...} objects) become the defaults of
  /// render(). \throws FormatError naming the file when there is no chat
  /// template (or no template called `name`) or the field is malformed.
  static ChatTemplate from_tokenizer_config_json(const nlohmann::json& config,
                                                 const std::string& file,
                                                 std::string_view name = "default") {
    const auto bad = [&](const std::string& what) -> void {
      throw FormatError("kappa: " + file + ": " + what);
    };
    if (!config.is_object()) bad("expected a JSON object");
    const auto it = config.find("chat_template");
    if (it == config.end() || it->is_null())
      bad("no \"chat_template\": this tokenizer has no chat template (pass one with "
          "ChatTemplate::parse)");
    std::string source;
    if (it->is_string()) {
      if (name != "default")
        bad("chat_template is a single template; there is no template named " +
            kappa::quoted(name));
      source = it->get<std::string>();
    } else if (it->is_array()) {
      bool found = false;
      std::string names;
      for (const auto& entry : *it) {
        if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
            !entry["name"].is_string() || !entry["template"].is_string())
          bad("chat_template: expected a list of {\"name\": string, \"template\": string}");
        const std::string n = entry["name"].get<std::string>();
        names += (names.empty() ? "" : ", ") + kappa::quoted(n, 40);
        if (n == name) {
          source = entry["template"].get<std::string>();
          found = true;
        }
      }
      if (!found)
        bad("chat_template: no template named " + kappa::quoted(name) + " (have " + names + ")");
    } else {
      bad("chat_template: expected a string or a list of named templates");
    }
    ChatTemplate t;
    try {
      t = parse(source);
    } catch (const ChatTemplateError& e) {
      throw ChatTemplateError(e.kind(), std::string(e.what()) + " (in " + file + ")");
    }
    const auto token = [&](const char* key) -> std::optional<std::string> {
      const auto f = config.find(key);
      if (f == config.end() || f->is_null()) return std::nullopt;
      if (f->is_string()) return f->get<std::string>();
      if (f->is_object() && f->contains("content") && (*f)["content"].is_string())
        return (*f)["content"].get<std::string>();
      bad(std::string(key) + ": expected a string or {\"content\": string}");
      return std::nullopt;
    };
    t.bos_token_ = token("bos_token");
    t.eos_token_ = token("eos_token");
    return t;
  }

  /// Reads tokenizer_config.json at `path` (see from_tokenizer_config_json).
  static ChatTemplate from_tokenizer_config(const std::string& path,
                                            std::string_view name = "default") {
    return from_tokenizer_config_json(read_json_file(path), path, name);
  }

  /// bos_token / eos_token of the tokenizer_config.json, if any.
  [[nodiscard]] const std::optional<std::string>& bos_token() const noexcept { return bos_token_; }
  [[nodiscard]] const std::optional<std::string>& eos_token() const noexcept { return eos_token_; }
  /// The template's source text.
  [[nodiscard]] const std::string& source() const noexcept { return source_; }

  /// Renders the conversation `messages` (a JSON list of message objects,
  /// which may carry tool_calls, reasoning_content, ...) as transformers'
  /// apply_chat_template(messages, tokenize=False, ...) does. Options'
  /// bos/eos override the tokenizer_config's. \throws ChatTemplateError of
  /// kind Raised when the template calls raise_exception (the message is the
  /// template's), of kind Runtime for other failures.
  [[nodiscard]] std::string render(const nlohmann::ordered_json& messages,
                                   const ChatOptions& options = {}) const {
    using chat_detail::Value;
    if (!program_)
      throw ChatTemplateError(ChatTemplateError::Kind::Runtime, "kappa: chat template: not parsed");
    if (!messages.is_array())
      throw ChatTemplateError(ChatTemplateError::Kind::Runtime,
                              "kappa: chat template: messages must be a JSON list");
    if (!options.variables.is_object())
      throw ChatTemplateError(ChatTemplateError::Kind::Runtime,
                              "kappa: chat template: variables must be a JSON object");
    chat_detail::Scope globals;
    globals.set("messages", chat_detail::from_json(messages));
    globals.set("tools", Value::none());
    globals.set("documents", Value::none());
    globals.set("add_generation_prompt", Value::boolean(options.add_generation_prompt));
    const auto& bos = options.bos_token ? options.bos_token : bos_token_;
    const auto& eos = options.eos_token ? options.eos_token : eos_token_;
    if (bos) globals.set("bos_token", Value::string(*bos));
    if (eos) globals.set("eos_token", Value::string(*eos));
    for (auto it = options.variables.begin(); it != options.variables.end(); ++it)
      globals.set(it.key(), chat_detail::from_json(it.value()));
    std::string out;
    chat_detail::Renderer renderer(globals, options.now);
    renderer.run(program_->body, out);
    return out;
  }

  /// Renders plain {"role", "content"} messages.
  [[nodiscard]] std::string render(const std::vector<ChatMessage>& messages,
                                   const ChatOptions& options = {}) const {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
    return render(list, options);
  }

 private:
  std::shared_ptr<const chat_detail::Program> program_;
  std::string source_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
};

}  // namespace kappa::tokenize
