"""Retention of raw points (issue 35): a finished run's raw points, once packed and rolled
up, can be dropped; every page and export reads the same numbers from its packs.

The raw points table is most of the database (about 60-80 bytes a point with its primary
key, against 12 in a :class:`~webapp.metrics.models.SeriesPack` and about 13 in the level-0
rollup blocks: docs/CAPACITY.md). A run that is finished, packed and rolled up through
each series' last step holds every point twice more; :func:`drop_packed_points` deletes
its raw copy, series by series, where nothing would be lost:

- **Packs hold no wall time.** The trainer stamps every point of a step with one wall
  time (``trainer/run.py``: rank 0 writes all policies' metrics and the pool's at one
  ``now``), so the run keeps one series raw, its clock: the pool's step time
  (:data:`CLOCK_KEY` of :data:`CLOCK_POLICY`, written every step). A series is dropped only
  when every point's wall time is the clock's at that step (or both are missing); the
  compare page's wall-clock axis reads a dropped series' wall times from the clock
  (:func:`dropped_wall_columns`). The clock stays raw, so the composer's step rates
  (:mod:`webapp.metrics.step_rates`) and the run page's recent-step pace read it as before.
- **Evaluation series** (``eval/...``: a few points a checkpoint, written later by the
  evaluation job with their own wall times) stay raw: the evaluation panel and the bar
  views read them as before.
- A series whose pack does not hold exactly its points, or whose rollups stop short of
  its last step, is kept.

So a dropped run keeps about 1-2% of its raw points (one of its ~50-80 series, and the
evaluations). The rule for readers: a series with a pack and no raw points was dropped;
its points are its pack's (:func:`dropped_points`). Each reader of raw points falls back
to it for the series it found no points of.

**A late batch** (a resubmitted or resumed run) must not lose the dropped points, since
ingestion deletes a run's packs when new points arrive. Ingestion's
:func:`webapp.metrics.series_packs.ingest_lock`, at the start of its transaction, sees a
packed run and first writes the dropped series' points back from their packs, with their
wall times from the clock (:func:`webapp.metrics.series_packs.points_restore`): the batch
then meets every point it would have met, duplicates are told apart as before, and the
packs are dropped only once the points are back.

**Races.** :func:`drop_packed_points` works on a run inside a transaction holding the
run's pack lock exclusively (``pg_try_advisory_xact_lock``, as the pack and rollup sweeps
do; a run whose ingestion is in flight is left for the next pass), and checks again,
under the lock, that the run is still packed and each series' pack still matches its
points. Ingestion holds the lock shared, so it either finished before (and the run is no
longer packed, or its packs match) or it starts after and restores.

PostgreSQL only, as packs and rollups; elsewhere (the demo's SQLite) nothing is dropped
and the fallbacks find nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.utils import timezone

from webapp.metrics import series_packs
from webapp.metrics.downsample import Point, bucket_width
from webapp.metrics.models import MetricPoint, MetricSeries, SeriesPack
from webapp.runs.models import Run

CLOCK_POLICY = series_packs.CLOCK_POLICY
CLOCK_KEY = series_packs.CLOCK_KEY
"""The series a dropped run keeps raw: the pool's step time, written at every step with
the step's wall time (the run's clock)."""
KEPT_PREFIXES = ("eval/",)
"""Keys whose series are never dropped (the evaluations: few points, their own wall times)."""


def retention_enabled() -> bool:
    return series_packs.packs_enabled()


def _table(model: type[Any]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


# --------------------------------------------------------------------------- dropping


@dataclass(frozen=True)
class RunDrop:
    """What :func:`drop_packed_points` did (or, dry, would do) to one run."""

    run_id: int
    series_dropped: int
    points_dropped: int
    series_kept: int


# Per series of the run: its raw points' count and highest step, and how many of them
# have a wall time other than the clock's at their step; with its pack's point count and
# its rollup watermark. One pass over the run's points (index scans of the primary key).
_DROPPABLE_SQL = """
    WITH clock AS (
        SELECT id FROM {series} WHERE run_id = %(run)s AND policy = %(clock_policy)s
                                      AND key = %(clock_key)s
    )
    SELECT s.id, s.key, s.rolled_through, octet_length(k.steps) / 4, agg.n, agg.hi, agg.off
    FROM {series} s
    LEFT JOIN {packs} k ON k.series_id = s.id
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, max(p.step) AS hi,
               count(*) FILTER (WHERE p.wall_time IS DISTINCT FROM c.wall_time) AS off
        FROM {points} p
        LEFT JOIN {points} c ON c.series_id = (SELECT id FROM clock) AND c.step = p.step
        WHERE p.series_id = s.id
    ) AS agg
    WHERE s.run_id = %(run)s AND s.id NOT IN (SELECT id FROM clock)
