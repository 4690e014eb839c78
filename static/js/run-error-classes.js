// The run page's "Answers by error class" table (templates/dashboard/_run_error_classes.html):
// the addition slices' val/error/<class>/<slice> points, one row per policy and slice, one
// column per class, each cell the share at the row's latest validation and, in brackets,
// at its first (step 0). Twenty curves would bury the page: run-charts.js leaves these
// keys out of the charts and hands their listing here on each poll
// (MRLRun.errorClasses.refresh). The card stays hidden for runs without such points.
"use strict";

(function () {
  const { config, el, getJSON } = window.MRLRun;
  const { toNumber } = window.MRLNonFinite;
  const table = config.errorClasses; // {prefix, classes: [{key, label}], slices}
  const classKeys = new Set(table.classes.map((c) => c.key));
  const first = new Map(); // "policy key" -> [step, value] of the series' first point
  let shown = null;

  const owns = (key) => key.startsWith(table.prefix);

  // "val/error/dropped_carry/carry" -> {errorClass: "dropped_carry", slice: "carry"}.
  function parse(key) {
    const [errorClass, slice] = key.slice(table.prefix.length).split("/");
    return classKeys.has(errorClass) && slice ? { errorClass, slice } : null;
  }

  function format(value) {
    const number = toNumber(value);
    return Number.isFinite(number) ? number.toFixed(2) : String(value);
  }

  // The series' first points, read once each (max_points 4 keeps a series' first point).
  async function readFirstPoints(listing) {
    const missing = listing.filter((s) => !first.has(s.policy + " " + s.key));
    if (!missing.length) return;
    const params = new URLSearchParams();
    for (const key of new Set(missing.map((s) => s.key))) params.append("key", key);
    for (const policy of new Set(missing.map((s) => s.policy))) params.append("policy", policy);
    params.set("max_points", "4");
    const answer = await getJSON(config.urls.series, params);
    for (const item of answer.series) {
      if (item.points.length) first.set(item.policy + " " + item.key, item.points[0]);
    }
  }

  // Rows in the pool's order, then the slices' order (a slice the server does not list
  // comes after, by name): [{policy, slice, lastStep, firstStep, cells: {class: text}}].
  function rowsOf(listing) {
    const rows = new Map();
    for (const s of listing) {
      const parsed = parse(s.key);
      if (!parsed) continue;
      const id = s.policy + " " + parsed.slice;
      if (!rows.has(id)) rows.set(id, { policy: s.policy, slice: parsed.slice, lastStep: -1, firstStep: null, cells: {} });
      const row = rows.get(id);
      const start = first.get(s.policy + " " + s.key);
      row.lastStep = Math.max(row.lastStep, s.last_step);
      if (start && (row.firstStep === null || start[0] < row.firstStep)) row.firstStep = start[0];
      row.cells[parsed.errorClass] = { last: format(s.last_value), first: start ? format(start[1]) : "–" };
    }
    const policyRank = (p) => (config.policies.includes(p) ? config.policies.indexOf(p) : config.policies.length);
    const sliceRank = (s) => (table.slices.includes(s) ? table.slices.indexOf(s) : table.slices.length);
    return Array.from(rows.values()).sort(
      (a, b) => policyRank(a.policy) - policyRank(b.policy) || a.policy.localeCompare(b.policy)
        || sliceRank(a.slice) - sliceRank(b.slice) || a.slice.localeCompare(b.slice)
    );
  }

  function render(rows) {
    const key = JSON.stringify(rows);
    if (key === shown) return; // unchanged: leave the rows (and a selection) be
    shown = key;
    const body = document.getElementById("error-class-rows");
    body.replaceChildren(...rows.map((row) => {
      const tr = el("tr", { "data-testid": `error-row-${row.policy}-${row.slice}` });
      const step = row.firstStep === null ? String(row.lastStep) : `${row.lastStep} (${row.firstStep})`;
      tr.append(el("td", {}, row.policy), el("td", {}, row.slice), el("td", { class: "number" }, step));
      for (const { key: errorClass } of table.classes) {
        const cell = row.cells[errorClass];
        const td = el("td", { class: "number", "data-class": errorClass });
        if (cell) td.append(cell.last, " ", el("span", { class: "first" }, `(${cell.first})`));
        else td.textContent = "–";
        tr.append(td);
      }
      return tr;
    }));
    document.getElementById("error-classes").hidden = rows.length === 0;
  }

  // `listing`: the keys API's entries of this table's keys ({policy, key, last_step,
  // last_value, ...}).
  async function refresh(listing) {
    if (!listing.length) return;
    await readFirstPoints(listing);
    render(rowsOf(listing));
  }

  window.MRLRun.errorClasses = { owns, refresh };
})();
