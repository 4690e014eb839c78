// The "no worker" notice of the run, experiment and sweep pages: polls the worker
// endpoint (GET /api/v1/worker) and shows the notice while no Celery worker has reported
// in recently, hides it once one has, without a reload. The server renders the notice's
// state at page load; this only keeps it current. Text goes in through textContent only.
"use strict";

(function () {
  const notices = Array.from(document.querySelectorAll("[data-worker-notice]"));
  if (!notices.length) return;
  const url = notices[0].dataset.url;
  const pollMs = Number(notices[0].dataset.pollMs) || 5000;

  function show(status) {
    for (const notice of notices) {
      const message = notice.querySelector("[data-worker-message]");
      if (!status.online && message) message.textContent = status.message;
      notice.hidden = status.online;
    }
  }

  async function poll() {
    try {
      const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (response.status === 401) return; // logged out: stop asking
      if (response.ok) show(await response.json());
    } catch (error) {
      // The server is unreachable: keep what the page shows and try again.
    }
    setTimeout(poll, pollMs);
  }
  poll();
})();
