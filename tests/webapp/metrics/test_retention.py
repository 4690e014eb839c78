"""Retention of raw points (issue 35): a finished run, packed and rolled up by beat's own
task, loses its raw points (but its clock series and its evaluations), and every page,
API answer and export that shows it is byte for byte what it was; a late batch to it
(a resubmitted run) first gets its points back, wall times included, and nothing is lost.

Runs are built through the ingestion API and packed and rolled up by
``scheduler.tasks.series_pack``, as in production; the drop is the management command's."""

from __future__ import annotations

import datetime as dt
import io
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import numpy as np
import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduler import tasks
from tests.webapp.metrics.test_api_support import make_run, post_batch
from webapp.metrics import retention, series_packs
from webapp.metrics.downsample import minmax_buckets
from webapp.metrics.models import MetricPoint, MetricSeries, SeriesPack
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

STEPS = 700  # 10 whole 64-step blocks and a partial one; 2 blocks of 256
TRAIN, VAL = "train/reward_mean", "val/reward@1"
ROLLOUTS, TOKENS = "perf/rollouts_total", "perf/response_tokens_total"
EVAL_ACC, EVAL_N = "eval/synthetic/add/accuracy", "eval/synthetic/add/n"
WALL0 = 1.7e9


def wall(run_index: int, step: int) -> float:
    """The wall time the trainer stamps on every point of a step (one ``now`` a step)."""
    return WALL0 + 1e5 * run_index + 2.5 * step + (step % 7) * 0.125


def value(policy: str, step: int, k: float) -> float | str:
    if policy == "a" and step in (100, 200, 300):
        return {100: "NaN", 200: "Infinity", 300: "-Infinity"}[step]
    return round(math.sin(step / (40.0 * k)) + step / 1000.0 + (step * 7919 % 13) / 100, 6)


def step_points(run_index: int, step: int, k: float) -> list[dict[str, Any]]:
    """One step of a two-policy run as rank 0 ships it: each policy's metrics and the
    pool's, one wall time."""
    now = wall(run_index, step)
    points = []

    def add(policy: str, key: str, v: Any) -> None:
        points.append({"policy": policy, "key": key, "step": step, "value": v, "wall_time": now})

    for policy in ("a", "b"):
        add(policy, TRAIN, value(policy, step, k))
        if step >= 1:
            add(policy, ROLLOUTS, 16.0 * step)
            add(policy, TOKENS, 160.0 * step + (step % 5))
        if step % 10 == 0 or step == STEPS - 1:
            add(policy, VAL, round(0.1 * k + step / 2000.0, 6))
    add("_pool", TRAIN, value("b", step, k + 0.5))
    add("_pool", "perf/step_s", 2.5 + (step % 7) * 0.125)
    if step % 10 == 0 or step == STEPS - 1:
        add("_pool", VAL, round(0.1 * k + step / 2000.0, 6))
    return points


def eval_points(run_index: int, step: int) -> list[dict[str, Any]]:
    """An evaluation job's points: its own, later wall times."""
    now = wall(run_index, STEPS) + 500.0 + step
    return [
        {"policy": policy, "key": key, "step": step, "value": v, "wall_time": now}
        for policy in ("a", "b")
        for key, v in ((EVAL_ACC, 0.25 + step / 4000.0), (EVAL_N, 40.0))
    ]


