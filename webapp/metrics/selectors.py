"""Read-side queries of the API: series (downsampled in SQL), keys, events, run status.

Values come back as Python floats, NaN and +-inf included (SQLite's NULL is read as
NaN); :func:`webapp.core.http.encode_value` turns them into JSON.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import (
    BooleanField,
    Count,
    ExpressionWrapper,
    F,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Cast

from webapp.metrics import retention, series_rollups
from webapp.metrics.downsample import (
    Point,
    bucket_width,
    cover,
    minmax_buckets,
    minmax_merge,
    rollup_size_for,
)
from webapp.metrics.models import MetricPoint, MetricSeries, TransferEvent
from webapp.runs.models import Run


def as_float(value: float | None) -> float:
    """A stored value as a float: SQLite's NULL (how it stores NaN) is NaN."""
    return math.nan if value is None else float(value)


# --------------------------------------------------------------------------- series


@dataclass
class SeriesPoints:
    """The points of one series in the requested range, possibly downsampled."""

    n_points: int = 0
    downsampled: bool = False
    points: list[Point] = field(default_factory=list)


def series_of_run(
    run: Run, *, keys: Sequence[str] = (), policies: Sequence[str] = ()
) -> list[MetricSeries]:
    """The series of ``run`` (only ``keys``/``policies`` when given), by policy and key."""
    queryset = MetricSeries.objects.filter(run=run)
    if keys:
        queryset = queryset.filter(key__in=keys)
    if policies:
        queryset = queryset.filter(policy__in=policies)
    return list(queryset.order_by("policy", "key"))


def series_points(
    series_ids: Sequence[int], *, max_points: int, after_step: int = -1
) -> dict[int, SeriesPoints]:
    """Points with ``step > after_step`` of each series, at most ``max_points`` each.

    A series with more points than that is reduced with min/max buckets
    (:func:`webapp.metrics.downsample.minmax_buckets`), on PostgreSQL inside the database.
    """
    if not series_ids:
        return {}
    if connection.vendor == "postgresql":
        return _series_points_postgres(series_ids, max_points, after_step)
    return _series_points_portable(series_ids, max_points, after_step)


