"""Read a comparison's runs, series and points from the database; build it.

The I/O half of the comparison engine (the arithmetic is :mod:`webapp.compare.assemble`,
pure numpy). Reading, in a few statements whatever the number of runs (PostgreSQL):

1. the series of the selected runs x policies x metrics (plus the x-axis counter),
   :func:`series_index`;
2. the common step grid: ``lo``/``hi`` = the lowest and highest step of the selected
   metric series (their ``first_step``/``last_step``, which ingestion keeps:
   :func:`step_range`), ``G = min(buckets, hi - lo + 1)``
   buckets of equal width (:func:`webapp.compare.assemble.bucket_of`);
3. the points of those series in [lo, hi] as packed binary columns, one row per
   series (an index-only scan), which :func:`webapp.compare.assemble.buckets_of`
   buckets. A series of a finished run is read instead from its packed copy where the
   status sync has made one (:mod:`webapp.metrics.series_packs`; about 6x faster),
   except on the wall-time axis, which needs the points' wall times. A series not
   packed yet is read from its level-0 rollup blocks' packed points up to its watermark
   and from the points after it (:func:`webapp.metrics.series_rollups.chunk_columns`),
   all in one snapshot (:data:`ONE_SNAPSHOT_SQL`).

Another database (the demo's SQLite) reads the points as rows and buckets them in
Python (:func:`buckets_portable`, also the reference of the tests). The summary table
reads per series its final, best and mean finite value in SQL (:func:`run_summaries`)
or from every point (:func:`run_summaries_portable`).

:func:`comparison_build` and :func:`summary_build` are the entry points: the reads
above, then :func:`webapp.compare.assemble.comparison_assemble` /
:func:`~webapp.compare.assemble.summary_assemble`; :func:`bars_build` and
:func:`significance_build` read one value per series (:func:`final_values`) for the bar
views and the significance view.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection, transaction
from django.db.models import Max, Min, Q
from django.http import Http404
from django.urls import reverse

from trainer.metrics import POOL
from webapp.compare.assemble import (
    X_COUNTERS,
    Buckets,
    Comparison,
    SeriesIndex,
    Summary,
    bucket_table,
    buckets_from_rows,
    buckets_of,
    buckets_of_many,
    comparison_assemble,
    empty_buckets,
    groups_of,
    policies_of,
    summaries_from_rows,
    summary_assemble,
)
from webapp.compare.bars import (
    NO_EVALUATIONS,
    BarChart,
    BarOptions,
    FinalValue,
    choose_baseline,
    eval_key,
    eval_suites,
    per_task,
    relative,
)
from webapp.compare.models import SavedComparison
from webapp.compare.significance import Primary, Significance, significance_rows, step_notes
from webapp.compare.spec import ComparisonSpec, SpecError
from webapp.compare.stats import RunSummary
from webapp.core.digits import INT64_DIGITS, ascii_digits
from webapp.core.permissions import lab_ids
from webapp.metrics import retention, series_packs, series_rollups
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs.models import Run
from webapp.runs.permissions import visible_runs

# --------------------------------------------------------------------------- selection


def saved_comparison_visible(user: AbstractBaseUser | AnonymousUser, ref: str) -> SavedComparison:
    """The saved comparison ``ref`` names (its slug, the last part of its page's address,
    or its id) if it is of one of ``user``'s labs; :class:`Http404` otherwise."""
    visible = SavedComparison.objects.filter(lab_id__in=lab_ids(user)).select_related("owner")
    saved = visible.filter(slug=ref).first()
    saved_id = ascii_digits(ref, max_digits=INT64_DIGITS)
    if saved is None and saved_id is not None:
        saved = visible.filter(pk=saved_id).first()
    if saved is None:
        raise Http404("no such saved comparison")
    return saved


def runs_for_spec(user: AbstractBaseUser | AnonymousUser, spec: ComparisonSpec) -> list[Run]:
    """The spec's runs, by id; :class:`Http404` if any is unknown or not visible."""
    runs = list(
        visible_runs(user).filter(pk__in=spec.runs).select_related("experiment").order_by("id")
    )
    missing = sorted(set(spec.runs) - {run.pk for run in runs})
    if missing:
        shown = ", ".join(str(pk) for pk in missing[:10])
        raise Http404(f"no such run: {shown}")
    return runs


