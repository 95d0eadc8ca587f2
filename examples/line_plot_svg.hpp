// examples/line_plot_svg.hpp - a small SVG writer for log-log line plots
// (error against time). Example code for the example programs, not part of
// the kappa library: copy it and change it.
//
// Why a writer of our own rather than a plotting tool: the example is C++
// and writes its picture itself, with no Python or other dependency at build
// or run time, and the output is plain SVG whose structure a test reads back
// (examples/tests/line_plot_svg_test.cpp): one <g class="series"> per line
// with one <circle> per point, axes with decade ticks, a legend.
//
//   lineplot::Plot plot{.title = "error vs time", .x_label = "s", .y_label = "error"};
//   plot.series.push_back({"positive RF", {0.01, 0.02}, {0.1, 0.05}});
//   plot.references.push_back({"exact", 0.3, 1e-7});   // a single marked point
//   plot.y_lines.push_back({"1 %", 0.01});             // a dashed horizontal line
//   lineplot::write_svg(plot, "error.svg");
//
// Both axes are logarithmic; points with a non-positive or non-finite
// coordinate are left out (a y of 0 cannot be drawn on a log axis). The axis
// ranges cover every drawable point and line, widened to whole decades.
// Errors: a series whose x and y differ in length throws
// std::invalid_argument naming both lengths; a plot with no drawable point
// throws std::invalid_argument; a file that cannot be written throws
// std::runtime_error naming it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "svg_common.hpp"

namespace lineplot {

/// One line: points (x_i, y_i) joined in the order given, each marked.
struct Series {
  std::string name;       ///< shown in the legend
  std::vector<double> x;  ///< e.g. seconds
  std::vector<double> y;  ///< e.g. relative error
};

/// A single point drawn as a black diamond with its name beside it.
struct Reference {
  std::string name;
  double x = 0;
  double y = 0;
};

/// A dashed horizontal line at y, labelled at its right end.
struct YLine {
  std::string name;
  double y = 0;
};

/// A plot: title, axis labels, lines, reference points and horizontal lines.
struct Plot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  std::vector<Reference> references;
  std::vector<YLine> y_lines;
};

