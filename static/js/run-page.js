// The run page's loop: polls the read API for the run's state, its timeline and actions,
// the job's output, the curves (run-charts.js) and the peer transfers (run-transfers.js);
// no page reload.
//
// Every string from the server goes into the page through textContent (never innerHTML).
"use strict";

(function () {
  const { config, el, getJSON } = window.MRLRun;
  const TERMINAL = new Set(["completed", "failed", "cancelled"]);
  let state = null;

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
      await Promise.all([window.MRLRun.charts.refresh(), refreshTimeline(), refreshLog()]);
      if (tick % 3 === 0) await window.MRLRun.transfers.refresh();
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
