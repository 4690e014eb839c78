// Strings from the server (group labels, policy names, metric names...) as Plotly text.
// Plotly reads a few HTML tags in titles, trace names, tick and hover labels (<a href>
// makes a live link, <span style> restyles), and in a hovertemplate it also substitutes
// %{...}: so every server string goes through plain(), and none is concatenated into a
// hovertemplate (put it into the trace's meta, plotMeta(), and write %{meta[0]}).
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
