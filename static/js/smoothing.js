// Curve smoothing shared by the pages that draw curves: TensorBoard's debiased EMA, the
// same as webapp.compare.stats.ema (which smooths the compare page and its exports on the
// server; tests/browser/test_run_charts.py checks that the two agree).
"use strict";

window.MRLSmoothing = (function () {
  // s_k = w * s_{k-1} + (1 - w) * y_k with s_0 = 0 over the finite values y_1, y_2, ...;
  // the output at y_k's position is s_k / (1 - w^k), so the first output is the first
  // value (no pull towards zero at the start). A non-finite value is skipped by the
  // recursion and passed through at its own position; weight 0 returns a copy.
  function ema(values, weight) {
    if (!(weight >= 0 && weight < 1)) throw new RangeError(`weight must be in [0, 1), not ${weight}`);
    const out = Array.from(values);
    if (weight === 0) return out;
    let state = 0;
    let count = 0;
    for (let i = 0; i < out.length; i++) {
      const y = out[i];
      if (!Number.isFinite(y)) continue;
      state = weight * state + (1 - weight) * y;
      count += 1;
      out[i] = state / (1 - Math.pow(weight, count));
    }
    return out;
  }

  return { ema };
})();
