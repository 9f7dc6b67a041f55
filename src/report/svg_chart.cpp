// SVG rendering of report charts: scales (linear, log2, categories), ticks, axes, legend, series.
#include "ipj/report/svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "text_format.hpp"

namespace ipj::report {
namespace {

// Okabe-Ito: distinguishable with the common colour-vision deficiencies, and in grey when printed.
const char* const kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};
constexpr int kPaletteSize = 7;
constexpr double kWidth = 560, kHeight = 340;
constexpr double kLeft = 68, kRight = 16, kBottom = 52;
constexpr double kCharWidth = 6.6;  // average glyph width of 12-unit sans-serif text, for the legend layout

const char* color_of(const Series& series, std::size_t position) {
  const int index = series.color >= 0 ? series.color : static_cast<int>(position);
  return kPalette[index % kPaletteSize];
}

std::string number(double value) {
  std::ostringstream text;
  text.precision(5);
  text << std::fixed << value;
  std::string result = text.str();
  result.erase(result.find_last_not_of('0') + 1);
  if (!result.empty() && result.back() == '.') result.pop_back();
  return result;
}

// One axis mapped onto pixels.
struct Scale {
  double low = 0, high = 1;  // in transformed units (log2 for log axes)
  double pixel_low = 0, pixel_high = 1;
  bool log = false;
  double transform(double value) const { return log ? std::log2(value) : value; }
  double operator()(double value) const {
    return pixel_low + (transform(value) - low) / (high - low) * (pixel_high - pixel_low);
  }
};

std::string tick_text(double value, double step, bool percent) {
  if (percent) {
    value *= 100.0;
    step *= 100.0;
  } else if (std::fabs(value) >= 1e6 && step >= 1e5) {
    return number(value / 1e6) + "M";
  } else if (std::fabs(value) >= 1e4 && step >= 1e3) {
    return number(value / 1e3) + "k";
  }
  // As many decimals as the step needs to be exact: 0.25 -> 2, 0.5 -> 1, 2.5 -> 1.
  int decimals = 0;
  while (decimals < 6 &&
         std::fabs(step * std::pow(10.0, decimals) - std::round(step * std::pow(10.0, decimals))) >
             1e-6 * std::pow(10.0, decimals))
    ++decimals;
  return fixed(value, decimals);
}

std::string axis_title(const Axis& axis) {
  if (axis.unit.empty()) return axis.label;
  return axis.label + " (" + axis.unit + ")";
}

struct Range {
  double low = 1e300, high = -1e300;
  bool empty() const { return low > high; }
  void add(double value) {
    low = std::min(low, value);
    high = std::max(high, value);
  }
};

// Data range of one coordinate over all series, padded so that no point sits on the frame.
Range data_range(const Chart& chart, bool x_axis, bool log) {
  Range range;
  for (const Series& series : chart.series)
    for (const auto& [x, y] : series.points) {
      const double value = x_axis ? x : y;
      if (!std::isfinite(value) || (log && value <= 0)) continue;
      range.add(log ? std::log2(value) : value);
    }
  const Axis& axis = x_axis ? chart.x : chart.y;
  if (range.empty()) range = {0, 1};
  if (axis.include_zero && !log) range.add(0.0);
  if (range.high - range.low < 1e-12) {
    const double pad = log ? 0.5 : std::max(std::fabs(range.high) * 0.1, 1e-3);
    range.low -= pad;
    range.high += pad;
  } else if (log) {
    range.low -= 0.25;
    range.high += 0.25;
  } else {
    const double pad = (range.high - range.low) * 0.06;
    if (!(axis.include_zero && range.low == 0.0)) range.low -= pad;
    range.high += pad;
  }
  return range;
}

struct Layout {
  Scale x, y;
  std::vector<double> x_ticks, y_ticks;  // in data units
  double y_step = 1, x_step = 1;
  double top = 16;
};

bool all_integers(const Chart& chart) {
  for (const Series& series : chart.series)
    for (const auto& point : series.points)
      if (std::fabs(point.first - std::round(point.first)) > 1e-9) return false;
  return true;
}

// Legend entries flow left to right and wrap; returns the SVG and the height it takes.
std::string legend(const Chart& chart, double& height) {
  std::ostringstream out;
  double x = kLeft, y = 14;
  height = 0;
  if (chart.series.size() < 2 && chart.kind != ChartKind::scatter) return "";
  out << "<g class=\"legend\">";
  for (std::size_t index = 0; index < chart.series.size(); ++index) {
    const Series& series = chart.series[index];
    const double width = 26 + kCharWidth * static_cast<double>(series.name.size()) + 14;
    if (x + width > kWidth - kRight && x > kLeft) {
      x = kLeft;
      y += 18;
    }
    const char* color = color_of(series, index);
    if (chart.kind == ChartKind::bar) {
      out << "<rect x=\"" << x << "\" y=\"" << y - 9 << "\" width=\"18\" height=\"10\" fill=\"" << color
          << "\"/>";
    } else {
      out << "<line x1=\"" << x << "\" y1=\"" << y - 4 << "\" x2=\"" << x + 18 << "\" y2=\"" << y - 4
          << "\" stroke=\"" << color << "\" stroke-width=\"2.5\""
          << (series.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/><circle cx=\"" << x + 9 << "\" cy=\""
          << y - 4 << "\" r=\"3.2\" fill=\"" << (series.dashed ? "#fff" : color) << "\" stroke=\"" << color
          << "\" stroke-width=\"1.5\"/>";
    }
    out << "<text x=\"" << x + 24 << "\" y=\"" << y << "\" class=\"legend-text\">" << html_escape(series.name)
        << "</text>";
    x += width;
  }
  if (chart.pareto_frontier) {
    if (x + 140 > kWidth - kRight) {
      x = kLeft;
      y += 18;
    }
    out << "<path d=\"M" << x << " " << y
        << " h9 v-8 h9\" class=\"frontier-key\" fill=\"none\" stroke=\"#555\" "
        << "stroke-width=\"1.5\" stroke-dasharray=\"3 2\"/><text x=\"" << x + 24 << "\" y=\"" << y
        << "\" class=\"legend-text\">Pareto frontier</text>";
  }
  out << "</g>";
  height = y + 10;
  return out.str();
}

Layout make_layout(const Chart& chart, double legend_height) {
  Layout layout;
  layout.top = std::max(16.0, legend_height + 8);
  const bool x_log = chart.x.scale == AxisScale::log2;
  const bool bars = chart.kind == ChartKind::bar;
  layout.x.pixel_low = kLeft;
  layout.x.pixel_high = kWidth - kRight;
  layout.y.pixel_low = kHeight - kBottom;
  layout.y.pixel_high = layout.top;
  if (bars) {
    layout.x.low = -0.5;
    layout.x.high = static_cast<double>(std::max<std::size_t>(chart.x.categories.size(), 1)) - 0.5;
  } else {
    const Range x_range = data_range(chart, true, x_log);
    layout.x.log = x_log;
    if (x_log) {
      layout.x.low = x_range.low;
      layout.x.high = x_range.high;
      std::vector<double> distinct;
      for (const Series& series : chart.series)
        for (const auto& point : series.points)
          if (point.first > 0) distinct.push_back(point.first);
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      if (distinct.size() <= 9) {
        layout.x_ticks = distinct;
      } else {
        for (double power = std::ceil(x_range.low); power <= x_range.high; power += 1.0)
          layout.x_ticks.push_back(std::exp2(power));
      }
    } else {
      // The x axis spans the data (ticks inside it only): epochs 1..4 do not start at 0.
      const std::vector<double> ticks = nice_ticks(x_range.low, x_range.high, 6, all_integers(chart));
      if (ticks.size() > 1) layout.x_step = ticks[1] - ticks[0];
      for (const double tick : ticks)
        if (tick >= x_range.low - 1e-9 && tick <= x_range.high + 1e-9) layout.x_ticks.push_back(tick);
      layout.x.low = x_range.low;
      layout.x.high = x_range.high;
    }
  }
  const Range y_range = data_range(chart, false, false);
  layout.y_ticks = nice_ticks(y_range.low, y_range.high, 5);
  layout.y.low = std::min(y_range.low, layout.y_ticks.front());
  layout.y.high = std::max(y_range.high, layout.y_ticks.back());
  if (layout.y_ticks.size() > 1) layout.y_step = layout.y_ticks[1] - layout.y_ticks[0];
  return layout;
}

void draw_axes(const Chart& chart, const Layout& layout, std::ostringstream& out) {
  const double bottom = kHeight - kBottom;
  out << "<g class=\"axis axis-y\">";
  for (const double tick : layout.y_ticks) {
    const double y = layout.y(tick);
    out << "<line class=\"grid\" x1=\"" << kLeft << "\" x2=\"" << kWidth - kRight << "\" y1=\"" << y
        << "\" y2=\"" << y << "\"/><text class=\"tick\" x=\"" << kLeft - 6 << "\" y=\"" << y + 4
        << "\" text-anchor=\"end\">" << html_escape(tick_text(tick, layout.y_step, chart.y.percent))
        << "</text>";
  }
  out << "<line class=\"frame\" x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\"" << layout.top
      << "\" y2=\"" << bottom << "\"/><text class=\"axis-label\" transform=\"translate(16 "
      << (layout.top + bottom) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << html_escape(axis_title(chart.y)) << "</text></g>";
  out << "<g class=\"axis axis-x\"><line class=\"frame\" x1=\"" << kLeft << "\" x2=\"" << kWidth - kRight
      << "\" y1=\"" << bottom << "\" y2=\"" << bottom << "\"/>";
  if (chart.kind == ChartKind::bar) {
    for (std::size_t index = 0; index < chart.x.categories.size(); ++index) {
      std::string label = chart.x.categories[index];
      const std::size_t room = static_cast<std::size_t>(std::max(
          4.0, (kWidth - kLeft - kRight) / static_cast<double>(chart.x.categories.size()) / kCharWidth));
      if (label.size() > room) label = label.substr(0, room - 1) + "\u2026";
      out << "<text class=\"tick\" x=\"" << layout.x(static_cast<double>(index)) << "\" y=\"" << bottom + 17
          << "\" text-anchor=\"middle\">" << html_escape(label) << "<title>"
          << html_escape(chart.x.categories[index]) << "</title></text>";
    }
  } else {
    for (const double tick : layout.x_ticks) {
      const double x = layout.x(tick);
      out << "<line class=\"tick-mark\" x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << bottom << "\" y2=\""
          << bottom + 5 << "\"/><text class=\"tick\" x=\"" << x << "\" y=\"" << bottom + 18
          << "\" text-anchor=\"middle\">"
          << html_escape(tick_text(tick, layout.x.log ? 1.0 : layout.x_step, chart.x.percent)) << "</text>";
    }
  }
  out << "<text class=\"axis-label\" x=\"" << (kLeft + kWidth - kRight) / 2 << "\" y=\"" << kHeight - 10
      << "\" text-anchor=\"middle\">"
      << html_escape(axis_title(chart.x) +
                     (chart.x.scale == AxisScale::log2 && chart.kind != ChartKind::bar ? ", log scale" : ""))
      << "</text></g>";
}

std::string point_tooltip(const Chart& chart, const Series& series, std::size_t index) {
  const auto& [x, y] = series.points[index];
  std::string text = series.name + ": ";
  if (chart.kind == ChartKind::bar && x >= 0 && static_cast<std::size_t>(x) < chart.x.categories.size())
    text += chart.x.categories[static_cast<std::size_t>(x)];
  else
    text += chart.x.label + " " + significant(x, 4);
  text += ", " + (chart.y.percent ? fixed(y * 100.0, 2) + "%" : with_unit(y, chart.y.unit));
  if (index < series.point_labels.size() && !series.point_labels[index].empty())
    text += " (" + series.point_labels[index] + ")";
  return text;
}

void draw_bars(const Chart& chart, const Layout& layout, std::ostringstream& out) {
  const double group = (layout.x(1.0) - layout.x(0.0)) * 0.72;
  const double width = group / static_cast<double>(std::max<std::size_t>(chart.series.size(), 1));
  const double zero = layout.y(std::max(layout.y.low, 0.0));
  for (std::size_t index = 0; index < chart.series.size(); ++index) {
    const Series& series = chart.series[index];
    out << "<g class=\"series\" data-series=\"" << html_escape(series.name) << "\">";
    for (std::size_t point = 0; point < series.points.size(); ++point) {
      const auto& [x, y] = series.points[point];
      const double left = layout.x(x) - group / 2 + width * static_cast<double>(index);
      const double top = layout.y(y);
      out << "<rect class=\"bar point\" x=\"" << left + 1 << "\" y=\"" << std::min(top, zero) << "\" width=\""
          << std::max(width - 2, 1.0) << "\" height=\"" << std::fabs(zero - top) << "\" fill=\""
          << color_of(series, index) << "\"><title>" << html_escape(point_tooltip(chart, series, point))
          << "</title></rect><text class=\"bar-value\" x=\"" << left + width / 2 << "\" y=\""
          << std::min(top, zero) - 4 << "\" text-anchor=\"middle\">"
          << html_escape(point < series.point_labels.size() && !series.point_labels[point].empty()
                             ? series.point_labels[point]
                         : chart.y.percent ? fixed(y * 100.0, 1)
                                           : significant(y, 3))
          << "</text>";
    }
    out << "</g>";
  }
}

void draw_lines(const Chart& chart, const Layout& layout, std::ostringstream& out, const std::string& clip) {
  for (std::size_t index = 0; index < chart.series.size(); ++index) {
    const Series& series = chart.series[index];
    const char* color = color_of(series, index);
    out << "<g class=\"series\" data-series=\"" << html_escape(series.name) << "\" clip-path=\"url(#" << clip
        << ")\">";
    if (chart.kind == ChartKind::scatter && chart.pareto_frontier) {
      const auto frontier = pareto_frontier(series.points);
      if (frontier.size() > 1) {
        out << "<path class=\"frontier\" fill=\"none\" stroke=\"" << color
            << "\" stroke-width=\"1.5\" stroke-dasharray=\"3 2\" d=\"M" << layout.x(frontier[0].first) << " "
            << layout.y(frontier[0].second);
        for (std::size_t point = 1; point < frontier.size(); ++point)
          out << " H" << layout.x(frontier[point].first) << " V" << layout.y(frontier[point].second);
        out << "\"/>";
      }
    }
    if (chart.kind == ChartKind::line && series.points.size() > 1) {
      out << "<path class=\"line\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2.2\""
          << (series.dashed ? " stroke-dasharray=\"6 4\"" : "") << " d=\"";
      for (std::size_t point = 0; point < series.points.size(); ++point)
        out << (point ? " L" : "M") << layout.x(series.points[point].first) << " "
            << layout.y(series.points[point].second);
      out << "\"/>";
    }
    const double radius = chart.kind == ChartKind::scatter ? 5.0 : 3.5;
    for (std::size_t point = 0; point < series.points.size(); ++point) {
      const auto& [x, y] = series.points[point];
      if (!std::isfinite(x) || !std::isfinite(y) || (layout.x.log && x <= 0)) continue;
      out << "<circle class=\"point\" cx=\"" << layout.x(x) << "\" cy=\"" << layout.y(y) << "\" r=\""
          << radius << "\" fill=\"" << (series.dashed ? "#fff" : color) << "\" stroke=\"" << color
          << "\" stroke-width=\"1.5\"><title>" << html_escape(point_tooltip(chart, series, point))
          << "</title></circle>";
    }
    out << "</g>";
  }
}

}  // namespace

std::vector<double> nice_ticks(double low, double high, int count, bool integers_only) {
  if (!(high > low)) high = low + 1.0;
  const double raw = (high - low) / std::max(count, 2);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double factor : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= factor * magnitude * 1.0000001) {
      step = factor * magnitude;
      break;
    }
  if (integers_only) step = std::max(1.0, std::round(step));
  std::vector<double> ticks;
  const double first = std::floor(low / step + 1e-9);
  for (int index = 0; index < 50; ++index) {
    const double tick = (first + index) * step;  // multiplied, not accumulated: no drift
    if (tick > high + step * 1e-9) break;
    ticks.push_back(std::fabs(tick) < step * 1e-9 ? 0.0 : tick);
  }
  if (ticks.size() < 2) ticks.push_back(ticks.empty() ? low : ticks.back() + step);
  return ticks;
}