def ship(client: Client, run: Run, token: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    response = post_batch(client, run, token, {"points": points})
    assert response.status_code == 200, response.content
    return response.json()


def shipped_run(client: Client, owner: User, run_index: int, k: float, name: str) -> Run:
    """A finished run of ``STEPS`` steps shipped in batches of 100 steps, evaluated at
    its first and last step."""
    run = make_run(owner, state=Run.State.RUNNING, name=name)
    token = services.run_token_issue(run)
    for first in range(0, STEPS, 100):
        batch = [
            p for s in range(first, min(first + 100, STEPS)) for p in step_points(run_index, s, k)
        ]
        ship(client, run, token, batch)
    ship(client, run, token, eval_points(run_index, 0) + eval_points(run_index, STEPS - 1))
    return run


def finish(runs: list[Run], days_ago: float) -> None:
    Run.objects.filter(pk__in=[run.pk for run in runs]).update(
        state=Run.State.COMPLETED, finished_at=timezone.now() - dt.timedelta(days=days_ago)
    )


@pytest.fixture
def two_runs(client: Client, alice: User) -> tuple[Run, Run]:
    """Two finished runs of two experiments (two groups), packed and rolled up by beat's
    task; the first finished 40 days ago, the second 2 days ago."""
    old = shipped_run(client, alice, 0, 1.0, "old")
    recent = shipped_run(client, alice, 1, 1.7, "recent")
    finish([old], 40)
    finish([recent], 2)
    tasks.series_pack()
    for run in (old, recent):
        run.refresh_from_db()
        assert run.series_packed
        for series in MetricSeries.objects.filter(run=run):
            last = MetricPoint.objects.filter(series=series).order_by("-step").first()
            assert series.rolled_through == last.step  # rolled up through the last step
            assert SeriesPack.objects.filter(series=series).exists()
    return old, recent


# --------------------------------------------------------------------------- what is shown


_CSRF = re.compile(rb'(name="csrfmiddlewaretoken" value=|csrfToken["\']?\s*[:=]\s*)"[^"]*"')


def body(response: Any) -> bytes:
    assert response.status_code == 200, (response.status_code, response.content[:300])
    if getattr(response, "streaming", False):
        data = b"".join(response.streaming_content)
    else:
        data = response.content
    return _CSRF.sub(rb"\1-", data)  # a page's CSRF token is new each time


def everything(client: Client, old: Run, recent: Run) -> dict[str, bytes]:
    """Every page, API answer and export that shows ``old``'s points."""
    keys = [TRAIN, VAL, ROLLOUTS, TOKENS, "perf/step_s", EVAL_ACC]
    shown: dict[str, bytes] = {}

    def get(name: str, url: str, params: Any = None) -> None:
        shown[name] = body(client.get(url, params or {}))

    pk = old.pk
    get("run page", reverse("dashboard:run_detail", args=[pk]))
    get("run list", reverse("dashboard:run_list"))
    get("experiment page", reverse("dashboard:experiment_detail", args=[old.experiment_id]))
    get("keys", f"/api/v1/runs/{pk}/keys")
    get("status", f"/api/v1/runs/{pk}/status")
    for max_points in (4, 10, 50, 300, 2000):
        get(
            f"series {max_points}",
            f"/api/v1/runs/{pk}/series",
            {"key": keys, "max_points": max_points},
        )
    get("series default", f"/api/v1/runs/{pk}/series", {"key": keys})
    get("series after", f"/api/v1/runs/{pk}/series", {"key": keys, "after_step": 650})
    get(
        "series after ds",
        f"/api/v1/runs/{pk}/series",
        {"key": TRAIN, "after_step": 63, "max_points": 20},
    )
    get("curves.csv", reverse("metrics:run_curves_csv", args=[pk]))
    get("metric.csv", reverse("metrics:run_metric_csv", args=[pk]), {"key": TRAIN})
    for x in ("step", "rollouts", "tokens"):
        get(f"history {x}", f"/api/v1/runs/{pk}/history", {"x": x})
        get(f"history {x} ds", f"/api/v1/runs/{pk}/history", {"x": x, "max_points": 30})
    get("history after", f"/api/v1/runs/{pk}/history", {"key": TRAIN, "after_step": 400})
    for lower in ("0", "1"):
        get(f"runs api {lower}", "/api/v1/runs", {"metric": [TRAIN, VAL], "lower_is_better": lower})
    get("evaluations", reverse("evals:run_evaluations", args=[pk]))
    runs = f"{old.pk},{recent.pk}"
    base = [("runs", runs), ("group_by", "experiment"), ("metric", TRAIN), ("metric", VAL)]
    for x in ("step", "rollouts", "tokens", "wall_time"):
        for buckets in ("50", "1000"):
            query = urlencode([*base, ("x", x), ("buckets", buckets), ("smooth", "0.3")])
            get(f"compare {x} {buckets}", f"/api/v1/compare?{query}")
        query = urlencode([*base, ("x", x)])
        get(f"compare export {x}", f"/compare/export.csv?{query}")
    for lower in ("0", "1"):
        for metric in (TRAIN, VAL):
            query = urlencode([*base, ("lower_is_better", lower), ("table_metric", metric)])
            get(f"compare summary {lower} {metric}", f"/api/v1/compare/summary?{query}")
            get(f"compare table {lower} {metric}", f"/compare/table.csv?{query}")
    for view in ("tasks", "relative", "significance"):
        query = urlencode([*base, ("view", view)])
        get(f"bars {view}", f"/api/v1/compare/bars?{query}")
        get(f"bars {view} csv", f"/compare/bars.csv?{query}")
    query = urlencode([*base, ("view", "significance"), ("sig_step", "350")])
    get("bars significance at 350", f"/api/v1/compare/bars?{query}")
    return shown


def first_difference(a: bytes, b: bytes) -> tuple[bytes, bytes]:
    """Where two bodies part: 80 bytes of each from just before."""
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return a[max(0, at - 40) : at + 40], b[max(0, at - 40) : at + 40]


def raw_rows(run: Run) -> list[tuple[int, int, float, float | None]]:
    return list(
        MetricPoint.objects.filter(series__run=run)
        .order_by("series_id", "step")
        .values_list("series_id", "step", "value", "wall_time")
    )


def same_rows(a: list[tuple], b: list[tuple]) -> bool:
    """Equal, NaN equal to NaN."""

    def key(row: tuple) -> tuple:
        return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)

    return [key(row) for row in a] == [key(row) for row in b]