"""


def _droppable(cursor: object, run_id: int) -> tuple[list[tuple[int, int]], int]:
    """([(series id, raw points)] of the run's series that can be dropped, how many of
    its series with raw points are kept)."""
    cursor.execute(  # type: ignore[attr-defined]
        _DROPPABLE_SQL.format(
            series=_table(MetricSeries), packs=_table(SeriesPack), points=_table(MetricPoint)
        ),
        {"run": run_id, "clock_policy": CLOCK_POLICY, "clock_key": CLOCK_KEY},
    )
    dropped: list[tuple[int, int]] = []
    kept = 1  # the clock, or the run has none
    for pk, key, rolled, packed, n, hi, off in cursor.fetchall():  # type: ignore[attr-defined]
        if n == 0:
            continue  # nothing raw: dropped already, or an empty series
        if (
            packed == n
            and hi is not None
            and rolled >= hi
            and off == 0
            and not key.startswith(KEPT_PREFIXES)
        ):
            dropped.append((pk, n))
        else:
            kept += 1
    return dropped, kept


# A run that still has a packed series with raw points other than those kept (a run done
# already has none: one index probe a series, so a pass over the old runs stays cheap).
_LEFT_SQL = """
    SELECT r.id FROM {runs} r
    WHERE r.state = ANY(%(states)s) AND r.series_packed AND r.finished_at <= %(cutoff)s
      AND EXISTS (
        SELECT 1 FROM {series} s JOIN {packs} k ON k.series_id = s.id
        WHERE s.run_id = r.id AND NOT (s.policy = %(clock_policy)s AND s.key = %(clock_key)s)
              AND NOT s.key LIKE ANY(%(kept)s)
              AND EXISTS (SELECT 1 FROM {points} p WHERE p.series_id = s.id)
      )
    ORDER BY r.finished_at, r.id
