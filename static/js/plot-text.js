// Strings from the server (group labels, policy names, metric names...) as Plotly text.
// Plotly reads a few HTML tags in titles, trace names, tick and hover labels (<a href>
// makes a live link, <span style> restyles), and in a hovertemplate it also substitutes
// %{...}: so every server string goes through plain(), and none is concatenated into a
// hovertemplate (put it into the trace's meta, plotMeta(), and write %{meta[0]}).
//
// And the page theme for Plotly: MRLPlotTheme.themed(layout) gives a chart the theme's
// backgrounds, text and grid colours (app.css's variables, light or dark by
// prefers-color-scheme), so that no chart stays white in the dark theme; onChange(redraw)
// redraws when the scheme changes. Every chart of the compare and run pages goes
// through it.
//
// Loaded before the page scripts that draw charts (compare.html, run_detail.html).
"use strict";

(function () {
  const LEGEND_CHARS = 40; // a longer label is ellipsized in a legend
  // A hover label shows the whole label in lines of this many characters (it is drawn
  // inside the chart, which clips it), up to HOVER_LINES of them ("…" past that: a
  // 2,000-character chat template cannot fit a chart; the page's tables hold it whole).
  const HOVER_LINE_CHARS = 40;
  const HOVER_LINES = 12;

  const text = (value) => (value === null || value === undefined ? "" : String(value));

  // Escaped for Plotly's pseudo-HTML: "&", "<" and ">" as entities, and "%" as one too,
  // so that neither a tag nor a %{...} template is read in it (Plotly shows the entities
  // as the characters).
  const plain = (value) =>
    text(value).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/%/g, "&#37;");

  // At most `limit` characters (not UTF-16 halves), the last one "…" when cut; raw text.
  function short(value, limit = LEGEND_CHARS) {
    const chars = Array.from(text(value));
    return chars.length > limit ? chars.slice(0, limit - 1).join("") + "…" : chars.join("");
  }

  // A legend entry: ellipsized, then escaped.
  const legend = (value) => plain(short(value));

  // The label for a hover: whole (up to HOVER_LINES), escaped, in lines (Plotly's <br>).
  function hoverText(value) {
    const chars = Array.from(short(text(value).replace(/[\r\n\u2028\u2029]+/g, " "), HOVER_LINE_CHARS * HOVER_LINES));
    const lines = [];
    for (let i = 0; i < chars.length; i += HOVER_LINE_CHARS) lines.push(plain(chars.slice(i, i + HOVER_LINE_CHARS).join("")));
    return lines.join("<br>");
  }

  // A trace's meta holding its whole label: %{meta[0]} in its hovertemplate.
  const plotMeta = (value) => [hoverText(value)];

  window.MRLPlotText = Object.freeze({ plain, short, legend, hoverText, plotMeta, LEGEND_CHARS });
})();

(function () {
  // The theme's colours, read from app.css's variables now (they change with the scheme).
  function colours() {
    const style = getComputedStyle(document.documentElement);
    const read = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
    return {
      fg: read("--fg", "#1d2430"),
      muted: read("--muted", "#5b6575"),
      card: read("--card", "#fff"),
      grid: read("--border", "#e3e6eb"),
      line: read("--input-border", "#c9ced6"),
    };
  }

  // `layout` drawn in the theme: the card's colour behind the chart and its plot area,
  // the theme's text colour (titles, ticks, legend, annotations inherit it), grid and
  // zero lines that read on that ground. What the layout sets itself is kept (a font
  // size, an axis title), except these colours.
  function themed(layout) {
    const theme = colours();
    const axis = (settings) => ({
      ...(settings || {}), gridcolor: theme.grid, zerolinecolor: theme.line, linecolor: theme.line,
    });
    const out = {
      ...layout,
      paper_bgcolor: theme.card,
      plot_bgcolor: theme.card,
      font: { ...(layout.font || {}), color: theme.fg },
    };
    for (const name of Object.keys(out)) {
      if (/^[xy]axis\d*$/.test(name)) out[name] = axis(out[name]);
    }
    if (!out.xaxis) out.xaxis = axis();
    if (!out.yaxis) out.yaxis = axis();
    return out;
  }

  // Call redraw() when the page's colour scheme changes (light <-> dark).
  function onChange(redraw) {
    const query = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
    if (query && query.addEventListener) query.addEventListener("change", () => redraw());
  }

  window.MRLPlotTheme = Object.freeze({ colours, themed, onChange });
})();
