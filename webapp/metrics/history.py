"""A run's history for code (``GET /api/v1/runs/<id>/history``): several metrics at once,
against step, rollouts or response tokens, every point or downsampled.

The points are the series reads of the run page (:func:`webapp.metrics.selectors.series_points`):
every point, or with ``max_points`` the min/max buckets (each bucket keeps its lowest and
highest point, and the series keeps its first and last: spikes and a NaN survive), read
from the rollups on PostgreSQL.

The x-axis ``rollouts`` / ``tokens`` is the run's consumption counter of the same policy
(``perf/rollouts_total`` / ``perf/response_tokens_total``, as the compare page's
x-axis) at each point's step: its value there, or linearly interpolated between its
neighbouring points (:func:`counter_at`); a counter is 0 at step 0, before any rollout.
A point after the counter's last one, or of a policy without the counter (``_pool``),
has no x (None), and the reply says so in a note.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from trainer import metrics as m
from webapp.metrics import selectors
from webapp.metrics.downsample import Point
from webapp.runs.models import Run

X_AXES = ("step", "rollouts", "tokens")
X_COUNTERS = {"rollouts": m.ROLLOUTS_TOTAL, "tokens": m.RESPONSE_TOKENS_TOTAL}
EVERY_POINT = 2**31 - 1
"""``max_points`` that never downsamples."""


def counter_at(steps: Sequence[int], counter: Sequence[Point]) -> list[float | None]:
    """The counter at each of ``steps``: its value at that step, or linearly interpolated
    between its two nearest points around it; None after its last point or without one.

    ``counter`` is the counter's (step, value) points by step; NaN values are left out. A
    counter whose first point is after step 0 is taken as 0 at step 0 (nothing consumed
    before the first rollout)."""
    known = [(step, value) for step, value in counter if math.isfinite(value)]
    if not known:
        return [None] * len(steps)
    if known[0][0] > 0:
        known.insert(0, (0, 0.0))
    known_steps = [step for step, _ in known]
    found: list[float | None] = []
    for step in steps:
        at = bisect.bisect_left(known_steps, step)
        if at < len(known) and known_steps[at] == step:
            found.append(known[at][1])
        elif at == 0 or at == len(known):
            found.append(None)  # before the first known point (a negative step), or after
        else:
            (s0, v0), (s1, v1) = known[at - 1], known[at]
            found.append(v0 + (v1 - v0) * (step - s0) / (s1 - s0))
    return found


@dataclass
class HistorySeries:
    policy: str
    key: str
    n_points: int
    downsampled: bool
    steps: list[int]
    values: list[float]
    x: list[float | None] | None = None  # None on the step axis


@dataclass
class History:
    run: int
    x: str
    max_points: int | None
    series: list[HistorySeries] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def run_history(
    run: Run,
    *,
    keys: Sequence[str] = (),
    policies: Sequence[str] = (),
    x: str = "step",
    max_points: int | None = None,
    after_step: int = -1,
) -> History:
    """The points of ``run``'s series of ``keys`` x ``policies`` (every one when empty)
    with a step above ``after_step``, every point or at most ``max_points`` a series, and
    their x on axis ``x`` (:data:`X_AXES`)."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {X_AXES}, not {x!r}")
    chosen = selectors.series_of_run(run, keys=keys, policies=policies)
    found = selectors.series_points(
        [s.pk for s in chosen], max_points=max_points or EVERY_POINT, after_step=after_step
    )
    history = History(run=run.pk, x=x, max_points=max_points)
    counters: dict[str, list[Point]] = {}
    if x in X_COUNTERS:
        counters = _counters(run, X_COUNTERS[x], {s.policy for s in chosen})
    lacking: list[str] = []
    for series in chosen:
        points = found[series.pk]
        steps = [step for step, _ in points.points]
        entry = HistorySeries(
            policy=series.policy,
            key=series.key,
            n_points=points.n_points,
            downsampled=points.downsampled,
            steps=steps,
            values=[value for _, value in points.points],
        )
        if x in X_COUNTERS:
            counter = counters.get(series.policy)
            if counter is None and series.policy not in lacking:
                lacking.append(series.policy)
            entry.x = counter_at(steps, counter or [])
        history.series.append(entry)
    if lacking:
        history.notes.append(
            f"no {X_COUNTERS[x]} for {', '.join(sorted(lacking))}: "
            f"their points have no {x} (x is null)"
        )
    return history


def _counters(run: Run, key: str, policies: set[str]) -> dict[str, list[Point]]:
    """Per policy of ``policies`` that has it, every point of ``run``'s counter ``key``."""
    series = selectors.series_of_run(run, keys=[key], policies=sorted(policies))
    points = selectors.series_points([s.pk for s in series], max_points=EVERY_POINT)
    return {s.policy: points[s.pk].points for s in series}
