"""``GET /api/v1/runs`` (issue 34): its filters, cursor pages, the final and best values
from the rollups, its queries, its schema; the lab's permissions per actor.

Actors (tests/fixtures_db.py): alice owns the runs, bob is her labmate, charlie is in
another lab; dora is staff.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.webapp.metrics.test_api_support import fill_series, make_run
from tests.webapp.metrics.test_fuzz_ingest import validate
from webapp.core.models import Lab
from webapp.core.services import lab_join
from webapp.metrics import series_rollups
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.metrics.run_values import series_values, series_values_from_points
from webapp.metrics.selectors import as_float
from webapp.metrics.views_schema import OPENAPI
from webapp.runs import services
from webapp.runs.models import Experiment, Run, Sweep, Tag

pytestmark = pytest.mark.django_db

KEY = "val/reward@1"
URL = "/api/v1/runs"


def listed(client: Client, **params: Any) -> dict[str, Any]:
    response = client.get(URL, params)
    assert response.status_code == 200, response.content
    problems = validate(response.json(), OPENAPI["components"]["schemas"]["RunList"])
    assert not problems, problems
    return response.json()


def ids(reply: dict[str, Any]) -> list[int]:
    return [run["id"] for run in reply["runs"]]


def as_user(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def grid(alice: User, bob: User, make_experiment: Callable[..., Experiment]) -> dict[str, Any]:
    """alice's SGT experiment (lambda 0.1, seeds 0 and 1, tagged "paper", completed), her
    standalone one (seed 0, running), and bob's SGT one with lambda 0.05 (seed 0)."""
    sgt = make_experiment(name="sgt-a", regime="sgt")
    alone = make_experiment(name="alone", regime="standalone", seeds=(0,))
    bobs = make_experiment(
        owner=bob, name="sgt-b", regime="sgt", seeds=(0,), sgt={"lambda_sgt": 0.05, "k_sgt": 2}
    )
    runs = {
        "sgt": services.runs_create(sgt),
        "alone": services.runs_create(alone),
        "bob": services.runs_create(bobs),
    }
    Run.objects.filter(experiment=sgt).update(state=Run.State.COMPLETED)
    Run.objects.filter(experiment=alone).update(state=Run.State.RUNNING)
    sgt.tags.add(Tag.objects.create(lab=sgt.lab, name="paper"))
    return runs


def test_filters_select_the_runs_a_researcher_asks_for(alice: User, grid: dict[str, Any]) -> None:
    client = as_user(alice)
    sgt = sorted(run.pk for run in grid["sgt"])
    bobs, alone = grid["bob"][0].pk, grid["alone"][0].pk
    everything = sorted([*sgt, alone, bobs])
    assert sorted(ids(listed(client))) == everything
    assert sorted(ids(listed(client, regime="sgt"))) == sorted([*sgt, bobs])
    assert sorted(ids(listed(client, regime=["sgt", "standalone"]))) == everything
    assert ids(listed(client, state="running")) == [alone]
    assert sorted(ids(listed(client, state="completed", regime="sgt"))) == sgt
    assert sorted(ids(listed(client, tag="paper"))) == sgt
    assert ids(listed(client, owner="bob")) == [bobs]
    assert ids(listed(client, experiment=grid["alone"][0].experiment_id)) == [alone]
    assert ids(listed(client, experiment_name="sgt-b")) == [bobs]
    assert sorted(ids(listed(client, seed=1))) == [grid["sgt"][1].pk]
    assert sorted(ids(listed(client, lab="Test lab"))) == everything
    assert ids(listed(client, lab="Other lab")) == []
    assert ids(listed(client, id=[alone, bobs, 10**9])) == [bobs, alone]
    # config fields by dotted path, typed as JSON
    assert sorted(ids(listed(client, **{"config.sgt.lambda_sgt": "0.1"}))) == sgt
    assert ids(listed(client, **{"config.sgt.lambda_sgt": "0.05"})) == [bobs]
    assert ids(listed(client, **{"config.sgt.k_sgt__gte": "2"})) == [bobs]
    assert sorted(ids(listed(client, **{"config.sgt.lambda_sgt__gt": "0.06"}))) == sgt
    assert ids(listed(client, **{"config.regime": "standalone"})) == [alone]
    pool_first = {"config.pool.0.name": "llama", "config.regime": "standalone"}
    assert ids(listed(client, **pool_first)) == [alone]
    assert ids(listed(client, **{"config.pool.1.name": "llama"})) == []
    assert ids(listed(client, **{"config.sgt.lambda_sgt": '"0.1"'})) == []  # a string
    assert ids(listed(client, **{"config.seed": "1"})) == [grid["sgt"][1].pk]