def _table(model: type[Any]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


_RANGES_SQL = """
    SELECT i.id, lo.step, hi.step, beyond.step IS NOT NULL, s.rolled_through
    FROM unnest(%(ids)s::bigint[]) AS i(id)
    JOIN {series} s ON s.id = i.id
    CROSS JOIN LATERAL (
        SELECT step FROM {points} WHERE series_id = i.id AND step > %(after)s
        ORDER BY step LIMIT 1
    ) AS lo
    CROSS JOIN LATERAL (
        SELECT step FROM {points} WHERE series_id = i.id AND step > %(after)s
        ORDER BY step DESC LIMIT 1
    ) AS hi
    LEFT JOIN LATERAL (
        SELECT step FROM {points} WHERE series_id = i.id AND step > %(after)s
        ORDER BY step OFFSET %(max)s LIMIT 1
    ) AS beyond ON true
"""
_EXACT_SQL = """
    SELECT series_id, step, value FROM {points}
    WHERE series_id = ANY(%(short)s::bigint[]) AND step > %(after)s
    UNION ALL
    SELECT p.series_id, p.step, p.value FROM {points} p
    JOIN unnest(%(ends_series)s::bigint[], %(ends_step)s::int[]) AS e(series_id, step)
    ON p.series_id = e.series_id AND p.step = e.step
"""

_PLANNER_SQL = "SELECT set_config('work_mem', '64MB', true), set_config('jit', 'off', true)"


@dataclass(frozen=True)
class _Range:
    first: int
    last: int
    long: bool  # more than max_points points in range
    rolled_through: int  # the series' rollup watermark


def _series_points_postgres(
    series_ids: Sequence[int], max_points: int, after_step: int
) -> dict[int, SeriesPoints]:
    """Index lookups for each series' range; the exact points of the short series and the
    ends of the long ones in one statement; then per long series its buckets, from its
    rollup blocks where they are current and from the points elsewhere
    (:func:`webapp.metrics.downsample.cover`, :mod:`webapp.metrics.series_rollups`)."""
    points = _table(MetricPoint)
    found: dict[int, SeriesPoints] = {pk: SeriesPoints() for pk in series_ids}
    picked: dict[int, dict[int, float]] = defaultdict(dict)
    params: dict[str, Any] = {"ids": list(series_ids), "after": after_step, "max": max_points}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_RANGES_SQL.format(points=points, series=_table(MetricSeries)), params)
        ranges = {
            pk: _Range(first, last, long, rolled)
            for pk, first, last, long, rolled in cursor.fetchall()
        }
        long_ranges = {pk: r for pk, r in ranges.items() if r.long}
        params["short"] = [pk for pk, r in ranges.items() if not r.long]
        params["ends_series"] = [pk for pk in long_ranges for _ in (0, 1)]
        params["ends_step"] = [step for r in long_ranges.values() for step in (r.first, r.last)]
        cursor.execute(_EXACT_SQL.format(points=points), params)
        for series_id, step, value in cursor.fetchall():
            picked[series_id][step] = as_float(value)
        if long_ranges:
            # Raw steps are grouped in memory (hash), not sorted on disk; no JIT, whose
            # compiling costs more than it saves here.
            cursor.execute(_PLANNER_SQL)
        for series_id, r in long_ranges.items():
            width = bucket_width(r.first, r.last, max_points)
            blocks, raw = cover(r.first, r.last, r.rolled_through, rollup_size_for(width))
            rows = series_rollups.minmax_block_rows(cursor, series_id, blocks, raw, width)
            count, buckets = minmax_merge(rows, width)
            found[series_id].n_points = count
            for low, high in buckets.values():
                for step, value in (low, high):
                    picked[series_id][step] = as_float(value)
            found[series_id].downsampled = True
    for series_id, by_step in picked.items():
        found[series_id].points = sorted(by_step.items())
        if series_id not in long_ranges:
            found[series_id].n_points = len(by_step)
    # a series with no points in range may be one whose raw points were dropped: its pack
    dropped = retention.dropped_columns([pk for pk in series_ids if pk not in ranges])
    for series_id, (steps, values) in dropped.items():
        after = steps > after_step
        steps, values = steps[after], values[after]
        found[series_id] = SeriesPoints(
            n_points=len(steps),
            downsampled=len(steps) > max_points,
            points=retention.minmax_reduced(steps, values, max_points),
        )
    return found


def _points_reduced(points: list[Point], max_points: int) -> SeriesPoints:
    """A series' points (by step) as a read answers them: every one, or at most
    ``max_points`` in min/max buckets (the reference of the SQL above)."""
    return SeriesPoints(
        n_points=len(points),
        downsampled=len(points) > max_points,
        points=minmax_buckets(points, max_points),
    )


def _series_points_portable(
    series_ids: Sequence[int], max_points: int, after_step: int
) -> dict[int, SeriesPoints]:
    rows = (
        MetricPoint.objects.filter(series_id__in=series_ids, step__gt=after_step)
        .order_by("series_id", "step")
        .values_list("series_id", "step", "value")
    )
    everything: dict[int, list[Point]] = {pk: [] for pk in series_ids}
    for series_id, step, value in rows:
        everything[series_id].append((step, as_float(value)))
    return {pk: _points_reduced(points, max_points) for pk, points in everything.items()}


@dataclass(frozen=True)
class SeriesSummary:
    policy: str
    key: str
    n_points: int
    last_step: int | None
    last_value: float | None


def series_summaries(run: Run) -> list[SeriesSummary]:
    """Every series of ``run`` with its number of points, last step and last value."""
    last = MetricPoint.objects.filter(series=OuterRef("pk")).order_by("-step")
    rows = (
        MetricSeries.objects.filter(run=run)
        .annotate(
            n=Subquery(
                MetricPoint.objects.filter(series=OuterRef("pk"))
                .order_by()
                .values("series")
                .annotate(c=Count("step"))
                .values("c")[:1]
            ),
            # not "last_step": MetricSeries has a field of that name (kept by ingestion)
            last_point_step=Subquery(last.values("step")[:1]),
            last_point_value=Subquery(last.values("value")[:1]),
        )
        .order_by("policy", "key")
        .values_list("pk", "policy", "key", "n", "last_point_step", "last_point_value")
    )
    rows = list(rows)
    dropped = retention.dropped_points([row[0] for row in rows if not row[3]])
    summaries = []
    for pk, policy, key, n, last_step, last_value in rows:
        if dropped.get(pk):  # its raw points were dropped: its pack's
            n, (last_step, last_value) = len(dropped[pk]), dropped[pk][-1]
        summaries.append(
            SeriesSummary(
                policy=policy,
                key=key,
                n_points=n or 0,
                last_step=last_step,
                last_value=None if last_step is None else as_float(last_value),
            )
        )
    return summaries


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class EventFilters:
    source: str = ""
    target: str = ""
    kind: str = ""
    step_min: int | None = None
    step_max: int | None = None


