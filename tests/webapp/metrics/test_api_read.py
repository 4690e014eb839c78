"""The run page's read API: series, keys, events, events summary, status; who sees what."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.metrics.test_api_support import event, point, post_batch
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

READ_ENDPOINTS = ["api:series", "api:keys", "api:events", "api:events_summary", "api:status"]


@pytest.fixture
def filled(client: Client, run: Run, token: str) -> Run:
    """Two policies, three keys, a NaN and infinities, and a handful of events."""
    points = [point(s, s / 10) for s in range(1, 6)]
    points += [point(s, s * 2.0, policy="b") for s in range(1, 4)]
    points += [
        point(1, "NaN", key="actor/pg_loss"),
        point(2, "Infinity", key="actor/pg_loss"),
        point(3, "-Infinity", key="actor/pg_loss"),
        point(4, 0.25, key="actor/pg_loss"),
    ]
    events = [
        event(1, "a", "b", "success", count=2),
        event(2, "a", "b", "rollout", weight=0.5),
        event(2, "b", "a", "rollout", prompt_id="q-1"),
        event(9, "b", "a", "advantage_stats", count=3),
        event(10, "a", "b", "success", prompt_id="q-2"),
    ]
    reply = post_batch(client, run, token, {"points": points, "events": events})
    assert reply.status_code == 200
    return run


def get(client: Client, name: str, run: Run, **params: Any) -> Any:
    return client.get(reverse(name, args=[run.pk]), params)


# --------------------------------------------------------------------------- permissions


@pytest.mark.parametrize("name", READ_ENDPOINTS)
def test_the_owner_and_a_labmate_can_read(
    client: Client, alice: User, bob: User, filled: Run, name: str
) -> None:
    for user in (alice, bob):
        client.force_login(user)
        response = get(client, name, filled)
        assert response.status_code == 200, (user, response.content)
        assert response.json()["run"] == filled.pk
        assert response["Cache-Control"].startswith("max-age=0")


@pytest.mark.parametrize("name", READ_ENDPOINTS)
def test_an_outsider_gets_404(client: Client, charlie: User, filled: Run, name: str) -> None:
    client.force_login(charlie)
    response = get(client, name, filled)
    assert response.status_code == 404
    assert response.json() == {"error": "no such run"}


@pytest.mark.parametrize("name", READ_ENDPOINTS)
def test_an_unknown_run_is_404(client: Client, alice: User, name: str) -> None:
    client.force_login(alice)
    assert client.get(reverse(name, args=[987654])).status_code == 404


@pytest.mark.parametrize("name", READ_ENDPOINTS)
def test_anonymous_gets_401_json_not_a_redirect(client: Client, filled: Run, name: str) -> None:
    response = get(client, name, filled)
    assert response.status_code == 401
    assert "log in" in response.json()["error"]


@pytest.mark.parametrize("name", READ_ENDPOINTS)
def test_a_run_token_does_not_open_the_read_api(
    client: Client, filled: Run, token: str, name: str
) -> None:
    response = client.get(
        reverse(name, args=[filled.pk]), headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 401


def test_staff_outside_the_lab_can_read(client: Client, filled: Run) -> None:
    admin = User.objects.create_user("root", is_staff=True)
    client.force_login(admin)
    assert get(client, "api:status", filled).status_code == 200


@pytest.mark.parametrize("name", READ_ENDPOINTS)
def test_post_is_not_allowed(client: Client, alice: User, filled: Run, name: str) -> None:
    client.force_login(alice)
    response = client.post(reverse(name, args=[filled.pk]))
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


# --------------------------------------------------------------------------- series


def test_a_small_series_comes_back_exactly(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    reply = get(client, "api:series", filled, key="train/reward_mean").json()
    assert reply["max_points"] == 2000 and reply["after_step"] is None
    assert reply["series"] == [
        {
            "policy": "a",
            "key": "train/reward_mean",
            "n_points": 5,
            "downsampled": False,
            "points": [[1, 0.1], [2, 0.2], [3, 0.3], [4, 0.4], [5, 0.5]],
        },
        {
            "policy": "b",
            "key": "train/reward_mean",
            "n_points": 3,
            "downsampled": False,
            "points": [[1, 2.0], [2, 4.0], [3, 6.0]],
        },
    ]


def test_non_finite_values_round_trip_as_strings(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    response = get(client, "api:series", filled, key="actor/pg_loss")
    assert b"NaN," not in response.content  # strict JSON: no bare NaN literal
    (series,) = response.json()["series"]
    assert series["points"] == [[1, "NaN"], [2, "Infinity"], [3, "-Infinity"], [4, 0.25]]


def test_series_filters_by_key_and_policy(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    everything = get(client, "api:series", filled).json()["series"]
    assert [(s["policy"], s["key"]) for s in everything] == [
        ("a", "actor/pg_loss"),
        ("a", "train/reward_mean"),
        ("b", "train/reward_mean"),
    ]
    response = client.get(
        reverse("api:series", args=[filled.pk]),
        {"key": ["train/reward_mean", "actor/pg_loss", "missing"], "policy": "b"},
    )
    assert [(s["policy"], s["key"]) for s in response.json()["series"]] == [
        ("b", "train/reward_mean")
    ]


def test_after_step_returns_only_newer_points(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    reply = get(client, "api:series", filled, key="train/reward_mean", after_step=3).json()
    assert reply["after_step"] == 3
    assert [(s["policy"], s["points"], s["n_points"]) for s in reply["series"]] == [
        ("a", [[4, 0.4], [5, 0.5]], 2),
        ("b", [], 0),
    ]


def test_max_points_downsamples_keeping_the_extremes(
    client: Client, alice: User, run: Run, token: str
) -> None:
    values = [float((s * 37) % 101) for s in range(300)]
    post_batch(client, run, token, {"points": [point(s, v) for s, v in enumerate(values)]})
    client.force_login(alice)
    (series,) = get(client, "api:series", run, max_points=20).json()["series"]
    assert series["downsampled"] is True and series["n_points"] == 300
    assert len(series["points"]) <= 20
    kept = {value for _, value in series["points"]}
    assert {min(values), max(values)} <= kept


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_points": "lots"}, "max_points: must be an integer"),
        ({"max_points": 3}, "max_points: must be [4, 10000]"),
        ({"max_points": 10_001}, "max_points: must be [4, 10000]"),
        ({"after_step": -2}, "after_step: must be"),
        ({"after_step": "1.5"}, "after_step: must be an integer"),
        ({"key": "k" * 129}, "key: longer than 128"),
    ],
)
def test_bad_series_parameters_are_400(
    client: Client, alice: User, filled: Run, params: dict[str, Any], message: str
) -> None:
    client.force_login(alice)
    response = get(client, "api:series", filled, **params)
    assert response.status_code == 400
    assert message in response.json()["error"]


# --------------------------------------------------------------------------- keys


def test_keys_lists_every_series_with_its_last_point(
    client: Client, alice: User, filled: Run
) -> None:
    client.force_login(alice)
    assert get(client, "api:keys", filled).json()["keys"] == [
        {"policy": "a", "key": "actor/pg_loss", "n_points": 4, "last_step": 4, "last_value": 0.25},
        {
            "policy": "a",
            "key": "train/reward_mean",
            "n_points": 5,
            "last_step": 5,
            "last_value": 0.5,
        },
        {
            "policy": "b",
            "key": "train/reward_mean",
            "n_points": 3,
            "last_step": 3,
            "last_value": 6.0,
        },
    ]


def test_keys_shows_a_nan_last_value_as_a_string(
    client: Client, alice: User, run: Run, token: str
) -> None:
    post_batch(client, run, token, {"points": [point(1, 1.0), point(2, "NaN")]})
    client.force_login(alice)
    assert get(client, "api:keys", run).json()["keys"][0]["last_value"] == "NaN"


# --------------------------------------------------------------------------- events


def test_events_are_listed_by_step_with_a_total(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    reply = get(client, "api:events", filled).json()
    assert (reply["total"], reply["limit"], reply["offset"]) == (5, 100, 0)
    assert [e["step"] for e in reply["events"]] == [1, 2, 2, 9, 10]
    first = reply["events"][0]
    assert set(first) == {
        "id",
        "step",
        "source",
        "target",
        "kind",
        "prompt_id",
        "count",
        "weight",
        "has_samples",
    }
    assert (first["source"], first["target"], first["count"], first["weight"]) == (
        "a",
        "b",
        2,
        None,
    )


@pytest.mark.parametrize(
    ("params", "steps"),
    [
        ({"source": "b"}, [2, 9]),
        ({"target": "b"}, [1, 2, 10]),
        ({"kind": "rollout"}, [2, 2]),
        ({"step_min": 2, "step_max": 9}, [2, 2, 9]),
        ({"limit": 2, "offset": 1}, [2, 2]),
        ({"source": "a", "kind": "success", "step_min": 5}, [10]),
    ],
)
def test_events_can_be_filtered_and_paged(
    client: Client, alice: User, filled: Run, params: dict[str, Any], steps: list[int]
) -> None:
    client.force_login(alice)
    reply = get(client, "api:events", filled, **params).json()
    assert [e["step"] for e in reply["events"]] == steps
    if "limit" in params:
        assert reply["total"] == 5


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"kind": "gossip"}, "kind: must be one of"),
        ({"limit": 0}, "limit: must be [1, 1000]"),
        ({"limit": 1001}, "limit: must be [1, 1000]"),
        ({"offset": -1}, "offset: must be >= 0"),
        ({"step_min": "x"}, "step_min: must be an integer"),
        ({"step_min": 5, "step_max": 2}, "step_min: 5 is above step_max"),
    ],
)
def test_bad_event_parameters_are_400(
    client: Client, alice: User, filled: Run, params: dict[str, Any], message: str
) -> None:
    client.force_login(alice)
    response = get(client, "api:events", filled, **params)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_the_events_summary_sums_counts(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    reply = get(client, "api:events_summary", filled, buckets=2).json()
    assert reply["policies"] == ["a", "b"]
    # a->b: 2 (success) + 1 (rollout) + 1 (success); b->a: 1 (rollout) + 3 (advantage_stats)
    assert reply["matrix"] == [[0, 4], [4, 0]]
    assert reply["total"] == 8
    assert reply["kinds"] == ["advantage_stats", "rollout", "success"]
    assert reply["bucket_size"] == 5  # steps 1..10 in 2 buckets
    assert reply["over_time"] == [
        {"step": 1, "kind": "rollout", "count": 2},
        {"step": 1, "kind": "success", "count": 2},
        {"step": 6, "kind": "advantage_stats", "count": 3},
        {"step": 6, "kind": "success", "count": 1},
    ]


def test_the_events_summary_of_a_run_without_events(client: Client, alice: User, run: Run) -> None:
    client.force_login(alice)
    reply = get(client, "api:events_summary", run).json()
    assert reply["policies"] == ["a", "b"]  # the pool, in pool order
    assert reply["matrix"] == [[0, 0], [0, 0]]
    assert (reply["total"], reply["over_time"]) == (0, [])


def test_bad_summary_buckets_are_400(client: Client, alice: User, run: Run) -> None:
    client.force_login(alice)
    assert get(client, "api:events_summary", run, buckets=0).status_code == 400


# --------------------------------------------------------------------------- status


def test_status_reports_the_run(client: Client, alice: User, run: Run, token: str) -> None:
    post_batch(
        client,
        run,
        token,
        {"points": [point(12)], "status": {"state": "running", "message": "step 12/200"}},
    )
    Run.objects.filter(pk=run.pk).update(slurm_job_id="4242", node="gpu-07")
    client.force_login(alice)
    reply = get(client, "api:status", run).json()
    assert reply["state"] == "running" and reply["is_terminal"] is False
    assert (reply["status_message"], reply["last_step"]) == ("step 12/200", 12)
    assert (reply["slurm_job_id"], reply["node"], reply["exit_code"]) == ("4242", "gpu-07", None)
    assert reply["failure_reason"] == ""
    assert reply["started_at"] is not None and reply["finished_at"] is None
    assert set(reply) == {
        "run",
        "name",
        "state",
        "is_terminal",
        "status_message",
        "last_step",
        "backend",
        "slurm_job_id",
        "node",
        "worker_nodes",
        "exit_code",
        "failure_reason",
        "has_token",
        "created_at",
        "queued_at",
        "submitted_at",
        "started_at",
        "finished_at",
        "updated_at",
        "total_steps",
        "elapsed_s",
        "eta_s",
        "steps_per_s",
        "progress",
        "progress_text",
        "timeline",
    }
