// The run page's peer-transfer panel: the filtered log (paged, a row expands to what
// crossed), the source -> target matrix and the counts over time, both of the filtered
// events; a matrix cell click filters the log to that pair. MRLRun.transfers.refresh() is
// called by run-page.js's poll loop. Every string from the server goes in as textContent
// (a policy name in a matrix header also as its title: the cell shows at most a few lines
// of it, run-transfers.css), or into Plotly through plot-text.js.
"use strict";

(function () {
  const { config, el, getJSON } = window.MRLRun;
  const { legend, plotMeta } = window.MRLPlotText;
  const form = document.getElementById("transfer-filter");
  if (!form) {
    // A regime where nothing crosses: the template says so, there is nothing to poll.
    window.MRLRun.transfers = { refresh: () => Promise.resolve() };
    return;
  }

  const transferQuery = { offset: 0, limit: 50 };
  const expanded = new Set(); // ids of the log rows shown open
  const details = new Map(); // id -> the event-detail reply (what crossed never changes)
  const COLUMNS = ["step", "source", "target", "kind", "prompt_id", "count", "weight"];
  // A kind as the filter names it (its regime's declaration), not as it is stored.
  const kindLabel = (kind) => (config.eventKinds && config.eventKinds[kind]) || kind;

  // A number as people read it: 3 significant digits (0.8548971767621961 reads 0.855).
  function readable(value) {
    if (typeof value !== "number" || !Number.isFinite(value)) return String(value);
    return String(Number(value.toPrecision(3)));
  }

  function cellText(field, value) {
    if (value === null || value === undefined || value === "") return "–";
    if (field === "kind") return kindLabel(value);
    if (field === "weight") return readable(value);
    return String(value);
  }

  function transferParams() {
    const params = new URLSearchParams();
    for (const [name, value] of new FormData(form)) if (value) params.set(name, value);
    return params;
  }

  function filtersActive() {
    return Array.from(new FormData(form).values()).some((value) => value !== "");
  }

  // --- the log ------------------------------------------------------------------------
  function detailUrl(id) {
    return `${config.urls.events}/${encodeURIComponent(id)}`;
  }

  function tokenList(tokens) {
    const list = el("ol", { class: "transfer-tokens", "data-testid": "transfer-tokens" });
    for (const token of tokens) list.append(el("li", {}, token === "" ? "∅" : token));
    return list;
  }

  // What a tokenizer's space and line-break markers mean, for the markers ``tokens`` use:
  // byte-level BPE (GPT-2, Qwen, Llama 3, SmolLM2) writes a space as "Ġ" and a line break
  // as "Ċ", SentencePiece a space as "▁". Null when they use none.
  const MARKERS = [["Ġ", "a space"], ["Ċ", "a line break"], ["▁", "a space"]];
  function markerNote(tokens) {
    const used = MARKERS.filter(([mark]) => tokens.some((token) => token.includes(mark)));
    if (!used.length) return null;
    const meanings = used.map(([mark, meaning]) => `${mark} is ${meaning}`).join(", ");
    return el("p", { class: "muted", "data-testid": "transfer-token-markers" }, `In these tokens ${meanings}.`);
  }

  // Whether the response ended with EOS and why it scored what it did (trainers since
  // 2026-12 send both; an older event has neither, and says nothing of them).
  function scoringNote(sample) {
    const parts = [];
    if (sample.finished === false) parts.push("Unfinished: cut off at max_new_tokens.");
    if (typeof sample.reason === "string" && sample.reason) parts.push(`Scored: ${sample.reason}`);
    if (!parts.length) return null;
    const attrs = { class: sample.finished === false ? "transfer-reason warn" : "transfer-reason muted", "data-testid": "transfer-reason" };
    return el("p", attrs, parts.join(" "));
  }

  function sampleBlock(sample, index, detail) {
    const box = el("div", { class: "transfer-sample" });
    const head = [`Response ${index + 1}`];
    if (sample.reward !== undefined && sample.reward !== null) head.push(`reward ${readable(sample.reward)}`);
    if (sample.finished === false) head.push("unfinished");
    box.append(el("h4", {}, head.join(" · ")));
    const note = scoringNote(sample);
    if (note) box.append(note);
    const text = el("pre", { class: "transfer-text", "data-testid": "transfer-text" });
    text.textContent = sample.text === "" ? "(empty response)" : sample.text;
    box.append(text);
    if (Array.isArray(sample.tokens)) {
      const tokens = sample.tokens.length;
      box.append(el("h4", {}, `Retokenized for ${detail.event.target} (THL): ${tokens} token${tokens === 1 ? "" : "s"}`));
      box.append(tokenList(sample.tokens));
      const note = markerNote(sample.tokens);
      if (note) box.append(note);
    }
    if (sample.truncated) {
      box.append(el("p", { class: "muted" },
        `Cut by the trainer: it records at most ${detail.limits.text} characters and ${detail.limits.tokens} tokens.`));
    }
    return box;
  }

  // The prompt the transfer answered: its text (the server rebuilds it from the run's task;
  // events store the id only), or, when it cannot, its id and why there is no text.
  function promptBlock(detail) {
    const box = el("div", { class: "transfer-prompt", "data-testid": "transfer-prompt" });
    const id = detail.event.prompt_id;
    box.append(el("h4", {}, id ? `Prompt ${id}` : "Prompt"));
    if (typeof detail.prompt_text === "string") {
      box.append(el("pre", { class: "transfer-text", "data-testid": "transfer-prompt-text" }, detail.prompt_text || "(empty prompt)"));
      // The problem alone: the task's system prompt and worked examples came before it.
      const context = document.getElementById("transfers").dataset.promptContext;
      if (context) box.append(el("p", { class: "muted", "data-testid": "transfer-prompt-context" }, context));
    } else {
      box.append(el("p", { class: "muted" }, "Its text cannot be found in the run's task (only the id was recorded)."));
    }
    return box;
  }

  function detailContent(detail) {
    const box = el("div", { class: "transfer-detail-body", "data-testid": "transfer-detail" });
    const { event, samples } = detail;
    if (event.prompt_id || typeof detail.prompt_text === "string") box.append(promptBlock(detail));
    if (samples === null) {
      box.append(el("p", { class: "empty" }, detail.no_text
        || "No text recorded for this event (its trainer did not ship what crossed)."));
      return box;
    }
    if (!samples.length) {
      box.append(el("p", { class: "empty" }, "No text recorded for this event."));
      return box;
    }
    box.append(el("p", { class: "muted" },
      `What ${event.source} sent to ${event.target} for this prompt at step ${event.step}` +
      (event.count > samples.length ? ` (${samples.length} of the ${event.count} that crossed; at most ${detail.limits.samples} are recorded):` : ":")));
    samples.forEach((sample, i) => box.append(sampleBlock(sample, i, detail)));
    return box;
  }

  function detailRow(id) {
    const cell = el("td", { colspan: String(COLUMNS.length + 1) });
    const detail = details.get(id);
    cell.append(detail ? detailContent(detail) : el("p", { class: "muted" }, "Loading…"));
    const row = el("tr", { class: "transfer-detail", "data-detail-of": String(id) });
    row.append(cell);
    return row;
  }

  async function toggle(row, button, id) {
    if (expanded.has(id)) {
      expanded.delete(id);
      button.setAttribute("aria-expanded", "false");
      button.textContent = "▸";
      document.querySelector(`tr[data-detail-of="${id}"]`)?.remove();
      return;
    }
    expanded.add(id);
    button.setAttribute("aria-expanded", "true");
    button.textContent = "▾";
    row.after(detailRow(id));
    if (details.has(id)) return;
    try {
      details.set(id, await getJSON(detailUrl(id)));
    } catch (error) {
      const failed = document.querySelector(`tr[data-detail-of="${id}"] td`);
      failed?.replaceChildren(el("p", { class: "bad" }, "Could not load this transfer; it will be retried when you open it again."));
      expanded.delete(id);
      button.setAttribute("aria-expanded", "false");
      button.textContent = "▸";
      return;
    }
    const open = document.querySelector(`tr[data-detail-of="${id}"]`);
    if (open) open.replaceWith(detailRow(id));
  }

  function logRow(event) {
    const row = el("tr", { "data-event-id": String(event.id) });
    const button = el("button", {
      type: "button", class: "link transfer-toggle", "aria-expanded": String(expanded.has(event.id)),
      "aria-label": `What crossed at step ${event.step}, ${event.source} to ${event.target}`,
    }, expanded.has(event.id) ? "▾" : "▸");
    button.addEventListener("click", () => toggle(row, button, event.id));
    const toggleCell = el("td");
    toggleCell.append(button);
    row.append(toggleCell);
    for (const field of COLUMNS) {
      const value = event[field];
      const attrs = field === "source" || field === "target" ? { class: "policy-name" } : {};
      if (field === "weight" && typeof value === "number") attrs.title = String(value); // the exact value
      row.append(el("td", attrs, cellText(field, value)));
    }
    return row;
  }

  async function refreshTransferLog() {
    const params = transferParams();
    params.set("limit", String(transferQuery.limit));
    params.set("offset", String(transferQuery.offset));
    const page = await getJSON(config.urls.events, params);
    const rows = [];
    for (const event of page.events) {
      rows.push(logRow(event));
      if (expanded.has(event.id)) rows.push(detailRow(event.id));
    }
    document.getElementById("transfer-rows").replaceChildren(...rows);
    const last = Math.min(transferQuery.offset + transferQuery.limit, page.total);
    document.getElementById("transfer-page").textContent = page.total ? `${transferQuery.offset + 1}–${last} of ${page.total}` : "none";
    document.getElementById("transfer-prev").disabled = transferQuery.offset === 0;
    document.getElementById("transfer-next").disabled = last >= page.total;
  }

  // --- matrix and chart ------------------------------------------------------------------
  function selectPair(source, target) {
    const same = form.elements.source.value === source && form.elements.target.value === target;
    form.elements.source.value = same ? "" : source;
    form.elements.target.value = same ? "" : target;
    transferQuery.offset = 0;
    refreshTransfers();
  }

  function matrixCell(source, target, count, max) {
    if (source === target) return el("td", { class: "diagonal", title: "A policy does not transfer to itself" }, "–");
    const selected = form.elements.source.value === source && form.elements.target.value === target;
    const cell = el("td", {
      class: selected ? "pair selected" : "pair",
      role: "button",
      tabindex: "0",
      "data-source": source,
      "data-target": target,
      "aria-pressed": String(selected),
      title: selected ? `Showing ${source} → ${target}; click to clear` : `Show ${source} → ${target} in the log`,
    }, String(count));
    cell.style.setProperty("--share", (count / max).toFixed(3));
    cell.addEventListener("click", () => selectPair(source, target));
    cell.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        selectPair(source, target);
      }
    });
    return cell;
  }

  function nameCell(name, scope) {
    const cell = el("th", { scope, title: name });
    cell.append(el("span", { class: "cell-label" }, name));
    return cell;
  }

  function drawMatrix(summary) {
    const policies = summary.policies;
    const max = Math.max(1, ...summary.matrix.flat());
    const table = el("table", { class: "matrix" });
    const head = el("tr");
    head.append(el("th", { scope: "col" }, "source \\ target"), ...policies.map((p) => nameCell(p, "col")));
    table.append(head);
    summary.matrix.forEach((row, i) => {
      const tr = el("tr");
      tr.append(nameCell(policies[i], "row"));
      row.forEach((count, j) => tr.append(matrixCell(policies[i], policies[j], count, max)));
      table.append(tr);
    });
    document.getElementById("transfer-matrix").replaceChildren(table);
  }

  function drawOverTime(summary) {
    // One bar per step bucket, spanning it: x is the bucket's middle, the width its steps.
    const size = summary.bucket_size;
    const kinds = Array.from(new Set(summary.over_time.map((row) => row.kind)));
    const traces = kinds.map((kind) => {
      const rows = summary.over_time.filter((row) => row.kind === kind);
      return {
        type: "bar", name: legend(kindLabel(kind)), meta: plotMeta(kindLabel(kind)), width: 0.9 * size,
        x: rows.map((r) => r.step + (size - 1) / 2), y: rows.map((r) => r.count),
        hovertemplate: "%{meta[0]}: %{y} (step %{customdata})<extra></extra>",
        customdata: rows.map((r) => (size > 1 ? `${r.step}–${r.step + size - 1}` : String(r.step))),
      };
    });
    // Steps and counts are whole: a few buckets get a tick each (not "step 1.5"), a few
    // transfers a tick per transfer (not "0.5 transfers").
    const starts = summary.over_time.map((row) => row.step);
    const buckets = starts.length ? (Math.max(...starts) - Math.min(...starts)) / size + 1 : 0;
    const perBucket = new Map();
    for (const row of summary.over_time) perBucket.set(row.step, (perBucket.get(row.step) || 0) + row.count);
    const most = Math.max(0, ...perBucket.values());
    // Drawn in the page's theme (plot-text.js's MRLPlotTheme).
    window.Plotly.react("transfer-over-time", traces, window.MRLPlotTheme.themed({
      barmode: "stack", height: 240, margin: { l: 50, r: 10, t: 10, b: 40 },
      xaxis: {
        title: { text: size > 1 ? `step (buckets of ${size})` : "step" },
        ...(size === 1 && buckets <= 12 ? { tick0: 0, dtick: 1 } : {}),
      },
      yaxis: { title: { text: "transfers" }, rangemode: "tozero", ...(most <= 8 ? { tick0: 0, dtick: 1 } : {}) },
      legend: { orientation: "h", y: 1.12 },
      datarevision: Date.now(),
    }), { displaylogo: false, responsive: true });
  }

  let chartDrawn = false;

  function clearOverTime(note) {
    const chart = document.getElementById("transfer-over-time");
    if (chartDrawn) window.Plotly.purge(chart);
    chartDrawn = false;
    chart.replaceChildren(el("p", { class: "empty" }, note));
  }

  async function refreshTransferSummary() {
    const summary = await getJSON(config.urls.eventsSummary, transferParams());
    const views = document.getElementById("transfer-views");
    const message = document.getElementById("transfer-message");
    message.hidden = summary.total > 0;
    if (!summary.total && !filtersActive()) {
      // Nothing has crossed yet: a sentence, not an empty matrix and an empty chart.
      message.textContent = "No transfers yet.";
      clearOverTime("");
      views.hidden = true;
      return;
    }
    views.hidden = false;
    drawMatrix(summary); // kept when nothing matches, so a selected cell can be clicked off
    if (!summary.total) {
      message.textContent = "No transfers match these filters.";
      clearOverTime("Nothing to draw for these filters.");
      return;
    }
    if (!chartDrawn) document.getElementById("transfer-over-time").replaceChildren();
    drawOverTime(summary);
    chartDrawn = true;
  }

  // --- controls ---------------------------------------------------------------------------
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    transferQuery.offset = 0;
    refreshTransfers();
  });
  document.getElementById("transfer-clear").addEventListener("click", () => {
    form.reset();
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

  // Redrawn in the other scheme's colours when the page's colour scheme changes.
  window.MRLPlotTheme.onChange(() => (chartDrawn ? refreshTransferSummary().catch(() => {}) : null));

  window.MRLRun.transfers = { refresh: refreshTransfers };
})();
