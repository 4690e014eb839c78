// The dashboard's demo card while the demo's zoo builds: reloads the page every few
// seconds (data-reload-ms on the card) until the server says the build is done. A file
// rather than an inline <script>, which the Content-Security-Policy (webapp/core/csp.py)
// does not run.
"use strict";

(function () {
  const card = document.querySelector("[data-reload-ms]");
  if (!card) return;
  const delay = Number(card.dataset.reloadMs) || 3000;
  setTimeout(() => window.location.reload(), delay);
})();