def series_index(
    run_ids: Sequence[int], policies: Sequence[str], keys: Sequence[str]
) -> SeriesIndex:
    """(run id, policy, key) -> series id of the series of ``run_ids`` x ``policies`` x
    ``keys`` that exist."""
    return {
        (run_id, policy, key): pk
        for pk, run_id, policy, key in MetricSeries.objects.filter(
            run_id__in=run_ids, policy__in=policies, key__in=keys
        ).values_list("id", "run_id", "policy", "key")
    }


# --------------------------------------------------------------------------- buckets


def _table(model: type[Any]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


# The series' own range (MetricSeries.first_step / last_step, kept by ingestion): one
# row a series by its primary key, no probe into the points (issue 35: two probes a
# series, 4,000 for 50 runs x 8 metrics x 5 policies, took 28-108 ms cold). A series
# whose range is not known (points written other than by ingestion) is probed as before;
# the IS NULL test is a one-time filter, so a known range costs nothing there.
_RANGE_SQL = """
    SELECT min(coalesce(s.first_step, lo.step)), max(coalesce(s.last_step, hi.step))
    FROM {series} AS s
    LEFT JOIN LATERAL (
        SELECT step FROM {points}
        WHERE s.first_step IS NULL AND series_id = s.id ORDER BY step LIMIT 1
    ) AS lo ON true
    LEFT JOIN LATERAL (
        SELECT step FROM {points}
        WHERE s.last_step IS NULL AND series_id = s.id ORDER BY step DESC LIMIT 1
    ) AS hi ON true
    WHERE s.id = ANY(%(ids)s::bigint[])
"""
# Each series' points in range as packed big-endian columns (one bytea per column;
# ``string_agg`` of ``int4send``/``float8send``), straight off the primary key's
# index-only scan, which covers ``value``; numpy then buckets them. All the aggregates of
# a group see its rows in the same order, so the columns line up. A NULL value (never
# written on PostgreSQL, which stores NaN) counts as NaN, as in the portable reference;
# a NULL wall time travels as NaN and is left out of the wall-time mean and minimum, as
# SQL's ``avg``/``min`` leave NULLs out. Bucketing in SQL instead (GROUP BY series,
# bucket) cost 3x as much: 430 vs 135 ms for 50 runs x 2 metrics x 5 policies x 1,000
# steps (bench/scale.py).
_POINTS_SQL = """
    SELECT series_id, string_agg(int4send(step), ''),
           string_agg(float8send(coalesce(value, 'NaN')), ''){wall_column}
    FROM {points}
    WHERE series_id = ANY(%(ids)s::bigint[]) AND step BETWEEN %(lo)s AND %(hi)s
    GROUP BY series_id
"""
_WALL_COLUMN = ", string_agg(float8send(coalesce(wall_time, 'NaN')), '')"


def step_range(series_ids: Sequence[int]) -> tuple[int, int] | None:
    """(lowest, highest) step over ``series_ids``; None when they have no points."""
    if not series_ids:
        return None
    if connection.vendor == "postgresql":
        sql = _RANGE_SQL.format(series=_table(MetricSeries), points=_table(MetricPoint))
        with connection.cursor() as cursor:
            cursor.execute(sql, {"ids": list(series_ids)})
            lo, hi = cursor.fetchone()
        return None if lo is None else (int(lo), int(hi))
    return step_range_portable(series_ids)


def step_range_portable(series_ids: Sequence[int]) -> tuple[int, int] | None:
    """:func:`step_range` on any database: the series' kept ranges, and the points' of
    those whose range is not known."""
    series = MetricSeries.objects.filter(pk__in=series_ids)
    kept = series.aggregate(lo=Min("first_step"), hi=Max("last_step"))
    unknown = series.filter(Q(first_step__isnull=True) | Q(last_step__isnull=True))
    probed = MetricPoint.objects.filter(series_id__in=unknown.values("pk")).aggregate(
        lo=Min("step"), hi=Max("step")
    )
    lows = [v for v in (kept["lo"], probed["lo"]) if v is not None]
    highs = [v for v in (kept["hi"], probed["hi"]) if v is not None]
    return (int(min(lows)), int(max(highs))) if lows and highs else None


ONE_SNAPSHOT_SQL = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
"""The points read of :func:`buckets_postgres` takes several statements (the packs, each
series' watermark, then its blocks up to the watermark and its points after it); in one
snapshot, a rollup sweep that commits between two of them cannot make a block hold
points that the read also takes from the points table (counted twice). Only where the
read opens the transaction: inside a caller's, the caller's isolation holds."""


def buckets_postgres(
    series_ids: Sequence[int], lo: int, hi: int, size: int, *, wall: bool = True
) -> dict[int, Buckets]:
    """Per series, its bucket means on the grid of ``size`` buckets over [lo, hi] (wall
    times only with ``wall``; NaN otherwise). Without wall times a series is read from
    its pack where it has one (:mod:`webapp.metrics.series_packs`), or else from its
    rollups' packed blocks and the points around them; with wall times from the points,
    in one statement. Every read streams one row per series, which is bucketed while
    PostgreSQL makes the next (on two cores about half the time of reading everything,
    then bucketing it)."""
    found: dict[int, Buckets] = {}
    rest = set(series_ids)
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        with connection.cursor() as cursor:
            if outermost:
                cursor.execute(ONE_SNAPSHOT_SQL)
            cursor.execute(series_packs.SERIES_SCAN_SETTINGS_SQL)
        rows: Iterable[tuple[int, bytes, bytes, bytes | None]]
        if wall:
            params = {"ids": list(series_ids), "lo": lo, "hi": hi}
            sql = _POINTS_SQL.format(points=_table(MetricPoint), wall_column=_WALL_COLUMN)
            rows = itertools.chain(
                series_packs.binary_stream(sql, params), _dropped_with_walls(rest, lo, hi)
            )
        else:
            packed = (
                (pk, steps, values, None)
                for pk, (steps, values) in series_packs.series_packs(series_ids)
            )
            rows = itertools.chain(packed, _not_packed(rest, lo, hi))
        table = bucket_table(lo, hi, size)
        if not wall:  # many series at a time, each chunk as it arrives
            found.update(_buckets_chunked(rows, rest, lo, hi, size, table))
        for series_id, step_bytes, value_bytes, wall_bytes in rows if wall else ():
            rest.discard(series_id)
            steps = np.frombuffer(step_bytes, dtype=">i4")
            values = np.frombuffer(value_bytes, dtype=">f8")
            walls = None if wall_bytes is None else np.frombuffer(wall_bytes, dtype=">f8")
            if walls is not None:
                # by step: the bucket sums do not depend on the order the plan read the
                # points in (a sort by series only, on a small table), and equal those of
                # a series whose raw points were dropped (read by step from its pack)
                order = np.argsort(steps, kind="stable")
                steps, values, walls = steps[order], values[order], walls[order]
            found[series_id] = buckets_of(
                steps,
                values,
                walls,
                lo,
                hi,
                size,
                table=table,
            )
    found.update((pk, empty_buckets(size)) for pk in rest)  # no points in range
    return found


def _dropped_with_walls(
    rest: set[int], lo: int, hi: int
) -> Iterator[tuple[int, bytes, bytes, bytes]]:
    """The rows of the series in ``rest`` once the points are read (those still there
    have no points in range, or had their raw points dropped): the dropped ones' packed
    points in [lo, hi], each with its run's clock's wall time at its step
    (:func:`webapp.metrics.retention.dropped_wall_columns`)."""
    for pk, steps, values, walls in retention.dropped_wall_columns(sorted(rest), lo, hi):
        if steps.size:
            yield (
                pk,
                steps.astype(">i4").tobytes(),
                values.astype(">f8").tobytes(),
                walls.astype(">f8").tobytes(),
            )


BUCKET_CHUNK = 100
"""Series bucketed together by :func:`webapp.compare.assemble.buckets_of_many`: enough
that numpy's per-call overhead is spread (a comparison of 2,000 series of 1,000 points
buckets in about half the time of one call per series), few enough that the arrays stay
in the CPU's caches and the bucketing still overlaps PostgreSQL making the next rows."""


def _buckets_chunked(
    rows: Iterable[tuple[int, bytes, bytes, bytes | None]],
    rest: set[int],
    lo: int,
    hi: int,
    size: int,
    table: np.ndarray | None,
) -> Iterator[tuple[int, Buckets]]:
    """(series id, buckets) of ``rows`` (no wall times), :data:`BUCKET_CHUNK` series at
    a time. Each series leaves ``rest`` as its row arrives, before the next is asked
    for: the rows of the series not packed are chosen from ``rest`` once the packs are
    read."""
    chunk: list[tuple[int, bytes, bytes, bytes | None]] = []
    for row in itertools.chain(rows, [None]):
        if row is not None:
            rest.discard(row[0])
            chunk.append(row)
            if len(chunk) < BUCKET_CHUNK:
                continue
        if chunk:
            steps, values = [r[1] for r in chunk], [r[2] for r in chunk]
            yield from zip(
                [r[0] for r in chunk],
                buckets_of_many(steps, values, lo, hi, size, table=table),
                strict=True,
            )
            chunk = []


def _not_packed(rest: set[int], lo: int, hi: int) -> Iterator[tuple[int, bytes, bytes, None]]:
    """The rows of the series in ``rest`` once the packs are read (those still there
    have none: a running run's, or one that just finished): from their level-0 rollup
    blocks' packed points up to each series' watermark, and the points around them.

    The read starts at the 64-step block holding ``lo``, not at ``lo``: that block's
    packed points come in one row where up to 63 points before the first whole block
    would be read from the points table (at lab scale, whose steps start at 1, those
    took a third of the read's time); the bucketing leaves out the steps before ``lo``,
    as it does the rest of the last block after ``hi``."""
    start = lo // series_rollups.BASE * series_rollups.BASE
    for pk, steps, values in series_rollups.chunk_columns(sorted(rest), start, hi):
        yield pk, steps, values, None


def buckets_portable(series_ids: Sequence[int], lo: int, hi: int, size: int) -> dict[int, Buckets]:
    """:func:`buckets_postgres` in Python (any database; the reference of the tests):
    the points as rows, bucketed by :func:`webapp.compare.assemble.buckets_from_rows`."""
    rows = (
        MetricPoint.objects.filter(series_id__in=series_ids, step__gte=lo, step__lte=hi)
        .order_by("series_id", "step")
        .values_list("series_id", "step", "value", "wall_time")
    )
    return buckets_from_rows(rows, series_ids, lo, hi, size)


def load_buckets(
    series_ids: Sequence[int], lo: int, hi: int, size: int, *, wall: bool
) -> dict[int, Buckets]:
    """:func:`buckets_postgres` on PostgreSQL, :func:`buckets_portable` elsewhere."""
    if connection.vendor == "postgresql":
        return buckets_postgres(series_ids, lo, hi, size, wall=wall)
    return buckets_portable(series_ids, lo, hi, size)


# --------------------------------------------------------------------------- build


def comparison_build(*, spec: ComparisonSpec, runs: Sequence[Run]) -> Comparison:
    """The curves of ``runs`` (visible, the spec's) as the spec asks for them."""
    notes: list[str] = []
    groups = groups_of(runs, spec.group_by)
    policies = policies_of(runs, spec, notes)
    counter_key = X_COUNTERS.get(spec.x)
    keys = list(spec.metrics) + ([counter_key] if counter_key else [])
    index = series_index([run.pk for run in runs], policies, keys)
    metric_ids = [pk for (_r, _p, key), pk in index.items() if key in spec.metrics]
    bounds = step_range(metric_ids)
    found: dict[int, Buckets] = {}
    size = 0
    if bounds is not None:
        lo, hi = bounds
        size = min(spec.buckets, hi - lo + 1)
        found = load_buckets(list(index.values()), lo, hi, size, wall=spec.x == "wall_time")
    return comparison_assemble(
        spec=spec,
        runs=runs,
        groups=groups,
        policies=policies,
        index=index,
        found=found,
        grid=size,
        notes=notes,
    )


# --------------------------------------------------------------------------- summary


_FINITE = "p.value IS NOT NULL AND p.value <> 'NaN'::float8 AND abs(p.value) <> 'Infinity'::float8"
_SUMMARY_SQL = f"""
    SELECT p.series_id,
           (array_agg(p.value ORDER BY p.step DESC) FILTER (WHERE {_FINITE}))[1],
           max(p.value) FILTER (WHERE {_FINITE}),
           min(p.value) FILTER (WHERE {_FINITE}),
           avg(p.value ORDER BY p.step) FILTER (WHERE {_FINITE})
    FROM {{points}} AS p
    WHERE p.series_id = ANY(%(ids)s::bigint[])
    GROUP BY p.series_id
"""


# The mean is summed by step (``avg ... ORDER BY``): a float sum depends on its order, and
# a plan that sorts the rows by series only leaves each series' order to the sort; by
# step it is one number whatever the plan, and a series whose raw points were dropped
# (its pack read by step, :func:`_summary_as_sql`) has the same.


def run_summaries(series_ids: Sequence[int], *, lower_is_better: bool) -> dict[int, RunSummary]:
    """Per series: :class:`webapp.compare.stats.RunSummary` of its raw points."""
    found = {pk: RunSummary(math.nan, math.nan, math.nan) for pk in series_ids}
    if not series_ids:
        return found
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                _SUMMARY_SQL.format(points=_table(MetricPoint)), {"ids": list(series_ids)}
            )
            rows = cursor.fetchall()
        for series_id, final, high, low, mean in rows:
            if final is None:
                continue
            best = low if lower_is_better else high
            found[series_id] = RunSummary(float(final), float(best), float(mean))
        # a series without points may be one whose raw points were dropped: its pack's
        seen = {row[0] for row in rows}
        missing = [pk for pk in series_ids if pk not in seen]
        for series_id, points in retention.dropped_points(missing).items():
            summary = _summary_as_sql([value for _, value in points], lower_is_better)
            if summary is not None:
                found[series_id] = summary
        return found
    return run_summaries_portable(series_ids, lower_is_better=lower_is_better)


