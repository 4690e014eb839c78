"""How much one export may draw: the caps, and the checks that refuse a larger one.

A figure's cost grows with what it draws: matplotlib lays out every panel (about 0.1 s
of CPU per panel and format), draws every point and bar, and a forest plot is one row
per comparison (0.24 in each). Before these caps one query of 200 runs grouped by seed,
16 metrics and 8 policies asked for 25,472 forest rows and held a web worker for 8
minutes and 1.2 GB (issue 44). The views check the counts twice: from the spec and the
runs before anything is built (groups, panels, the forest's rows), then from the built
comparison before anything is drawn (its points, its bars, its rows). An export over a
cap is refused with :class:`ExportTooLarge`, whose message names the count, the cap and
what to narrow; the view answers it as 400 JSON.

The caps fit every figure the product itself exports with room to spare (the presets of
:data:`webapp.compare.views_pages.PRESETS` on the example pools of 2-3 policies plus the
pool mean: the gap pool's 4 slices x 4 policies = 16 panels of 4 regimes, 32,000
points; Figure 12: 4 policies x about 10 tasks x 4 regimes = 160 bars; the gap
significance preset: 1 metric x 4 policies x 3 regimes = 12 rows), and the worst
allowed figure draws in a few seconds (``bench/export_worst.py``, bench/RESULTS.md).
The CSV and LaTeX files are not capped: they cost what the JSON of the same query costs
(the issue's query: 1.1 s), which the page and the client read uncapped.

Pure: no Django, no matplotlib; the counts of built figures are read duck-typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_FIGURE_GROUPS = 16
"""Groups (legend entries, lines per panel) of a curves or bar figure: 8 colours x 2
dashes; a regime comparison has 4-6, a seed comparison as many as seeds."""
MAX_FIGURE_PANELS = 36
"""Panels (metrics x policies) of a curves figure: the gap preset (4 slices) on the
largest pool the composer allows (8 policies and the pool mean); Figure 5's 3 metrics
on it draw 27."""
MAX_FIGURE_POINTS = 80_000
"""Points of a curves figure, summed over its lines (groups x panels x buckets):
16 panels of 10 groups at 500 buckets, or 36 of 16 at 138."""
MAX_FIGURE_BARS = 800
"""Bars of a bar figure (policies x categories x groups): Figure 12 draws about 160."""
MAX_FOREST_ROWS = 128
"""Rows of a significance forest plot (metrics x policies x groups besides the
baseline): 32 inches of figure; the gap preset draws 12."""

GROUPS_ADVICE = "choose fewer runs, or a coarser group_by (e.g. regime rather than seed)"
PANELS_ADVICE = "choose fewer metrics or policies"
POINTS_ADVICE = "choose fewer buckets, metrics, policies or runs, or a coarser group_by"
BARS_ADVICE = "choose fewer policies, metrics or runs, or a coarser group_by"
ROWS_ADVICE = "choose fewer metrics, policies or runs, or a coarser group_by"


class ExportTooLarge(ValueError):
    """An export over a cap: ``what`` it counts, the ``count`` asked for, the ``cap``
    (and its constant's ``cap_name``) and ``advice`` on what to narrow."""

    def __init__(
        self, what: str, count: int, cap: int, cap_name: str, advice: str, detail: str = ""
    ) -> None:
        self.what, self.count, self.cap, self.cap_name = what, count, cap, cap_name
        self.advice = advice
        counted = f"{count:,} {what} ({detail})" if detail else f"{count:,} {what}"
        super().__init__(
            f"export too large: this figure would draw {counted}, over the cap of "
            f"{cap:,} {what} an export may draw; to export it, {advice}"
        )

    def as_json(self) -> dict[str, Any]:
        """The 400 reply's body: ``{"error", "cap", "limit", "count"}``."""
        return {"error": str(self), "cap": self.cap_name, "limit": self.cap, "count": self.count}


@dataclass(frozen=True)
class Cap:
    """One cap: what it counts, its value, its constant's name and the advice."""

    what: str
    limit: int
    name: str
    advice: str

    def check(self, count: int, detail: str = "") -> None:
        """Raises :class:`ExportTooLarge` when ``count`` is over the cap."""
        if count > self.limit:
            raise ExportTooLarge(self.what, count, self.limit, self.name, self.advice, detail)


GROUPS = Cap("groups", MAX_FIGURE_GROUPS, "MAX_FIGURE_GROUPS", GROUPS_ADVICE)
PANELS = Cap("panels", MAX_FIGURE_PANELS, "MAX_FIGURE_PANELS", PANELS_ADVICE)
POINTS = Cap("points", MAX_FIGURE_POINTS, "MAX_FIGURE_POINTS", POINTS_ADVICE)
BARS = Cap("bars", MAX_FIGURE_BARS, "MAX_FIGURE_BARS", BARS_ADVICE)
ROWS = Cap("rows", MAX_FOREST_ROWS, "MAX_FOREST_ROWS", ROWS_ADVICE)


# --------------------------------------------------------------------------- before building


def check_curves_plan(*, groups: int, metrics: int, policies: int) -> None:
    """A curves figure (or the bundle, which holds one) as the spec and runs ask for it:
    ``groups`` groups, ``metrics`` x ``policies`` panels."""
    GROUPS.check(groups)
    PANELS.check(metrics * policies, f"{metrics} metrics x {policies} policies")


def check_bars_plan(*, groups: int) -> None:
    """A bar view export: its groups (the bars come with the build)."""
    GROUPS.check(groups)


def forest_rows_planned(*, groups: int, metrics: int, policies: int) -> int:
    """The significance view's rows: one per metric, policy and group besides the
    baseline."""
    return metrics * policies * max(groups - 1, 0)


def check_significance_plan(*, groups: int, metrics: int, policies: int) -> None:
    """A significance forest plot as the spec and runs ask for it."""
    rows = forest_rows_planned(groups=groups, metrics=metrics, policies=policies)
    ROWS.check(rows, f"{metrics} metrics x {policies} policies x {max(groups - 1, 0)} groups")


# --------------------------------------------------------------------------- once built


def curve_points(panels: Sequence[Any]) -> int:
    """The points a curves figure draws: every trace's length, over every panel (a
    :class:`webapp.compare.assemble.Panel`'s ``traces``, each with an ``x`` array)."""
    return sum(len(trace.x) for panel in panels for trace in panel.traces)


def check_curves_built(panels: Sequence[Any]) -> None:
    """The built comparison's points (:func:`curve_points`)."""
    POINTS.check(curve_points(panels))


def bar_count(panels: Sequence[Any]) -> int:
    """The bars a bar figure draws at most: per panel (a
    :class:`webapp.compare.bars.BarPanel`) its categories times its traces."""
    return sum(len(panel.categories) * len(panel.traces) for panel in panels)


def check_bars_built(panels: Sequence[Any]) -> None:
    """The built bar chart's bars (:func:`bar_count`)."""
    BARS.check(bar_count(panels))


def check_significance_built(rows: Sequence[Any]) -> None:
    """The built significance table's rows, one forest row each."""
    ROWS.check(len(rows))
