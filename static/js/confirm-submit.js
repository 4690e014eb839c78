// Forms that ask before they post: a form with data-confirm="question" shows the question
// and posts only when the user says OK. A listener in a file rather than an onsubmit=
// attribute, which the Content-Security-Policy (webapp/core/csp.py) does not run.
"use strict";

(function () {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
})();
