"""CSV downloads of a run's curves: one metric (``step,policy,value``) and the whole run
(``key,policy,step,value``); every point, non-finite values as the API writes them, the
run page's permissions, 404s, and safe file names."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.metrics.test_api_support import fill_series, point, post_batch
from webapp.metrics import series_packs
from webapp.metrics.models import SeriesPack
from webapp.metrics.views_csv import safe_name
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

REWARD, LOSS = "train/reward_mean", "actor/pg_loss"


@pytest.fixture
def filled(client: Client, run: Run, token: str) -> Run:
    """Policies a and b (pool order) and _pool; b logs before a at step 0; a NaN and
    infinities."""
    points = [point(s, s / 10, policy="b") for s in range(3)]
    points += [point(s, 1e-3 * (s + 1)) for s in range(3)]
    points += [point(1, 0.3125, policy="_pool")]
    points += [
        point(1, "NaN", key=LOSS),
        point(2, "Infinity", key=LOSS),
        point(3, "-Infinity", key=LOSS),
        point(4, 0.25, key=LOSS),
    ]
    assert post_batch(client, run, token, {"points": points}).status_code == 200
    return run


def download(client: Client, name: str, run_id: int, **params: Any) -> Any:
    return client.get(reverse(f"metrics:{name}", args=[run_id]), params)


def rows(response: Any) -> list[list[str]]:
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_one_metric_has_every_point_by_step_then_policy_in_pool_order(
    client: Client, alice: User, filled: Run
) -> None:
    client.force_login(alice)
    response = download(client, "run_metric_csv", filled.pk, key=REWARD)
    assert rows(response) == [
        ["step", "policy", "value"],
        ["0", "a", "0.001"],
        ["0", "b", "0.0"],
        ["1", "a", "0.002"],
        ["1", "b", "0.1"],
        ["1", "pool mean", "0.3125"],  # as the page names it, not "_pool"
        ["2", "a", "0.003"],
        ["2", "b", "0.2"],
    ]
    expected = f'attachment; filename="run-{filled.pk}-train-reward_mean.csv"'
    assert response["Content-Disposition"] == expected


def test_non_finite_values_are_written_as_the_api_writes_them(
    client: Client, alice: User, filled: Run
) -> None:
    client.force_login(alice)
    assert rows(download(client, "run_metric_csv", filled.pk, key=LOSS))[1:] == [
        ["1", "a", "NaN"],
        ["2", "a", "Infinity"],
        ["3", "a", "-Infinity"],
        ["4", "a", "0.25"],
    ]


def test_the_whole_run_by_key_policy_step(client: Client, bob: User, filled: Run) -> None:
    client.force_login(bob)  # a labmate, not the owner
    response = download(client, "run_curves_csv", filled.pk)
    got = rows(response)
    assert got[0] == ["key", "policy", "step", "value"]
    assert got[1:5] == [
        [LOSS, "a", "1", "NaN"],
        [LOSS, "a", "2", "Infinity"],
        [LOSS, "a", "3", "-Infinity"],
        [LOSS, "a", "4", "0.25"],
    ]
    assert [row[:2] for row in got[5:]] == [[REWARD, "a"]] * 3 + [[REWARD, "b"]] * 3 + [
        [REWARD, "pool mean"]
    ]
    assert got[-1] == [REWARD, "pool mean", "1", "0.3125"]
    assert response["Content-Disposition"] == f'attachment; filename="run-{filled.pk}-e-s0.csv"'


def test_long_and_packed_series_come_whole_not_downsampled(
    client: Client, alice: User, run: Run
) -> None:
    fill_series(run, 5000, key=REWARD)
    fill_series(run, 300, key=REWARD, policy="b")
    Run.objects.filter(pk=run.pk).update(state=Run.State.COMPLETED)
    assert series_packs.packs_sweep(max_runs=1) == (1, 2)
    assert SeriesPack.objects.filter(series__run=run).count() == 2
    client.force_login(alice)
    got = rows(download(client, "run_metric_csv", run.pk, key=REWARD))[1:]
    assert len(got) == 5300
    assert [int(step) for step, policy, _ in got if policy == "a"] == list(range(5000))
    assert len(rows(download(client, "run_curves_csv", run.pk))) == 5301


def test_an_unknown_key_or_run_or_no_key_is_404(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    assert download(client, "run_metric_csv", filled.pk, key="no/such").status_code == 404
    assert download(client, "run_metric_csv", filled.pk).status_code == 404
    assert download(client, "run_metric_csv", 987654, key=REWARD).status_code == 404
    assert download(client, "run_curves_csv", 987654).status_code == 404


@pytest.mark.parametrize("name", ["run_metric_csv", "run_curves_csv"])
def test_an_outsider_gets_404_and_anonymous_the_login_page(
    client: Client, charlie: User, filled: Run, name: str
) -> None:
    response = download(client, name, filled.pk, key=REWARD)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    client.force_login(charlie)
    assert download(client, name, filled.pk, key=REWARD).status_code == 404


def test_post_is_refused(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    url = reverse("metrics:run_curves_csv", args=[filled.pk])
    assert client.post(url).status_code == 405


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train/reward_mean", "train-reward_mean"),
        ("val/reward@1", "val-reward-1"),
        ('../../etc/"passwd"', "etc-passwd"),
        ("..", "curves"),
        ("名前", "curves"),
        ("a\r\nContent-Type: x", "a-Content-Type-x"),
    ],
)
def test_file_names_are_safe(text: str, expected: str) -> None:
    assert safe_name(text) == expected
