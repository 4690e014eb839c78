"""Downsampling a metric series for charts, as pure functions (the SQL's reference).

Min/max buckets: the steps are cut into buckets of one width ``w`` aligned to multiples of
it (bucket ``step // w``), as few as fit ``max_points``, and each bucket keeps its lowest
and its highest point, plus the series' first and last point. So a 1,000,000-point curve
shrinks to at most ``max_points`` points and still shows every spike: the global minimum
and maximum always survive.

The width (:func:`bucket_width`) is a whole number of blocks of the largest rollup size
(:data:`ROLLUP_SIZES`: 64, 256, 1,024, ... steps) that fits, so on PostgreSQL a long
series is read from its rollups (:mod:`webapp.metrics.series_rollups`), a few
thousand block summaries whatever its length, with the same answer as from the points:
every bucket is made of whole blocks (:func:`cover` says which blocks and which raw
steps make up a range).

Order of values is PostgreSQL's float8 order: NaN above everything (so a NaN spike stays
visible as a "maximum"), ties broken by the lower step. :mod:`webapp.metrics.selectors`
computes the same thing in SQL; its tests compare the two.

Also :func:`lttb` (largest-triangle-three-buckets) for a visually smoother alternative;
it is not used by the API.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Point = tuple[int, float]  # (step, value); value may be NaN or +-inf

MIN_MAX_POINTS = 4

ROLLUP_SIZES: tuple[int, ...] = tuple(64 * 4**level for level in range(8))
"""Block sizes of the rollup levels, in steps: level ``L`` has blocks of
``ROLLUP_SIZES[L]`` steps starting at multiples of it (64 ... 1,048,576)."""


def value_order(value: float) -> tuple[int, float]:
    """Sort key of a value in PostgreSQL's float8 order (NaN greatest, equal to itself)."""
    return (1, 0.0) if math.isnan(value) else (0, value)


def point_order(point: Point) -> tuple[tuple[int, float], int]:
    """Sort key of a point: by value, then by step (PostgreSQL's ``ARRAY[value, step]``)."""
    return value_order(point[1]), point[0]


def n_buckets(max_points: int) -> int:
    """How many min/max buckets fit in ``max_points`` with the first and last point."""
    if max_points < MIN_MAX_POINTS:
        raise ValueError(f"max_points must be >= {MIN_MAX_POINTS}, not {max_points}")
    return (max_points - 2) // 2


def rollup_size_for(width: int) -> int:
    """The largest rollup block size that is at most ``width`` (1: none, read points)."""
    fitting = [size for size in ROLLUP_SIZES if size <= width]
    return fitting[-1] if fitting else 1


