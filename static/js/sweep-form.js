// The sweep form's run count ("Launches 6 runs: 2 regimes x 3 seeds"), kept up to date
// as regimes, seeds and values change; the server renders the same count first.
(function () {
  "use strict";
  const form = document.querySelector('[data-testid="sweep-form"]');
  const count = document.getElementById("sweep-count");
  if (!form || !count) return;

  function items(text) {
    const parts = (text || "").replace(/;/g, ",").split(",").map((part) => part.trim());
    return new Set(parts.filter((part) => part !== "")).size;
  }
  function plural(n, word) {
    return n + " " + word + (n === 1 ? "" : "s");
  }
  function update() {
    const regimes = form.querySelectorAll('input[name="regimes"]:checked').length;
    const seeds = items(form.elements.seeds ? form.elements.seeds.value : "");
    const swept = form.elements.param_path && form.elements.param_path.value !== "";
    const values = swept ? items(form.elements.param_values.value) : 1;
    count.querySelector('[data-part="runs"]').textContent = plural(regimes * seeds * values, "run");
    count.querySelector('[data-part="regimes"]').textContent = plural(regimes, "regime");
    count.querySelector('[data-part="seeds"]').textContent = plural(seeds, "seed");
    count.querySelector('[data-part="values"]').textContent = plural(values, "value");
    count.querySelector('[data-part="values-wrap"]').hidden = !swept;
  }
  form.addEventListener("input", update);
  form.addEventListener("change", update);
  update();
})();