def _summary_as_sql(values: Sequence[float], lower_is_better: bool) -> RunSummary | None:
    """:data:`_SUMMARY_SQL`'s answer from a series' values by step: the last, highest,
    lowest and mean finite value, the mean summed in step order as PostgreSQL's ``avg``
    does (a running sum, then divided); None without a finite value."""
    finite = [value for value in values if math.isfinite(value)]
    if not finite:
        return None
    total = 0.0
    for value in finite:
        total += value
    best = min(finite) if lower_is_better else max(finite)
    return RunSummary(finite[-1], best, total / len(finite))


def run_summaries_portable(
    series_ids: Sequence[int], *, lower_is_better: bool
) -> dict[int, RunSummary]:
    """:func:`run_summaries` in Python from every point (the reference of the tests)."""
    rows = (
        MetricPoint.objects.filter(series_id__in=series_ids)
        .order_by("series_id", "step")
        .values_list("series_id", "value")
    )
    return summaries_from_rows(rows, series_ids, lower_is_better=lower_is_better)


def summary_build(
    *, spec: ComparisonSpec, runs: Sequence[Run], metric: str, lower_is_better: bool = False
) -> Summary:
    """The summary table of ``metric`` over the spec's groups and policies (raw points,
    not smoothed or bucketed)."""
    notes: list[str] = []
    groups = groups_of(runs, spec.group_by)
    policies = policies_of(runs, spec, notes)
    index = {
        (run_id, policy): pk
        for pk, run_id, policy in MetricSeries.objects.filter(
            run_id__in=[run.pk for run in runs], policy__in=policies, key=metric
        ).values_list("id", "run_id", "policy")
    }
    per_series = run_summaries(list(index.values()), lower_is_better=lower_is_better)
    summary = summary_assemble(
        metric=metric,
        groups=groups,
        policies=policies,
        index=index,
        per_series=per_series,
        lower_is_better=lower_is_better,
        notes=notes,
    )
    summary.group_by = spec.group_by
    return summary


