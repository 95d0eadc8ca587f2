// Tests for examples/line_plot_svg.hpp: the SVG it writes has one group per
// series with one marker per drawable point, decade ticks covering the data,
// the reference points and horizontal lines, and bad plots throw.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "line_plot_svg.hpp"

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

lineplot::Plot example_plot() {
  lineplot::Plot plot;
  plot.title = "error <vs> time";
  plot.x_label = "s";
  plot.y_label = "error";
  plot.series.push_back({"a & b", {0.01, 0.02, 0.04}, {0.5, 0.1, 0.02}});
  plot.series.push_back({"c", {0.03, 0.05, -1.0}, {0.2, 0.0, 0.1}});  // two points not drawable
  plot.references.push_back({"exact", 0.3, 1e-4});
  plot.y_lines.push_back({"1 %", 0.01});
  return plot;
}

TEST(LinePlotSvg, SeriesPointsReferencesAndLines) {
  const std::string svg = lineplot::to_svg(example_plot());
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(count(svg, "<g class=\"series\""), 2u);
  EXPECT_EQ(count(svg, "<g class=\"legend-entry\""), 2u);
  // 3 + 1 drawable points, plus one marker per legend entry.
  EXPECT_EQ(count(svg, "<circle"), 4u + 2u);
  EXPECT_EQ(count(svg, "<g class=\"reference\""), 1u);
  EXPECT_EQ(count(svg, "<g class=\"yline\""), 1u);
  // Text is escaped.
  EXPECT_NE(svg.find("error &lt;vs&gt; time"), std::string::npos);
  EXPECT_NE(svg.find("a &amp; b"), std::string::npos);
  // Decades: x from 0.01 to 1 (0.3 rounds up), y from 1e-4 to 1.
  EXPECT_NE(svg.find(">0.01</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0.1</text>"), std::string::npos);
  EXPECT_NE(svg.find(">1</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0.0001</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"xtick\""), 3u);  // 0.01, 0.1, 1
  EXPECT_EQ(count(svg, "class=\"ytick\""), 5u);  // 1e-4 .. 1
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(LinePlotSvg, BadPlotsThrow) {
  lineplot::Plot plot = example_plot();
  plot.series[0].y.pop_back();
  EXPECT_THROW((void)lineplot::to_svg(plot), std::invalid_argument);
  lineplot::Plot empty;
  empty.series.push_back({"nothing", {0.0}, {std::numeric_limits<double>::quiet_NaN()}});
  EXPECT_THROW((void)lineplot::to_svg(empty), std::invalid_argument);
  EXPECT_THROW(lineplot::write_svg(example_plot(), "/nonexistent-dir/plot.svg"),
               std::runtime_error);
}

}  // namespace