namespace detail {

using svg_common::num;
using svg_common::xml_escape;

inline bool drawable(double x, double y) {
  return std::isfinite(x) && std::isfinite(y) && x > 0 && y > 0;
}

/// "10^k" as text: 1e-3 -> "0.001", 1e4 -> "10000" for |k| <= 4, else "1e-05".
inline std::string decade_label(int k) {
  char buf[32];
  if (k >= -4 && k <= 4) {
    std::snprintf(buf, sizeof buf, "%.*f", k < 0 ? -k : 0, std::pow(10.0, k));
  } else {
    std::snprintf(buf, sizeof buf, "1e%d", k);
  }
  return buf;
}

// Colour-blind friendly palette (Okabe and Ito).
inline constexpr std::array<const char*, 8> kColours{"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                                     "#E69F00", "#56B4E9", "#F0E442", "#000000"};

}  // namespace detail

/// The plot as an SVG document.
inline std::string to_svg(const Plot& plot) {
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = 0;
  double y_lo = std::numeric_limits<double>::infinity(), y_hi = 0;
  const auto cover = [&](double x, double y) {
    x_lo = std::min(x_lo, x);
    x_hi = std::max(x_hi, x);
    y_lo = std::min(y_lo, y);
    y_hi = std::max(y_hi, y);
  };
  for (const Series& s : plot.series) {
    if (s.x.size() != s.y.size())
      throw std::invalid_argument("lineplot: series \"" + s.name + "\" has " +
                                  std::to_string(s.x.size()) + " x values but " +
                                  std::to_string(s.y.size()) + " y values");
    for (std::size_t i = 0; i < s.x.size(); ++i)
      if (detail::drawable(s.x[i], s.y[i])) cover(s.x[i], s.y[i]);
  }
  for (const Reference& r : plot.references)
    if (detail::drawable(r.x, r.y)) cover(r.x, r.y);
  if (!(x_hi > 0)) throw std::invalid_argument("lineplot: the plot has no drawable point");
  for (const YLine& l : plot.y_lines)
    if (detail::drawable(1.0, l.y)) {
      y_lo = std::min(y_lo, l.y);
      y_hi = std::max(y_hi, l.y);
    }
  const int dx0 = static_cast<int>(std::floor(std::log10(x_lo)));
  const int dx1 = std::max(dx0 + 1, static_cast<int>(std::ceil(std::log10(x_hi))));
  const int dy0 = static_cast<int>(std::floor(std::log10(y_lo)));
  const int dy1 = std::max(dy0 + 1, static_cast<int>(std::ceil(std::log10(y_hi))));

  const double left = 80, top = 50, width = 560, height = 400, legend_w = 230;
  const double total_w = left + width + 30 + legend_w, total_h = top + height + 60;
  const auto px = [&](double x) {
    return left + width * (std::log10(x) - dx0) / static_cast<double>(dx1 - dx0);
  };
  const auto py = [&](double y) {
    return top + height * (1.0 - (std::log10(y) - dy0) / static_cast<double>(dy1 - dy0));
  };
  using detail::num;
  std::string svg = svg_common::svg_start(
      total_w, total_h, "font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\"");
  svg += svg_common::kWhiteBackground;
  svg += "<text class=\"title\" x=\"" + num(left + width / 2) + "\" y=\"28\" font-size=\"15\" " +
         "text-anchor=\"middle\">" + detail::xml_escape(plot.title) + "</text>\n";
  // Axes, decade grid and labels.
  svg += "<g class=\"axes\" stroke=\"#999\" stroke-width=\"0.5\">\n";
  for (int k = dx0; k <= dx1; ++k) {
    const double x = px(std::pow(10.0, k));
    svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" +
           num(top + height) + "\"/>\n";
  }
  for (int k = dy0; k <= dy1; ++k) {
    const double y = py(std::pow(10.0, k));
    svg += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + width) +
           "\" y2=\"" + num(y) + "\"/>\n";
  }
  svg += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(width) +
         "\" height=\"" + num(height) + "\" fill=\"none\" stroke=\"black\" stroke-width=\"1\"/>\n";
  svg += "</g>\n<g class=\"ticks\">\n";
  for (int k = dx0; k <= dx1; ++k)
    svg += "<text class=\"xtick\" x=\"" + num(px(std::pow(10.0, k))) + "\" y=\"" +
           num(top + height + 18) + "\" text-anchor=\"middle\">" + detail::decade_label(k) +
           "</text>\n";
  for (int k = dy0; k <= dy1; ++k)
    svg += "<text class=\"ytick\" x=\"" + num(left - 6) + "\" y=\"" +
           num(py(std::pow(10.0, k)) + 4) + "\" text-anchor=\"end\">" + detail::decade_label(k) +
           "</text>\n";
  svg += "</g>\n";
  svg += "<text class=\"xlabel\" x=\"" + num(left + width / 2) + "\" y=\"" +
         num(top + height + 45) + "\" text-anchor=\"middle\">" + detail::xml_escape(plot.x_label) +
         "</text>\n";
  svg += "<text class=\"ylabel\" transform=\"translate(22 " + num(top + height / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + detail::xml_escape(plot.y_label) + "</text>\n";
  // Horizontal lines.
  for (const YLine& l : plot.y_lines) {
    if (!detail::drawable(1.0, l.y)) continue;
    svg += "<g class=\"yline\"><line x1=\"" + num(left) + "\" y1=\"" + num(py(l.y)) + "\" x2=\"" +
           num(left + width) + "\" y2=\"" + num(py(l.y)) +
           "\" stroke=\"#555\" stroke-dasharray=\"6 4\"/><text x=\"" + num(left + width - 4) +
           "\" y=\"" + num(py(l.y) - 4) + "\" text-anchor=\"end\" fill=\"#555\">" +
           detail::xml_escape(l.name) + "</text></g>\n";
  }
  // Series and legend.
  double legend_y = top + 10;
  for (std::size_t s = 0; s < plot.series.size(); ++s) {
    const Series& series = plot.series[s];
    const std::string colour = detail::kColours[s % detail::kColours.size()];
    std::string points;
    std::string marks;
    for (std::size_t i = 0; i < series.x.size(); ++i) {
      if (!detail::drawable(series.x[i], series.y[i])) continue;
      const std::string p = num(px(series.x[i])) + "," + num(py(series.y[i]));
      points += (points.empty() ? "" : " ") + p;
      marks += "<circle cx=\"" + num(px(series.x[i])) + "\" cy=\"" + num(py(series.y[i])) +
               "\" r=\"3.5\"/>";
    }
    svg += "<g class=\"series\" data-name=\"" + detail::xml_escape(series.name) + "\" stroke=\"" +
           colour + "\" fill=\"" + colour + "\">";
    if (!points.empty())
      svg += "<polyline points=\"" + points + "\" fill=\"none\" stroke-width=\"1.8\"/>";
    svg += marks + "</g>\n";
    svg += "<g class=\"legend-entry\"><line x1=\"" + num(left + width + 30) + "\" y1=\"" +
           num(legend_y) + "\" x2=\"" + num(left + width + 55) + "\" y2=\"" + num(legend_y) +
           "\" stroke=\"" + colour + "\" stroke-width=\"2\"/><circle cx=\"" +
           num(left + width + 42.5) + "\" cy=\"" + num(legend_y) + "\" r=\"3.5\" fill=\"" + colour +
           "\"/><text x=\"" + num(left + width + 62) + "\" y=\"" + num(legend_y + 4) + "\">" +
           detail::xml_escape(series.name) + "</text></g>\n";
    legend_y += 20;
  }
  for (const Reference& r : plot.references) {
    if (!detail::drawable(r.x, r.y)) continue;
    const double x = px(r.x), y = py(r.y);
    svg += "<g class=\"reference\"><path d=\"M" + num(x) + "," + num(y - 6) + " L" + num(x + 6) +
           "," + num(y) + " L" + num(x) + "," + num(y + 6) + " L" + num(x - 6) + "," + num(y) +
           " Z\" fill=\"black\"/><text x=\"" + num(x - 9) + "\" y=\"" + num(y + 4) +
           "\" text-anchor=\"end\">" + detail::xml_escape(r.name) + "</text></g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

/// Writes to_svg(plot) to `path`.
/// \throws std::runtime_error naming the file if it cannot be written.
inline void write_svg(const Plot& plot, const std::string& path) {
  const std::string svg = to_svg(plot);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("lineplot: cannot open " + path + " for writing");
  out << svg;
  if (!out.flush()) throw std::runtime_error("lineplot: cannot write " + path);
}

}  // namespace lineplot
