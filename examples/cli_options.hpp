// examples/cli_options.hpp - the command line of kappa's tools (kappa-generate):
// a table of options, each with its group, its value's name, a description that
// states the default, and what it sets. The table parses argv and prints
// --help from the same entries, so an option cannot be parsed but missing
// from the help, or the reverse. Adding an option is one call:
//
//   kappa_cli::Options cli("kappa-generate", "usage: ...", {"Model", "Prompt"});
//   cli.value("Model", "--model", "DIR", "the model directory (required)",
//             [&](const std::string& v) { args.model = v; });
//   cli.flag("Prompt", "--ignore-eos", "keep going after EOS",
//            [&] { args.ignore_eos = true; });
//   if (!cli.parse(argc, argv)) return 0;   // --help was printed
//
// Errors are kappa_cli::UsageError (the tools print them on one line and exit
// with status 2).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kappa_cli {

/// A bad command line: an unknown option, a missing or malformed value.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The number `v` given to option `opt`. \throws UsageError naming both.
inline double parse_double(const std::string& opt, const std::string& v) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty()) throw UsageError(opt + " expects a number, got '" + v + "'");
  return x;
}

/// The integer `v` given to option `opt`, in [lo, hi]. \throws UsageError.
inline long long parse_int(const std::string& opt, const std::string& v, long long lo,
                           long long hi) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty() || x < lo || x > hi)
    throw UsageError(opt + " expects an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "], got '" + v + "'");
  return x;
}

/// Integers separated by commas and/or white space ("1,2,3", "1 2 3",
/// "1, 2, 3"), each in [0, hi]. \throws UsageError for an empty list or an
/// entry that is not such an integer.
inline std::vector<long long> parse_int_list(const std::string& opt, const std::string& v,
                                             long long hi) {
  std::vector<long long> out;
  std::size_t i = 0;
  const auto separator = [](char c) {
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
  };
  while (i < v.size()) {
    while (i < v.size() && separator(v[i])) ++i;
    std::size_t j = i;
    while (j < v.size() && !separator(v[j])) ++j;
    if (j > i) {
      const std::string item = v.substr(i, j - i);
      if (item.find_first_not_of("0123456789") != std::string::npos)
        throw UsageError(opt + " expects integers separated by commas or spaces, got '" + item +
                         "'");
      out.push_back(parse_int(opt, item, 0, hi));
    }
    i = j;
  }
  if (out.empty()) throw UsageError(opt + " expects at least one integer, got '" + v + "'");
  return out;
}

/// A program's options: parsing and --help from one table.
class Options {
 public:
  /// `usage`: the lines printed first by --help; `groups`: the headings of
  /// the help in order (every option names one of them).
  Options(std::string program, std::string usage, std::vector<std::string> groups)
      : program_(std::move(program)), usage_(std::move(usage)), groups_(std::move(groups)) {}

  /// An option without a value.
  void flag(const std::string& group, const std::string& name, const std::string& help,
            std::function<void()> apply) {
    add(group, name, "", help, [f = std::move(apply)](const std::string&) { f(); });
  }
  /// An option followed by a value (`value_name` in the help, e.g. "N").
  void value(const std::string& group, const std::string& name, const std::string& value_name,
             const std::string& help, std::function<void(const std::string&)> apply) {
    add(group, name, value_name, help, std::move(apply));
  }

  /// Parses argv[1..]. Returns false when -h/--help was given (the help is
  /// then printed on stdout). \throws UsageError for an unknown option or a
  /// missing value, and whatever an option's action throws.
  bool parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "-h" || arg == "--help") {
        std::fputs(help().c_str(), stdout);
        return false;
      }
      const auto it = std::find_if(options_.begin(), options_.end(),
                                   [&](const Option& o) { return o.name == arg; });
      if (it == options_.end())
        throw UsageError(arg.starts_with("-") ? "unknown option " + arg
                                              : "unexpected argument '" + arg + "'");
      std::string v;
      if (!it->value_name.empty()) {
        if (i + 1 >= argc) throw UsageError(arg + " needs a value (" + it->value_name + ")");
        v = argv[++i];
      }
      given_.push_back(arg);
      it->apply(v);
    }
    return true;
  }

  /// Whether option `name` appeared on the command line.
  [[nodiscard]] bool given(std::string_view name) const {
    return std::find(given_.begin(), given_.end(), name) != given_.end();
  }

  /// The help: the usage lines, then each group's options with their
  /// descriptions wrapped at 80 columns.
  [[nodiscard]] std::string help() const {
    constexpr std::size_t kIndent = 24, kWidth = 80;
    std::string out = usage_;
    for (const std::string& group : groups_) {
      out += "\n" + group + ":\n";
      for (const Option& o : options_) {
        if (o.group != group) continue;
        std::string line = "  " + o.name;
        if (!o.value_name.empty()) line += " " + o.value_name;
        if (line.size() + 2 > kIndent) {  // the description starts on the next line
          out += line + "\n";
          line.clear();
        }
        line.resize(kIndent, ' ');
        bool empty = true;
        std::size_t pos = 0;
        while (pos < o.help.size()) {  // word-wrapped from column kIndent
          std::size_t end = o.help.find(' ', pos);
          if (end == std::string::npos) end = o.help.size();
          const std::string word = o.help.substr(pos, end - pos);
          if (!empty && line.size() + 1 + word.size() > kWidth) {
            out += line + "\n";
            line.assign(kIndent, ' ');
            empty = true;
          }
          if (!empty) line += ' ';
          line += word;
          empty = false;
          pos = end + 1;
        }
        out += line;
        out += "\n";
      }
    }
    out += "\n  -h, --help            print this help and exit\n";
    return out;
  }

  [[nodiscard]] const std::string& program() const { return program_; }

 private:
  struct Option {
    std::string group, name, value_name, help;
    std::function<void(const std::string&)> apply;
  };
  void add(const std::string& group, const std::string& name, const std::string& value_name,
           const std::string& help, std::function<void(const std::string&)> apply) {
    if (std::find(groups_.begin(), groups_.end(), group) == groups_.end())
      throw std::logic_error("kappa_cli: option " + name + " names an unknown group " + group);
    options_.push_back({group, name, value_name, help, std::move(apply)});
  }

  std::string program_, usage_;
  std::vector<std::string> groups_;
  std::vector<Option> options_;
  std::vector<std::string> given_;
};

}  // namespace kappa_cli
