// examples/svg_common.hpp - the pieces the examples' SVG writers share
// (heatmap_svg.hpp, line_plot_svg.hpp): numbers for attributes, XML escaping
// and the <svg> start tag. Example code, not part of the kappa library.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace svg_common {

/// A number for an SVG attribute: at most two decimals, no "-0".
inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

/// `text` with & < > " ' replaced by XML entities.
inline std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
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
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

/// The <svg> start tag of a width x height document (viewBox in the same
/// units), followed by `attrs` (e.g. font-family="...") and a newline.
inline std::string svg_start(double width, double height, std::string_view attrs) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
         num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" " +
         std::string(attrs) + ">\n";
}

/// A white rectangle under the whole picture.
inline constexpr const char* kWhiteBackground =
    "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";

}  // namespace svg_common
