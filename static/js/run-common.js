// What the run page's scripts share: the page's config (from the json_script), element
// building through textContent only (never innerHTML: every string from the server is
// text) and JSON reads of the API. Loaded before run-charts.js, run-transfers.js and
// run-page.js, which each add one part of the page to window.MRLRun.
"use strict";

window.MRLRun = (function () {
  const config = JSON.parse(document.getElementById("run-page-config").textContent);
  // Okabe-Ito: colour-blind safe, one colour per policy in pool order.
  const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000", "#999999"];

  function el(tag, attrs = {}, text = "") {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
    if (text) node.textContent = text;
    return node;
  }

  async function getJSON(url, params) {
    const query = params ? "?" + params.toString() : "";
    const response = await fetch(url + query, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    return response.json();
  }

  const policyColour = new Map(config.policies.map((name, i) => [name, PALETTE[i % PALETTE.length]]));
  return { config, el, getJSON, policyColour };
})();