# --------------------------------------------------------------------------- bar views


_FINAL_SQL = f"""
    SELECT s.run_id, s.policy, s.key, last.step, last.value, base.value
    FROM {{series}} AS s
    LEFT JOIN LATERAL (
        SELECT p.step, p.value FROM {{points}} AS p
        WHERE p.series_id = s.id AND {_FINITE} AND p.step <= %(at_most)s::integer
        ORDER BY p.step DESC LIMIT 1
    ) AS last ON true
    LEFT JOIN {{points}} AS base ON base.series_id = s.id AND base.step = 0
    WHERE s.run_id = ANY(%(runs)s) AND s.policy = ANY(%(policies)s) AND s.key = ANY(%(keys)s)
"""
# The series by the (run, policy, key) unique index; per series its last finite point at
# or before at_most (a backward scan of the primary key (series, step) from at_most, which
# stops at the first finite value) and its point at step 0 (one lookup).
_NO_LIMIT = 2**31 - 1  # the step column is an integer: every step is at most this


def final_values(
    run_ids: Sequence[int],
    policies: Sequence[str],
    keys: Sequence[str],
    at_most: int | None = None,
) -> dict[tuple[int, str, str], FinalValue]:
    """Per existing series of ``run_ids`` x ``policies`` x ``keys``: its last finite
    value (at or before step ``at_most`` when given) and that step, and its value at step
    0 (:class:`webapp.compare.bars.FinalValue`), in one statement on PostgreSQL."""
    if not (run_ids and policies and keys):
        return {}
    if connection.vendor != "postgresql":
        return final_values_portable(run_ids, policies, keys, at_most)
    params = {
        "runs": list(run_ids),
        "policies": list(policies),
        "keys": list(keys),
        "at_most": _NO_LIMIT if at_most is None else min(at_most, _NO_LIMIT),
    }
    sql = _FINAL_SQL.format(series=_table(MetricSeries), points=_table(MetricPoint))
    found = {}
    nothing: list[tuple[int, str, str]] = []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for run_id, policy, key, step, value, base in cursor.fetchall():
            found[(run_id, policy, key)] = FinalValue(
                final=math.nan if value is None else float(value),
                step=None if step is None else int(step),
                base=math.nan if base is None else float(base),
            )
            if step is None and base is None:
                nothing.append((run_id, policy, key))
    if nothing:  # some may be series whose raw points were dropped: their packs'
        _final_values_dropped(found, nothing, at_most)
    return found


