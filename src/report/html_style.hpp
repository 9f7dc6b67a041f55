// The report's stylesheet (inline: the HTML file stands alone). Screen, narrow windows and print.
// Private to src/report.
#pragma once

namespace ipj::report {

inline constexpr const char* kReportStyle = R"CSS(
:root { --ink: #1d2330; --muted: #5b6474; --rule: #d9dde5; --panel: #f6f7f9; --accent: #0b5cad;
        --good: #1a7f37; --bad: #b42318; --warn: #9a6700; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; color: var(--ink); background: #fff; line-height: 1.45;
       font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 0 20px 40px; }
header.report-header { border-bottom: 3px solid var(--ink); padding: 22px 0 12px; margin-bottom: 8px; }
header.report-header h1 { margin: 0 0 4px; font-size: 26px; letter-spacing: -0.01em; }
.meta, .path, figcaption .sub, p.caption, .footnote { color: var(--muted); font-size: 13px; }
.path { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; word-break: break-all; }
nav.toc { font-size: 13px; margin: 10px 0 4px; display: flex; flex-wrap: wrap; gap: 4px 14px; }
nav.toc a { color: var(--accent); text-decoration: none; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--rule); }
h2 .kind { font-size: 12px; font-weight: 600; color: #fff; background: var(--muted); border-radius: 3px;
           padding: 2px 6px; margin-right: 8px; vertical-align: 3px; text-transform: uppercase; letter-spacing: .04em; }
h3 { font-size: 15px; margin: 18px 0 6px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0 12px; font-size: 14px; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; word-break: break-word; }
ul.notes { margin: 8px 0; padding: 8px 12px 8px 28px; background: #fff8e6; border-left: 3px solid var(--warn);
           font-size: 14px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(440px, 1fr)); gap: 14px 22px; margin: 12px 0; }
figure { margin: 0; padding: 10px 12px 8px; border: 1px solid var(--rule); border-radius: 6px; background: #fff;
         break-inside: avoid; page-break-inside: avoid; }
figcaption { font-weight: 600; font-size: 14px; margin-bottom: 4px; }
.chart-scroll { overflow-x: auto; }
svg.chart { display: block; width: 100%; min-width: 380px; height: auto; font-family: inherit; }
svg.chart .tick { font-size: 12px; fill: #444c5a; font-variant-numeric: tabular-nums; }
svg.chart .axis-label { font-size: 13px; fill: var(--ink); font-weight: 600; }
svg.chart .legend-text { font-size: 12px; fill: var(--ink); }
svg.chart .bar-value { font-size: 11px; fill: #444c5a; font-variant-numeric: tabular-nums; }
svg.chart .grid { stroke: #e6e9ef; stroke-width: 1; }
svg.chart .frame, svg.chart .tick-mark { stroke: #8a93a3; stroke-width: 1; }
svg.chart .no-data { font-size: 14px; fill: var(--muted); }
p.caption { margin: 4px 0 0; }
.table-wrap { overflow-x: auto; margin: 8px 0 14px; }
table { border-collapse: collapse; font-size: 13.5px; min-width: 50%; }
caption { text-align: left; font-weight: 600; padding: 4px 0; font-size: 14px; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--rule); text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; white-space: nowrap; }
th[scope=row] { background: transparent; }
td.num .meta { white-space: normal; }
table.summary { width: 100%; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) > * { background: #fbfbfc; }
td.model { font-size: 12.5px; color: var(--muted); min-width: 16em; }
.source { display: inline-block; font-size: 11.5px; font-weight: 600; border-radius: 3px; padding: 1px 6px;
          border: 1px solid currentColor; white-space: nowrap; }
.source-counter { color: var(--good); }
.source-integrated { color: var(--accent); }
.source-estimated { color: var(--warn); }
.source-none, .source-mixed { color: var(--muted); }
.status { font-weight: 600; white-space: nowrap; }
.status-regressed, .status-missing { color: var(--bad); }
.status-improved { color: var(--good); }
.status-within-noise, .status-not-comparable { color: var(--warn); }
footer { margin-top: 40px; padding-top: 10px; border-top: 1px solid var(--rule); color: var(--muted); font-size: 12.5px; }
@media (max-width: 640px) {
  main { padding: 0 10px 30px; }
  header.report-header h1 { font-size: 21px; }
  .charts { grid-template-columns: 1fr; }
  svg.chart { min-width: 340px; }
  /* The SVG scales down with the window: larger text units keep labels near 10 px on a phone. */
  svg.chart .tick { font-size: 15px; }
  svg.chart .axis-label { font-size: 16px; }
  svg.chart .legend-text, svg.chart .bar-value { font-size: 13px; }
}
@media print {
  @page { margin: 14mm; }
  body { font-size: 10.5pt; }
  main { max-width: none; padding: 0; }
  nav.toc { display: none; }
  h2 { break-after: avoid; page-break-after: avoid; }
  .charts { grid-template-columns: 1fr 1fr; }
  svg.chart { min-width: 0; }
  .table-wrap { overflow: visible; }
  section.result { break-before: auto; }
  a { color: inherit; text-decoration: none; }
}
)CSS";

}  // namespace ipj::report
