// The run page's loop: polls the read API for the run's state, progress, timeline and
// actions (one status read), the job's output, the curves (run-charts.js) and the peer
// transfers (run-transfers.js); no page reload, and no fetch of the page itself.
//
// Every string from the server goes into the page through textContent (never innerHTML).
"use strict";

(function () {
  const { config, el, getJSON } = window.MRLRun;
  const TERMINAL = new Set(["completed", "failed", "cancelled"]);
  let state = null;

  // --- status ------------------------------------------------------------------------
  // One read of the status API per poll brings the facts, the progress, the timeline and
  // what the actions depend on; the page itself is never fetched again (a fetch of it
  // would take the flash message a pending redirect left for the next page view).
  async function refreshStatus() {
    const status = await getJSON(config.urls.status);
    state = status.state;
    const badge = document.querySelector("#run-state .state");
    badge.textContent = status.state;
    badge.className = "state state-" + status.state;
    for (const node of document.querySelectorAll("#run-facts [data-field]")) {
      let value = status[node.dataset.field];
      if (node.dataset.field === "failure_reason") {
        showReason(node, value || "");
        continue;
      }
      if (value && node.dataset.field.endsWith("_at")) value = when(value);
      const empty = value === null || value === undefined || value === "";
      node.textContent = empty ? "–" : String(value);
    }
    showChartsEmpty(status.state);
    const jobLabel = document.querySelector("#run-facts [data-testid=job-label]");
    if (jobLabel) {
      // The backend is known once the run is submitted: "Slurm job", "Local process (pid)".
      const labels = { slurm: jobLabel.dataset.labelSlurm, local: jobLabel.dataset.labelLocal };
      jobLabel.textContent = labels[status.backend] || jobLabel.dataset.labelOther;
    }
    showProgress(status);
    showTimeline(status.timeline || []);
    showActions(status);
  }

  // A failure reason: its first line in bold (what went wrong), the rest (the job's last
  // words, a log tail) folded in a <details>, as _run_summary.html renders it. Rebuilt
  // only when the reason changes, so an opened <details> stays open across polls.
  function splitReason(reason) {
    const lines = reason.trim().split(/\r?\n/);
    const rest = lines.slice(1).join("\n").replace(/^\n+|\n+$/g, "");
    return { head: lines[0].trim(), rest };
  }

  // The nodes of a reason (or a timeline note, which holds one): the first line (in
  // `tag`), then the rest folded.
  function reasonParts(reason, tag, attrs) {
    const { head, rest } = splitReason(reason);
    const parts = [el(tag, attrs, head)];
    if (rest) {
      const count = rest.split("\n").length;
      const details = el("details", { class: "failure-details" });
      details.append(el("summary", {}, `Details: ${count} more line${count === 1 ? "" : "s"}`));
      details.append(el("pre", { class: "config log" }, rest));
      parts.push(details);
    }
    return parts;
  }

  let shownReason = null;
  function showReason(node, reason) {
    if (reason === shownReason) return;
    shownReason = reason;
    if (!reason.trim()) node.replaceChildren("–"); // a dash is not an alarm
    else node.replaceChildren(...reasonParts(reason, "strong", { class: "bad" }));
  }

  // Before any chart: what the curves card says depends on the state (a failed run sends
  // no more points, so it must not promise them).
  function showChartsEmpty(runState) {
    const box = document.getElementById("charts-empty");
    if (!box) return;
    const text = box.dataset["text" + runState.charAt(0).toUpperCase() + runState.slice(1)] || box.dataset.textWaiting;
    if (box.textContent !== text) box.textContent = text;
  }

  function when(iso) {
    return iso.replace("T", " ").slice(0, 19); // the server's time zone (UTC), as rendered
  }

  // The bar's width is the share of steps done; its text is the server's
  // ("step 30/60 · 2m10s elapsed · ETA 2m", "step 60/60 · ran 4m10s", "queued").
  function showProgress(status) {
    const box = document.getElementById("run-progress");
    if (!box) return;
    const percent = Math.floor(100 * Math.min(1, Math.max(0, Number(status.progress) || 0)));
    box.className = "progress progress-" + status.state;
    box.querySelector(".progress-fill").style.width = percent + "%";
    box.querySelector(".progress-bar").setAttribute("aria-valuenow", String(percent));
    box.querySelector(".progress-text").textContent = status.progress_text;
  }

  let shownTimeline = null;
  function showTimeline(changes) {
    const key = JSON.stringify(changes);
    if (key === shownTimeline) return; // unchanged: leave the rows (and a selection) be
    shownTimeline = key;
    const rows = changes.map((change) => {
      const stateCell = el("td");
      stateCell.append(el("span", { class: "state state-" + change.state, "data-testid": "run-state" }, change.state));
      const tr = el("tr");
      const noteCell = el("td");
      if (change.note.trim()) noteCell.append(...reasonParts(change.note, "span", {}));
      tr.append(el("td", {}, when(change.at)), stateCell, noteCell);
      return tr;
    });
    if (!rows.length) {
      const empty = el("tr");
      empty.append(el("td", { colspan: "3", class: "empty" }, "No changes recorded."));
      rows.push(empty);
    }
    document.getElementById("timeline-rows").replaceChildren(...rows);
  }

  // The action forms are the page's own (their CSRF tokens included); each says when it
  // applies (data-when): only those that do are in the page (cancel while the run lives,
  // resubmit after it ended, revoke while it has a token).
  const actionBox = document.getElementById("run-actions");
  const actionForms = actionBox ? Array.from(actionBox.querySelectorAll(":scope > form")) : [];
  function showActions(status) {
    if (!actionBox) return;
    const applies = {
      active: !status.is_terminal,
      terminal: status.is_terminal,
      token: status.has_token,
    };
    const shown = actionForms.filter((form) => !form.dataset.when || applies[form.dataset.when]);
    const current = Array.from(actionBox.children);
    if (shown.length !== current.length || shown.some((form, i) => form !== current[i])) {
      for (const form of shown) form.hidden = false;
      actionBox.replaceChildren(...shown); // only on a change: a focused button keeps focus
    }
    const issue = actionBox.querySelector("[data-testid=issue-token]");
    if (issue) issue.textContent = status.has_token ? issue.dataset.labelToken : issue.dataset.labelNoToken;
  }

  // A form with data-confirm (cancel) asks first; confirmed, it posts confirm=yes, which
  // the view reads as the answer (without JavaScript, the view asks on a page of its own).
  for (const form of actionForms) {
    if (!form.dataset.confirm) continue;
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
        return;
      }
      let answer = form.querySelector("input[name=confirm]");
      if (!answer) {
        answer = el("input", { type: "hidden", name: "confirm" });
        form.append(answer);
      }
      answer.value = "yes";
    });
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
      await Promise.all([window.MRLRun.charts.refresh(), refreshLog()]);
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
