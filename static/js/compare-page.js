// The compare page: mean curves with bands per group, one panel per (policy, metric),
// and the summary table. Data, smoothing and grouping come from the server
// (/api/v1/compare), the same code that renders the exports, so screen and paper agree.
// The "View" choice swaps the curves for a bar view (compare-bars.js, from
// /api/v1/compare/bars): per-task evaluation or the relative improvement over a baseline;
// or for the significance view (compare-significance.js, the same endpoint with
// view=significance): paired t intervals by seed (Welch when unpaired), Holm's p.
//
// Every string from the server goes into the page through textContent (never innerHTML),
// and into Plotly through plot-text.js (escaped; a legend entry ellipsized, the whole
// label in the hover through the trace's meta, never inside a hovertemplate). A group
// is shown by its name ("sgt.lambda_sgt = 0.05": the grouping key and the value; the
// regime or experiment alone), its label stays the data's key. Charts are drawn in the
// page's theme (plot-text.js's MRLPlotTheme) and redrawn when the scheme changes.
"use strict";

(function () {
  const { plain, legend, plotMeta } = window.MRLPlotText;
  const { themed } = window.MRLPlotTheme;
  const { toNumber: num } = window.MRLNonFinite; // "NaN", "Infinity", "-Infinity" as numbers
  const config = JSON.parse(document.getElementById("compare-page-config").textContent);
  const controls = document.getElementById("compare-controls");

  function el(tag, attrs = {}, text = "") {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    if (text) node.textContent = text;
    return node;
  }

  // A header cell for a label of any length: drawn in at most a few lines (app.css
  // .cell-label), then `after` (a statistic's name) in full; the whole text in its title.
  function labelCell(text, after = "") {
    const cell = el("th", { title: after ? `${text}: ${after}` : text });
    cell.append(el("span", { class: "cell-label" }, after ? `${text}:` : text));
    if (after) cell.append(after);
    return cell;
  }

  function viewParams() {
    // The view settings of the form, and the selection as the resolved run ids.
    const params = new URLSearchParams();
    params.set("runs", config.runs.join(","));
    for (const [name, value] of new FormData(controls)) {
      if (["sweep", "runs", "run"].includes(name) || name.startsWith("q_")) continue;
      if (value !== "") params.append(name, value);
    }
    return params;
  }

  function pageParams() {
    // What the address bar (and a saved comparison) keeps: the selection as chosen.
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(controls)) if (value !== "") params.append(name, value);
    return params;
  }

  function rgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  async function getJSON(url, params) {
    const response = await fetch(`${url}?${params}`, { credentials: "same-origin" });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
    return body;
  }

  // label -> what people read ("sgt.lambda_sgt = 0.05"), from the reply's groups.
  const groupNames = (groups) => new Map((groups || []).map((group) => [group.label, group.name || group.label]));

  function renderPanels(data, logY) {
    const box = document.getElementById("compare-panels");
    const names = groupNames(data.groups);
    const name = (group) => names.get(group) || group;
    box.replaceChildren();
    if (!data.panels.length) {
      box.append(el("p", { class: "empty" }, "Nothing to plot for these runs and metrics yet."));
      return;
    }
    for (const panel of data.panels) {
      const div = el("div", {
        class: "chart", "data-testid": "compare-panel", "data-policy": panel.policy, "data-metric": panel.metric,
      });
      box.append(div);
      const traces = [];
      for (const trace of panel.traces) {
        const x = trace.x.map(num);
        const upper = trace.upper.map(num);
        const lower = trace.lower.map(num);
        traces.push({
          x: x.concat([...x].reverse()), y: upper.concat([...lower].reverse()), fill: "toself",
          fillcolor: rgba(trace.colour, 0.18), line: { width: 0 }, hoverinfo: "skip",
          showlegend: false, legendgroup: trace.group, type: "scatter", mode: "lines",
        });
        traces.push({
          x, y: trace.mean.map(num), name: legend(name(trace.group)), legendgroup: trace.group, type: "scatter",
          mode: "lines", line: { color: trace.colour, width: 2, dash: trace.dash || "solid" },
          meta: plotMeta(name(trace.group)), hoverlabel: { namelength: -1 },
          customdata: trace.n, hovertemplate: "%{y:.4g} (n=%{customdata})<extra>%{meta[0]}</extra>",
        });
      }
      window.Plotly.react(div, traces, themed({
        title: { text: plain(panel.title || `${panel.policy} · ${panel.metric}`), font: { size: 13 } }, height: 300,
        margin: { l: 50, r: 10, t: 34, b: 58 }, legend: { orientation: "h", y: -0.3 },
        xaxis: { title: { text: plain(panel.x_label || data.x_label || "step"), standoff: 4 } },
        yaxis: { type: logY ? "log" : "linear", title: { text: plain(panel.y_label || "") } },
      }), { displaylogo: false, responsive: true });
    }
  }

  function cell(stat) {
    if (!stat || stat.n === 0) return "–";
    const mean = num(stat.mean);
    const std = num(stat.std);
    return `${mean.toFixed(3)} ± ${Number.isFinite(std) ? std.toFixed(3) : "–"} (n=${stat.n})`;
  }

  function renderSummary(summary) {
    document.getElementById("summary-metric").textContent = summary.metric_label || summary.metric;
    const table = el("table", { class: "list summary" });
    const head = el("tr");
    head.append(el("th", {}, "policy"));
    const names = summary.group_names || {};
    for (const group of summary.groups) {
      for (const stat of ["final", "best", "mean"]) head.append(labelCell(names[group] || group, stat));
    }
    table.append(head);
    for (const row of summary.rows) {
      const tr = el("tr");
      tr.append(labelCell(row.policy_label || row.policy));
      for (const c of row.cells) {
        for (const stat of ["final", "best", "mean"]) {
          const best = summary.best && summary.best[stat] && summary.best[stat][row.policy] === c.group;
          const td = el("td", best ? { class: "best" } : {}, cell(c[stat]));
          tr.append(td);
        }
      }
      table.append(tr);
    }
    document.getElementById("summary").replaceChildren(table);
  }

  function setExportLinks(spec, summaryMetric) {
    for (const link of document.querySelectorAll("#figure-exports a[data-export]")) {
      const params = new URLSearchParams(spec);
      if (link.dataset.columns) params.set("columns", link.dataset.columns);
      link.href = config.urls.export.replace("FMT", link.dataset.export) + "?" + params;
    }
    for (const link of document.querySelectorAll("a[data-table]")) {
      const params = new URLSearchParams(spec);
      params.set("table_metric", summaryMetric);
      link.href = config.urls.table.replace("FMT", link.dataset.table) + "?" + params;
    }
  }

  function setBarExportLinks(spec) {
    for (const link of document.querySelectorAll("#bar-exports a[data-bar-export]")) {
      const params = new URLSearchParams(spec);
      if (link.dataset.columns) params.set("columns", link.dataset.columns);
      link.href = config.urls.bars_file.replace("FMT", link.dataset.barExport) + "?" + params;
    }
  }

  function currentView() {
    const select = controls.elements.namedItem("view");
    return select && select.value ? select.value : "curves";
  }

  function setSigExportLinks(spec) {
    for (const link of document.querySelectorAll("#sig-exports a[data-sig-export]")) {
      const params = new URLSearchParams(spec);
      if (link.dataset.columns) params.set("columns", link.dataset.columns);
      link.href = config.urls.bars_file.replace("FMT", link.dataset.sigExport) + "?" + params;
    }
  }

  // The significance view's parts of the page (compare-significance.js draws them).
  const sigParts = {
    title: document.getElementById("sig-title"),
    empty: document.getElementById("sig-empty"),
    sentences: document.getElementById("sig-sentences"),
    forest: document.getElementById("sig-forest"),
    table: document.getElementById("sig-table"),
    method: document.getElementById("sig-method"),
  };

  function showView(view) {
    document.getElementById("curves-card").hidden = view !== "curves";
    document.getElementById("bars-card").hidden = !["tasks", "relative"].includes(view);
    document.getElementById("sig-card").hidden = view !== "significance";
    // data-for-view: the views (space-separated) a control belongs to.
    for (const node of document.querySelectorAll("[data-for-view]")) {
      node.hidden = !node.dataset.forView.split(" ").includes(view);
    }
  }

  function setBaselineOptions(data) {
    const options = document.getElementById("baseline-options");
    options.replaceChildren(...data.groups.map((group) => el("option", { value: group.label }, group.name || "")));
    const baseline = controls.elements.namedItem("baseline");
    if (baseline && data.baseline) baseline.placeholder = data.baseline;
  }

  function renderBars(data) {
    document.getElementById("bars-title").textContent = data.title;
    const empty = document.getElementById("bars-empty");
    empty.textContent = data.empty || "";
    empty.hidden = !data.empty;
    window.CompareBars.render(document.getElementById("bar-panels"), data);
    window.CompareBars.caption(document.getElementById("bars-interval-note"), data);
    setBaselineOptions(data);
  }

  async function refresh() {
    const params = viewParams();
    const view = currentView();
    // No key chosen (no series yet): the server's default table metric, which the page
    // carries (compare/views_pages.py's summary_metric).
    const summarySelect = document.getElementById("summary-metric-select");
    const summaryMetric = summarySelect.value || summarySelect.dataset.default;
    const notes = document.getElementById("compare-notes");
    history.replaceState(null, "", "?" + pageParams());
    document.getElementById("save-query").value = pageParams().toString();
    showView(view);
    try {
      let data;
      if (view === "curves") {
        data = await getJSON(config.urls.data, params);
        renderPanels(data, params.get("log_y") === "1");
      } else if (view === "significance") {
        data = await getJSON(config.urls.bars, params);
        window.CompareSignificance.render(sigParts, data);
        setBaselineOptions(data);
        setSigExportLinks(data.spec);
      } else {
        data = await getJSON(config.urls.bars, params);
        renderBars(data);
        setBarExportLinks(data.spec);
      }
      // A view's "nothing to draw" reason is shown in its card, not again here.
      notes.textContent = (data.notes || []).filter((note) => note !== data.empty).join(" ");
      notes.classList.remove("error");
      const summaryParams = new URLSearchParams(data.spec);
      summaryParams.set("table_metric", summaryMetric);
      renderSummary(await getJSON(config.urls.summary, summaryParams));
      setExportLinks(data.spec, summaryMetric);
    } catch (error) {
      const message = String(error.message || error);
      notes.textContent = message;
      notes.classList.add("error");
      if (view === "significance") window.CompareSignificance.clear(sigParts);
      else if (view !== "curves") document.getElementById("bar-panels").replaceChildren();
      else if (!document.querySelector("#compare-panels .js-plotly-plot")) {
        // Nothing drawn yet: the reason where the curves would be, not "Loading…" forever.
        document.getElementById("compare-panels").replaceChildren(
          el("p", { class: "error", "data-testid": "compare-panels-error" }, `The curves could not be loaded: ${message}`),
        );
      }
    }
  }

  // The export links download through fetch: a file comes as a download, as a plain
  // link would, but an export the server refuses (400: over a cap of
  // webapp/compare/export_limits.py, naming it and what to narrow; 503: its figure
  // stopped by a time or memory limit) shows its message beside the links instead of a
  // page of raw JSON. A click with a modifier (new tab, save as) is left to the browser.
  const EXPORT_LINKS = "a[data-export], a[data-bar-export], a[data-sig-export], a[data-table]";

  function exportNote(link) {
    const actions = link.closest(".actions") || link.parentElement;
    let note = actions.nextElementSibling;
    if (!note || !note.classList.contains("export-note")) {
      note = el("p", { class: "export-note", role: "status", "data-testid": "export-note" });
      actions.after(note);
    }
    return note;
  }

  function attachmentName(disposition) {
    const found = /filename="([^"]+)"/.exec(disposition || "");
    return found ? found[1] : "export";
  }

  async function download(link) {
    const note = exportNote(link);
    note.className = "export-note muted";
    note.textContent = `Preparing ${link.textContent.trim()}…`;
    try {
      const response = await fetch(link.href, { credentials: "same-origin" });
      if (response.redirected) {
        window.location.assign(link.href); // e.g. to the login page: let the browser go
        return;
      }
      if (!response.ok) {
        let message = `the export failed (HTTP ${response.status})`;
        try {
          const reply = await response.json();
          if (reply && typeof reply.error === "string") message = reply.error;
        } catch (_) { /* not JSON: keep the status */ }
        note.className = "export-note error";
        note.textContent = message;
        return;
      }
      const url = URL.createObjectURL(await response.blob());
      const save = el("a", { href: url, download: attachmentName(response.headers.get("Content-Disposition")) });
      document.body.append(save);
      save.click();
      save.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      note.textContent = "";
    } catch (error) {
      note.className = "export-note error";
      note.textContent = `The export failed: ${error.message}`;
    }
  }

  document.addEventListener("click", (event) => {
    const link = event.target.closest(EXPORT_LINKS);
    if (!link || !link.href || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    download(link);
  });

  controls.addEventListener("submit", (event) => {
    event.preventDefault();
    refresh();
  });
  for (const input of controls.querySelectorAll("select, input[type=checkbox], input[type=number]")) {
    input.addEventListener("change", refresh);
  }
  document.getElementById("summary-metric-select").addEventListener("change", refresh);
  window.MRLPlotTheme.onChange(refresh); // redrawn in the other theme's colours
  refresh();
})();