def _final_values_dropped(
    found: dict[tuple[int, str, str], FinalValue],
    names: Sequence[tuple[int, str, str]],
    at_most: int | None,
) -> None:
    """Fill ``found`` for those of ``names`` whose raw points were dropped, from their
    packs, as :data:`_FINAL_SQL` reads the points."""
    wanted = set(names)
    series = {
        pk: (run_id, policy, key)
        for pk, run_id, policy, key in MetricSeries.objects.filter(
            run_id__in={name[0] for name in names},
            policy__in={name[1] for name in names},
            key__in={name[2] for name in names},
        ).values_list("id", "run_id", "policy", "key")
        if (run_id, policy, key) in wanted
    }
    for pk, points in retention.dropped_points(list(series)).items():
        last: tuple[int, float] | None = None
        base = math.nan
        for step, value in points:
            if step == 0:
                base = value
            if math.isfinite(value) and (at_most is None or step <= at_most):
                last = (step, value)
        found[series[pk]] = FinalValue(
            final=math.nan if last is None else last[1],
            step=None if last is None else last[0],
            base=base,
        )


def final_values_portable(
    run_ids: Sequence[int],
    policies: Sequence[str],
    keys: Sequence[str],
    at_most: int | None = None,
) -> dict[tuple[int, str, str], FinalValue]:
    """:func:`final_values` in Python from every point (any database; the reference of
    the tests)."""
    series = {
        pk: (run_id, policy, key)
        for pk, run_id, policy, key in MetricSeries.objects.filter(
            run_id__in=run_ids, policy__in=policies, key__in=keys
        ).values_list("id", "run_id", "policy", "key")
    }
    last: dict[int, tuple[int, float]] = {}
    base: dict[int, float] = {}
    rows = (
        MetricPoint.objects.filter(series_id__in=list(series))
        .order_by("series_id", "step")
        .values_list("series_id", "step", "value")
    )
    for series_id, step, value in rows:
        value = math.nan if value is None else float(value)
        if step == 0:
            base[series_id] = value
        if math.isfinite(value) and (at_most is None or step <= at_most):
            last[series_id] = (step, value)
    found = {}
    for pk, name in series.items():
        step, value = last.get(pk, (None, math.nan))
        found[name] = FinalValue(final=value, step=step, base=base.get(pk, math.nan))
    return found


