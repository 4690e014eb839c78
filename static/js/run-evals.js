// The run page's evaluation panel: polls the run's evaluations (jobs and per-task
// results) and draws them; fast while a job is active, slowly otherwise.
//
// Every string from the server goes into the page through textContent (never innerHTML).
"use strict";

(function () {
  const { config, el, getJSON } = window.MRLRun;
  const ACTIVE = new Set(["queued", "submitted", "pending", "running"]);
  const panel = document.getElementById("evaluation");
  if (!panel) return;
  const cancelTemplate = document.getElementById("evaluation-cancel-template");

  function when(iso) {
    return iso ? iso.replace("T", " ").slice(0, 19) : "–";
  }

  function percent(value) {
    return value === null || value === undefined ? "–" : (100 * value).toFixed(1);
  }

  function signed(value) {
    if (value === null || value === undefined) return "–";
    const text = (100 * value).toFixed(1);
    return value > 0 ? "+" + text : text;
  }

  let shownJobs = null;
  function showJobs(evaluations) {
    const key = JSON.stringify(evaluations);
    if (key === shownJobs) return;
    shownJobs = key;
    document.getElementById("evaluation-empty").hidden = evaluations.length > 0;
    document.getElementById("evaluation-jobs").hidden = evaluations.length === 0;
    const rows = evaluations.map((job) => {
      const tr = el("tr", { "data-testid": "evaluation-job", "data-state": job.state });
      const state = el("td");
      state.append(el("span", { class: "state state-" + job.state, "data-testid": "evaluation-state" }, job.state));
      const what = job.what + (job.automatic ? " (automatic)" : "");
      const jobText = job.job_id ? `${job.backend} ${job.job_id}${job.node ? " on " + job.node : ""}` : "–";
      const reason = el("td", { class: job.failure_reason ? "bad" : "" }, job.failure_reason || "–");
      const action = el("td");
      if (job.cancel_url && ACTIVE.has(job.state) && cancelTemplate) {
        const form = cancelTemplate.cloneNode(true);
        form.removeAttribute("id");
        form.hidden = false;
        form.action = job.cancel_url;
        form.className = "inline";
        action.append(form);
      }
      tr.append(el("td", {}, job.suite), el("td", {}, what), state, el("td", {}, jobText), el("td", {}, when(job.created_at)), reason, action);
      return tr;
    });
    document.getElementById("evaluation-job-rows").replaceChildren(...rows);
  }

  // One table per suite: a row per task; per policy its base model's accuracy (step 0),
  // the checkpoint's, and the difference, in percent.
  let shownResults = null;
  function showResults(results) {
    const key = JSON.stringify(results);
    if (key === shownResults) return;
    shownResults = key;
    const tables = results.map((suite) => {
      const box = el("div", { class: "eval-suite", "data-testid": "evaluation-table", "data-suite": suite.suite });
      const step = suite.step === null ? "no checkpoint evaluated yet" : `checkpoint at step ${suite.step}`;
      box.append(el("h3", {}, `${suite.suite}: accuracy (%), base model vs ${step}`));
      if (suite.earlier_steps.length) {
        const steps = suite.earlier_steps.join(", ");
        box.append(el("p", { class: "muted", "data-testid": "earlier-steps" }, `Also evaluated at step ${steps}: the run's eval/${suite.suite}/… curves show every evaluated step.`));
      }
      const table = el("table", { class: "list eval-results" });
      const head = el("thead");
      const top = el("tr");
      top.append(el("th", { rowspan: "2" }, "Task"));
      for (const policy of suite.policies) top.append(el("th", { colspan: "3", class: "policy-head" }, policy));
      const sub = el("tr");
      for (let i = 0; i < suite.policies.length; i += 1) {
        sub.append(el("th", {}, "base"), el("th", {}, suite.step === null ? "checkpoint" : `step ${suite.step}`), el("th", {}, "Δ"));
      }
      head.append(top, sub);
      const body = el("tbody");
      for (const row of suite.rows) {
        const tr = el("tr", { "data-testid": "evaluation-row", "data-task": row.task });
        tr.append(el("td", {}, row.task));
        for (const cell of row.cells) {
          const delta = cell.delta;
          const deltaClass = delta === null ? "" : delta > 0 ? "gain" : delta < 0 ? "loss" : "";
          tr.append(
            el("td", { class: "number", "data-testid": "base-value" }, percent(cell.base)),
            el("td", { class: "number", "data-testid": "checkpoint-value", title: cell.n ? `${cell.n} items` : "" }, percent(cell.value)),
            el("td", { class: "number " + deltaClass, "data-testid": "delta-value" }, signed(delta)),
          );
        }
        body.append(tr);
      }
      table.append(head, body);
      box.append(table);
      return box;
    });
    document.getElementById("evaluation-results").replaceChildren(...tables);
  }

  async function showLog(evaluations) {
    const latest = evaluations[0];
    const box = document.getElementById("evaluation-log-box");
    if (!latest || !latest.job_id) return;
    const answer = await getJSON(latest.log_url);
    box.hidden = !answer.log;
    if (answer.log) document.getElementById("evaluation-log").textContent = answer.log;
  }

  async function poll() {
    let active = false;
    try {
      const answer = await getJSON(config.urls.evaluations);
      showJobs(answer.evaluations);
      showResults(answer.results);
      active = answer.evaluations.some((job) => ACTIVE.has(job.state));
      await showLog(answer.evaluations);
    } catch (error) {
      active = true; // try again soon
    }
    setTimeout(poll, active ? config.pollMs : 5 * config.pollMs);
  }
  poll();
})();
