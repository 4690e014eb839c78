"""Each series' kept step range (``MetricSeries.first_step`` / ``last_step``, issue 35).

Ingestion keeps the columns equal to the lowest and highest step of the series' stored
points, in the batch's transaction, on PostgreSQL (one UPDATE) and on the portable path
(SQLite's, taken here on PostgreSQL): after out-of-order batches, replays, repeats within
a batch, and for a series whose points were written other than by ingestion (range NULL).
Migration 0003 fills them from the points. A comparison's step range reads them, and
probes the points only for a series whose range is not known.
"""

from __future__ import annotations

import importlib
import json
import random
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Max, Min

from tests.webapp.metrics.test_api_support import make_run, point
from webapp.compare import selectors
from webapp.metrics import ingest
from webapp.metrics.batch import parse_batch
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

PATHS = ("postgresql", "portable")
XMIN_SQL = "SELECT xmin::text FROM experiments_metricseries WHERE run_id = %s"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which code path ingestion and the step range take (the portable one is SQLite's)."""
    if request.param == "portable":
        for module in (ingest, selectors):
            monkeypatch.setattr(module, "connection", SimpleNamespace(vendor="sqlite"))
    return str(request.param)


@pytest.fixture
def run(alice: User) -> Run:
    return make_run(alice)


def send(run: Run, points: list[dict[str, Any]]) -> dict[str, Any]:
    batch = parse_batch(json.dumps({"points": points}).encode())
    return ingest.metrics_ingest(run=run, batch=batch).as_json()


def kept_and_stored(run: Run) -> tuple[dict[int, tuple[Any, Any]], dict[int, tuple[Any, Any]]]:
    """Per series of ``run``: (first_step, last_step), and the points' (min, max) step."""
    kept = {
        pk: (first, last)
        for pk, first, last in MetricSeries.objects.filter(run=run).values_list(
            "pk", "first_step", "last_step"
        )
    }
    stored = {
        row["series_id"]: (row["lo"], row["hi"])
        for row in MetricPoint.objects.filter(series__run=run)
        .values("series_id")
        .annotate(lo=Min("step"), hi=Max("step"))
    }
    return kept, stored


def test_out_of_order_batches_and_replays_keep_the_range_of_the_points(run: Run, path: str) -> None:
    batches = [
        [point(s, policy=p) for s in (10, 11, 12) for p in ("a", "b")],
        [point(s, policy="a") for s in (3, 40)] + [point(20, policy="b")],  # late and ahead
        [point(s, policy="a") for s in (10, 11)],  # a replay: nothing new
        [point(7, policy="c"), point(7, policy="c", key="k2"), point(5, policy="b")],
        [point(100, policy="a"), point(100, policy="a"), point(0, policy="a")],  # a repeat
    ]
    for points in batches:
        send(run, points)
        kept, stored = kept_and_stored(run)
        assert kept == stored
    kept, _ = kept_and_stored(run)
    names = dict(MetricSeries.objects.filter(run=run).values_list("pk", "policy"))
    assert {names[pk]: r for pk, r in kept.items() if names[pk] in "ab"} == {
        "a": (0, 100),
        "b": (5, 20),
    }


def test_a_replayed_batch_writes_no_series_row(run: Run) -> None:
    points = [point(s, policy=p) for s in range(5) for p in ("a", "b")]
    send(run, points)
    with connection.cursor() as cursor:
        cursor.execute(XMIN_SQL, [run.pk])
        before = sorted(cursor.fetchall())
        send(run, points[3:])  # all duplicates
        cursor.execute(XMIN_SQL, [run.pk])
        assert sorted(cursor.fetchall()) == before


def test_random_batches_match_the_points(run: Run, path: str) -> None:
    rng = random.Random(35)
    for _ in range(12):
        points = [
            point(rng.randint(0, 500), policy=rng.choice("abc"), key=rng.choice(("k1", "k2")))
            for _ in range(rng.randint(1, 40))
        ]
        send(run, points)
        kept, stored = kept_and_stored(run)
        assert kept == stored


def test_a_series_written_other_than_by_ingestion_gets_its_whole_range(run: Run, path: str) -> None:
    series = MetricSeries.objects.create(run=run, policy="a", key="train/reward_mean")
    MetricPoint.objects.bulk_create(
        MetricPoint(series=series, step=s, value=0.0) for s in (2, 900)
    )  # range not known: NULL
    series.refresh_from_db()
    assert (series.first_step, series.last_step) == (None, None)
    assert selectors.step_range([series.pk]) == (2, 900)  # probed
    send(run, [point(50), point(60)])
    series.refresh_from_db()
    assert (series.first_step, series.last_step) == (2, 900)


def test_the_step_range_reads_the_kept_columns(run: Run, alice: User, path: str) -> None:
    send(run, [point(s, policy=p) for s in (5, 6, 7) for p in ("a", "b")])
    other = make_run(alice, name="other")
    loose = MetricSeries.objects.create(run=other, policy="a", key="train/reward_mean")
    MetricPoint.objects.bulk_create(MetricPoint(series=loose, step=s) for s in (1, 3))
    ids = list(MetricSeries.objects.filter(run=run).values_list("pk", flat=True))
    assert selectors.step_range(ids) == (5, 7)
    assert selectors.step_range([*ids, loose.pk]) == (1, 7)
    # the columns, not the points, are what it reads where they are known
    MetricSeries.objects.filter(pk__in=ids).update(first_step=-3, last_step=70)
    assert selectors.step_range(ids) == (-3, 70)
    assert selectors.step_range([*ids, loose.pk]) == (-3, 70)
    empty = MetricSeries.objects.create(run=other, policy="b", key="train/reward_mean")
    assert selectors.step_range([empty.pk]) is None
    assert selectors.step_range([]) is None


def test_a_known_range_probes_no_point(run: Run) -> None:
    """PostgreSQL's plan: the points' index is never visited for a series with a range."""
    send(run, [point(s, policy=p) for s in range(100) for p in ("a", "b")])
    ids = list(MetricSeries.objects.filter(run=run).values_list("pk", flat=True))
    sql = selectors._RANGE_SQL.format(
        series='"experiments_metricseries"', points='"experiments_metricpoint"'
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + sql, {"ids": ids})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    probes = [line for line in plan.splitlines() if "experiments_metricpoint" in line]
    assert probes and all("never executed" in line for line in probes), plan


def test_the_migration_fills_the_range_from_the_points(run: Run) -> None:
    send(run, [point(s, policy=p) for s in (4, 9, 30) for p in ("a", "b")])
    send(run, [point(1, policy="a")])
    MetricSeries.objects.filter(run=run).update(first_step=None, last_step=None)
    migration = importlib.import_module("webapp.metrics.migrations.0003_series_step_range")
    with connection.cursor() as cursor:
        cursor.execute(migration._BACKFILL_SQL)
    kept, stored = kept_and_stored(run)
    assert kept == stored and sorted(kept.values()) == [(1, 30), (4, 30)]