def events_of_run(run: Run, filters: EventFilters) -> QuerySet[TransferEvent]:
    """The events of ``run`` that pass ``filters``, by step."""
    queryset = TransferEvent.objects.filter(run=run)
    for name in ("source", "target", "kind"):
        if getattr(filters, name):
            queryset = queryset.filter(**{name: getattr(filters, name)})
    if filters.step_min is not None:
        queryset = queryset.filter(step__gte=filters.step_min)
    if filters.step_max is not None:
        queryset = queryset.filter(step__lte=filters.step_max)
    return queryset.order_by("step", "id")


def events_page(
    run: Run, filters: EventFilters, *, limit: int, offset: int
) -> tuple[int, list[TransferEvent]]:
    """``(total matching, the events in [offset, offset + limit))`` by step; their
    ``samples`` are not loaded (:func:`event_of_run` does), ``has_samples`` says whether
    there are any."""
    queryset = events_of_run(run, filters)
    page = queryset.defer("samples").annotate(
        has_samples=ExpressionWrapper(Q(samples__isnull=False), output_field=BooleanField())
    )
    return queryset.count(), list(page[offset : offset + limit])


def event_of_run(run: Run, event_id: int) -> TransferEvent | None:
    """One event of ``run`` with its samples; None when ``run`` has no such event."""
    return TransferEvent.objects.filter(run=run, pk=event_id).first()


@dataclass
class EventsSummary:
    policies: list[str]
    matrix: list[list[int]]  # [source index][target index] -> summed count
    kinds: list[str]
    bucket_size: int
    over_time: list[dict[str, Any]]  # {"step": bucket start, "kind": k, "count": c}
    total: int


def _policy_order(run: Run, seen: set[str]) -> list[str]:
    """The run's pool order first, then any other name seen in events, sorted."""
    pool = [name for name in run.policy_names if name != "?"]
    return pool + sorted(seen - set(pool))


def bucket_size_for(first: int, last: int, buckets: int) -> int:
    """Width (in steps) of ``buckets`` equal buckets covering [first, last]; at least 1."""
    return max(1, -(-(last - first + 1) // buckets))


def events_summary(run: Run, filters: EventFilters | None = None, *, buckets: int) -> EventsSummary:
    """Counts (the events' ``count`` summed) per source x target and per step bucket x kind,
    of the events that pass ``filters`` (the log's filters). The policies are the pool's
    whatever the filters, so the matrix keeps its shape."""
    events = events_of_run(run, filters or EventFilters()).order_by()
    pairs = list(events.values("source", "target").annotate(c=Sum("count")))
    policies = _policy_order(run, {p["source"] for p in pairs} | {p["target"] for p in pairs})
    index = {name: i for i, name in enumerate(policies)}
    matrix = [[0] * len(policies) for _ in policies]
    for pair in pairs:
        matrix[index[pair["source"]]][index[pair["target"]]] += pair["c"]
    steps = events.aggregate(first=Min("step"), last=Max("step"))
    if steps["first"] is None:
        return EventsSummary(policies, matrix, [], 1, [], 0)
    first, size = steps["first"], bucket_size_for(steps["first"], steps["last"], buckets)
    bucket = Cast((F("step") - first) / size, IntegerField())
    rows = (
        events.annotate(bucket=bucket)
        .values("bucket", "kind")
        .annotate(c=Sum("count"))
        .order_by("bucket", "kind")
    )
    over_time = [
        {"step": first + row["bucket"] * size, "kind": row["kind"], "count": row["c"]}
        for row in rows
    ]
    return EventsSummary(
        policies=policies,
        matrix=matrix,
        kinds=sorted({row["kind"] for row in over_time}),
        bucket_size=size,
        over_time=over_time,
        total=sum(row["count"] for row in over_time),
    )
