"""Min/max-bucket downsampling: the pure reference, and the SQL path checked against it."""

from __future__ import annotations

import itertools
import math
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webapp.metrics.test_api_support import fill_series
from webapp.metrics import selectors
from webapp.metrics.downsample import (
    ROLLUP_SIZES,
    Point,
    bucket_width,
    cover,
    lttb,
    minmax_buckets,
    n_buckets,
    point_order,
    value_order,
)
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs.models import Run

NAN, INF = math.nan, math.inf


def same(a: list[Point], b: list[Point]) -> bool:
    """Equal point lists, NaN equal to NaN."""
    return len(a) == len(b) and all(
        sa == sb and (va == vb or (math.isnan(va) and math.isnan(vb)))
        for (sa, va), (sb, vb) in zip(a, b, strict=True)
    )


# --------------------------------------------------------------------------- reference


def test_a_short_series_comes_back_unchanged() -> None:
    points = [(0, 1.0), (5, NAN), (7, -INF)]
    assert minmax_buckets(points, 4) == points


def test_buckets_are_aligned_and_as_many_as_fit() -> None:
    assert n_buckets(2000) == 999
    assert bucket_width(0, 9, 12) == 3  # 5 buckets: 0-2, 3-5, 6-8, 9
    assert bucket_width(100, 109, 8) == 5  # 3 buckets: 100-104, 105-109 (+ none)
    assert bucket_width(0, 99, 4) == 128  # one bucket, of whole 64-step blocks
    # a million steps in 999 buckets: whole 256-step rollup blocks, 977 buckets
    assert bucket_width(0, 999_999, 2000) == 1024
    assert bucket_width(5, 70_000, 2000) == 128


@given(st.integers(0, 2**31 - 2), st.integers(0, 10**7), st.integers(4, 5000))
def test_the_width_keeps_within_the_budget_on_whole_blocks(
    first: int, span: int, max_points: int
) -> None:
    last = min(first + span, 2**31 - 1)
    width = bucket_width(first, last, max_points)
    assert last // width - first // width + 1 <= n_buckets(max_points)
    block = max((size for size in ROLLUP_SIZES if size <= width), default=1)
    assert width % block == 0


@given(st.integers(0, 100_000), st.integers(0, 100_000), st.integers(-1, 120_000))
def test_cover_reads_every_step_once(lo: int, span: int, rolled_through: int) -> None:
    hi = lo + span
    rolled_through = (rolled_through + 1) // 64 * 64 - 1  # a watermark ends a block
    for largest in (1, 64, 256, 4096):
        blocks, raw = cover(lo, hi, rolled_through, largest)
        pieces = [
            (k * ROLLUP_SIZES[level], (k + 1) * ROLLUP_SIZES[level] - 1)
            for level, first, last in blocks
            for k in (first, last)
        ]
        assert all(ROLLUP_SIZES[level] <= largest for level, _, _ in blocks)
        assert all(b <= rolled_through for _, b in pieces)
        covered = sorted(
            [
                (k * ROLLUP_SIZES[level], (k + 1) * ROLLUP_SIZES[level] - 1)
                for level, first, last in blocks
                for k in range(first, last + 1)
            ]
            + list(raw)
        )
        assert covered[0][0] == lo and covered[-1][1] == hi
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(covered))
        assert len(blocks) <= 2 * 8


def test_max_points_below_4_is_refused() -> None:
    with pytest.raises(ValueError, match="max_points"):
        n_buckets(3)


def test_it_keeps_first_last_and_each_buckets_extremes() -> None:
    values = [5.0, 1.0, 9.0, 4.0, 3.0, 8.0, 0.0, 7.0, 6.0, 2.0]
    points = list(enumerate(values))
    kept = minmax_buckets(points, 6)  # 2 buckets: steps 0-8 and 9
    assert kept == [(0, 5.0), (2, 9.0), (6, 0.0), (9, 2.0)]
    kept = minmax_buckets(points, 8)  # width 5: steps 0-4 and 5-9
    assert kept == [(0, 5.0), (1, 1.0), (2, 9.0), (5, 8.0), (6, 0.0), (9, 2.0)]


def test_nan_counts_as_the_highest_value_so_a_nan_spike_stays_visible() -> None:
    points = [(s, float(s % 7)) for s in range(1000)]
    points[500] = (500, NAN)
    points[600] = (600, -INF)
    kept = minmax_buckets(points, 20)
    assert len(kept) <= 20
    assert any(s == 500 and math.isnan(v) for s, v in kept)
    assert (600, -INF) in kept
    assert value_order(NAN) > value_order(INF) > value_order(1.0)


def test_ties_go_to_the_earlier_step() -> None:
    assert point_order((3, 1.0)) < point_order((4, 1.0))
    kept = minmax_buckets([(s, 1.0) for s in range(100)], 4)  # one bucket
    assert kept == [(0, 1.0), (99, 1.0)]


