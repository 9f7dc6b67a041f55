// Inline SVG charts that ipj draws itself (no JavaScript, no fonts, no network): line, scatter (with Pareto
// frontiers) and grouped bar charts with labelled axes, units, grid, legend and per-point tooltips (<title>).
// The SVG scales with its container (viewBox); all text is HTML-escaped.
#pragma once

#include <string>
#include <vector>

#include "ipj/report/report_model.hpp"

namespace ipj::report {

// Tick positions for an axis from `low` to `high` (about `count` of them, 1/2/5 x 10^k steps).
std::vector<double> nice_ticks(double low, double high, int count, bool integers_only = false);

// The points of a series that no other point beats: sorted by x, each with a higher y than all before it
// (maximise y at minimal x, e.g. accuracy per joule).
std::vector<std::pair<double, double>> pareto_frontier(std::vector<std::pair<double, double>> points);

// `<svg class="chart ...">...</svg>`; `id` must be unique in the document (clip paths refer to it).
std::string render_svg_chart(const Chart& chart, const std::string& id);

}  // namespace ipj::report