def bucket_width(first: int, last: int, max_points: int) -> int:
    """The width of the aligned buckets for steps ``first`` .. ``last`` (``first <=
    last``, both >= 0): the smallest multiple of :func:`rollup_size_for` it such that
    at most :func:`n_buckets` buckets ``step // width`` cover the range.

    ``last // w - first // w + 1 <= (last - first) // w + 2``, so ``w > (last - first) /
    (n - 1)`` is enough for ``n >= 2`` buckets; one bucket needs ``w > last``.
    """
    buckets = n_buckets(max_points)
    least = last + 1 if buckets == 1 else (last - first) // (buckets - 1) + 1
    block = rollup_size_for(least)
    return -(-least // block) * block


def minmax_buckets(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most ``max_points`` points of ``points`` (sorted by step, steps unique, >= 0).

    ``points`` itself when it is short enough; otherwise the first and the last point and,
    per bucket of :func:`bucket_width`, its lowest and its highest point; sorted by step.
    """
    if len(points) <= max_points:
        return list(points)
    width = bucket_width(points[0][0], points[-1][0], max_points)
    lowest: dict[int, Point] = {}
    highest: dict[int, Point] = {}
    for point in points:
        bucket = point[0] // width
        if bucket not in lowest or point_order(point) < point_order(lowest[bucket]):
            lowest[bucket] = point
        if bucket not in highest or point_order(point) > point_order(highest[bucket]):
            highest[bucket] = point
    kept = {points[0], points[-1], *lowest.values(), *highest.values()}
    return sorted(kept, key=lambda point: point[0])


SummaryRow = tuple[int, int, float, int, float, int]
"""A block's or a bucket's summary: (a step in it, points, lowest value, its step, highest
value, its step)."""


def minmax_merge(
    rows: Sequence[SummaryRow], width: int
) -> tuple[int, dict[int, tuple[Point, Point]]]:
    """Merge summaries that each lie within one bucket of ``width`` steps into the
    buckets: (points in all, bucket -> (lowest point, highest point)). The same lowest and
    highest as :func:`minmax_buckets` finds from the points, in the same order."""
    count = 0
    buckets: dict[int, tuple[Point, Point]] = {}
    for at, n, low_value, low_step, high_value, high_step in rows:
        count += n
        low, high = (low_step, low_value), (high_step, high_value)
        bucket = at // width
        if bucket in buckets:
            old_low, old_high = buckets[bucket]
            low = min(low, old_low, key=point_order)
            high = max(high, old_high, key=point_order)
        buckets[bucket] = (low, high)
    return count, buckets


BlockRun = tuple[int, int, int]
"""(level, first block, last block): consecutive blocks of one rollup level."""
StepRange = tuple[int, int]
"""(first step, last step), inclusive."""


def cover(
    lo: int, hi: int, rolled_through: int, largest: int
) -> tuple[list[BlockRun], list[StepRange]]:
    """How to read the steps ``lo`` .. ``hi`` of a series whose blocks are current up to
    ``rolled_through``: runs of whole rollup blocks of size at most ``largest`` (the
    largest first, the finer ones at its edges) and the step ranges left to read from
    the points (the edges finer than 64 steps, and everything after ``rolled_through``).
    Every step of the range is in exactly one of them."""
    blocks: list[BlockRun] = []
    raw: list[StepRange] = []
    levels = [level for level, size in enumerate(ROLLUP_SIZES) if size <= largest][::-1]

    def split(start: int, stop: int, at: int) -> None:
        if start > stop:
            return
        if at == len(levels):
            raw.append((start, stop))
            return
        level = levels[at]
        size = ROLLUP_SIZES[level]
        first, last = -(-start // size), (stop + 1) // size - 1
        if first > last:
            split(start, stop, at + 1)
            return
        blocks.append((level, first, last))
        split(start, first * size - 1, at + 1)
        split((last + 1) * size, stop, at + 1)

    split(lo, min(hi, rolled_through), 0)
    if hi > rolled_through:
        raw.append((max(lo, rolled_through + 1), hi))
    raw.sort()
    return blocks, raw


def lttb(points: Sequence[Point], max_points: int) -> list[Point]:
    """Largest-triangle-three-buckets (Steinarsson 2013) over finite values.

    Keeps the first and last point and, per bucket, the point spanning the largest
    triangle with the previous pick and the next bucket's mean. Non-finite values are
    skipped (use :func:`minmax_buckets` to show them).
    """
    finite = [p for p in points if math.isfinite(p[1])]
    if len(finite) <= max_points or max_points < 3:
        return finite
    every = (len(finite) - 2) / (max_points - 2)
    picked = [finite[0]]
    previous = finite[0]
    for i in range(max_points - 2):
        start, stop = int(i * every) + 1, int((i + 1) * every) + 1
        after = finite[stop : min(int((i + 2) * every) + 1, len(finite) - 1)] or [finite[-1]]
        mean_step = sum(p[0] for p in after) / len(after)
        mean_value = sum(p[1] for p in after) / len(after)
        best = max(
            finite[start:stop],
            key=lambda p: abs(
                (previous[0] - mean_step) * (p[1] - previous[1])
                - (previous[0] - p[0]) * (mean_value - previous[1])
            ),
        )
        picked.append(best)
        previous = best
    picked.append(finite[-1])
    return picked