@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True, width=64),
            st.sampled_from([0.0, 1.0, -1.0]),
        ),
        min_size=1,
        max_size=300,
    ),
    st.integers(min_value=4, max_value=60),
    st.integers(min_value=1, max_value=5),
)
def test_the_reference_keeps_extremes_within_budget(
    values: list[float], max_points: int, stride: int
) -> None:
    points = [(i * stride, v) for i, v in enumerate(values)]
    kept = minmax_buckets(points, max_points)
    assert len(kept) <= max_points
    assert [s for s, _ in kept] == sorted({s for s, _ in kept})
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert min(points, key=point_order) in kept
    assert max(points, key=point_order) in kept


def test_lttb_keeps_the_ends_and_the_budget() -> None:
    points = [(s, math.sin(s / 10)) for s in range(1000)]
    kept = lttb(points, 50)
    assert len(kept) == 50
    assert kept[0] == points[0] and kept[-1] == points[-1]
    assert lttb(points[:10], 50) == points[:10]


# --------------------------------------------------------------------------- SQL path


def store(run: Run, key: str, points: list[Point]) -> int:
    series = MetricSeries.objects.create(run=run, policy="a", key=key)
    MetricPoint.objects.bulk_create(
        MetricPoint(series=series, step=s, value=v, wall_time=None) for s, v in points
    )
    return series.pk


SHAPES: dict[str, list[Point]] = {
    "ramp": [(s, float(s)) for s in range(500)],
    "sparse steps": [(s * s, math.cos(s)) for s in range(300)],
    "non-finite": [
        (s, [NAN, INF, -INF, 0.5][s % 4] if s % 37 == 0 else s % 11) for s in range(400)
    ],
    "ties": [(s, float(s % 3)) for s in range(333)],
    "short": [(1, 1.0), (2, NAN)],
}


@pytest.mark.django_db
@pytest.mark.parametrize(("max_points", "after_step"), [(4, -1), (10, -1), (64, -1), (50, 120)])
def test_sql_matches_the_reference(run: Run, max_points: int, after_step: int) -> None:
    ids = {name: store(run, name, points) for name, points in SHAPES.items()}
    found = selectors.series_points(
        list(ids.values()), max_points=max_points, after_step=after_step
    )
    for name, points in SHAPES.items():
        in_range = [p for p in points if p[0] > after_step]
        got = found[ids[name]]
        assert got.n_points == len(in_range), name
        assert got.downsampled == (len(in_range) > max_points), name
        assert same(got.points, minmax_buckets(in_range, max_points)), name


@pytest.mark.django_db
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=5000),
            st.one_of(st.floats(allow_nan=True, width=64), st.integers(-3, 3).map(float)),
        ),
        min_size=1,
        max_size=150,
        unique_by=lambda p: p[0],
    ),
    st.integers(min_value=4, max_value=40),
)
def test_sql_matches_the_reference_on_random_series(
    run: Run, points: list[Point], max_points: int
) -> None:
    points.sort()
    series_id = store(run, f"r{time.monotonic_ns()}", points)
    got = selectors.series_points([series_id], max_points=max_points)[series_id]
    assert same(got.points, minmax_buckets(points, max_points))


@pytest.mark.django_db
def test_a_million_points_come_back_as_at_most_2000_with_the_extremes(
    client: Client, alice: User, run: Run
) -> None:
    fill_series(run, 1_000_000, spike=777_777)  # +1000 at 777,777; -1000 at 333,333
    client.force_login(alice)
    started = time.perf_counter()
    response = client.get(reverse("api:series", args=[run.pk]), {"key": "big"})
    elapsed = time.perf_counter() - started
    (series,) = response.json()["series"]
    assert series["n_points"] == 1_000_000 and series["downsampled"] is True
    assert len(series["points"]) <= 2000
    assert [777_777, 1000.0] in series["points"]
    assert [333_333, -1000.0] in series["points"]
    assert series["points"][0][0] == 0 and series["points"][-1][0] == 999_999
    steps = [step for step, _ in series["points"]]
    assert steps == sorted(set(steps))
    assert elapsed < 10, f"took {elapsed:.1f}s"


@pytest.mark.django_db
def test_after_step_on_a_long_series_returns_only_the_new_points(
    client: Client, alice: User, run: Run
) -> None:
    fill_series(run, 200_000)
    client.force_login(alice)
    response = client.get(
        reverse("api:series", args=[run.pk]), {"key": "big", "after_step": 199_990}
    )
    (series,) = response.json()["series"]
    assert series["downsampled"] is False and series["n_points"] == 9
    assert [step for step, _ in series["points"]] == list(range(199_991, 200_000))
