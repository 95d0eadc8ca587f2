// examples/heatmap_svg.hpp - a small SVG writer for heatmaps of attention
// weights. Example code for the example programs (demo, transformer), not
// part of the kappa library: copy it and change it.
//
// A Figure holds one or more Panels side by side. A panel is a matrix drawn as
// coloured cells, with its row labels on the left (queries), its column
// labels below, rotated by 45 degrees (keys), and a title above. Panels that
// share a Scale share one colour bar, drawn right of the last of them; a
// panel with its own scale gets its own bar. Small matrices (at most 12 x 12)
// print their values in the cells. Every size follows from the labels'
// estimated widths (DejaVu Sans metrics, the widest of the fonts named), so
// no label is clipped. Cells shrink for long sequences (about 400 px a
// side); so do the labels, down to 7 px, then column labels stand upright
// and only every k-th row and column is labelled.
//
//   heatmap::Figure fig;
//   fig.panels.push_back({"softmax", weights, tokens, tokens});  // Z^-1 A, N x N
//   heatmap::write_svg(fig, "weights.svg");
//
// Labels are bytes: a byte-level BPE token may hold part of a UTF-8
// character. readable_token() shows them so: a space as U+2423 '␣', a newline
// as '↵', a tab as '⇥', control and invisible characters as \uXXXX, bytes that
// are not UTF-8 as \xNN; a label longer than 32 characters is cut to 32 and
// ends in '…'. The writer then escapes & < > " ' for XML. Pass the
// tokenizer's bytes (HfTokenizer::token), not its vocabulary strings: GPT-2's
// vocabulary spells a space 'Ġ', which is shown as it is.
//
// Cells: a NaN is drawn hatched grey and named in a legend; a cell the panel
// marks as masked is drawn light grey (also in the legend) and prints no
// value. kappa gives masked keys weight 0, and a query row whose keys are all
// masked gets a zero weights row, never NaN (kappa/attention/attention.hpp),
// so a NaN in a kappa weights matrix means the inputs held one.
//
// Errors: a panel whose labels or mask do not fit its matrix throws
// kappa::ShapeError (a std::invalid_argument) naming both sizes; an empty
// panel or a bad scale throws std::invalid_argument; a file that cannot be
// written throws std::runtime_error naming it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kappa/core/error.hpp"
#include "kappa/core/matrix.hpp"
#include "svg_common.hpp"

namespace heatmap {

/// A colour map from [0, 1] to sRGB.
enum class Colormap {
  /// Sequential, perceptually uniform: lightness rises monotonically from dark
  /// violet to yellow. Nine control points sampled from matplotlib's viridis
  /// (a public-domain map), interpolated linearly in sRGB: between points this
  /// close the result differs from interpolating in a uniform colour space by
  /// less than one visible step. For weights in [0, 1].
  kViridis,
  /// Diverging, for signed values centred on 0: blue (negative), near-white
  /// (0), red (positive), with equal lightness at equal distances from the
  /// centre. Seven control points (ColorBrewer's RdBu, reversed).
  kBlueWhiteRed,
};

/// The values a colour bar spans: [lo, hi] maps onto the colour map; values
/// outside take the end colours (the printed value stays exact).
struct Scale {
  double lo = 0;
  double hi = 1;
  Colormap colormap = Colormap::kViridis;
  std::string label = "attention weight";

  /// [-m, m] on the diverging map, m = max |v| over the finite values rounded
  /// up to a tick step (1 when every value is 0): for signed matrices such as
  /// the weights of the linear kernel.
  static Scale symmetric(const kappa::RowMatrix<double>& values, std::string label);