def test_created_range_and_bad_parameters(alice: User, grid: dict[str, Any]) -> None:
    client = as_user(alice)
    alone = grid["alone"][0]
    earlier = timezone.now() - timedelta(days=3)
    Run.objects.filter(pk=alone.pk).update(created_at=earlier)
    day = earlier.date().isoformat()
    assert ids(listed(client, created_before=day)) == [alone.pk]  # the whole day included
    assert alone.pk not in ids(listed(client, created_after=(earlier.date() + timedelta(1))))
    assert ids(listed(client, created_before=earlier.isoformat() + "", created_after=day)) == []
    for params, named in [
        ({"created_after": "yesterday"}, "created_after"),
        ({"seed": "x"}, "seed"),
        ({"config.sgt.lambda_sgt__near": "1"}, "__near"),
        ({"config.sgt..x": "1"}, "not a config path"),
        ({"config.sgt.lambda_sgt__gt": "abc"}, "compares numbers"),
        ({"order": "name"}, "order"),
        ({"limit": "0"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"lower_is_better": "maybe"}, "lower_is_better"),
        ({"regime": "a\x00b"}, "NUL"),
    ]:
        response = client.get(URL, params)
        assert response.status_code == 400, params
        assert named in response.json()["error"], (params, response.json())


def test_cursor_pages_walk_every_run_once(alice: User, grid: dict[str, Any]) -> None:
    client = as_user(alice)
    everything = sorted(
        (run.pk for runs in grid.values() for run in runs), reverse=True
    )  # newest first
    for order, expected in (("-id", everything), ("id", everything[::-1])):
        seen: list[int] = []
        reply = listed(client, limit=2, order=order)
        assert reply["total"] == len(everything)
        while True:
            seen += ids(reply)
            if reply["next"] is None:
                assert reply["next_cursor"] is None
                break
            assert reply["count"] == 2 and "limit=2" in reply["next"]
            response = client.get(reply["next"])
            assert response.status_code == 200
            reply = response.json()
        assert seen == expected
    # a cursor keeps the filters of its link, and is refused for the other order
    first = listed(client, limit=1, regime="sgt")
    rest = client.get(first["next"]).json()
    assert all(run["regime"] == "sgt" for run in rest["runs"])
    wrong = client.get(URL, {"cursor": first["next_cursor"], "order": "id"})
    assert wrong.status_code == 400 and "order" in wrong.json()["error"]


def test_the_permissions_are_the_pages(
    alice: User, bob: User, charlie: User, grid: dict[str, Any], make_experiment: Callable
) -> None:
    everything = sorted(run.pk for runs in grid.values() for run in runs)
    assert sorted(ids(listed(as_user(alice)))) == everything
    assert sorted(ids(listed(as_user(bob)))) == everything  # labmate: sees the lab's runs
    charlies = services.runs_create(make_experiment(owner=charlie, name="c", seeds=(0,)))
    assert ids(listed(as_user(charlie))) == [charlies[0].pk]  # another lab: only his own
    assert ids(listed(as_user(charlie), id=everything)) == []
    dora = User.objects.create_user("dora", password="x", is_staff=True)
    assert sorted(ids(listed(as_user(dora)))) == sorted([*everything, charlies[0].pk])
    anonymous = Client().get(URL)
    assert anonymous.status_code == 401 and anonymous.json() == {"error": "log in first"}
    nobody = User.objects.create_user("nobody", password="x")  # in no lab
    assert ids(listed(as_user(nobody))) == []
    assert as_user(alice).post(URL).status_code == 405


def test_a_run_row_carries_what_a_notebook_needs(alice: User, grid: dict[str, Any]) -> None:
    run = grid["sgt"][0]
    Run.objects.filter(pk=run.pk).update(
        started_at=timezone.now() - timedelta(seconds=90), finished_at=timezone.now()
    )
    row = next(r for r in listed(as_user(alice))["runs"] if r["id"] == run.pk)
    assert row["experiment"] == {"id": run.experiment_id, "name": "sgt-a"}
    assert (row["owner"], row["lab"], row["state"], row["seed"]) == (
        "alice",
        "Test lab",
        "completed",
        0,
    )
    assert row["regime"] == "sgt" and row["policies"] == ["llama", "qwen", "gpt2"]
    assert row["tags"] == ["paper"] and row["config"] == run.config
    assert row["duration_s"] == pytest.approx(90, abs=1)
    assert row["links"]["page"].endswith(f"/runs/{run.pk}/")
    assert row["links"]["history"].endswith(f"/api/v1/runs/{run.pk}/history")
    assert row["metrics"] == {}


def points_of(series_id: int) -> list[tuple[int, float]]:
    rows = MetricPoint.objects.filter(series_id=series_id).values_list("step", "value")
    return [(step, as_float(value)) for step, value in rows]


