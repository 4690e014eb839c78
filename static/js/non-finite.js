// Numbers from the server's JSON: the APIs write a non-finite value as the string "NaN",
// "Infinity" or "-Infinity" (webapp/api/http.py::encode_value, webapp/compare/serialize.py),
// since JSON has no literal for them. MRLNonFinite.toNumber(value) turns such a string
// back into the number; any other value comes back as it is (an unknown string as
// undefined).
//
// Loaded before the page scripts that read those numbers (compare.html, run_detail.html).
"use strict";

(function () {
  const NON_FINITE = Object.freeze(Object.assign(Object.create(null), { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity }));

  const toNumber = (value) => (typeof value === "string" ? NON_FINITE[value] : value);

  window.MRLNonFinite = Object.freeze({ toNumber });
})();