  friend bool operator==(const Scale&, const Scale&) = default;
};

/// Cells that a mask hid (true = masked), same shape as the panel's values.
using Mask = Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// One matrix: values (rows x cols), one label per row and per column.
struct Panel {
  std::string title;
  kappa::RowMatrix<double> values;
  std::vector<std::string> row_labels;
  std::vector<std::string> col_labels;
  Scale scale{};
  Mask masked{};  ///< empty: nothing masked
};

/// Whether cells print their values: kAuto prints them when every panel is at
/// most 12 x 12.
enum class CellValues { kAuto, kShow, kHide };

struct Figure {
  std::string title;  ///< above all panels; may be empty
  std::vector<Panel> panels;
  std::string x_label = "key";    ///< below each panel's column labels
  std::string y_label = "query";  ///< left of each panel's row labels
  CellValues cell_values = CellValues::kAuto;
  std::string masked_legend = "masked (weight 0)";
};

/// The figure as an SVG document (UTF-8).
inline std::string to_svg(const Figure& figure);

/// Writes to_svg(figure) to `path`.
inline void write_svg(const Figure& figure, const std::string& path);

/// How a character of a label is shown: spaces as '␣' (tokens) or kept (titles).
enum class Spaces { kShow, kKeep };

/// The readable form of a label's bytes (UTF-8 out); see the file comment.
inline std::string readable(std::string_view bytes, Spaces spaces);
inline std::string readable_token(std::string_view bytes) {
  return readable(bytes, Spaces::kShow);
}

/// `text` with & < > " ' replaced by XML entities.
using svg_common::xml_escape;

// ---- implementation ----------------------------------------------------------

namespace detail {

struct Rgb {
  double r, g, b;  // sRGB, each in [0, 1]
};

inline constexpr std::array<Rgb, 9> kViridisPoints{{
    {0x44 / 255.0, 0x01 / 255.0, 0x54 / 255.0},
    {0x47 / 255.0, 0x2d / 255.0, 0x7b / 255.0},
    {0x3b / 255.0, 0x52 / 255.0, 0x8b / 255.0},
    {0x2c / 255.0, 0x72 / 255.0, 0x8e / 255.0},
    {0x21 / 255.0, 0x90 / 255.0, 0x8c / 255.0},
    {0x27 / 255.0, 0xad / 255.0, 0x81 / 255.0},
    {0x5d / 255.0, 0xc8 / 255.0, 0x63 / 255.0},
    {0xaa / 255.0, 0xdc / 255.0, 0x32 / 255.0},
    {0xfd / 255.0, 0xe7 / 255.0, 0x25 / 255.0},
}};

inline constexpr std::array<Rgb, 7> kBlueWhiteRedPoints{{
    {0x21 / 255.0, 0x66 / 255.0, 0xac / 255.0},
    {0x67 / 255.0, 0xa9 / 255.0, 0xcf / 255.0},
    {0xd1 / 255.0, 0xe5 / 255.0, 0xf0 / 255.0},
    {0xf7 / 255.0, 0xf7 / 255.0, 0xf7 / 255.0},
    {0xfd / 255.0, 0xdb / 255.0, 0xc7 / 255.0},
    {0xef / 255.0, 0x8a / 255.0, 0x62 / 255.0},
    {0xb2 / 255.0, 0x18 / 255.0, 0x2b / 255.0},
}};

inline std::vector<Rgb> control_points(Colormap map) {
  if (map == Colormap::kViridis) return {kViridisPoints.begin(), kViridisPoints.end()};
  return {kBlueWhiteRedPoints.begin(), kBlueWhiteRedPoints.end()};
}

/// The colour at t in [0, 1] (clamped): linear between control points.
inline Rgb colour_at(Colormap map, double t) {
  const std::vector<Rgb> p = control_points(map);
  t = std::clamp(t, 0.0, 1.0) * static_cast<double>(p.size() - 1);
  const auto i = std::min(static_cast<std::size_t>(t), p.size() - 2);
  const double f = t - static_cast<double>(i);
  return {p[i].r + f * (p[i + 1].r - p[i].r), p[i].g + f * (p[i + 1].g - p[i].g),
          p[i].b + f * (p[i + 1].b - p[i].b)};
}

inline std::string hex(const Rgb& c) {
  const auto byte = [](double v) {
    return static_cast<int>(std::lround(std::clamp(v, 0.0, 1.0) * 255));
  };
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", byte(c.r), byte(c.g), byte(c.b));
  return buf;
}

/// Relative luminance (WCAG): picks dark or light text on a cell.
inline double luminance(const Rgb& c) {
  const auto lin = [](double v) {
    return v <= 0.04045 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * lin(c.r) + 0.7152 * lin(c.g) + 0.0722 * lin(c.b);
}

using svg_common::num;

/// A value printed with `decimals` decimals, with "-0.00" shown as "0.00".
inline std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.front() == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

/// Decodes the UTF-8 character at s[i] into cp; returns its length, or 0 when
/// the bytes there are not well-formed UTF-8 (overlong, surrogate, truncated,
/// beyond U+10FFFF).
inline std::size_t decode_utf8(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  std::size_t len = 0;
  char32_t min = 0;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  } else if ((b0 & 0xe0) == 0xc0) {
    len = 2, cp = b0 & 0x1f, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    len = 3, cp = b0 & 0x0f, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

/// Characters that print nothing visible or reorder text, and those XML 1.0
/// forbids: shown as \uXXXX.
inline bool invisible(char32_t cp) {
  return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0xad || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff ||
         (cp >= 0xfdd0 && cp <= 0xfdef) || (cp & 0xfffe) == 0xfffe;
}

/// Advance width in em of one character in DejaVu Sans (the widest of the
/// fonts the figure names), rounded up; non-ASCII characters count as 0.8 em,
/// wide East Asian ones as 1 em.
inline double em_width(char32_t cp) {
  // ASCII 32..126, in thousandths of an em.
  static constexpr std::array<std::uint16_t, 95> kAscii{
      318,  401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337,  // ' '../
      636,  636, 636, 636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531,  // 0..?
      1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656, 557, 863, 748, 787,  // @..O
      603,  787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500,  // P.._
      500,  613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,  // `..o
      635,  635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838};      // p..~
  if (cp >= 32 && cp <= 126) return kAscii[cp - 32] / 1000.0;
  return cp >= 0x2e80 ? 1.0 : 0.8;
}

/// Estimated width of UTF-8 text at font size `size` (px), with 4% to spare.
inline double text_width(std::string_view text, double size) {
  double em = 0;
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const std::size_t n = decode_utf8(text, i, cp);
    em += n ? em_width(cp) : 0.8;
    i += n ? n : 1;
  }
  return 1.04 * em * size;
}

/// A tick step of 1, 2, 2.5 or 5 times a power of ten, about range / target.
inline double nice_step(double range, int target) {
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * mag >= raw * (1 - 1e-9)) return m * mag;
  return 10 * mag;
}

/// Decimals that print every multiple of `step` exactly.
inline int step_decimals(double step) {
  for (int d = 0; d < 6; ++d) {
    const double scaled = step * std::pow(10.0, d);
    if (std::abs(scaled - std::round(scaled)) < 1e-6 * scaled) return d;
  }
  return 6;
}

struct Ticks {
  std::vector<double> values;
  int decimals = 0;
};

inline Ticks ticks(double lo, double hi) {
  const double step = nice_step(hi - lo, 5);
  Ticks t;
  t.decimals = step_decimals(step);
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; ++k)
    t.values.push_back(k * step);
  return t;
}

// Font sizes (px) and spacing.
inline constexpr double kMaxLabelSize = 13, kTitleSize = 14, kAxisSize = 12, kTickSize = 11;
inline constexpr double kFigureTitleSize = 16, kMargin = 16, kGap = 30, kPad = 6;
inline constexpr double kBarWidth = 14, kBarGap = 14;
inline constexpr const char* kFonts = "DejaVu Sans, Helvetica, Arial, sans-serif";
inline constexpr const char* kMaskedFill = "#e4e4e4";

/// A panel's extent around its matrix's top-left corner (px).
struct Box {
  double left = 0, right = 0, top = 0, bottom = 0;
};

inline void check_panel(const Panel& p, std::size_t index) {
  const std::string name = "heatmap: panel " + std::to_string(index) + " ('" + p.title + "')";
  const auto rows = static_cast<std::size_t>(p.values.rows());
  const auto cols = static_cast<std::size_t>(p.values.cols());
  const std::string shape = std::to_string(rows) + " x " + std::to_string(cols);
  if (rows == 0 || cols == 0)
    throw std::invalid_argument(name + " has an empty matrix (" + shape + ")");
  if (p.row_labels.size() != rows || p.col_labels.size() != cols)
    throw kappa::ShapeError(name + ": the matrix is " + shape + " but has " +
                            std::to_string(p.row_labels.size()) + " row labels and " +
                            std::to_string(p.col_labels.size()) + " column labels");
  if (p.masked.size() != 0 &&
      (p.masked.rows() != p.values.rows() || p.masked.cols() != p.values.cols()))
    throw kappa::ShapeError(name + ": the matrix is " + shape + " but its mask is " +
                            std::to_string(p.masked.rows()) + " x " +
                            std::to_string(p.masked.cols()));
  if (!std::isfinite(p.scale.lo) || !std::isfinite(p.scale.hi) || !(p.scale.lo < p.scale.hi))
    throw std::invalid_argument(name + ": the colour scale needs finite lo < hi, got [" +
                                fixed(p.scale.lo, 6) + ", " + fixed(p.scale.hi, 6) + "]");
}

inline bool is_masked(const Panel& p, kappa::Index i, kappa::Index j) {
  return p.masked.size() != 0 && p.masked(i, j);
}

/// <text> at (x, y) with the given attributes; `content` is readable UTF-8.
inline std::string text(double x, double y, double size, std::string_view attrs,
                        std::string_view content) {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\"" +
         (attrs.empty() ? "" : " ") + std::string(attrs) + ">" + xml_escape(content) + "</text>\n";
}

}  // namespace detail