"""


def runs_to_drop(older_than_days: float, limit: int | None = None) -> list[int]:
    """Ids of the runs whose raw points may go, oldest first: finished more than
    ``older_than_days`` ago, packed, with raw points left that are not kept anyway."""
    if not retention_enabled():
        return []
    sql = _LEFT_SQL.format(
        runs=_table(Run),
        series=_table(MetricSeries),
        packs=_table(SeriesPack),
        points=_table(MetricPoint),
    )
    params = {
        "states": sorted(Run.TERMINAL_STATES),
        "cutoff": timezone.now() - dt.timedelta(days=older_than_days),
        "clock_policy": CLOCK_POLICY,
        "clock_key": CLOCK_KEY,
        "kept": [prefix.replace("%", r"\%").replace("_", r"\_") + "%" for prefix in KEPT_PREFIXES],
    }
    if limit is not None:
        sql += " LIMIT %(limit)s"
        params["limit"] = limit
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [pk for (pk,) in cursor.fetchall()]


def drop_run_points(run_id: int, *, dry_run: bool = False) -> RunDrop | None:
    """Drop the raw points of run ``run_id``'s droppable series (see the module), in one
    transaction holding its pack lock; None when the lock is taken (an ingestion or a
    sweep in flight) or the run is no longer packed. ``dry_run``: count, delete nothing."""
    if not retention_enabled():
        return None
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_xact_lock(%s, %s)", [series_packs.PACK_LOCK_CLASS, run_id]
        )
        if not cursor.fetchone()[0]:
            return None
        if not Run.objects.filter(pk=run_id, series_packed=True).exists():
            return None  # new points came in since it was chosen
        cursor.execute(series_packs.SERIES_SCAN_SETTINGS_SQL)
        dropped, kept = _droppable(cursor, run_id)
        points = sum(n for _, n in dropped)
        if dropped and not dry_run:
            cursor.execute(
                f"DELETE FROM {_table(MetricPoint)} WHERE series_id = ANY(%s::bigint[])",
                [[pk for pk, _ in dropped]],
            )
            points = cursor.rowcount
    return RunDrop(run_id, len(dropped), points, kept)


def drop_packed_points(
    older_than_days: float, *, dry_run: bool = False, max_runs: int | None = None
) -> list[RunDrop]:
    """Drop the raw points of the runs :func:`runs_to_drop` names, one transaction a run,
    until ``max_runs`` runs lost points (a run whose series all stay raw, their wall times
    not the clock's, does not count, so such runs never hold the others back); what was
    (``dry_run``: would be) dropped of each run that was not busy."""
    done: list[RunDrop] = []
    for run_id in runs_to_drop(older_than_days):
        if max_runs is not None and len(done) >= max_runs:
            break
        result = drop_run_points(run_id, dry_run=dry_run)
        if result is not None and result.series_dropped:
            done.append(result)
    return done


# --------------------------------------------------------------------------- readers


_DROPPED_SQL = """
    SELECT k.series_id, k.steps, k."values" FROM {packs} k
    WHERE k.series_id = ANY(%(ids)s::bigint[])
          AND NOT EXISTS (SELECT 1 FROM {points} p WHERE p.series_id = k.series_id)
"""


def _dropped_columns(series_ids: Sequence[int]) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(series id, steps, values) by step of those of ``series_ids`` whose raw points were
    dropped (they have a pack and no points)."""
    if not retention_enabled() or not series_ids:
        return
    sql = _DROPPED_SQL.format(packs=_table(SeriesPack), points=_table(MetricPoint))
    rows = list(series_packs.binary_stream(sql, {"ids": sorted(set(series_ids))}))
    for pk, steps, values in rows:
        step_array = np.frombuffer(bytes(steps), dtype=">i4").astype(np.int64)
        value_array = np.frombuffer(bytes(values), dtype=">f8").astype(np.float64)
        order = np.argsort(step_array, kind="stable")
        yield pk, step_array[order], value_array[order]


def dropped_columns(series_ids: Sequence[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """(steps, values) by step of those of ``series_ids`` whose raw points were dropped,
    from their packs; the others are left out (read their points)."""
    return {pk: (steps, values) for pk, steps, values in _dropped_columns(series_ids)}


def minmax_reduced(steps: np.ndarray, values: np.ndarray, max_points: int) -> list[Point]:
    """:func:`webapp.metrics.downsample.minmax_buckets` of the points ``(steps[i],
    values[i])`` (steps ascending, unique, >= 0) in numpy, point for point: every point
    when they fit in ``max_points``, else the first, the last and each bucket's lowest and
    highest in PostgreSQL's order of ``ARRAY[value, step]`` (NaN above every number)."""
    n = len(steps)
    if n <= max_points:
        return list(zip(steps.tolist(), values.tolist(), strict=True))
    width = bucket_width(int(steps[0]), int(steps[-1]), max_points)
    bucket = steps // width
    nan = np.isnan(values)
    # sorted by (bucket, NaN, value, step): a bucket's first is its lowest, its last its
    # highest (the primary key is lexsort's last)
    order = np.lexsort((steps, np.where(nan, 0.0, values), nan, bucket))
    ordered = bucket[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:] - 1, n - 1]
    keep = np.zeros(n, dtype=bool)
    keep[order[starts]] = keep[order[ends]] = True
    keep[0] = keep[-1] = True
    return list(zip(steps[keep].tolist(), values[keep].tolist(), strict=True))


def dropped_points(series_ids: Sequence[int]) -> dict[int, list[Point]]:
    """The points (step, value) by step of those of ``series_ids`` whose raw points were
    dropped, from their packs; the others are left out (read their points)."""
    return {
        pk: list(zip(steps.tolist(), values.tolist(), strict=True))
        for pk, steps, values in _dropped_columns(series_ids)
    }


def dropped_wall_columns(
    series_ids: Sequence[int], lo: int, hi: int
) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """(series id, steps, values, wall times) of the points in [lo, hi] of those of
    ``series_ids`` whose raw points were dropped: the pack's points, each with its run's
    clock's wall time at its step (NaN where the clock has none), as
    :func:`drop_run_points` checked them to be."""
    found = list(_dropped_columns(series_ids))
    if not found:
        return
    run_of = dict(
        MetricSeries.objects.filter(pk__in=[pk for pk, _, _ in found]).values_list("pk", "run_id")
    )
    clocks: dict[int, dict[int, float]] = {run_id: {} for run_id in set(run_of.values())}
    rows = MetricPoint.objects.filter(
        series__run_id__in=list(clocks),
        series__policy=CLOCK_POLICY,
        series__key=CLOCK_KEY,
        wall_time__isnull=False,
    ).values_list("series__run_id", "step", "wall_time")
    for run_id, step, wall_time in rows:
        clocks[run_id][step] = wall_time
    for pk, steps, values in found:
        keep = (steps >= lo) & (steps <= hi)
        steps, values = steps[keep], values[keep]
        clock = clocks[run_of[pk]]
        walls = np.array([clock.get(step, np.nan) for step in steps.tolist()], dtype=np.float64)
        yield pk, steps, values, walls
