// Tests for examples/heatmap_svg.hpp: label escaping and readable bytes, the
// shape errors, NaN and masked cells, colour bars, the colour maps and ticks.
// (check_svg.py checks the examples' pictures as XML.)
#include "heatmap_svg.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using heatmap::Figure;
using heatmap::Panel;
using heatmap::readable;
using heatmap::readable_token;
using heatmap::Spaces;
using heatmap::to_svg;
using Matrix = kappa::RowMatrix<double>;

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

Figure one_panel(Matrix values, std::vector<std::string> rows, std::vector<std::string> cols) {
  Figure fig;
  fig.panels.push_back({"p", std::move(values), std::move(rows), std::move(cols)});
  return fig;
}

/// The message of the exception that `f` throws as E (empty if none).
template <class E, class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(HeatmapSvg, XmlEscapeReplacesTheFiveSpecialCharacters) {
  EXPECT_EQ(heatmap::xml_escape(R"(a<b>&"c'd)"), "a&lt;b&gt;&amp;&quot;c&apos;d");
  EXPECT_EQ(heatmap::xml_escape("plain \xe2\x90\xa3 text"), "plain \xe2\x90\xa3 text");
}

TEST(HeatmapSvg, ReadableTokenShowsWhitespaceControlsAndBadBytes) {
  EXPECT_EQ(readable_token(" cat"), "\u2423cat");
  EXPECT_EQ(readable_token("a\nb\tc"), "a\u21b5b\u21e5c");
  EXPECT_EQ(readable_token(std::string("\x01\x7f", 2)), "\\u0001\\u007F");
  EXPECT_EQ(readable_token(std::string("\0", 1)), "\\u0000");
  EXPECT_EQ(readable_token("\xc2\x85"), "\\u0085");                       // C1 control NEL
  EXPECT_EQ(readable_token("\xe2\x80\xae"), "\\u202E");                   // right-to-left override
  EXPECT_EQ(readable_token("\xef\xbb\xbf"), "\\uFEFF");                   // byte-order mark
  EXPECT_EQ(readable_token("\xff"), "\\xff");                             // never UTF-8
  EXPECT_EQ(readable_token("\xe2\x82"), "\\xe2\\x82");                    // a cut 3-byte character
  EXPECT_EQ(readable_token("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(readable_token("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(readable_token("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
  EXPECT_EQ(readable_token("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9\u2423\xe2\x82\xac");
  EXPECT_EQ(readable_token("\xc4\xa0the"), "\xc4\xa0the");  // GPT-2's vocabulary spelling, kept
  EXPECT_EQ(readable_token(""), "\u2205");
  EXPECT_EQ(readable_token(std::string(40, 'a')), std::string(32, 'a') + "\u2026");
  // Titles keep their spaces and are not cut; newlines become spaces.
  EXPECT_EQ(readable(" a b\nc", Spaces::kKeep), " a b c");
  EXPECT_EQ(readable(std::string(40, 'a'), Spaces::kKeep), std::string(40, 'a'));
}

TEST(HeatmapSvg, LabelsAndTitlesAreEscapedInTheDocument) {
  Figure fig = one_panel(Matrix::Constant(2, 2, 0.5), {"<a&b>", " x"}, {"\"q\"", "it's\x01"});
  fig.title = "R&D <test>";
  const std::string svg = to_svg(fig);
  EXPECT_NE(svg.find(">&lt;a&amp;b&gt;</text>"), std::string::npos);
  EXPECT_NE(svg.find(">\u2423x</text>"), std::string::npos);
  EXPECT_NE(svg.find(">&quot;q&quot;</text>"), std::string::npos);
  EXPECT_NE(svg.find(">it&apos;s\\u0001</text>"), std::string::npos);
  EXPECT_NE(svg.find("R&amp;D &lt;test&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<a&b>"), std::string::npos);
  // Every & starts an entity, and no control character but '\n' is left.
  const std::regex bare_amp("&(?!(amp|lt|gt|quot|apos);)");
  EXPECT_FALSE(std::regex_search(svg, bare_amp));
  for (char c : svg) EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 || c == '\n') << int(c);
}

TEST(HeatmapSvg, LabelsThatDoNotMatchTheShapeNameBothSizes) {
  const std::string msg = message_of<kappa::ShapeError>([] {
    to_svg(one_panel(Matrix::Zero(2, 3), {"a", "b"}, {"x", "y"}));
  });
  EXPECT_NE(msg.find("'p'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 x 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 row labels and 2 column labels"), std::string::npos) << msg;
  // ShapeError is a std::invalid_argument.
  EXPECT_THROW(to_svg(one_panel(Matrix::Zero(2, 3), {"a"}, {"x", "y", "z"})),
               std::invalid_argument);

  Figure masked = one_panel(Matrix::Zero(2, 2), {"a", "b"}, {"x", "y"});
  masked.panels[0].masked = heatmap::Mask::Constant(3, 3, false);
  const std::string mask_msg = message_of<kappa::ShapeError>([&] { to_svg(masked); });
  EXPECT_NE(mask_msg.find("2 x 2 but its mask is 3 x 3"), std::string::npos) << mask_msg;
}

TEST(HeatmapSvg, EmptyPanelsBadScalesAndUnwritablePathsThrow) {
  EXPECT_THROW(to_svg(Figure{}), std::invalid_argument);
  EXPECT_THROW(to_svg(one_panel(Matrix(0, 0), {}, {})), std::invalid_argument);
  Figure flat = one_panel(Matrix::Zero(1, 1), {"a"}, {"b"});
  flat.panels[0].scale.hi = flat.panels[0].scale.lo;
  EXPECT_THROW(to_svg(flat), std::invalid_argument);
  flat.panels[0].scale.hi = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(to_svg(flat), std::invalid_argument);
  const std::string path = "/nonexistent-kappa-dir/figure.svg";
  const std::string msg = message_of<std::runtime_error>(
      [&] { heatmap::write_svg(one_panel(Matrix::Zero(1, 1), {"a"}, {"b"}), path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(HeatmapSvg, NanCellsAreHatchedAndMaskedCellsGreyBothInTheLegend) {
  Matrix w(2, 2);
  w << 1, 0, std::numeric_limits<double>::quiet_NaN(), 0.5;
  Figure fig = one_panel(w, {"a", "b"}, {"a", "b"});
  fig.panels[0].masked = heatmap::Mask::Constant(2, 2, false);
  fig.panels[0].masked(0, 1) = true;
  fig.masked_legend = "masked here";
  const std::string svg = to_svg(fig);
  EXPECT_EQ(count(svg, "fill=\"url(#heatmap-nan)\""), 2u);  // the cell and the legend swatch
  EXPECT_EQ(count(svg, std::string("fill=\"") + heatmap::detail::kMaskedFill + "\""), 2u);
  EXPECT_NE(svg.find(">NaN (not a number)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">masked here</text>"), std::string::npos);
  // Values print for the two finite, unmasked cells only.
  EXPECT_NE(svg.find(">1.00</text>"), std::string::npos);
  EXPECT_NE(svg.find(">0.50</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">0.00</text>"), std::string::npos);

  const std::string plain = to_svg(one_panel(Matrix::Constant(2, 2, 0.25), {"a", "b"}, {"a", "b"}));
  EXPECT_EQ(plain.find("class=\"legend\""), std::string::npos);
  EXPECT_EQ(plain.find("fill=\"url(#heatmap-nan)\""), std::string::npos);
}

TEST(HeatmapSvg, PanelsThatShareAScaleShareAColourBar) {
  Figure fig = one_panel(Matrix::Constant(2, 2, 0.5), {"a", "b"}, {"a", "b"});
  fig.panels.push_back(fig.panels[0]);
  EXPECT_EQ(count(to_svg(fig), "class=\"colorbar\""), 1u);
  EXPECT_EQ(count(to_svg(fig), "class=\"panel\""), 2u);
  fig.panels[0].scale = heatmap::Scale::symmetric(fig.panels[0].values, "signed");
  EXPECT_EQ(count(to_svg(fig), "class=\"colorbar\""), 2u);
}

TEST(HeatmapSvg, CellValuesPrintForSmallMatricesOnly) {
  const std::vector<std::string> twelve(12, "t"), thirteen(13, "t");
  EXPECT_EQ(count(to_svg(one_panel(Matrix::Constant(12, 12, 0.25), twelve, twelve)), ">0.25<"),
            144u);
  Figure big = one_panel(Matrix::Constant(13, 13, 0.25), thirteen, thirteen);
  EXPECT_EQ(count(to_svg(big), ">0.25<"), 0u);
  big.cell_values = heatmap::CellValues::kShow;
  EXPECT_EQ(count(to_svg(big), ">0.25<"), 169u);
  Figure hidden = one_panel(Matrix::Constant(2, 2, 0.25), {"a", "b"}, {"a", "b"});
  hidden.cell_values = heatmap::CellValues::kHide;
  EXPECT_EQ(count(to_svg(hidden), ">0.25<"), 0u);
}

TEST(HeatmapSvg, TheFigureWidensForLongLabels) {
  const auto width = [](const std::string& svg) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(svg, m, std::regex("<svg[^>]* width=\"([0-9.]+)\"")));
    return std::stod(m[1]);
  };
  const double narrow = width(to_svg(one_panel(Matrix::Zero(1, 1), {"a"}, {"b"})));
  const std::string wide_label(30, 'W');  // 30 x 0.989 em x 13 px = 386 px in DejaVu Sans
  const double wide = width(to_svg(one_panel(Matrix::Zero(1, 1), {wide_label}, {"b"})));
  EXPECT_GE(wide - narrow, 30 * 0.989 * 13 - 13);
}

TEST(HeatmapSvg, LongSequencesGetSmallerUprightAndThinnedLabels) {
  const auto square = [](int n) {
    std::vector<std::string> labels;
    for (int i = 0; i < n; ++i) labels.push_back("t" + std::to_string(i));
    return to_svg(one_panel(Matrix::Zero(n, n), labels, labels));
  };
  // 6 tokens: 46 px cells, 13 px labels at 45 degrees.
  EXPECT_EQ(count(square(6), ") rotate(-45)\" font-size=\"13\">t"), 6u);
  // 40 tokens: 10 px cells, 8 px labels; 45 degrees would overlap them.
  EXPECT_EQ(count(square(40), ") rotate(-90)\" font-size=\"8\">t"), 40u);
  // 100 tokens: 6 px cells, 7 px labels on every other row and column.
  const std::string dense = square(100);
  EXPECT_EQ(count(dense, "font-size=\"7\">t"), 100u);
  EXPECT_NE(dense.find(">t98</text>"), std::string::npos);
  EXPECT_EQ(dense.find(">t99</text>"), std::string::npos);
}

TEST(HeatmapSvg, ViridisRunsDarkToLightAndTheDivergingMapIsWhiteAtZero) {
  using heatmap::Colormap;
  using heatmap::detail::colour_at;
  using heatmap::detail::hex;
  EXPECT_EQ(hex(colour_at(Colormap::kViridis, 0)), "#440154");
  EXPECT_EQ(hex(colour_at(Colormap::kViridis, 0.5)), "#21908c");
  EXPECT_EQ(hex(colour_at(Colormap::kViridis, 1)), "#fde725");
  EXPECT_EQ(hex(colour_at(Colormap::kViridis, -3)), "#440154");  // clamped
  EXPECT_EQ(hex(colour_at(Colormap::kViridis, 7)), "#fde725");
  EXPECT_EQ(hex(colour_at(Colormap::kBlueWhiteRed, 0.5)), "#f7f7f7");
  // A sequential map: luminance rises monotonically, so larger weights read lighter.
  double previous = -1;
  for (int i = 0; i <= 100; ++i) {
    const double y = heatmap::detail::luminance(colour_at(Colormap::kViridis, i / 100.0));
    EXPECT_GT(y, previous) << "at t = " << i / 100.0;
    previous = y;
  }
}

TEST(HeatmapSvg, TicksAndTheSymmetricScale) {
  const auto t = heatmap::detail::ticks(0, 1);
  ASSERT_EQ(t.values.size(), 6u);
  EXPECT_EQ(t.decimals, 1);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_NEAR(t.values[i], 0.2 * static_cast<double>(i), 1e-12);

  Matrix linear(2, 2);  // the demo's linear-kernel weights reach 2.333 and -1.333
  linear << 2.333, -1.333, 0.5, std::numeric_limits<double>::quiet_NaN();
  const auto s = heatmap::Scale::symmetric(linear, "signed");
  EXPECT_DOUBLE_EQ(s.lo, -2.5);
  EXPECT_DOUBLE_EQ(s.hi, 2.5);
  EXPECT_EQ(s.colormap, heatmap::Colormap::kBlueWhiteRed);
  const auto st = heatmap::detail::ticks(s.lo, s.hi);
  EXPECT_EQ(st.values, (std::vector<double>{-2, -1, 0, 1, 2}));
  EXPECT_EQ(st.decimals, 0);
  const auto zero = heatmap::Scale::symmetric(Matrix::Zero(2, 2), "");
  EXPECT_DOUBLE_EQ(zero.lo, -1);
  EXPECT_DOUBLE_EQ(zero.hi, 1);
  EXPECT_EQ(heatmap::detail::ticks(0, 0.5).decimals, 1);
  EXPECT_EQ(heatmap::detail::fixed(-0.0004, 2), "0.00");
}

}  // namespace