inline Scale Scale::symmetric(const kappa::RowMatrix<double>& values, std::string label) {
  double m = 0;
  for (kappa::Index i = 0; i < values.size(); ++i)
    if (std::isfinite(values.data()[i])) m = std::max(m, std::abs(values.data()[i]));
  if (m == 0) m = 1;
  const double step = detail::nice_step(m, 5);
  m = std::ceil(m / step - 1e-9) * step;
  return {-m, m, Colormap::kBlueWhiteRed, std::move(label)};
}

inline std::string readable(std::string_view bytes, Spaces spaces) {
  constexpr std::size_t kMaxChars = 32;
  std::string out;
  std::size_t chars = 0;
  char buf[16];
  for (std::size_t i = 0; i < bytes.size();) {
    if (chars == kMaxChars && spaces == Spaces::kShow) {
      out += "\u2026";  // …
      break;
    }
    char32_t cp = 0;
    const std::size_t n = detail::decode_utf8(bytes, i, cp);
    if (n == 0) {  // not UTF-8: the byte itself
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(bytes[i]));
      out += buf;
      ++i;
      ++chars;
      continue;
    }
    if (cp == ' ' && spaces == Spaces::kShow) {
      out += "\u2423";  // ␣
    } else if (cp == '\n' && spaces == Spaces::kShow) {
      out += "\u21b5";  // ↵
    } else if (cp == '\t' && spaces == Spaces::kShow) {
      out += "\u21e5";  // ⇥
    } else if ((cp == '\n' || cp == '\t') && spaces == Spaces::kKeep) {
      out += ' ';
    } else if (detail::invisible(cp)) {
      std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(bytes.substr(i, n));
    }
    i += n;
    ++chars;
  }
  if (out.empty() && spaces == Spaces::kShow) out = "\u2205";  // ∅: an empty token
  return out;
}

