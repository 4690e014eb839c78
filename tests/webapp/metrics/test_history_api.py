"""``GET /api/v1/runs/<id>/history`` (issue 34): several keys at once, every point as
stored or the run page's min/max buckets, against step, rollouts or tokens."""

from __future__ import annotations

import math

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.metrics.test_api_support import fill_series, make_run, point, post_batch
from tests.webapp.metrics.test_fuzz_ingest import validate
from webapp.metrics import series_rollups
from webapp.metrics.history import counter_at
from webapp.metrics.models import MetricPoint
from webapp.metrics.selectors import as_float
from webapp.metrics.views_schema import OPENAPI
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

NAN, INF = math.nan, math.inf


def history(client: Client, run: Run, **params: object) -> dict:
    response = client.get(f"/api/v1/runs/{run.pk}/history", params)
    assert response.status_code == 200, response.content
    problems = validate(response.json(), OPENAPI["components"]["schemas"]["History"])
    assert not problems, problems
    return response.json()


def decoded(values: list) -> list[float]:
    names = {"NaN": NAN, "Infinity": INF, "-Infinity": -INF}
    return [names[v] if isinstance(v, str) else float(v) for v in values]


def same_values(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True)
    )


def test_counter_at_interpolates_between_the_counters_points() -> None:
    counter = [(1, 256.0), (2, 512.0), (4, 1024.0), (5, NAN)]
    assert counter_at([0, 1, 2, 3, 4, 5, 9], counter) == [
        0.0,
        256.0,
        512.0,
        768.0,
        1024.0,
        None,
        None,
    ]
    assert counter_at([0, 3], []) == [None, None]
    assert counter_at([0, 10, 20], [(0, 5.0), (20, 25.0)]) == [5.0, 15.0, 25.0]


@pytest.fixture
def shipped(client: Client, alice: User) -> Run:
    """Run of policies a and b: rewards at every step 0..9 (NaN and infinities at steps 3,
    4, 5 for a), a validation every 5 steps, and a's consumption counters from step 1."""
    run = make_run(alice)
    token = services.run_token_issue(run)
    values = [0.1, 0.2, 0.3, "NaN", "Infinity", "-Infinity", 0.7, 0.8, 0.9, 1.0]
    points = [point(step, value) for step, value in enumerate(values)]
    points += [point(step, 0.5 + step / 100, policy="b") for step in range(10)]
    points += [point(step, step / 10, key="val/reward@1") for step in (0, 5)]
    points += [point(step, 16.0 * step, key="perf/rollouts_total") for step in range(1, 8)]
    points += [point(step, 160.0 * step, key="perf/response_tokens_total") for step in range(1, 8)]
    assert post_batch(client, run, token, {"points": points}).status_code == 200
    return run


def test_history_is_the_points_stored(client: Client, alice: User, shipped: Run) -> None:
    client.force_login(alice)
    reply = history(client, shipped, key=["train/reward_mean", "val/reward@1"])
    assert reply["x"] == "step" and reply["max_points"] is None and reply["notes"] == []
    assert [(s["policy"], s["key"]) for s in reply["series"]] == [
        ("a", "train/reward_mean"),
        ("a", "val/reward@1"),
        ("b", "train/reward_mean"),
    ]
    for series in reply["series"]:
        assert "x" not in series and series["downsampled"] is False
        stored = MetricPoint.objects.filter(
            series__run=shipped, series__policy=series["policy"], series__key=series["key"]
        ).order_by("step")
        assert series["step"] == [p.step for p in stored]
        assert same_values(decoded(series["value"]), [as_float(p.value) for p in stored])
        assert series["n_points"] == len(stored)
    assert reply["series"][0]["value"][3:6] == ["NaN", "Infinity", "-Infinity"]
    only_b = history(client, shipped, policy="b")
    assert {s["key"] for s in only_b["series"]} == {"train/reward_mean"}
    everything = history(client, shipped)
    assert len(everything["series"]) == 5  # every key of every policy
    after = history(client, shipped, key="train/reward_mean", policy="a", after_step=7)
    assert after["series"][0]["step"] == [8, 9]


def test_x_is_the_policys_counter_at_each_step(client: Client, alice: User, shipped: Run) -> None:
    client.force_login(alice)
    tokens = history(client, shipped, key=["val/reward@1", "train/reward_mean"], x="tokens")
    by_name = {(s["policy"], s["key"]): s for s in tokens["series"]}
    # val at steps 0 and 5: 0 before any rollout, then the counter's value at step 5
    assert by_name["a", "val/reward@1"]["x"] == [0.0, 800.0]
    # after the counter's last point (step 7) the x is unknown
    assert by_name["a", "train/reward_mean"]["x"] == [160.0 * s for s in range(8)] + [None, None]
    # b has no counter: no x, and a note says so
    assert by_name["b", "train/reward_mean"]["x"] == [None] * 10
    assert tokens["notes"] == [
        "no perf/response_tokens_total for b: their points have no tokens (x is null)"
    ]
    rollouts = history(client, shipped, key="val/reward@1", x="rollouts")
    assert rollouts["series"][0]["x"] == [0.0, 80.0]


def test_downsampled_history_is_the_run_pages_buckets(client: Client, alice: User) -> None:
    run = make_run(alice)
    long = fill_series(run, 20_000, key="long", spike=12_345)
    fill_series(run, 300, key="short")
    Run.objects.filter(pk=run.pk).update(last_step=19_999)
    series_rollups.run_rollup(run.pk)
    client.force_login(alice)
    reply = history(client, run, key=["long", "short"], max_points=500)
    page = client.get(
        f"/api/v1/runs/{run.pk}/series", {"key": ["long", "short"], "max_points": 500}
    )
    for ours, theirs in zip(reply["series"], page.json()["series"], strict=True):
        assert ours["key"] == theirs["key"]
        assert ours["step"] == [step for step, _ in theirs["points"]]
        assert ours["value"] == [value for _, value in theirs["points"]]
        assert ours["n_points"] == theirs["n_points"]
    long_series = next(s for s in reply["series"] if s["key"] == "long")
    assert long_series["downsampled"] and len(long_series["step"]) <= 500
    assert long_series["n_points"] == 20_000 and 12_345 in long_series["step"]  # the spike
    assert max(long_series["value"]) == 1000.0 and min(long_series["value"]) == -1000.0
    full = history(client, run, key="long")
    assert len(full["series"][0]["step"]) == 20_000
    assert MetricPoint.objects.filter(series_id=long).count() == 20_000


def test_history_permissions_and_parameters(
    client: Client, alice: User, bob: User, charlie: User, shipped: Run
) -> None:
    url = f"/api/v1/runs/{shipped.pk}/history"
    assert client.get(url).status_code == 401
    client.force_login(bob)
    assert client.get(url).status_code == 200  # a labmate reads
    client.force_login(charlie)
    outsider = client.get(url)
    assert outsider.status_code == 404 and outsider.json() == {"error": "no such run"}
    client.force_login(alice)
    assert client.get(f"/api/v1/runs/{shipped.pk + 999}/history").status_code == 404
    for params, named in [({"x": "wall_time"}, "x"), ({"max_points": "3"}, "max_points")]:
        response = client.get(url, params)
        assert response.status_code == 400 and named in response.json()["error"]
    assert client.post(url).status_code == 405
