"""The final and best value of chosen metrics for a page of runs (``GET /api/v1/runs``),
in a fixed number of statements whatever the number of runs.

Per series (run, policy, key):

- ``final``: the value at its last step (``final_step``), NaN included: a loss that went
  NaN at the end is what the run ended with;
- ``best``: its highest value (the lowest with ``lower_is_better``), NaN left out, and
  ``best_step`` where it was reached (on a tie: the latest step when higher is better,
  the earliest when lower is; PostgreSQL's ``max``/``min`` of ``ARRAY[value, step]``);
  None when the series has no finite or infinite value;
- ``n_points``.

On PostgreSQL the best comes from the rollups (:mod:`webapp.metrics.series_rollups`):
each series' steps up to its watermark are covered by the fewest rollup blocks
(:func:`webapp.metrics.downsample.cover`, the largest blocks first), whose stored lowest
and highest (value, step) are merged, and only the steps the blocks do not cover (the
edges finer than 64 steps, and the steps after the watermark) are read from the points.
A block's highest value is NaN when the block holds a NaN (NaN sorts above every number):
such a block's points are read instead, which happens only for series with a NaN. The
statements: one for the last points, one for the blocks, one for the uncovered steps (and
one for the NaN blocks, when there are any). Another database (the demo's SQLite) reads
every point of the series, in one statement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.db import connection, transaction

from webapp.metrics import retention
from webapp.metrics.downsample import ROLLUP_SIZES, BlockRun, StepRange, cover
from webapp.metrics.models import MetricPoint, MetricSeries, SeriesRollup
from webapp.metrics.selectors import as_float


@dataclass(frozen=True)
class SeriesValues:
    """One series' final and best value (see the module's docstring)."""

    n_points: int
    final: float
    final_step: int
    best: float | None
    best_step: int | None


Extreme = tuple[float, int]
"""(value, step), compared in PostgreSQL's order of ``ARRAY[value, step]`` (values
finite or infinite: NaN never gets here)."""


def _better(candidate: Extreme | None, current: Extreme | None, lower: bool) -> Extreme | None:
    if candidate is None:
        return current
    if current is None:
        return candidate
    if lower:
        return candidate if candidate < current else current
    return candidate if candidate > current else current


def series_values_from_points(
    points: Iterable[tuple[int, float]], *, lower_is_better: bool
) -> SeriesValues | None:
    """:class:`SeriesValues` of a series' points (step, value) in any order; None without
    points. The reference of the rollup path, and the portable path."""
    count = 0
    last: tuple[int, float] | None = None
    best: Extreme | None = None
    for step, value in points:
        count += 1
        if last is None or step > last[0]:
            last = (step, value)
        if not math.isnan(value):
            best = _better((value, step), best, lower_is_better)
    if last is None:
        return None
    return SeriesValues(
        n_points=count,
        final=last[1],
        final_step=last[0],
        best=None if best is None else best[0],
        best_step=None if best is None else best[1],
    )


@lru_cache(maxsize=4096)
def plan(
    last_step: int, rolled_through: int, largest: int
) -> tuple[tuple[BlockRun, ...], tuple[StepRange, ...]]:
    """Which rollup blocks and which steps of the points make up a series' steps 0 ..
    ``last_step``: :func:`webapp.metrics.downsample.cover`'s whole blocks, and also the
    64-step block holding the watermark, which the sweep stores with the points it had
    up to it (current for those steps: a late point at or below the watermark lowers
    it), instead of reading those steps from the points: after the sweep, a series'
    last steps are one block row, not up to 63 points. Cached: a lab's series mostly
    share their last step and watermark."""
    blocks, raw = cover(0, last_step, rolled_through, largest)
    if rolled_through >= 0:
        partial = rolled_through // ROLLUP_SIZES[0]
        edge = (partial * ROLLUP_SIZES[0], rolled_through)
        if edge in raw:
            raw.remove(edge)
            blocks.append((0, partial, partial))
    return tuple(blocks), tuple(raw)


def int_array(values: Iterable[int]) -> str:
    """An array parameter as PostgreSQL's text form, ``{1,2,3}`` (cast in the SQL): for
    50,000 series' 100,000 block ranges, psycopg's per-element list adaptation took 0.8 s."""
    return "{" + ",".join(map(str, values)) + "}"


def _table(model: type[Any]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


_LAST_SQL = """
    SELECT s.id, s.rolled_through, last.step, last.value
    FROM unnest(%(ids)s::bigint[]) AS i(id)
    JOIN {series} s ON s.id = i.id
    CROSS JOIN LATERAL (
        SELECT step, value FROM {points} WHERE series_id = i.id ORDER BY step DESC LIMIT 1
    ) AS last