namespace detail {

/// Sizes shared by every panel of a figure.
struct Grid {
  double cell = 0;              ///< side of a cell (px)
  bool values = false;          ///< print values in the cells
  double value_size = 0;        ///< their font size
  bool borders = false;         ///< white lines between cells
  bool tooltips = false;        ///< a <title> per cell (browsers show it on hover)
  double label_size = 0;        ///< font size of the row and column labels
  std::size_t label_every = 1;  ///< label rows and columns 0, k, 2k, ...
  double col_angle = 45;        ///< column labels' rotation (degrees): 45, or 90 when dense
  double cos_a = 0, sin_a = 0;  ///< of col_angle
};

inline Grid grid(const Figure& figure) {
  kappa::Index n_max = 1;
  for (const Panel& p : figure.panels) n_max = std::max({n_max, p.values.rows(), p.values.cols()});
  Grid g;
  g.cell = std::clamp(std::floor(400.0 / static_cast<double>(n_max)), 6.0, 46.0);
  g.values = figure.cell_values == CellValues::kShow ||
             (figure.cell_values == CellValues::kAuto && n_max <= 12);
  g.value_size = std::min(11.5, 0.27 * g.cell);
  g.borders = g.cell >= 14;
  g.tooltips = n_max <= 64;
  // Labels shrink with the cells down to 7 px; column labels turn upright when
  // 45 degrees would overlap them; below that only every k-th label is shown.
  g.label_size = std::clamp(0.8 * g.cell, 7.0, kMaxLabelSize);
  g.col_angle = g.cell * std::sqrt(0.5) >= g.label_size ? 45 : 90;
  g.cos_a = g.col_angle == 45 ? std::sqrt(0.5) : 0;
  g.sin_a = g.col_angle == 45 ? std::sqrt(0.5) : 1;
  g.label_every = static_cast<std::size_t>(std::ceil(g.label_size / g.cell - 1e-9));
  return g;
}

/// A panel's readable labels, its matrix size and its extent around the
/// matrix's top-left corner (px).
struct PanelLayout {
  std::vector<std::string> rows, cols;
  double w = 0, h = 0;          // the matrix
  double row_w = 0, col_w = 0;  // the widest row and column label
  Box box;
};

inline PanelLayout panel_layout(const Figure& figure, const Panel& p, const Grid& g) {
  PanelLayout l;
  for (const auto& label : p.row_labels) l.rows.push_back(readable_token(label));
  for (const auto& label : p.col_labels) l.cols.push_back(readable_token(label));
  l.w = g.cell * static_cast<double>(p.values.cols());
  l.h = g.cell * static_cast<double>(p.values.rows());
  double col_left = 0;  // column labels hang down to the left of their column
  for (const auto& label : l.rows) l.row_w = std::max(l.row_w, text_width(label, g.label_size));
  for (std::size_t j = 0; j < l.cols.size(); j += g.label_every) {
    const double lw = text_width(l.cols[j], g.label_size);
    l.col_w = std::max(l.col_w, lw);
    col_left =
        std::min(col_left, g.cell * (static_cast<double>(j) + 0.5) - g.cos_a * lw - g.label_size);
  }
  const double title_w = 1.1 * text_width(readable(p.title, Spaces::kKeep), kTitleSize);
  const double y_axis_w = figure.y_label.empty() ? 0 : kPad + kAxisSize;
  l.box.left = std::min({-kPad - l.row_w - y_axis_w - 2, col_left, l.w / 2 - title_w / 2});
  l.box.right = std::max(l.w, l.w / 2 + title_w / 2);
  l.box.top = p.title.empty() ? 0 : -(10 + kTitleSize);
  l.box.bottom = l.h + kPad + g.sin_a * l.col_w + 0.5 * g.label_size +
                 (figure.x_label.empty() ? 0 : kPad + kAxisSize * 1.3);
  return l;
}

inline std::string axis_text(std::string_view attrs, std::string_view content) {
  return "<text " + std::string(attrs) + " font-size=\"" + num(kAxisSize) +
         "\" text-anchor=\"middle\" fill=\"#555555\" class=\"axis-label\">" +
         xml_escape(readable(content, Spaces::kKeep)) + "</text>\n";
}

/// One panel: title, cells (with values and tooltips), frame, labels, axis names.
inline std::string draw_panel(const Figure& figure, const Panel& p, const PanelLayout& l,
                              const Grid& g, double ox, double oy) {
  std::string s = "<g class=\"panel\" transform=\"translate(" + num(ox) + "," + num(oy) + ")\">\n";
  if (!p.title.empty())
    s += text(l.w / 2, -10, kTitleSize,
              "text-anchor=\"middle\" font-weight=\"bold\" class=\"panel-title\"",
              readable(p.title, Spaces::kKeep));

  s += "<g class=\"cells\" shape-rendering=\"crispEdges\"" +
       std::string(g.borders ? " stroke=\"white\" stroke-width=\"1\"" : "") + ">\n";
  std::string values;
  for (kappa::Index i = 0; i < p.values.rows(); ++i) {
    for (kappa::Index j = 0; j < p.values.cols(); ++j) {
      const double v = p.values(i, j);
      const double x = g.cell * static_cast<double>(j), y = g.cell * static_cast<double>(i);
      std::string fill, shown;
      if (is_masked(p, i, j)) {
        fill = kMaskedFill, shown = "masked";
      } else if (std::isnan(v)) {
        fill = "url(#heatmap-nan)", shown = "NaN";
      } else {
        const Rgb c = colour_at(p.scale.colormap, (v - p.scale.lo) / (p.scale.hi - p.scale.lo));
        fill = hex(c), shown = fixed(v, 4);
        if (g.values)
          values += text(x + g.cell / 2, y + g.cell / 2 + 0.35 * g.value_size, g.value_size,
                         std::string("text-anchor=\"middle\" fill=\"") +
                             (luminance(c) > 0.3 ? "#1a1a1a" : "white") + "\"",
                         fixed(v, 2));
      }
      s += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(g.cell) +
           "\" height=\"" + num(g.cell) + "\" fill=\"" + fill + "\"";
      if (g.tooltips)
        s += "><title>" +
             xml_escape(l.rows[static_cast<std::size_t>(i)] + " \u2192 " +
                        l.cols[static_cast<std::size_t>(j)] + ": " + shown) +
             "</title></rect>\n";
      else
        s += "/>\n";
    }
  }
  s += "</g>\n";
  if (!values.empty()) s += "<g class=\"values\">\n" + values + "</g>\n";
  s += "<rect width=\"" + num(l.w) + "\" height=\"" + num(l.h) +
       "\" fill=\"none\" stroke=\"#404040\" stroke-width=\"0.8\"/>\n";

  // Row labels: right-aligned, left of the matrix; the y axis name left of them.
  s += "<g class=\"row-labels\" text-anchor=\"end\">\n";
  for (std::size_t i = 0; i < l.rows.size(); i += g.label_every)
    s += text(-kPad, g.cell * (static_cast<double>(i) + 0.5) + 0.35 * g.label_size, g.label_size,
              "", l.rows[i]);
  s += "</g>\n";
  if (!figure.y_label.empty())
    s += axis_text("transform=\"translate(" + num(-2 * kPad - l.row_w - 0.25 * kAxisSize) + "," +
                       num(l.h / 2) + ") rotate(-90)\"",
                   figure.y_label);

  // Column labels: rotated, each ending under its column (the glyphs' middle
  // line, 0.35 em above the baseline, runs through the column's centre).
  s += "<g class=\"col-labels\" text-anchor=\"end\">\n";
  for (std::size_t j = 0; j < l.cols.size(); j += g.label_every) {
    const double x = g.cell * (static_cast<double>(j) + 0.5) + 0.35 * g.label_size * g.sin_a;
    const double y = l.h + kPad + 0.35 * g.label_size * g.cos_a;
    s += "<text transform=\"translate(" + num(x) + "," + num(y) + ") rotate(-" + num(g.col_angle) +
         ")\" font-size=\"" + num(g.label_size) + "\">" + xml_escape(l.cols[j]) + "</text>\n";
  }
  s += "</g>\n";
  if (!figure.x_label.empty())
    s += axis_text("x=\"" + num(l.w / 2) + "\" y=\"" +
                       num(l.h + kPad + g.sin_a * l.col_w + 0.5 * g.label_size + kPad + kAxisSize) +
                       "\"",
                   figure.x_label);
  return s + "</g>\n";
}

/// The width of a colour bar with its tick labels and name.
inline double colorbar_width(const Scale& scale) {
  const Ticks t = ticks(scale.lo, scale.hi);
  double tick_w = 0;
  for (double v : t.values) tick_w = std::max(tick_w, text_width(fixed(v, t.decimals), kTickSize));
  return kBarWidth + 7 + tick_w + (scale.label.empty() ? 0 : 8 + kAxisSize);
}

/// A vertical colour bar of height h at (x, y), filled by gradient `id`.
inline std::string draw_colorbar(const Scale& scale, const std::string& id, double x, double y,
                                 double h) {
  std::string s = "<g class=\"colorbar\" transform=\"translate(" + num(x) + "," + num(y) +
                  ")\">\n" + "<rect width=\"" + num(kBarWidth) + "\" height=\"" + num(h) +
                  "\" fill=\"url(#" + id + ")\" stroke=\"#404040\" stroke-width=\"0.8\"/>\n";
  const Ticks t = ticks(scale.lo, scale.hi);
  double tick_w = 0;
  for (double v : t.values) {
    const double ty = h * (1 - (v - scale.lo) / (scale.hi - scale.lo));
    const std::string label = fixed(v, t.decimals);
    tick_w = std::max(tick_w, text_width(label, kTickSize));
    s += "<line x1=\"" + num(kBarWidth) + "\" x2=\"" + num(kBarWidth + 4) + "\" y1=\"" + num(ty) +
         "\" y2=\"" + num(ty) + "\" stroke=\"#404040\" stroke-width=\"0.8\"/>\n";
    s += text(kBarWidth + 7, ty + 0.35 * kTickSize, kTickSize, "", label);
  }
  if (!scale.label.empty())
    s += axis_text("transform=\"translate(" + num(kBarWidth + 7 + tick_w + 8 + 0.75 * kAxisSize) +
                       "," + num(h / 2) + ") rotate(-90)\"",
                   scale.label);
  return s + "</g>\n";
}

/// The SVG gradient of a colour map, bottom (lo) to top (hi).
inline std::string gradient(Colormap map, const std::string& id) {
  const std::vector<Rgb> pts = control_points(map);
  std::string s = "<linearGradient id=\"" + id + "\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (std::size_t i = 0; i < pts.size(); ++i)
    s += "<stop offset=\"" + num(static_cast<double>(i) / static_cast<double>(pts.size() - 1)) +
         "\" stop-color=\"" + hex(pts[i]) + "\"/>";
  return s + "</linearGradient>\n";
}

}  // namespace detail