std::vector<std::pair<double, double>> pareto_frontier(std::vector<std::pair<double, double>> points) {
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) {
    return a.first < b.first || (a.first == b.first && a.second > b.second);
  });
  std::vector<std::pair<double, double>> frontier;
  for (const auto& point : points)
    if (frontier.empty() || point.second > frontier.back().second) frontier.push_back(point);
  return frontier;
}

std::string render_svg_chart(const Chart& chart, const std::string& id) {
  const char* kind = chart.kind == ChartKind::bar       ? "bar"
                     : chart.kind == ChartKind::scatter ? "scatter"
                                                        : "line";
  std::ostringstream out;
  out.precision(6);
  double legend_height = 0;
  const std::string legend_svg = legend(chart, legend_height);
  const Layout layout = make_layout(chart, legend_height);
  out << "<svg class=\"chart chart-" << kind << "\" id=\"" << html_escape(id) << "\" viewBox=\"0 0 " << kWidth
      << " " << kHeight << "\" role=\"img\" aria-labelledby=\"" << html_escape(id) << "-title\" "
      << "xmlns=\"http://www.w3.org/2000/svg\" preserveAspectRatio=\"xMidYMid meet\"><title id=\""
      << html_escape(id) << "-title\">" << html_escape(chart.title) << "</title>"
      << "<defs><clipPath id=\"" << html_escape(id) << "-clip\"><rect x=\"" << kLeft - 8 << "\" y=\""
      << layout.top - 8 << "\" width=\"" << kWidth - kLeft - kRight + 16 << "\" height=\""
      << kHeight - kBottom - layout.top + 16 << "\"/></clipPath></defs>";
  out << legend_svg;
  draw_axes(chart, layout, out);
  bool any_point = false;
  for (const Series& series : chart.series)
    any_point = any_point || !series.points.empty();
  if (!any_point) {
    out << "<text class=\"no-data\" x=\"" << (kLeft + kWidth - kRight) / 2 << "\" y=\""
        << (layout.top + kHeight - kBottom) / 2 << "\" text-anchor=\"middle\">no data</text>";
  } else if (chart.kind == ChartKind::bar) {
    draw_bars(chart, layout, out);
  } else {
    draw_lines(chart, layout, out, html_escape(id) + "-clip");
  }
  out << "</svg>";
  return out.str();
}

}  // namespace ipj::report
