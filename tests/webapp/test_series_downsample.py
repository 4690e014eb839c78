"""Min/max-bucket downsampling: the pure reference, and the SQL path checked against it."""

from __future__ import annotations

import math
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webapp.test_api_support import fill_series
from webapp.api import selectors
from webapp.api.downsample import (
    Point,
    bucket_of,
    lttb,
    minmax_buckets,
    n_buckets,
    point_order,
    value_order,
)
from webapp.experiments.models import MetricPoint, MetricSeries, Run

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


def test_buckets_cover_the_steps_evenly() -> None:
    assert [bucket_of(s, 0, 9, 5) for s in range(10)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert bucket_of(109, 100, 109, 3) == 2
    assert n_buckets(2000) == 999


def test_max_points_below_4_is_refused() -> None:
    with pytest.raises(ValueError, match="max_points"):
        n_buckets(3)


def test_it_keeps_first_last_and_each_buckets_extremes() -> None:
    values = [5.0, 1.0, 9.0, 4.0, 3.0, 8.0, 0.0, 7.0, 6.0, 2.0]
    points = list(enumerate(values))
    kept = minmax_buckets(points, 6)  # 2 buckets of 5 steps
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