"""
# Per series, its blocks merged (one row a series, not one a block): their points, the
# lowest and the highest (value, step) of the blocks whose extreme is a number, and the
# blocks whose highest is NaN (a NaN in the block hides its highest number).
_BLOCKS_SQL = """
    SELECT t.id, sum(r.n_points),
           min(ARRAY[r.low_value, r.low_step::float8]) FILTER (WHERE r.low_value <> 'NaN'),
           max(ARRAY[r.high_value, r.high_step::float8]) FILTER (WHERE r.high_value <> 'NaN'),
           array_agg(ARRAY[r.level, r.block]) FILTER (WHERE r.high_value = 'NaN')
    FROM unnest(%(ids)s::bigint[], %(levels)s::int[], %(firsts)s::int[], %(lasts)s::int[])
         AS t(id, level, k1, k2)
    JOIN {rollups} r
      ON r.series_id = t.id AND r.level = t.level AND r.block BETWEEN t.k1 AND t.k2
    GROUP BY t.id
"""
# NaN is left out of the extremes (FILTER), as the best never is NaN; counted all the same.
_RAW_SQL = """
    SELECT t.id, count(*),
           min(ARRAY[p.value, p.step::float8]) FILTER (WHERE p.value <= 'Infinity'),
           max(ARRAY[p.value, p.step::float8]) FILTER (WHERE p.value <= 'Infinity')
    FROM unnest(%(ids)s::bigint[], %(los)s::int[], %(his)s::int[]) AS t(id, lo, hi)
    JOIN {points} p ON p.series_id = t.id AND p.step BETWEEN t.lo AND t.hi
    GROUP BY t.id