def eval_keys(run_ids: Sequence[int]) -> list[str]:
    """The distinct ``eval/...`` keys of ``run_ids``' series (the unique index's range
    on run, then the key prefix)."""
    return sorted(
        MetricSeries.objects.filter(run_id__in=run_ids, key__startswith="eval/")
        .values_list("key", flat=True)
        .distinct()
    )


def bars_build(*, spec: ComparisonSpec, runs: Sequence[Run], options: BarOptions) -> BarChart:
    """The bar view ``options.view`` of ``runs`` (visible, the spec's): per-task
    evaluation of a suite, or the relative improvement over the baseline group.

    Raises :class:`webapp.compare.spec.SpecError` for a suite the runs were not evaluated
    on or a baseline that is no group."""
    notes: list[str] = []
    groups = groups_of(runs, spec.group_by)
    policies = policies_of(runs, spec, notes)
    run_ids = [run.pk for run in runs]
    chart = BarChart(
        view=options.view,
        spec=spec,
        options=options,
        groups=groups,
        panels=[],
        notes=notes,
        runs=list(runs),
    )
    if options.view == "tasks":
        keys = eval_keys(run_ids)
        chart.suites = eval_suites(keys, options.score)
        if not chart.suites:
            if options.score != "accuracy" and eval_suites(keys):
                chart.empty = (
                    f"No {options.score} in these runs' evaluations: it is logged for "
                    "multiple-choice tasks only."
                )
            else:
                chart.empty = NO_EVALUATIONS
            notes.append(chart.empty)
            return chart
        suite = options.suite or next(iter(chart.suites))
        if suite not in chart.suites:
            shown = ", ".join(chart.suites)
            raise SpecError(
                f"suite: these runs have no {options.score} results of suite {suite!r}; "
                f"their suites: {shown}"
            )
        chart.suite = suite
        tasks = chart.suites[suite]
        wanted = [eval_key(suite, task, options.score) for task in tasks]
        values = final_values(run_ids, policies, wanted)
        chart.panels = per_task(
            groups=groups,
            policies=policies,
            suite=suite,
            tasks=tasks,
            values=values,
            band=spec.band,
            score=options.score,
            notes=notes,
        )
        return chart
    regime_of = {run.pk: run.regime for run in runs}
    chart.baseline = choose_baseline(groups, options.baseline, regime_of, notes)
    values = final_values(run_ids, policies, options.metrics)
    chart.panels = relative(
        groups=groups,
        policies=policies,
        metrics=options.metrics,
        baseline=chart.baseline,
        values=values,
        seed_of={run.pk: run.seed for run in runs},
        notes=notes,
    )
    if not values:
        chart.empty = "No values of these metrics in these runs."
        notes.append(chart.empty)
    return chart


