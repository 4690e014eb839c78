// The runs list's column chooser: the optional columns (owner, job, created) are hidden
// by the table's hide-<column> classes; a checked box shows its column, and the choice
// is kept in localStorage for the next visit.
(function () {
  "use strict";
  const KEY = "mrl.runs-list.columns";
  const table = document.querySelector('[data-testid="run-table"]');
  const chooser = document.querySelector('[data-testid="column-chooser"]');
  if (!table || !chooser) return;
  const boxes = Array.from(chooser.querySelectorAll('input[name="show-column"]'));

  function saved() {
    try {
      const value = JSON.parse(window.localStorage.getItem(KEY) || "[]");
      return Array.isArray(value) ? value : [];
    } catch (error) {
      return [];
    }
  }
  function apply(shown) {
    for (const box of boxes) {
      box.checked = shown.includes(box.value);
      table.classList.toggle("hide-" + box.value, !box.checked);
    }
  }
  chooser.addEventListener("change", function () {
    const shown = boxes.filter((box) => box.checked).map((box) => box.value);
    try {
      window.localStorage.setItem(KEY, JSON.stringify(shown));
    } catch (error) {
      // storage off: the choice lasts this page only
    }
    apply(shown);
  });
  apply(saved());
})();