"""


@dataclass
class _Merge:
    """What is known of one series so far."""

    count: int = 0
    low: Extreme | None = None
    high: Extreme | None = None

    def add(self, count: int, low: Extreme | None, high: Extreme | None) -> None:
        self.count += count
        self.low = _better(low, self.low, True)
        self.high = _better(high, self.high, False)


def _raw_extremes(
    cursor: object, ranges: Sequence[tuple[int, int, int]]
) -> list[tuple[int, int, Extreme | None, Extreme | None]]:
    """Per series of ``ranges`` (series id, first step, last step): its points' count and
    lowest and highest non-NaN (value, step) over those ranges."""
    if not ranges:
        return []
    cursor.execute(  # type: ignore[attr-defined]
        _RAW_SQL.format(points=_table(MetricPoint)),
        {
            "ids": int_array([pk for pk, _, _ in ranges]),
            "los": int_array([lo for _, lo, _ in ranges]),
            "his": int_array([hi for _, _, hi in ranges]),
        },
    )
    return [
        (pk, count, _extreme(low), _extreme(high))
        for pk, count, low, high in cursor.fetchall()  # type: ignore[attr-defined]
    ]


def _extreme(pair: Sequence[float] | None) -> Extreme | None:
    """An ``ARRAY[value, step]`` of the SQL as (value, step)."""
    return None if pair is None else (float(pair[0]), int(pair[1]))


def _values_postgres(series_ids: Sequence[int], lower_is_better: bool) -> dict[int, SeriesValues]:
    largest = ROLLUP_SIZES[-1]
    merged: dict[int, _Merge] = {}
    finals: dict[int, tuple[int, float]] = {}
    blocks: list[tuple[int, BlockRun]] = []
    raw: list[tuple[int, int, int]] = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            _LAST_SQL.format(series=_table(MetricSeries), points=_table(MetricPoint)),
            {"ids": int_array(series_ids)},
        )
        for pk, rolled_through, last_step, last_value in cursor.fetchall():
            finals[pk] = (last_step, as_float(last_value))
            merged[pk] = _Merge()
            planned_blocks, planned_raw = plan(last_step, rolled_through, largest)
            blocks += [(pk, run) for run in planned_blocks]
            raw += [(pk, lo, hi) for lo, hi in planned_raw]
        nan_blocks: list[tuple[int, int, int]] = []
        if blocks:
            cursor.execute(
                _BLOCKS_SQL.format(rollups=_table(SeriesRollup)),
                {
                    "ids": int_array([pk for pk, _ in blocks]),
                    "levels": int_array([run[0] for _, run in blocks]),
                    "firsts": int_array([run[1] for _, run in blocks]),
                    "lasts": int_array([run[2] for _, run in blocks]),
                },
            )
            for pk, n, low, high, hidden in cursor:
                merged[pk].add(int(n), _extreme(low), _extreme(high))
                for level, block in hidden or ():  # read these blocks' points instead
                    size = ROLLUP_SIZES[level]
                    nan_blocks.append((pk, block * size, (block + 1) * size - 1))
        for pk, count, low, high in _raw_extremes(cursor, raw):
            merged[pk].add(count, low, high)
        for pk, _count, low, high in _raw_extremes(cursor, nan_blocks):
            merged[pk].add(0, low, high)  # counted with its block
    found = {}
    for pk, known in merged.items():
        best = known.low if lower_is_better else known.high
        last_step, last_value = finals[pk]
        found[pk] = SeriesValues(
            n_points=known.count,
            final=last_value,
            final_step=last_step,
            best=None if best is None else best[0],
            best_step=None if best is None else best[1],
        )
    return found


def _values_portable(series_ids: Sequence[int], lower_is_better: bool) -> dict[int, SeriesValues]:
    points: dict[int, list[tuple[int, float]]] = {pk: [] for pk in series_ids}
    rows = MetricPoint.objects.filter(series_id__in=series_ids).values_list(
        "series_id", "step", "value"
    )
    for series_id, step, value in rows:
        points[series_id].append((step, as_float(value)))
    found = {}
    for pk, series_points in points.items():
        values = series_values_from_points(series_points, lower_is_better=lower_is_better)
        if values is not None:
            found[pk] = values
    return found


def series_values(
    series_ids: Sequence[int], *, lower_is_better: bool = False
) -> dict[int, SeriesValues]:
    """:class:`SeriesValues` of each of ``series_ids`` that has points."""
    if not series_ids:
        return {}
    if connection.vendor == "postgresql":
        found = _values_postgres(series_ids, lower_is_better)
        # a series without points may be one whose raw points were dropped: its pack's
        missing = [pk for pk in series_ids if pk not in found]
        for pk, points in retention.dropped_points(missing).items():
            values = series_values_from_points(points, lower_is_better=lower_is_better)
            if values is not None:
                found[pk] = values
        return found
    return _values_portable(series_ids, lower_is_better)


RunValues = dict[int, dict[str, dict[str, SeriesValues]]]
"""run id -> metric key -> policy -> its values."""


def run_values(
    run_ids: Sequence[int],
    keys: Sequence[str],
    *,
    policies: Sequence[str] = (),
    lower_is_better: bool = False,
) -> RunValues:
    """The final and best values of ``keys`` (every policy's, or ``policies``') of each
    of ``run_ids``: one statement for the series, then :func:`series_values`."""
    found: RunValues = {pk: {} for pk in run_ids}
    if not run_ids or not keys:
        return found
    series = MetricSeries.objects.filter(run_id__in=run_ids, key__in=keys)
    if policies:
        series = series.filter(policy__in=policies)
    index = {
        pk: (run_id, key, policy)
        for pk, run_id, key, policy in series.values_list("pk", "run_id", "key", "policy")
    }
    for pk, values in series_values(list(index), lower_is_better=lower_is_better).items():
        run_id, key, policy = index[pk]
        found[run_id].setdefault(key, {})[policy] = values
    return found
