// The run page's peer-transfer panel: the filtered log (paged), the source -> target
// matrix and the counts over time. MRLRun.transfers.refresh() is called by run-page.js's
// poll loop.
"use strict";

(function () {
  const { config, el, getJSON } = window.MRLRun;

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

  window.MRLRun.transfers = { refresh: refreshTransfers };
})();
