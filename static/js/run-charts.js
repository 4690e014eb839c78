// The run page's curves: one Plotly chart per metric key, one trace per policy, grouped
// as the metric catalogue says; fed incrementally from the series API by
// MRLRun.charts.refresh() (called by run-page.js's poll loop).
"use strict";

(function () {
  const { config, el, getJSON, policyColour } = window.MRLRun;
  const MAX_POINTS = 2000; // per trace; the series API downsamples above this
  const NON_FINITE = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };

  const keyToGroup = new Map();
  for (const group of config.groups) for (const key of group.keys) keyToGroup.set(key, group);

  // charts: key -> {div, traces: Map(policy -> {x, y, lastStep, downsampled}), revision,
  // drawn, visible}. `revision` counts the changes to the chart's points (it is the
  // layout's datarevision), `drawn` is the revision on screen, `visible` whether the chart
  // is in or near the viewport (null until the observer has said).
  const charts = new Map();
  const nonFinite = new Map(); // "policy key" -> first step with a non-finite value

  function toNumber(value) {
    return typeof value === "string" ? NON_FINITE[value] : value;
  }

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

  window.MRLRun.charts = { refresh: refreshCurves };
})();
