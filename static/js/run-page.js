// The run page: live Plotly charts (one per metric key, one trace per policy), the run's
// state, and the peer-transfer log. Polls the read API; no page reload.
//
// Every string from the server goes into the page through textContent (never innerHTML).
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("run-page-config").textContent);
  const MAX_POINTS = 2000; // per trace; the series API downsamples above this
  const TERMINAL = new Set(["completed", "failed", "cancelled"]);
  // Okabe-Ito: colour-blind safe, one colour per policy in pool order.
  const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999"];
  const NON_FINITE = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };

  const policyColour = new Map(config.policies.map((name, i) => [name, PALETTE[i % PALETTE.length]]));
  const keyToGroup = new Map();
  for (const group of config.groups) for (const key of group.keys) keyToGroup.set(key, group);

  // charts: key -> {div, traces: Map(policy -> {x, y, lastStep, downsampled})}
  const charts = new Map();
  const nonFinite = new Map(); // "policy key" -> first step with a non-finite value
  let state = null;

  function el(tag, attrs = {}, text = "") {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    if (text) node.textContent = text;
    return node;
  }

  async function getJSON(url, params) {
    const query = params ? "?" + params.toString() : "";
    const response = await fetch(url + query, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    return response.json();
  }

  function toNumber(value) {
    return typeof value === "string" ? NON_FINITE[value] : value;
  }

  // --- charts ------------------------------------------------------------------------
  function groupSection(group) {
    const id = "group-" + group.slug;
    let section = document.getElementById(id);
    if (!section) {
      section = el("div", { id, class: "chart-group" });
      section.append(el("h3", {}, group.title), el("div", { class: "chart-grid" }));
      // Keep the groups in their declared order.
      const order = config.groups.map((g) => g.slug).concat(["other"]);
      const container = document.getElementById("charts");
      const after = Array.from(container.children).find(
        (child) => order.indexOf(child.id.slice(6)) > order.indexOf(group.slug)
      );
      container.insertBefore(section, after || null);
    }
    return section.querySelector(".chart-grid");
  }

  function chartFor(key) {
    let chart = charts.get(key);
    if (!chart) {
      const group = keyToGroup.get(key) || { slug: "other", title: "Other", keys: [] };
      const div = el("div", { class: "chart", "data-testid": "chart-" + key, "data-key": key, "data-points": "0" });
      const grid = groupSection(group);
      const position = group.keys.indexOf(key);
      const after = Array.from(grid.children).find((child) => group.keys.indexOf(child.dataset.key) > position);
      grid.insertBefore(div, after || null);
      chart = { div, traces: new Map() };
      charts.set(key, chart);
      document.getElementById("charts-empty").hidden = true;
    }
    return chart;
  }

  function render(key) {
    const chart = charts.get(key);
    const traces = [];
    let points = 0;
    for (const policy of config.policies) {
      const trace = chart.traces.get(policy);
      if (!trace) continue;
      points += trace.x.length;
      traces.push({
        x: trace.x, y: trace.y, name: policy, mode: "lines", type: "scatter", // SVG: one WebGL context per chart runs out past ~16 charts
        line: { color: policyColour.get(policy) || "#444", width: 1.6 },
      });
    }
    chart.div.dataset.points = String(points);
    const layout = {
      title: { text: key, font: { size: 13 } }, margin: { l: 48, r: 12, t: 32, b: 56 }, height: 280,
      xaxis: { title: { text: "step", standoff: 4 } }, legend: { orientation: "h", y: -0.32 }, uirevision: key,
    };
    window.Plotly.react(chart.div, traces, layout, { displaylogo: false, responsive: true });
  }

  function noteNonFinite(policy, key, points) {
    for (const [step, value] of points) {
      if (typeof value === "string" && !nonFinite.has(policy + " " + key)) nonFinite.set(policy + " " + key, [step, value]);
    }
    const box = document.getElementById("nonfinite-warning");
    if (nonFinite.size) {
      box.hidden = false;
      box.textContent = "Non-finite values: " + Array.from(nonFinite, ([name, [step, value]]) => `${name} = ${value} at step ${step}`).join("; ");
    }
  }

  function apply(series, replace) {
    const touched = new Set();
    for (const item of series) {
      const chart = chartFor(item.key);
      let trace = chart.traces.get(item.policy);
      if (!trace || replace) {
        trace = { x: [], y: [], lastStep: -1, downsampled: false };
        chart.traces.set(item.policy, trace);
      }
      trace.downsampled = trace.downsampled || Boolean(item.downsampled);
      for (const [step, value] of item.points) {
        if (step <= trace.lastStep) continue;
        trace.x.push(step);
        trace.y.push(toNumber(value));
        trace.lastStep = step;
      }
      noteNonFinite(item.policy, item.key, item.points);
      touched.add(item.key);
    }
    touched.forEach(render);
  }

  async function refreshCurves() {
    const listing = await getJSON(config.urls.keys);
    const full = [];
    const incremental = new Map(); // after_step -> [series]
    for (const s of listing.keys) {
      const trace = charts.get(s.key)?.traces.get(s.policy);
      if (trace && trace.lastStep >= s.last_step) continue;
      if (!trace || trace.downsampled || s.n_points > MAX_POINTS) full.push(s);
      else {
        if (!incremental.has(trace.lastStep)) incremental.set(trace.lastStep, []);
        incremental.get(trace.lastStep).push(s);
      }
    }
    const batches = [];
    const wanted = (list) => {
      const params = new URLSearchParams();
      for (const key of new Set(list.map((s) => s.key))) params.append("key", key);
      for (const policy of new Set(list.map((s) => s.policy))) params.append("policy", policy);
      params.set("max_points", String(MAX_POINTS));
      return params;
    };
    // One request per metric: each chart fills as soon as its own points arrive, and no
    // single request carries a whole run (100 series x 1,000 steps is 100k points).
    const fullByKey = new Map();
    for (const s of full) {
      if (!fullByKey.has(s.key)) fullByKey.set(s.key, []);
      fullByKey.get(s.key).push(s);
    }
    for (const list of fullByKey.values()) batches.push(getJSON(config.urls.series, wanted(list)).then((r) => apply(r.series, true)));
    for (const [afterStep, list] of incremental) {
      const params = wanted(list);
      params.set("after_step", String(afterStep));
      batches.push(getJSON(config.urls.series, params).then((r) => apply(r.series, false)));
    }
    await Promise.all(batches);
  }

  // --- status ------------------------------------------------------------------------
  async function refreshStatus() {
    const status = await getJSON(config.urls.status);
    state = status.state;
    const badge = document.querySelector("#run-state .state");
    badge.textContent = status.state;
    badge.className = "state state-" + status.state;
    for (const node of document.querySelectorAll("#run-facts [data-field]")) {
      let value = status[node.dataset.field];
      if (value && node.dataset.field.endsWith("_at")) value = value.replace("T", " ").slice(0, 19);
      node.textContent = value === null || value === undefined || value === "" ? "–" : String(value);
    }
  }

  // --- transfers ---------------------------------------------------------------------
  const transferQuery = { offset: 0, limit: 50 };

  function transferParams() {
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(document.getElementById("transfer-filter"))) if (value) params.set(name, value);
    return params;
  }

  async function refreshTransferLog() {
    const params = transferParams();
    params.set("limit", String(transferQuery.limit));
    params.set("offset", String(transferQuery.offset));
    const page = await getJSON(config.urls.events, params);
    const body = document.getElementById("transfer-rows");
    body.replaceChildren(
      ...page.events.map((event) => {
        const row = el("tr");
        for (const field of ["step", "source", "target", "kind", "prompt_id", "count", "weight"]) {
          const value = event[field];
          row.append(el("td", {}, value === null || value === undefined ? "–" : String(value)));
        }
        return row;
      })
    );
    const last = Math.min(transferQuery.offset + transferQuery.limit, page.total);
    document.getElementById("transfer-page").textContent = page.total ? `${transferQuery.offset + 1}–${last} of ${page.total}` : "none";
  }

  async function refreshTransferSummary() {
    const summary = await getJSON(config.urls.eventsSummary, transferParams());
    const policies = summary.policies;
    const box = document.getElementById("transfer-matrix");
    if (!policies.length) return;
    const max = Math.max(1, ...summary.matrix.flat());
    const table = el("table", { class: "matrix" });
    const head = el("tr");
    head.append(el("th", {}, "source \\ target"), ...policies.map((p) => el("th", {}, p)));
    table.append(head);
    summary.matrix.forEach((row, i) => {
      const tr = el("tr");
      tr.append(el("th", {}, policies[i]));
      row.forEach((count) => {
        const td = el("td", {}, String(count));
        td.style.background = `rgba(0, 114, 178, ${(0.08 + 0.6 * count / max).toFixed(3)})`;
        tr.append(td);
      });
      table.append(tr);
    });
    box.replaceChildren(table);
    const kinds = Array.from(new Set(summary.over_time.map((row) => row.kind)));
    const traces = kinds.map((kind) => {
      const rows = summary.over_time.filter((row) => row.kind === kind);
      return { type: "bar", name: kind, x: rows.map((r) => r.step), y: rows.map((r) => r.count) };
    });
    window.Plotly.react("transfer-over-time", traces,
      { barmode: "stack", height: 240, margin: { l: 40, r: 10, t: 10, b: 30 }, xaxis: { title: { text: "step" } } },
      { displaylogo: false, responsive: true });
  }

  document.getElementById("transfer-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    transferQuery.offset = 0;
    refreshTransfers();
  });
  document.getElementById("transfer-prev").addEventListener("click", () => {
    transferQuery.offset = Math.max(0, transferQuery.offset - transferQuery.limit);
    refreshTransferLog();
  });
  document.getElementById("transfer-next").addEventListener("click", () => {
    transferQuery.offset += transferQuery.limit;
    refreshTransferLog();
  });

  function refreshTransfers() {
    return Promise.all([refreshTransferLog(), refreshTransferSummary()]);
  }

  // --- job output ------------------------------------------------------------------
  async function refreshLog() {
    const answer = await getJSON(config.urls.log);
    const box = document.getElementById("job-log");
    if (!answer.log) return;
    const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    box.textContent = answer.log;
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  // --- the loop ----------------------------------------------------------------------
  let tick = 0;
  async function poll() {
    const indicator = document.getElementById("live-indicator");
    try {
      await refreshStatus();
      await refreshCurves();
      if (tick % 3 === 0) await Promise.all([refreshTransfers(), refreshLog()]);
      indicator.textContent = TERMINAL.has(state) ? "finished" : "live";
      indicator.classList.remove("bad");
    } catch (error) {
      indicator.textContent = "reconnecting…";
      indicator.classList.add("bad");
    }
    tick += 1;
    // A finished run changes rarely (a resubmission): poll it slowly.
    setTimeout(poll, TERMINAL.has(state) ? 5 * config.pollMs : config.pollMs);
  }
  poll();
})();
