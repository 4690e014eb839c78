"""Downsampling a metric series for charts, as pure functions (the SQL's reference).

Min/max buckets: the steps from the first to the last point are cut into ``n`` buckets of
equal width and each bucket keeps its lowest and its highest point, plus the series'
first and last point. So a 1,000,000-point curve shrinks to at most ``max_points``
points and still shows every spike: the global minimum and maximum always survive.

Order of values is PostgreSQL's float8 order: NaN above everything (so a NaN spike stays
visible as a "maximum"), ties broken by the lower step. :mod:`webapp.api.selectors`
computes the same thing in SQL; its tests compare the two.

Also :func:`lttb` (largest-triangle-three-buckets) for a visually smoother alternative;
it is not used by the API.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Point = tuple[int, float]  # (step, value); value may be NaN or +-inf

MIN_MAX_POINTS = 4


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


def bucket_of(step: int, first: int, last: int, buckets: int) -> int:
    """The bucket (0 .. buckets-1) of ``step`` when [first, last] is cut into ``buckets``.

    Integer arithmetic, exactly as the SQL does it: ``(step - first) * buckets //
    (last - first + 1)``.
    """
    return (step - first) * buckets // (last - first + 1)


def minmax_buckets(points: Sequence[Point], max_points: int) -> list[Point]:
    """At most ``max_points`` points of ``points`` (sorted by step, steps unique).

    ``points`` itself when it is short enough; otherwise the first and the last point and,
    per bucket, its lowest and its highest point; sorted by step.
    """
    if len(points) <= max_points:
        return list(points)
    buckets = n_buckets(max_points)
    first, last = points[0][0], points[-1][0]
    lowest: dict[int, Point] = {}
    highest: dict[int, Point] = {}
    for point in points:
        bucket = bucket_of(point[0], first, last, buckets)
        if bucket not in lowest or point_order(point) < point_order(lowest[bucket]):
            lowest[bucket] = point
        if bucket not in highest or point_order(point) > point_order(highest[bucket]):
            highest[bucket] = point
    kept = {points[0], points[-1], *lowest.values(), *highest.values()}
    return sorted(kept, key=lambda point: point[0])


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
