// The compare page's significance view, from /api/v1/compare/bars?view=significance
// (webapp/compare/serialize.py::significance_json, the numbers the CSV and LaTeX exports
// write): one plain sentence per comparison, a forest plot of the intervals (one row per
// comparison, the estimate and its 95% interval in the group's colour, a dashed zero
// line), and the table (test, n, difference, interval, p, Holm's p, the note). A
// comparison with one seed links its "launch a sweep" to the sweep form of its
// experiment; the primary endpoint (kept out of Holm's family) reads "primary" where the
// others have their Holm p.
//
// Every string from the server goes into the page through textContent, and into Plotly
// through plot-text.js (escaped; legends ellipsized, the whole label in the hover through
// the trace's meta); never innerHTML.
"use strict";

(function () {
  const { toNumber: num } = window.MRLNonFinite; // "NaN", "Infinity", "-Infinity" as numbers
  const { plain, legend, plotMeta } = window.MRLPlotText;
  const ROW_PX = 30;

  function el(tag, attrs = {}, text = "") {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    if (text) node.textContent = text;
    return node;
  }

  function nowrap(node, on) {
    if (on) node.style.whiteSpace = "nowrap";
    return node;
  }

  function fixed(value, decimals) {
    const n = num(value);
    return Number.isFinite(n) ? n.toFixed(decimals) : "–";
  }

  // "[0.11, 0.29]", or "–" without an interval (one pair, a group of one run).
  function intervalText(interval) {
    if (!interval || !Number.isFinite(num(interval.low))) return "–";
    return `[${fixed(interval.low, interval.decimals)}, ${fixed(interval.high, interval.decimals)}]`;
  }

  // The test a row ran: "none" where there was none to run (one seed or a group of one
  // run: no interval; every seed moving by the same amount: no spread), not its method.
  function testText(interval) {
    if (!Number.isFinite(num(interval.low))) return "none (one seed)";
    if (interval.no_spread) return "none (no spread)";
    return interval.method;
  }

  function countText(interval) {
    if (interval.method === "paired t") return `${interval.n} seed${interval.n === 1 ? "" : "s"}`;
    return `${interval.n} vs ${interval.n_other}`;
  }

  // A group as people read it: "sgt.lambda_sgt = 0.05" (the regime alone).
  function groupName(data, group) {
    const found = (data.groups || []).find((item) => item.label === group);
    return (found && found.name) || group;
  }

  // A row's label on the plot: group · policy (· metric when several are compared).
  function rowLabel(row, data) {
    const parts = [groupName(data, row.group), row.policy_label];
    if (data.metrics.length > 1) parts.push(row.metric_label);
    return parts.join(" · ");
  }

  const SWEEP_WORDS = "launch a sweep";

  // The sentence as text; with a sweep URL, its words "launch a sweep" are the link.
  function sentenceItem(row) {
    const item = el("li", { "data-testid": "sig-sentence" });
    const at = row.sweep_url ? row.sentence.indexOf(SWEEP_WORDS) : -1;
    if (at < 0) {
      item.textContent = row.sentence;
      return item;
    }
    const link = el("a", { href: row.sweep_url, "data-testid": "sig-sweep-link" }, SWEEP_WORDS);
    item.append(row.sentence.slice(0, at), link, row.sentence.slice(at + SWEEP_WORDS.length));
    return item;
  }

  function sentences(box, data) {
    const list = el("ul", { "data-testid": "sig-sentences" });
    for (const row of data.rows) list.append(sentenceItem(row));
    box.replaceChildren(list);
  }

  function forest(box, data) {
    const rows = data.rows.filter((row) => row.interval && Number.isFinite(num(row.interval.estimate)));
    if (!rows.length) {
      box.replaceChildren();
      box.hidden = true;
      return;
    }
    box.hidden = false;
    // Top to bottom in the table's order: Plotly's categories run bottom-up, so reversed.
    const labels = rows.map((row) => plain(rowLabel(row, data)));
    const byGroup = new Map();
    rows.forEach((row, k) => {
      if (!byGroup.has(row.group)) byGroup.set(row.group, { row, ks: [] });
      byGroup.get(row.group).ks.push(k);
    });
    const traces = [];
    for (const [group, { row, ks }] of byGroup) {
      const est = ks.map((k) => num(rows[k].interval.estimate));
      const high = ks.map((k) => num(rows[k].interval.high));
      const low = ks.map((k) => num(rows[k].interval.low));
      traces.push({
        type: "scatter", mode: "markers", x: est, y: ks.map((k) => labels[k]),
        name: legend(groupName(data, group)), legendgroup: group, meta: plotMeta(groupName(data, group)), hoverlabel: { namelength: -1 },
        marker: { color: row.colour, size: 9, symbol: ks.map((k) => (rows[k].interval.method === "paired t" ? "circle" : "square")) },
        error_x: {
          type: "data", symmetric: false, visible: true, color: row.colour, thickness: 2, width: 5,
          array: est.map((e, i) => (Number.isFinite(high[i] - e) ? high[i] - e : 0)),
          arrayminus: est.map((e, i) => (Number.isFinite(e - low[i]) ? e - low[i] : 0)),
        },
        customdata: ks.map((k) => [intervalText(rows[k].interval), rows[k].interval.method]),
        hovertemplate: "%{x:.4g} %{customdata[0]} (%{customdata[1]})<extra>%{meta[0]}</extra>",
      });
    }
    const metric = data.metrics.length === 1 && rows.length ? rows[0].metric_label : "value";
    window.Plotly.react(box, traces, window.MRLPlotTheme.themed({
      height: 110 + ROW_PX * rows.length,
      margin: { l: 10, r: 20, t: 30, b: 48 },
      showlegend: byGroup.size > 1,
      legend: { orientation: "h", x: 0, xanchor: "left", y: 1.0, yanchor: "bottom" },
      xaxis: { title: { text: plain(`${metric}: difference to ${data.baseline} (${data.where})`), standoff: 4 }, zeroline: false },
      yaxis: { type: "category", categoryorder: "array", categoryarray: [...labels].reverse(), automargin: true },
      shapes: [{
        type: "line", xref: "x", x0: 0, x1: 0, yref: "paper", y0: 0, y1: 1,
        line: { color: window.MRLPlotTheme.colours().fg, width: 1.2, dash: "dash" }, name: "zero", layer: "below",
      }],
    }), { displaylogo: false, responsive: true });
  }

  function table(box, data) {
    if (!data.rows.length) {
      box.replaceChildren();
      return;
    }
    const several = data.metrics.length > 1;
    const holmColumn = Boolean(data.correction) || data.rows.some((row) => row.primary);
    const heads = ["policy", ...(several ? ["metric"] : []), "group", "test", "n", "difference",
      "95% interval", "p", holmColumn ? "Holm p" : null, "note"].filter(Boolean);
    const tableNode = el("table", { class: "list", "data-testid": "sig-table-rows" });
    const head = el("tr");
    for (const name of heads) head.append(nowrap(el("th", {}, name), name !== "note"));
    tableNode.append(head);
    for (const row of data.rows) {
      const tr = el("tr", {
        "data-testid": "sig-row", "data-group": row.group, "data-policy": row.policy, "data-metric": row.metric,
        ...(row.primary ? { "data-primary": "1" } : {}),
      });
      const interval = row.interval;
      const cells = [row.policy_label, ...(several ? [row.metric_label] : []), groupName(data, row.group)];
      if (interval) {
        cells.push(testText(interval), countText(interval), fixed(interval.estimate, interval.decimals),
          intervalText(interval), interval.p_text || "–");
        if (holmColumn) cells.push(row.primary ? "primary" : interval.p_adjusted_text || "–");
      } else {
        cells.push("–", "–", "–", "–", "–");
        if (holmColumn) cells.push(row.primary ? "primary" : "–");
      }
      for (const text of cells) tr.append(nowrap(el("td", {}, text), true));
      tr.append(el("td", {}, row.note)); // the note wraps; the numbers do not
      tableNode.append(tr);
    }
    box.replaceChildren(tableNode);
  }

  function render(parts, data) {
    parts.title.textContent = data.title;
    parts.empty.textContent = data.empty || "";
    parts.empty.hidden = !data.empty;
    sentences(parts.sentences, data);
    forest(parts.forest, data);
    table(parts.table, data);
    parts.method.textContent = data.empty ? "" : data.method;
  }

  function clear(parts) {
    parts.sentences.replaceChildren();
    parts.forest.replaceChildren();
    parts.table.replaceChildren();
    parts.method.textContent = "";
  }

  window.CompareSignificance = { render, clear };
})();