# --------------------------------------------------------------------------- tests


def test_every_page_and_export_is_the_same_after_the_drop(
    client: Client, alice: User, two_runs: tuple[Run, Run]
) -> None:
    old, recent = two_runs
    client.force_login(alice)
    before = everything(client, old, recent)
    assert everything(client, old, recent) == before  # what is compared is deterministic
    kept_before = MetricPoint.objects.filter(series__run=recent).count()
    everything_raw = MetricPoint.objects.filter(series__run=old).count()

    out = io.StringIO()
    call_command("drop_packed_points", "--older-than-days", "30", stdout=out)

    # the old run keeps its clock and its evaluations raw; the recent run everything
    left = MetricPoint.objects.filter(series__run=old)
    assert set(left.values_list("series__policy", "series__key").distinct()) == {
        ("_pool", "perf/step_s"),
        ("a", EVAL_ACC),
        ("a", EVAL_N),
        ("b", EVAL_ACC),
        ("b", EVAL_N),
    }
    dropped = everything_raw - left.count()
    assert dropped > 0.85 * everything_raw  # the clock is 1 of 15 series here
    assert f"run {old.pk}: dropped {dropped} points" in out.getvalue()
    assert MetricPoint.objects.filter(series__run=recent).count() == kept_before
    assert SeriesPack.objects.filter(series__run=old).count() == old.series.count()

    after = everything(client, old, recent)
    changed = [name for name in before if after[name] != before[name]]
    assert not changed, [(name, first_difference(before[name], after[name])) for name in changed]
    # and nothing is left to drop
    assert retention.runs_to_drop(30) == []
    call_command("drop_packed_points", "--older-than-days", "30", stdout=(out := io.StringIO()))
    assert out.getvalue().strip() == "dropped 0 raw points of 0 runs"


def test_a_late_batch_gets_the_points_back_first(
    client: Client, alice: User, two_runs: tuple[Run, Run]
) -> None:
    old, recent = two_runs
    client.force_login(alice)
    stored = raw_rows(old)
    before = everything(client, old, recent)
    assert retention.drop_run_points(old.pk) is not None
    assert len(raw_rows(old)) < len(stored) / 5  # the clock and the evaluations

    # A resubmitted run replays its last steps: duplicates, as if nothing had been dropped;
    # the points are back, wall times included, and the packs stay (nothing new).
    token = services.run_token_issue(old)
    replay = [p for s in range(650, STEPS) for p in step_points(0, s, 1.0)]
    reply = ship(client, old, token, replay)
    assert reply["points"] == {"accepted": 0, "duplicates": len(replay)}
    assert same_rows(raw_rows(old), stored)
    old.refresh_from_db()
    assert old.series_packed
    assert everything(client, old, recent) == before

    # Dropped again, then new steps: the points come back, the run is packed again by the
    # next tick, and its series hold the old points and the new ones.
    again = retention.drop_run_points(old.pk)
    assert again is not None and again.points_dropped > 0
    more = [p for s in range(STEPS, STEPS + 10) for p in step_points(0, s, 1.0)]
    reply = ship(client, old, token, more)
    assert reply["points"] == {"accepted": len(more), "duplicates": 0}
    old.refresh_from_db()
    assert not old.series_packed and not SeriesPack.objects.filter(series__run=old).exists()
    grown = raw_rows(old)
    assert same_rows([row for row in grown if row[1] < STEPS], stored)
    assert len(grown) == len(stored) + len(more)
    tasks.series_pack()
    old.refresh_from_db()
    assert old.series_packed
    series = client.get(
        f"/api/v1/runs/{old.pk}/series", {"key": TRAIN, "policy": "b", "max_points": 5000}
    ).json()["series"][0]
    assert series["n_points"] == STEPS + 10
    assert [step for step, _ in series["points"]] == list(range(STEPS + 10))