def test_final_and_best_from_the_rollups_equal_the_points(alice: User) -> None:
    """Long series read from their rollup blocks plus the points past the watermark and
    at the edges, against every point: a spike, a NaN hiding a block's maximum, a series
    ending in NaN, late points after the sweep, infinities."""
    run = make_run(alice)
    rng = random.Random(3)
    plain = fill_series(run, 5_000, key="plain", spike=4_321)
    hidden = fill_series(run, 3_000, key="hidden")
    ends_nan = fill_series(run, 700, key="ends_nan")
    infinite = fill_series(run, 900, key="infinite")
    with connection.cursor() as cursor:
        # the NaN is in the block of the maximum, which the block's high then hides
        cursor.execute(
            "UPDATE experiments_metricpoint SET value = 'NaN' WHERE series_id = %s AND step = 1500",
            [hidden],
        )
        cursor.execute(
            "UPDATE experiments_metricpoint SET value = 50 WHERE series_id = %s AND step = 1501",
            [hidden],
        )
        cursor.execute(
            "UPDATE experiments_metricpoint SET value = 'NaN' WHERE series_id = %s AND step = 699",
            [ends_nan],
        )
        cursor.execute(
            "UPDATE experiments_metricpoint SET value = CASE WHEN step = 10 THEN '-Infinity' "
            "WHEN step = 800 THEN 'Infinity' ELSE value END WHERE series_id = %s",
            [infinite],
        )
    Run.objects.filter(pk=run.pk).update(last_step=4_999)
    assert series_rollups.run_rollup(run.pk) > 0
    assert MetricSeries.objects.get(pk=plain).rolled_through == 4_999  # read from blocks
    late = MetricSeries.objects.get(pk=plain)  # points after the sweep: read from the table
    MetricPoint.objects.bulk_create(
        MetricPoint(series=late, step=5_000 + i, value=rng.random()) for i in range(37)
    )
    everything = [plain, hidden, ends_nan, infinite]
    for lower in (False, True):
        found = series_values(everything, lower_is_better=lower)
        for pk in everything:
            expected = series_values_from_points(points_of(pk), lower_is_better=lower)
            assert expected is not None
            got = found[pk]
            assert got.n_points == expected.n_points, pk
            assert (got.best, got.best_step) == (expected.best, expected.best_step), (pk, lower)
            assert got.final_step == expected.final_step
            assert got.final == expected.final or (
                math.isnan(got.final) and math.isnan(expected.final)
            )
    assert found[hidden].best is not None
    highest = series_values([hidden])[hidden]
    assert (highest.best, highest.best_step) == (50, 1501)
    assert math.isnan(series_values([ends_nan])[ends_nan].final)
    assert series_values([infinite])[infinite].best == math.inf
    assert series_values([infinite], lower_is_better=True)[infinite].best == -math.inf


def test_values_of_chosen_metrics_in_a_fixed_number_of_queries(
    alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(name="many", seeds=tuple(range(12)))
    runs = services.runs_create(experiment)
    for index, run in enumerate(runs):
        for policy in ("llama", "_pool"):
            series = MetricSeries.objects.create(run=run, policy=policy, key=KEY)
            MetricPoint.objects.bulk_create(
                MetricPoint(series=series, step=step, value=index + step / 10)
                for step in range(0, 30, 10)
            )
    client = as_user(alice)
    with CaptureQueriesContext(connection) as few:
        reply = listed(client, metric=KEY, limit=3)
    with CaptureQueriesContext(connection) as many:
        reply = listed(client, metric=KEY, limit=12)
    assert len(many.captured_queries) == len(few.captured_queries)
    for row in reply["runs"]:
        index = [run.pk for run in runs].index(row["id"])
        values = row["metrics"][KEY]
        assert set(values) == {"_pool", "llama"}
        assert values["_pool"] == {
            "final": index + 2.0,
            "final_step": 20,
            "best": index + 2.0,
            "best_step": 20,
            "n_points": 3,
        }
    lowest = listed(client, metric=KEY, policy="llama", lower_is_better=1, id=runs[5].pk)
    assert lowest["runs"][0]["metrics"] == {
        KEY: {"llama": {"final": 7.0, "final_step": 20, "best": 5.0, "best_step": 0, "n_points": 3}}
    }


def test_another_labs_staff_and_sweeps(alice: User, make_experiment: Callable) -> None:
    source = make_experiment(name="src", seeds=(0,))
    from scheduler.launch import sweep_launch

    sweep = sweep_launch(owner=alice, source=source, name="grid", regimes=["sgt", "prp"], seeds=[0])
    swept = sorted(Run.objects.filter(experiment__sweep=sweep).values_list("pk", flat=True))
    assert sorted(ids(listed(as_user(alice), sweep=sweep.pk))) == swept
    assert Sweep.objects.filter(pk=sweep.pk).exists()
    other = Lab.objects.create(name="Lab two")
    lab_join(alice, other)
    assert ids(listed(as_user(alice), lab=str(other.pk))) == []
