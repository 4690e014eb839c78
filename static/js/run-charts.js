// The run page's curves: one Plotly chart per metric key, one trace per policy, grouped
// as the metric catalogue says; fed incrementally from the series API by
// MRLRun.charts.refresh() (called by run-page.js's poll loop). The addition slices' error
// classes (val/error/...) are no charts: run-error-classes.js tables them.
//
// What the reader controls (templates/dashboard/_run_curves.html): a search that hides
// the charts whose key and name do not match, groups that collapse, the smoothing (the
// compare page's debiased EMA, window.MRLSmoothing; the raw curve stays faint behind),
// and a CSV download per chart and of the whole run. The hover shows every policy's value
// at the step under the pointer, to 4 significant digits; a constant series gets a y range
// around its value (Plotly's autorange pads a flat line by about 1 each way: 0.001 read as 0).
"use strict";

(function () {
  const { config, el, getJSON, policyColour } = window.MRLRun;
  const { ema } = window.MRLSmoothing;
  // "NaN", "Infinity", "-Infinity" from the series API as numbers (non-finite.js).
  const { toNumber } = window.MRLNonFinite;
  // Plotly reads a few HTML tags (and %{...} in hovers): server strings go in through these.
  const { plain, legend, plotMeta } = window.MRLPlotText;
  const MAX_POINTS = 2000; // per trace; the series API downsamples above this
  const POOL = "_pool";
  const STORE = { smoothing: "mrl.run.smoothing", collapsed: "mrl.run.collapsedGroups" };
  // A chart whose values spread over less than this fraction of their size is drawn as
  // constant (float noise in a schedule's value is ~1e-16 of it).
  const CONSTANT_SPREAD = 1e-9;
  // A chart spanning at most this many steps gets one x tick per step.
  const FEW_STEPS = 10;

  const keyToGroup = new Map();
  for (const group of config.groups) for (const key of group.keys) keyToGroup.set(key, group);
  const groupBySlug = new Map(config.groups.map((group) => [group.slug, group]));
  // Keys with a variable part (val/reward@1/<skill>): the catalogue's patterns, as
  // {pattern, label ("Validation reward@1 · {skill}"), unit, group}.
  const families = (config.metricFamilies || []).map((family) => ({ ...family, regex: new RegExp(family.pattern) }));
  function familyMetric(key) {
    for (const family of families) {
      const found = family.regex.exec(key);
      if (found) {
        const label = family.label.replace(/\{(\w+)\}/g, (_, name) => (found.groups && found.groups[name]) || "");
        return { label, unit: family.unit, group: family.group };
      }
    }
    return null;
  }
  const metric = (key) => (config.metrics && config.metrics[key]) || familyMetric(key) || {};
  const metricLabel = (key) => metric(key).label || key;
  // The pool's series as people read them: "pool mean" ("pool max" where the server says
  // the pool value is the slowest policy's: trainer.metrics.policy_label), as in the CSVs.
  const poolLabels = config.poolLabels || {};
  const policyLabel = (policy, key) => (policy === POOL ? poolLabels[key] || "pool mean" : policy);

  // charts: key -> {cell, div, traces: Map(policy -> {x, y, lastStep, downsampled, lo, hi}),
  // revision, drawn, visible, hiddenSinceDrawn}. `revision` counts the changes to the
  // chart's points, `drawn` is what is on screen (the layout's datarevision: points and view
  // settings), `visible` whether the chart is in or near the viewport (null until the
  // observer has said); `lo`/`hi` are a trace's lowest and highest finite value.
  const charts = new Map();
  const nonFinite = new Map(); // "policy key" -> first step with a non-finite value
  const view = { smoothing: 0, revision: 0, search: "", collapsed: new Set() };

  function remembered(name, fallback) {
    try {
      const value = window.localStorage.getItem(STORE[name]);
      return value === null ? fallback : JSON.parse(value);
    } catch (error) {
      return fallback; // storage off, or a value from elsewhere
    }
  }

  function remember(name, value) {
    try {
      window.localStorage.setItem(STORE[name], JSON.stringify(value));
    } catch (error) {
      // storage off: the setting lasts as long as the page
    }
  }

  const dataRevision = (chart) => `${chart.revision}.${view.revision}`;
  const isShown = (chart) => !chart.cell.hidden && !chart.cell.closest(".chart-group").classList.contains("collapsed");

  function groupSection(group) {
    const id = "group-" + group.slug;
    let section = document.getElementById(id);
    if (!section) {
      section = el("div", { id, class: "chart-group", "data-testid": "chart-group-" + group.slug });
      const grid = el("div", { class: "chart-grid", id: id + "-charts" });
      const toggle = el("button", {
        type: "button", class: "chart-group-toggle", "aria-controls": grid.id, "data-testid": "chart-group-toggle-" + group.slug,
      });
      toggle.append(el("span", {}, group.title), el("span", { class: "chart-group-count" }));
      toggle.addEventListener("click", () => setCollapsed(group.slug, !view.collapsed.has(group.slug)));
      const heading = el("h3");
      heading.append(toggle);
      section.append(heading, grid);
      // Keep the groups in their declared order.
      const order = config.groups.map((g) => g.slug).concat(["other"]);
      const container = document.getElementById("charts");
      const after = Array.from(container.children).find(
        (child) => order.indexOf(child.id.slice(6)) > order.indexOf(group.slug)
      );
      container.insertBefore(section, after || null);
      showCollapsed(section, view.collapsed.has(group.slug));
    }
    return section.querySelector(".chart-grid");
  }

  function showCollapsed(section, collapsed) {
    section.classList.toggle("collapsed", collapsed);
    section.querySelector(".chart-grid").hidden = collapsed;
    section.querySelector(".chart-group-toggle").setAttribute("aria-expanded", String(!collapsed));
  }

  function setCollapsed(slug, collapsed) {
    if (collapsed) view.collapsed.add(slug);
    else view.collapsed.delete(slug);
    remember("collapsed", Array.from(view.collapsed));
    const section = document.getElementById("group-" + slug);
    if (section) showCollapsed(section, collapsed);
    for (const chart of charts.values()) if (collapsed && !isShown(chart)) chart.hiddenSinceDrawn = true;
    catchUp();
  }

  // A run has dozens of charts and every poll brings points to all of them: only those on
  // or near the screen are redrawn, and one scrolled into view catches up at once.
  const onScreen = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const chart = charts.get(entry.target.dataset.key);
      if (!chart) continue;
      chart.visible = entry.isIntersecting;
      update(entry.target.dataset.key);
    }
  }, { rootMargin: "400px 0px" });

  function chartFor(key) {
    let chart = charts.get(key);
    if (!chart) {
      const group = keyToGroup.get(key) || groupBySlug.get(metric(key).group) || { slug: "other", title: "Other", keys: [] };
      const cell = el("div", { class: "chart-cell", "data-key": key });
      const div = el("div", { class: "chart", "data-testid": "chart-" + key, "data-key": key, "data-points": "0" });
      const tools = el("div", { class: "chart-tools" });
      const link = el("a", {
        href: config.urls.metricCsv + "?" + new URLSearchParams({ key }), download: "",
        "data-testid": "chart-csv-" + key, "aria-label": "Download the points of " + metricLabel(key) + " as CSV",
      }, "Download CSV");
      tools.append(el("code", { class: "muted" }, key), link);
      cell.append(div, tools);
      const grid = groupSection(group);
      // The group's listed keys in their order, then the others (a family's) as they come.
      const rank = (name) => (group.keys.includes(name) ? group.keys.indexOf(name) : group.keys.length);
      const after = Array.from(grid.children).find((child) => rank(child.dataset.key) > rank(key));
      grid.insertBefore(cell, after || null);
      chart = { cell, div, traces: new Map(), revision: 0, drawn: null, visible: null, hiddenSinceDrawn: false };
      charts.set(key, chart);
      applySearch();
      onScreen.observe(div);
      document.getElementById("charts-empty").hidden = true;
    }
    return chart;
  }

  // The y range of a chart whose finite values are all (nearly) one value v: v +- 10% of
  // |v| (+- 1 for 0), so that its ticks read v; null for any other chart (autorange).
  function constantRange(chart) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const trace of chart.traces.values()) {
      lo = Math.min(lo, trace.lo);
      hi = Math.max(hi, trace.hi);
    }
    if (!(lo <= hi)) return null; // no finite value
    const value = (lo + hi) / 2;
    const size = Math.abs(value);
    if (hi - lo > size * CONSTANT_SPREAD) return null;
    const pad = size > 0 ? size * 0.1 : 1;
    return [value - pad, value + pad];
  }

  // The steps a chart spans (last - first over its traces); null without points.
  function stepSpan(chart) {
    let first = Infinity;
    let last = -Infinity;
    for (const trace of chart.traces.values()) {
      if (!trace.x.length) continue;
      first = Math.min(first, trace.x[0]);
      last = Math.max(last, trace.x[trace.x.length - 1]);
    }
    return first <= last ? last - first : null;
  }

  // The theme's colours (plot-text.js: the one helper every chart of the app uses).
  const { colours, themed } = window.MRLPlotTheme;

  function tracesOf(chart) {
    const weight = view.smoothing;
    const raw = [];
    const lines = [];
    for (const [index, policy] of config.policies.entries()) {
      const trace = chart.traces.get(policy);
      const label = policyLabel(policy, chart.div.dataset.key);
      if (!trace) continue;
      const colour = policyColour.get(policy) || "#444";
      // SVG scatter: one WebGL context per chart runs out past ~16 charts. The uid (Plotly
      // makes CSS classes of it, so no policy names) keeps a trace hidden from the legend
      // hidden across redraws and smoothing changes.
      // The legend shows the name ellipsized, the hover the whole of it (the trace's meta).
      // A trace of one point (a run's first step) is a marker: a line needs two.
      const common = {
        x: trace.x, name: legend(label), meta: plotMeta(label), legendgroup: policy,
        mode: trace.x.length === 1 ? "lines+markers" : "lines", type: "scatter",
        marker: { color: colour, size: 7 },
      };
      if (weight > 0) {
        raw.push({
          ...common, y: trace.y, uid: `p${index}raw`, showlegend: false, hoverinfo: "skip", opacity: 0.25,
          line: { color: colour, width: 1.2 },
        });
        lines.push({
          ...common, y: ema(trace.y, weight), uid: `p${index}`, customdata: trace.y, line: { color: colour, width: 1.8 },
          hovertemplate: "%{meta[0]}: %{y:.4~g} <span style='opacity:.7'>(raw %{customdata:.4~g})</span><extra></extra>",
        });
      } else {
        lines.push({ ...common, y: trace.y, uid: `p${index}`, line: { color: colour, width: 1.6 }, hovertemplate: "%{meta[0]}: %{y:.4~g}<extra></extra>" });
      }
    }
    return raw.concat(lines); // the smoothed lines over the faint raw ones
  }

  function render(key) {
    const chart = charts.get(key);
    if (!isShown(chart)) return; // drawn when shown again
    const { fg, muted, card } = colours();
    const range = constantRange(chart);
    const unit = metric(key).unit || "";
    // Steps are whole: a run of a few steps gets a tick per step, not "step 1.5".
    const steps = stepSpan(chart);
    const stepTicks = steps !== null && steps <= FEW_STEPS ? { tick0: 0, dtick: 1 } : {};
    // The trace arrays grow in place, and Plotly.react redraws only for new arrays or a new
    // datarevision: the revision makes every change of points (or of the smoothing) a
    // redraw. uirevision keeps what the user did (a zoom, hidden traces) across redraws;
    // an axis nobody zoomed autoranges over the new points, or takes a constant series'
    // range.
    const layout = themed({
      title: { text: plain(metricLabel(key)), font: { size: 13 } }, margin: { l: 56, r: 12, t: 32, b: 56 }, height: 280,
      hovermode: "x unified", hoverlabel: { bgcolor: card, bordercolor: muted, font: { color: fg } },
      xaxis: { title: { text: "step", standoff: 4 }, unifiedhovertitle: { text: "step %{x}" }, ...stepTicks },
      yaxis: {
        title: { text: plain(unit) }, automargin: true,
        // Plain numbers on the ticks ("0.0003", not "300μ"); a constant series' few digits.
        exponentformat: "e", ...(range ? { range, autorange: false, tickformat: ".4~g" } : { autorange: true, tickformat: "" }),
      },
      legend: { orientation: "h", y: -0.32 },
      uirevision: key, datarevision: dataRevision(chart),
    });
    window.Plotly.react(chart.div, tracesOf(chart), layout, { displaylogo: false, responsive: true });
    chart.drawn = dataRevision(chart);
    chart.hiddenSinceDrawn = false;
  }

  // A chart shown and on or near the screen is redrawn when out of date, and resized to
  // its box when it was hidden since it was drawn (the window may have changed meanwhile).
  function update(key) {
    const chart = charts.get(key);
    if (!isShown(chart) || chart.visible === false) return;
    if (chart.drawn !== dataRevision(chart)) render(key);
    else if (chart.hiddenSinceDrawn) {
      chart.hiddenSinceDrawn = false;
      window.Plotly.Plots.resize(chart.div);
    }
  }

  function catchUp() {
    for (const key of charts.keys()) update(key);
  }

  function applySearch() {
    const words = view.search.toLowerCase().split(/\s+/).filter(Boolean);
    const matching = new Map(); // group section -> charts shown
    for (const [key, chart] of charts) {
      const text = (key + " " + metricLabel(key)).toLowerCase();
      chart.cell.hidden = !words.every((word) => text.includes(word));
      if (chart.cell.hidden) chart.hiddenSinceDrawn = true;
      const section = chart.cell.closest(".chart-group");
      matching.set(section, (matching.get(section) || 0) + (chart.cell.hidden ? 0 : 1));
    }
    for (const [section, shown] of matching) {
      section.hidden = shown === 0;
      const total = section.querySelectorAll(".chart-cell").length;
      section.querySelector(".chart-group-count").textContent = shown === total ? `(${total})` : `(${shown} of ${total})`;
    }
    const none = charts.size > 0 && Array.from(matching.values()).every((shown) => shown === 0);
    document.getElementById("charts-none-match").hidden = !none;
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
        trace = { x: [], y: [], lastStep: -1, downsampled: false, lo: Infinity, hi: -Infinity };
        chart.traces.set(item.policy, trace);
        changed.add(item.key);
      }
      trace.downsampled = trace.downsampled || Boolean(item.downsampled);
      for (const [step, raw] of item.points) {
        if (step <= trace.lastStep) continue;
        const value = toNumber(raw);
        trace.x.push(step);
        trace.y.push(value);
        trace.lastStep = step;
        if (Number.isFinite(value)) {
          trace.lo = Math.min(trace.lo, value);
          trace.hi = Math.max(trace.hi, value);
        }
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
    // The error classes' keys (val/error/...) are a table, not twenty charts
    // (run-error-classes.js): it gets their listing.
    const table = window.MRLRun.errorClasses;
    const tabled = table ? listing.keys.filter((s) => table.owns(s.key)) : [];
    for (const s of listing.keys) {
      if (table && table.owns(s.key)) continue;
      const trace = charts.get(s.key)?.traces.get(s.policy);
      if (trace && trace.lastStep >= s.last_step) continue;
      if (!trace || trace.downsampled || s.n_points > MAX_POINTS) full.push(s);
      else {
        if (!incremental.has(trace.lastStep)) incremental.set(trace.lastStep, []);
        incremental.get(trace.lastStep).push(s);
      }
    }
    const batches = table ? [table.refresh(tabled)] : [];
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

  // --- the controls ---------------------------------------------------------------------
  const smoothingInput = document.getElementById("chart-smoothing");
  const smoothingValue = document.getElementById("chart-smoothing-value");
  const searchInput = document.getElementById("chart-search");

  function setSmoothing(weight) {
    const clamped = Math.min(0.99, Math.max(0, Number(weight) || 0));
    smoothingInput.value = String(clamped);
    smoothingValue.textContent = clamped > 0 ? clamped.toFixed(2) : "off";
    if (clamped === view.smoothing) return;
    view.smoothing = clamped;
    view.revision += 1;
    remember("smoothing", clamped);
    catchUp(); // the others redraw as they come into view
  }

  for (const slug of remembered("collapsed", [])) if (typeof slug === "string") view.collapsed.add(slug);
  setSmoothing(remembered("smoothing", 0));
  smoothingInput.addEventListener("input", () => setSmoothing(smoothingInput.value));
  window.MRLPlotTheme.onChange(() => {
    view.revision += 1; // every chart redraws in the other scheme's colours
    catchUp();
  });
  searchInput.addEventListener("input", () => {
    view.search = searchInput.value.trim();
    applySearch();
    catchUp();
  });

  window.MRLRun.charts = { refresh: refreshCurves };
})();