def test_only_old_packed_runs_lose_points_and_dry_run_drops_nothing(
    client: Client, alice: User, two_runs: tuple[Run, Run], settings: Any
) -> None:
    old, recent = two_runs
    count = MetricPoint.objects.count()
    recent_count = MetricPoint.objects.filter(series__run=recent).count()
    out = io.StringIO()
    call_command("drop_packed_points", "--older-than-days", "1", "--dry-run", stdout=out)
    assert MetricPoint.objects.count() == count
    assert f"run {old.pk}: would drop" in out.getvalue()
    assert f"run {recent.pk}: would drop" in out.getvalue()
    settings.RAW_POINT_RETENTION_DAYS = None
    with pytest.raises(CommandError, match="retention is off"):
        call_command("drop_packed_points")
    assert tasks.points_retention() == 0 and MetricPoint.objects.count() == count
    # beat's task follows the setting
    settings.RAW_POINT_RETENTION_DAYS = 10
    assert tasks.points_retention() == 1
    assert MetricPoint.objects.filter(series__run=recent).count() == recent_count
    assert MetricPoint.objects.filter(series__run=old).count() < recent_count / 5
    # a run not packed (new points came in) keeps its points
    unpacked = shipped_run(client, alice, 2, 1.2, "unpacked")
    finish([unpacked], 50)
    assert retention.runs_to_drop(10) == []
    assert retention.drop_run_points(unpacked.pk) is None


def test_a_series_whose_wall_times_are_not_the_clocks_is_kept(
    client: Client, alice: User, two_runs: tuple[Run, Run]
) -> None:
    old, _ = two_runs
    odd = MetricSeries.objects.get(run=old, policy="b", key=TRAIN)
    MetricPoint.objects.filter(series=odd, step=5).update(wall_time=1.0)
    result = retention.drop_run_points(old.pk)
    assert result is not None and result.series_kept == 6  # clock, 4 evaluations, odd
    assert MetricPoint.objects.filter(series=odd).count() == STEPS


@contextmanager
def other_session() -> Iterator[psycopg.Connection]:
    """A second connection to the test database (another process's session)."""
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"],
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        password=settings["PASSWORD"] or None,
    ) as other:
        yield other


@pytest.mark.django_db(transaction=True)  # the fixture's sweep holds no lock past its commit
def test_a_run_whose_ingestion_is_in_flight_is_left_for_later(
    client: Client, alice: User, two_runs: tuple[Run, Run]
) -> None:
    old, _ = two_runs
    count = MetricPoint.objects.count()
    with other_session() as other:
        other.execute(
            "SELECT pg_advisory_xact_lock_shared(%s, %s)", [series_packs.PACK_LOCK_CLASS, old.pk]
        )
        assert retention.drop_run_points(old.pk) is None
        assert retention.drop_packed_points(30) == []
        other.rollback()
    assert MetricPoint.objects.count() == count
    assert retention.drop_packed_points(30)[0].run_id == old.pk


@pytest.mark.django_db(False)
@pytest.mark.parametrize("seed", range(40))
def test_the_numpy_buckets_are_the_reference_buckets(seed: int) -> None:
    """A dropped series is bucketed in numpy: the same points as the pure reference
    (NaN highest, infinities, ties between equal values, -0.0 and 0.0, gaps)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    steps = np.sort(rng.choice(int(rng.integers(n, 4 * n + 1)), size=n, replace=False))
    pool = np.array([0.0, -0.0, 1.0, -1.0, 0.5, np.nan, np.inf, -np.inf])
    values = np.where(
        rng.random(n) < 0.3, rng.choice(pool, size=n), np.round(rng.normal(size=n), 1)
    )
    for max_points in (4, 5, 17, 100, 999, n, n + 1):
        if max_points < 4:
            continue
        ours = retention.minmax_reduced(steps.astype(np.int64), values, max_points)
        points = list(zip(steps.tolist(), values.tolist(), strict=True))
        reference = minmax_buckets(points, max_points)
        assert [step for step, _ in ours] == [step for step, _ in reference]
        assert same_rows(ours, reference)
