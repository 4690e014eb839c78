// The compare page's bar views: per-task evaluation (Figure 12) and the relative
// improvement over a baseline group (Figure 11), one Plotly panel per policy, from
// /api/v1/compare/bars (webapp/compare/serialize.py::bars_json, the numbers the exports
// draw). Grouped bars, one per group in its colour; error bars from the band (per task)
// or each bar's 95% interval (relative view: delta method, the baseline's variance
// included; caption() writes which into the page); the base model as a dashed line over
// each task; a dashed zero line in the relative view.
//
// Every string from the server goes into the page through textContent, or into Plotly
// through plot-text.js (escaped; legends ellipsized, the whole label in the hover through
// the trace's meta); never innerHTML. Groups are shown by their names (the grouping key
// and the value, "sgt.lambda_sgt = 0.05"), charts in the page's theme (MRLPlotTheme).
"use strict";

(function () {
  const { toNumber: num } = window.MRLNonFinite; // "NaN", "Infinity", "-Infinity" as numbers
  const PATTERNS = { solid: "", dash: "/", dot: ".", dashdot: "x" };
  // The bars of a category take a quarter of its width each, at most 0.8 of it together
  // (the exports' rule, webapp/compare/bars_export.py::bar_span).
  const barSpan = (groups) => Math.min(0.8, 0.25 * Math.max(groups, 1));

  // Plotly renders titles, ticks, legends and hovers as HTML-like text (plot-text.js).
  const { plain, short, legend, plotMeta } = window.MRLPlotText;
  const { themed, colours } = window.MRLPlotTheme;
  const AXIS_TITLE_CHARS = 60; // the relative view's y title names the baseline group

  function el(tag, attrs = {}, text = "") {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    if (text) node.textContent = text;
    return node;
  }

  // The relative view's hover: the bar's interval after its value (none: one run).
  const intervalText = (low, high) =>
    Number.isFinite(low) && Number.isFinite(high) ? ` [${low.toPrecision(4)}, ${high.toPrecision(4)}]` : "";

  function barTraces(panel, names, relative) {
    const name = (group) => names.get(group) || group;
    const errorColour = colours().muted;
    const x = panel.category_labels.map(plain);
    const traces = [];
    for (const trace of panel.traces) {
      const mean = trace.mean.map(num);
      const shown = trace.n.map((n) => n > 0);
      const y = mean.map((value, k) => (shown[k] && Number.isFinite(value) ? value : null));
      const above = trace.upper.map(num).map((u, k) => (Number.isFinite(u - mean[k]) ? Math.max(u - mean[k], 0) : 0));
      const below = trace.lower.map(num).map((l, k) => (Number.isFinite(mean[k] - l) ? Math.max(mean[k] - l, 0) : 0));
      const upper = trace.upper.map(num);
      const spans = trace.lower.map(num).map((l, k) => (relative ? intervalText(l, upper[k]) : ""));
      traces.push({
        type: "bar", x, y, name: legend(name(trace.group)), legendgroup: trace.group,
        marker: { color: trace.colour, pattern: { shape: PATTERNS[trace.dash] || "" } },
        error_y: { type: "data", symmetric: false, array: above, arrayminus: below, visible: true, color: errorColour, thickness: 1.2, width: 3 },
        meta: plotMeta(name(trace.group)), hoverlabel: { namelength: -1 },
        customdata: trace.n.map((n, k) => [n, spans[k]]),
        hovertemplate: "%{x}: %{y:.4g}%{customdata[1]} (n=%{customdata[0]})<extra>%{meta[0]}</extra>",
      });
    }
    return traces;
  }

  function baseShapes(panel, data) {
    // The base model per task: a dashed line across the task's bars (shapes, drawn over them).
    if (data.view !== "tasks") return [];
    const span = barSpan(panel.traces.length);
    const shapes = [];
    panel.base.map(num).forEach((value, k) => {
      if (!Number.isFinite(value)) return;
      shapes.push({
        type: "line", xref: "x", yref: "y", x0: k - span / 2 - 0.04, x1: k + span / 2 + 0.04, y0: value, y1: value,
        line: { color: "#888", width: 2.5, dash: "dash" }, name: "base", layer: "above",
      });
    });
    return shapes;
  }

  function baseTrace(panel, data) {
    // Markers at the base values: the legend entry and the hover text of the base lines.
    if (data.view !== "tasks" || !panel.base.map(num).some(Number.isFinite)) return [];
    return [{
      type: "scatter", mode: "markers", x: panel.category_labels.map(plain),
      y: panel.base.map(num).map((v) => (Number.isFinite(v) ? v : null)),
      name: legend(panel.base_label), marker: { symbol: "line-ew-open", size: 18, color: "#888", line: { width: 2.5 } },
      hovertemplate: "%{x}: %{y:.4g}<extra>base model</extra>",
    }];
  }

  function render(box, data) {
    box.replaceChildren();
    const names = new Map((data.groups || []).map((group) => [group.label, group.name || group.label]));
    for (const panel of data.panels) {
      const div = el("div", { class: "chart", "data-testid": "bar-panel", "data-policy": panel.policy });
      box.append(div);
      const shapes = baseShapes(panel, data);
      if (data.zero_line) {
        shapes.push({
          type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: 0, y1: 0,
          line: { color: colours().fg, width: 1.2, dash: "dash" }, name: "zero", layer: "above",
        });
      }
      const traces = barTraces(panel, names, data.view === "relative").concat(baseTrace(panel, data));
      const layout = {
        title: { text: plain(panel.title), font: { size: 13 }, y: 0.98, yanchor: "top" }, height: 340,
        barmode: "group", bargap: 1 - barSpan(panel.traces.length), bargroupgap: 0.06,
        showlegend: traces.length > 0,
        // The legend above the bars: rotated task names below take the room they need.
        margin: { l: 60, r: 10, t: 56, b: 40 },
        legend: { orientation: "h", x: 0, xanchor: "left", y: 1.0, yanchor: "bottom" },
        xaxis: { type: "category", title: { text: plain(panel.x_label || ""), standoff: 4 }, automargin: true },
        yaxis: { title: { text: plain(short(panel.y_label, AXIS_TITLE_CHARS)) }, zeroline: !data.zero_line, automargin: true },
        shapes,
      };
      if (!panel.traces.length) {
        layout.annotations = [{ text: plain(panel.message || "no data"), xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false }];
      }
      window.Plotly.react(div, traces, themed(layout), { displaylogo: false, responsive: true });
    }
  }

  function caption(node, data) {
    // What the relative view's error bars are ("Error bars: 95% interval, paired delta
    // method, 5 seeds ..."), from the server; hidden when there is nothing to say.
    if (!node) return;
    node.textContent = data.interval_note || "";
    node.hidden = !data.interval_note;
  }

  window.CompareBars = { render, caption };
})();