def significance_build(
    *,
    spec: ComparisonSpec,
    runs: Sequence[Run],
    options: BarOptions,
    primary: Primary | None = None,
) -> Significance:
    """The significance view of ``runs`` (visible, the spec's): per metric, policy and
    non-baseline group, the difference to the baseline group at the final step (or at
    ``options.sig_step``), its interval, n, p and Holm's p
    (:mod:`webapp.compare.significance`), from one final-value statement. With no policy
    chosen, the pool mean too (where it is logged); ``primary`` is kept out of the Holm
    family; a comparison with one seed links to its experiment's sweep form.

    Raises :class:`webapp.compare.spec.SpecError` for a baseline that is no group."""
    notes: list[str] = []
    groups = groups_of(runs, spec.group_by)
    policies = policies_of(runs, spec, notes)
    if not spec.policies:
        policies.append(POOL)  # the pool's net effect, on the keys it is logged for
    regime_of = {run.pk: run.regime for run in runs}
    baseline = choose_baseline(groups, options.baseline, regime_of, notes)
    table = Significance(
        spec=spec,
        options=options,
        groups=groups,
        baseline=baseline,
        step=options.sig_step,
        notes=notes,
        primary=primary,
    )
    values = final_values([run.pk for run in runs], policies, options.metrics, options.sig_step)
    if len(groups) < 2:
        table.empty = f"Only the group {baseline!r}: choose runs of at least two groups."
    elif not values:
        table.empty = "No values of these metrics in these runs."
    if table.empty:
        notes.append(table.empty)
        return table
    experiment_of = {run.pk: run.experiment_id for run in runs}
    table.rows, table.correction = significance_rows(
        groups=groups,
        policies=policies,
        metrics=options.metrics,
        baseline=baseline,
        values=values,
        seed_of={run.pk: run.seed for run in runs},
        notes=notes,
        primary=primary,
        sweep_url_of=lambda run: reverse("compare:sweep_create", args=[experiment_of[run]]),
    )
    notes += step_notes(table.rows, options.sig_step)
    return table
