/*
 * The compose page's "Build <recipe> zoo" buttons (next to a policy's "not built" error):
 * each submits the small #zoo-build-form (outside the compose form); here it is sent
 * with fetch() instead, so the page stays and nothing typed in the form is lost. The
 * answer is shown beside the button ("Building the gap zoo (started): 0 of 3 models
 * ready."), and while the build runs its progress is asked for every few seconds; once
 * built: "Built: press Preview again". Without this script the browser posts the form and
 * comes back to the page with a message. Vanilla JS, no libraries.
 */
(function () {
  "use strict";

  var buildForm = document.getElementById("zoo-build-form");
  if (!buildForm || !window.fetch) {
    return;
  }
  var POLL_MS = 4000;

  function boxes(recipe) {
    return document.querySelectorAll('.zoo-build[data-zoo-recipe="' + recipe + '"]');
  }

  function show(recipe, text, state) {
    Array.prototype.forEach.call(boxes(recipe), function (box) {
      var status = box.querySelector('[data-role="zoo-build-status"]');
      var button = box.querySelector("button");
      box.setAttribute("data-state", state);
      if (status) {
        status.textContent = text;
      }
      if (button) {
        button.disabled = state === "building";
        button.hidden = state === "building" || state === "ready";
      }
    });
  }

  function describe(recipe, data) {
    if (data.state === "ready") {
      return "Built: press Preview again.";
    }
    if (data.state === "failed") {
      return "The build failed: " + data.error;
    }
    if (data.state === "queued" || data.state === "building") {
      return "Building the " + recipe + " zoo: " + data.progress + ".";
    }
    return "The build stopped before it finished; build again.";
  }

  function follow(recipe) {
    var url = buildForm.action + "?recipe=" + encodeURIComponent(recipe);
    window.setTimeout(function () {
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (response) {
          return response.json();
        })
        .then(function (data) {
          var active = data.state === "queued" || data.state === "building";
          show(recipe, describe(recipe, data), active ? "building" : data.state);
          if (active) {
            follow(recipe);
          }
        })
        .catch(function () {
          follow(recipe);
        });
    }, POLL_MS);
  }

  buildForm.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (!button || !button.value) {
      return; // not one of the buttons: let the browser post it
    }
    event.preventDefault();
    var recipe = button.value;
    var body = new FormData(buildForm);
    body.append("recipe", recipe);
    show(recipe, "Starting the build of the " + recipe + " zoo…", "building");
    fetch(buildForm.action, {
      method: "POST",
      body: body,
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    })
      .then(function (response) {
        return response.json().then(function (data) {
          return { ok: response.ok, data: data };
        });
      })
      .then(function (answer) {
        show(recipe, answer.data.message || describe(recipe, answer.data), answer.ok ? "building" : "failed");
        if (answer.ok) {
          follow(recipe);
        }
      })
      .catch(function () {
        show(recipe, "Could not reach the server; try again.", "failed");
      });
  });

  var followed = {};
  Array.prototype.forEach.call(document.querySelectorAll('.zoo-build[data-state="building"]'), function (box) {
    var recipe = box.getAttribute("data-zoo-recipe");
    if (!followed[recipe]) {
      followed[recipe] = true;
      follow(recipe);
    }
  });
})();
