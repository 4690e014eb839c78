// The run page: live Plotly charts (one per metric key, one trace per policy), the run's
// state and timeline, the job's output and the peer-transfer log. Polls the read API; no
// page reload.
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

  // charts: key -> {div, traces: Map(policy -> {x, y, lastStep, downsampled}), revision,
  // drawn, visible}. `revision` counts the changes to the chart's points (it is the
  // layout's datarevision), `drawn` is the revision on screen, `visible` whether the chart
  // is in or near the viewport (null until the observer has said).
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

  // A run has dozens of charts and every poll brings points to all of them: only those on
  // or near the screen are redrawn, and one scrolled into view catches up at once.
  const onScreen = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const chart = charts.get(entry.target.dataset.key);
      if (!chart) continue;
      chart.visible = entry.isIntersecting;
      if (chart.visible && chart.drawn !== chart.revision) render(entry.target.dataset.key);
    }
  }, { rootMargin: "400px 0px" });

  function chartFor(key) {
    let chart = charts.get(key);
    if (!chart) {
      const group = keyToGroup.get(key) || { slug: "other", title: "Other", keys: [] };
      const div = el("div", { class: "chart", "data-testid": "chart-" + key, "data-key": key, "data-points": "0" });
      const grid = groupSection(group);
      const position = group.keys.indexOf(key);
      const after = Array.from(grid.children).find((child) => group.keys.indexOf(child.dataset.key) > position);
      grid.insertBefore(div, after || null);
      chart = { div, traces: new Map(), revision: 0, drawn: -1, visible: null };
      charts.set(key, chart);
      onScreen.observe(div);
      document.getElementById("charts-empty").hidden = true;
    }
    return chart;
  }

  function render(key) {
    const chart = charts.get(key);
    const traces = [];
    for (const policy of config.policies) {
      const trace = chart.traces.get(policy);
      if (!trace) continue;
      traces.push({
        x: trace.x, y: trace.y, name: policy, mode: "lines", type: "scatter", // SVG: one WebGL context per chart runs out past ~16 charts
        line: { color: policyColour.get(policy) || "#444", width: 1.6 },
      });
    }
    // The trace arrays grow in place, and Plotly.react redraws only for new arrays or a new
    // datarevision: the revision makes every change of points a redraw. uirevision keeps
    // what the user did (a zoom, hidden traces) across redraws; an axis nobody zoomed has
    // no range here, so it autoranges over the new points.
    const layout = {
      title: { text: key, font: { size: 13 } }, margin: { l: 48, r: 12, t: 32, b: 56 }, height: 280,
      xaxis: { title: { text: "step", standoff: 4 } }, legend: { orientation: "h", y: -0.32 },
      uirevision: key, datarevision: chart.revision,
    };
    window.Plotly.react(chart.div, traces, layout, { displaylogo: false, responsive: true });
    chart.drawn = chart.revision;
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

  // `series` from the series API; `replace`: they are whole series (else the points after
  // each trace's last step); `only`: the "key policy" names asked for (a request names
  // keys and policies, so its answer can hold other pairs: a series that is new since the
  // keys listing, whose points after another trace's step must not start its trace).
  function apply(series, replace, only) {
    const changed = new Set();
    for (const item of series) {
      if (only && !only.has(item.key + " " + item.policy)) continue;
      const chart = chartFor(item.key);
      let trace = chart.traces.get(item.policy);
      if (!trace || replace) {
        trace = { x: [], y: [], lastStep: -1, downsampled: false };
        chart.traces.set(item.policy, trace);
        changed.add(item.key);
      }
      trace.downsampled = trace.downsampled || Boolean(item.downsampled);
      for (const [step, value] of item.points) {
        if (step <= trace.lastStep) continue;
        trace.x.push(step);
        trace.y.push(toNumber(value));
        trace.lastStep = step;
        changed.add(item.key);
      }
      noteNonFinite(item.policy, item.key, item.points);
    }
    for (const key of changed) {
      const chart = charts.get(key);
      chart.revision += 1;
      let points = 0;
      for (const policy of config.policies) points += chart.traces.get(policy)?.x.length || 0;
      chart.div.dataset.points = String(points);
      if (chart.visible !== false) render(key);
    }
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
      const only = new Set(list.map((s) => s.key + " " + s.policy));
      batches.push(getJSON(config.urls.series, params).then((r) => apply(r.series, false, only)));
    }
    await Promise.all(batches);
  }

  // --- status ------------------------------------------------------------------------
  // The timeline (and the actions, which follow the state: cancel while the run lives,
  // resubmit after) are the server's rendering of this page: they are fetched again when
  // the run's state, or the time it last entered a state, changes (a row per change).
  const initialState = document.querySelector("#run-state .state").textContent.trim();
  let lifecycle = null; // the last status's state and state timestamps
  let timelineStale = false;

  async function refreshStatus() {
    const status = await getJSON(config.urls.status);
    state = status.state;
    const now = ["state", "queued_at", "submitted_at", "started_at", "finished_at"].map((name) => status[name]).join("|");
    if (lifecycle === null ? status.state !== initialState : now !== lifecycle) timelineStale = true;
    lifecycle = now;
    const badge = document.querySelector("#run-state .state");
    badge.textContent = status.state;
    badge.className = "state state-" + status.state;
    for (const node of document.querySelectorAll("#run-facts [data-field]")) {
      let value = status[node.dataset.field];
      if (value && node.dataset.field.endsWith("_at")) value = value.replace("T", " ").slice(0, 19);
      node.textContent = value === null || value === undefined || value === "" ? "–" : String(value);
    }
  }

  function timelineRow(row) {
    // Rebuilt from the cells' text: nothing of the fetched page is parsed into this one.
    const cells = Array.from(row.cells, (cell) => cell.textContent.trim());
    const tr = el("tr");
    if (cells.length < 3) {
      tr.append(el("td", { colspan: "3", class: "empty" }, cells.join(" ")));
      return tr;
    }
    const badge = el("span", { class: "state state-" + cells[1], "data-testid": "run-state" }, cells[1]);
    const stateCell = el("td");
    stateCell.append(badge);
    tr.append(el("td", {}, cells[0]), stateCell, el("td", {}, cells[2]));
    return tr;
  }

  function actionsFrom(fetched) {
    // The buttons are forms (POST, with the CSRF token): rebuilt element by element.
    const box = el("div", { class: "actions", id: "run-actions" });
    for (const form of fetched.querySelectorAll(":scope > form")) {
      const copy = el("form", { method: "post", action: form.getAttribute("action"), class: form.getAttribute("class") || "" });
      for (const input of form.querySelectorAll("input[type=hidden]")) {
        copy.append(el("input", { type: "hidden", name: input.getAttribute("name"), value: input.getAttribute("value") || "" }));
      }
      const button = form.querySelector("button");
      if (button) {
        const attrs = { type: "submit" };
        for (const name of ["class", "data-testid"]) if (button.hasAttribute(name)) attrs[name] = button.getAttribute(name);
        copy.append(el("button", attrs, button.textContent.trim()));
      }
      box.append(copy);
    }
    return box;
  }

  async function refreshTimeline() {
    if (!timelineStale) return;
    const response = await fetch(window.location.pathname, { credentials: "same-origin", headers: { Accept: "text/html" } });
    if (!response.ok) throw new Error(`timeline: HTTP ${response.status}`);
    const fetched = new DOMParser().parseFromString(await response.text(), "text/html");
    const rows = fetched.querySelectorAll("#timeline-rows > tr");
    if (!rows.length) return; // not the run page (a login page): try again next time
    document.getElementById("timeline-rows").replaceChildren(...Array.from(rows, timelineRow));
    const actions = fetched.getElementById("run-actions");
    const current = document.getElementById("run-actions");
    if (actions && current) current.replaceWith(actionsFrom(actions));
    timelineStale = false;
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
      await Promise.all([refreshCurves(), refreshTimeline(), refreshLog()]);
      if (tick % 3 === 0) await refreshTransfers();
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