inline std::string to_svg(const Figure& figure) {
  using namespace detail;
  if (figure.panels.empty()) throw std::invalid_argument("heatmap: the figure has no panels");
  for (std::size_t k = 0; k < figure.panels.size(); ++k) check_panel(figure.panels[k], k);
  const std::size_t n_panels = figure.panels.size();
  const Grid g = grid(figure);
  std::vector<PanelLayout> layouts;
  for (const Panel& p : figure.panels) layouts.push_back(panel_layout(figure, p, g));

  // A colour bar after each run of panels with the same scale.
  std::vector<bool> bar_after(n_panels);
  for (std::size_t k = 0; k < n_panels; ++k)
    bar_after[k] = k + 1 == n_panels || !(figure.panels[k + 1].scale == figure.panels[k].scale);

  // Left to right: each panel's extent, then its colour bar; matrices top-aligned.
  std::vector<double> ox(n_panels), bar_x(n_panels);
  double cursor = kMargin, top = 0, bottom = 0;
  for (std::size_t k = 0; k < n_panels; ++k) {
    const Box& b = layouts[k].box;
    ox[k] = cursor - b.left;
    cursor = ox[k] + b.right;
    if (bar_after[k]) {
      bar_x[k] = ox[k] + layouts[k].w + kBarGap;
      cursor = std::max(cursor, bar_x[k] + colorbar_width(figure.panels[k].scale));
    }
    cursor += kGap;
    top = std::max(top, -b.top);
    bottom = std::max(bottom, b.bottom);
  }
  const std::string fig_title = readable(figure.title, Spaces::kKeep);
  const double oy = kMargin + (fig_title.empty() ? 0 : kFigureTitleSize + 12) + top;

  // The legend names NaN and masked cells when there are any.
  bool any_nan = false, any_masked = false;
  for (const Panel& p : figure.panels)
    for (kappa::Index i = 0; i < p.values.rows(); ++i)
      for (kappa::Index j = 0; j < p.values.cols(); ++j) {
        const bool masked = is_masked(p, i, j);
        any_masked |= masked;
        any_nan |= !masked && std::isnan(p.values(i, j));
      }
  std::vector<std::pair<std::string, std::string>> legend;  // (fill, text)
  if (any_masked) legend.emplace_back(kMaskedFill, readable(figure.masked_legend, Spaces::kKeep));
  if (any_nan) legend.emplace_back("url(#heatmap-nan)", "NaN (not a number)");
  double legend_w = 0;
  for (const auto& entry : legend) legend_w += 14 + 6 + text_width(entry.second, kAxisSize) + 20;
  const double legend_y = oy + bottom + 6;

  const double width =
      std::ceil(std::max({cursor - kGap + kMargin, legend_w + 2 * kMargin,
                          1.1 * text_width(fig_title, kFigureTitleSize) + 2 * kMargin}));
  const double height = std::ceil(legend_y + (legend.empty() ? 0 : 14 + 4) + kMargin);

  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  s += svg_common::svg_start(width, height,
                             "font-family=\"" + std::string(kFonts) + "\" fill=\"#1a1a1a\"");
  s += "<title>" + xml_escape(fig_title.empty() ? "heatmap" : fig_title) + "</title>\n";
  s += "<defs>\n<pattern id=\"heatmap-nan\" width=\"6\" height=\"6\" "
       "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
       "<rect width=\"6\" height=\"6\" fill=\"#c8c8c8\"/>"
       "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#7a7a7a\" stroke-width=\"2\"/>"
       "</pattern>\n";
  for (std::size_t k = 0; k < n_panels; ++k)
    if (bar_after[k])
      s += gradient(figure.panels[k].scale.colormap, "heatmap-bar-" + std::to_string(k));
  s += "</defs>\n";
  s += svg_common::kWhiteBackground;
  if (!fig_title.empty())
    s += text(width / 2, kMargin + kFigureTitleSize, kFigureTitleSize,
              "text-anchor=\"middle\" font-weight=\"bold\" class=\"figure-title\"", fig_title);
  for (std::size_t k = 0; k < n_panels; ++k) {
    s += draw_panel(figure, figure.panels[k], layouts[k], g, ox[k], oy);
    if (bar_after[k])
      s += draw_colorbar(figure.panels[k].scale, "heatmap-bar-" + std::to_string(k), bar_x[k], oy,
                         layouts[k].h);
  }
  if (!legend.empty()) {
    s += "<g class=\"legend\">\n";
    double x = kMargin;
    for (const auto& [fill, label] : legend) {
      s += "<rect x=\"" + num(x) + "\" y=\"" + num(legend_y) +
           "\" width=\"14\" height=\"14\" fill=\"" + fill +
           "\" stroke=\"#404040\" stroke-width=\"0.8\"/>\n";
      s += text(x + 20, legend_y + 7 + 0.35 * kAxisSize, kAxisSize, "", label);
      x += 14 + 6 + text_width(label, kAxisSize) + 20;
    }
    s += "</g>\n";
  }
  return s + "</svg>\n";
}

inline void write_svg(const Figure& figure, const std::string& path) {
  const std::string svg = to_svg(figure);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("heatmap: cannot open '" + path + "' for writing");
  out << svg;
  out.close();
  if (!out) throw std::runtime_error("heatmap: cannot write '" + path + "'");
}

}  // namespace heatmap
