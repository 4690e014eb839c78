"""POST /api/v1/runs/<id>/ingest (SPEC 8.1): auth, validation, idempotence, status."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.metrics.test_api_support import event, make_run, point, post_batch
from webapp.metrics.models import MetricPoint, MetricSeries, TransferEvent
from webapp.metrics.views import MAX_BODY_BYTES
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def stored_points(run: Run) -> dict[tuple[str, str, int], float]:
    rows = MetricPoint.objects.filter(series__run=run).values_list(
        "series__policy", "series__key", "step", "value"
    )
    return {(policy, key, step): value for policy, key, step, value in rows}


def snapshot(run: Run) -> tuple[Any, ...]:
    run.refresh_from_db()
    points = sorted(
        MetricPoint.objects.filter(series__run=run).values_list(
            "series__policy", "series__key", "step", "value", "wall_time"
        )
    )
    events = sorted(
        TransferEvent.objects.filter(run=run).values_list(
            "step", "source", "target", "kind", "prompt_id", "count", "weight"
        )
    )
    return (
        json.dumps(points),
        events,
        MetricSeries.objects.filter(run=run).count(),
        run.last_step,
        run.state,
        run.status_message,
    )


# --------------------------------------------------------------------------- happy path


def test_it_stores_points_events_and_status(client: Client, run: Run, token: str) -> None:
    body = {
        "points": [point(1, 0.25), point(2, 0.5), point(2, 3.0, policy="b", key="actor/kl")],
        "events": [event(2), event(2, kind="rollout", weight=0.75, count=4)],
        "status": {"state": "running", "message": "step 2/10"},
    }
    response = post_batch(client, run, token, body)
    assert response.status_code == 200
    reply = response.json()
    assert reply["accepted"] == 5 and reply["duplicates"] == 0
    assert reply["points"] == {"accepted": 3, "duplicates": 0}
    assert reply["events"] == {"accepted": 2, "duplicates": 0}
    assert reply["status"] == {"state": "running", "applied": True}
    assert stored_points(run) == {
        ("a", "train/reward_mean", 1): 0.25,
        ("a", "train/reward_mean", 2): 0.5,
        ("b", "actor/kl", 2): 3.0,
    }
    rollout = TransferEvent.objects.get(run=run, kind="rollout")
    assert (rollout.count, rollout.weight, rollout.prompt_id) == (4, 0.75, "p-2")
    run.refresh_from_db()
    assert (run.state, run.status_message, run.last_step) == ("running", "step 2/10", 2)
    assert run.started_at is not None


def test_every_part_is_optional(client: Client, run: Run, token: str) -> None:
    response = post_batch(client, run, token, {})
    assert response.status_code == 200
    assert response.json()["accepted"] == 0


def test_a_replayed_batch_changes_nothing(client: Client, run: Run, token: str) -> None:
    body = {
        "points": [point(s, s / 10) for s in range(50)],
        "events": [event(s) for s in range(5)],
        "status": {"state": "running", "message": "step 49/100"},
    }
    assert post_batch(client, run, token, body).json()["accepted"] == 55
    before = snapshot(run)
    replay = post_batch(client, run, token, body).json()
    assert (replay["accepted"], replay["duplicates"]) == (0, 55)
    assert snapshot(run) == before


def test_a_replay_keeps_the_first_value(client: Client, run: Run, token: str) -> None:
    post_batch(client, run, token, {"points": [point(3, 1.0)]})
    reply = post_batch(client, run, token, {"points": [point(3, 2.0)]}).json()
    assert reply["duplicates"] == 1
    assert stored_points(run) == {("a", "train/reward_mean", 3): 1.0}


def test_a_partly_overlapping_batch_adds_only_the_new_part(
    client: Client, run: Run, token: str
) -> None:
    post_batch(client, run, token, {"points": [point(s) for s in range(0, 10)]})
    post_batch(client, run, token, {"events": [event(s) for s in range(0, 3)]})
    reply = post_batch(
        client,
        run,
        token,
        {"points": [point(s) for s in range(5, 15)], "events": [event(s) for s in range(2, 6)]},
    ).json()
    assert reply["points"] == {"accepted": 5, "duplicates": 5}
    assert reply["events"] == {"accepted": 3, "duplicates": 1}
    assert (reply["accepted"], reply["duplicates"]) == (8, 6)
    assert sorted(step for _, _, step in stored_points(run)) == list(range(15))
    assert TransferEvent.objects.filter(run=run).count() == 6


def test_repeats_inside_one_batch_count_as_duplicates(client: Client, run: Run, token: str) -> None:
    reply = post_batch(
        client, run, token, {"points": [point(1, 1.0), point(1, 2.0)], "events": [event(1)] * 2}
    ).json()
    assert (reply["accepted"], reply["duplicates"]) == (2, 2)
    assert stored_points(run) == {("a", "train/reward_mean", 1): 1.0}


def test_a_10000_point_batch_is_accepted(client: Client, run: Run, token: str) -> None:
    points = [point(s % 2500, s * 0.001, key=f"k{s // 2500}") for s in range(10_000)]
    reply = post_batch(client, run, token, {"points": points}).json()
    assert reply["accepted"] == 10_000
    assert MetricPoint.objects.filter(series__run=run).count() == 10_000
    assert MetricSeries.objects.filter(run=run).count() == 4


def test_non_finite_values_are_stored_as_such(client: Client, run: Run, token: str) -> None:
    points = [point(1, "NaN"), point(2, "Infinity"), point(3, "-Infinity"), point(4, 1e308)]
    assert post_batch(client, run, token, {"points": points}).status_code == 200
    stored = stored_points(run)
    assert math.isnan(stored[("a", "train/reward_mean", 1)])
    assert stored[("a", "train/reward_mean", 2)] == math.inf
    assert stored[("a", "train/reward_mean", 3)] == -math.inf
    assert stored[("a", "train/reward_mean", 4)] == 1e308


def test_last_step_only_grows(client: Client, run: Run, token: str) -> None:
    post_batch(client, run, token, {"points": [point(7)], "events": [event(9)]})
    run.refresh_from_db()
    assert run.last_step == 9
    post_batch(client, run, token, {"points": [point(3)]})
    run.refresh_from_db()
    assert run.last_step == 9


def test_the_first_trained_step_of_each_job_sets_the_pace_mark(
    client: Client, run: Run, token: str
) -> None:
    """The list pages' ETA counts from the job's first trained step (its start-up, and
    the step-0 evaluation, are left out); a resubmitted job sets a new mark."""
    from datetime import timedelta

    from django.utils import timezone

    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(seconds=60))
    post_batch(client, run, token, {"points": [point(0)]})  # the step-0 evaluation
    run.refresh_from_db()
    assert (run.pace_step, run.pace_at) == (None, None)
    post_batch(client, run, token, {"points": [point(2)]})
    run.refresh_from_db()
    first_mark = run.pace_at
    assert run.pace_step == 2 and first_mark is not None and first_mark > run.started_at
    post_batch(client, run, token, {"points": [point(5)]})
    run.refresh_from_db()
    assert (run.pace_step, run.pace_at) == (2, first_mark)  # later steps keep it
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now())  # a resubmitted job
    post_batch(client, run, token, {"points": [point(6)]})
    run.refresh_from_db()
    assert run.pace_step == 6 and run.pace_at > first_mark


# --------------------------------------------------------------------------- status


@pytest.mark.parametrize(
    ("start", "reported", "expected"),
    [
        (Run.State.SUBMITTED, "running", "running"),
        (Run.State.PENDING, "running", "running"),
        (Run.State.RUNNING, "completing", "completing"),
        (Run.State.RUNNING, "completed", "completed"),
        (Run.State.RUNNING, "failed", "failed"),
        (Run.State.RUNNING, "running", "running"),
    ],
)
def test_a_status_moves_the_run(
    client: Client, alice: User, start: str, reported: str, expected: str
) -> None:
    run = make_run(alice, state=start)
    token = services.run_token_issue(run)
    reply = post_batch(client, run, token, {"status": {"state": reported, "message": "m"}}).json()
    assert reply["status"] == {"state": expected, "applied": True}
    run.refresh_from_db()
    assert (run.state, run.status_message) == (expected, "m")


def test_a_failed_status_records_the_reason(client: Client, run: Run, token: str) -> None:
    post_batch(client, run, token, {"status": {"state": "failed", "message": "ValueError: x"}})
    run.refresh_from_db()
    assert (run.state, run.failure_reason) == ("failed", "ValueError: x")
    assert run.finished_at is not None


def test_a_cancelled_run_is_never_resurrected(client: Client, alice: User) -> None:
    run = make_run(alice, state=Run.State.CANCELLED)
    token = services.run_token_issue(run)
    reply = post_batch(
        client,
        run,
        token,
        {"points": [point(5)], "status": {"state": "running", "message": "step 5/9"}},
    ).json()
    assert reply["accepted"] == 1
    assert reply["status"]["applied"] is False
    assert reply["status"]["state"] == "cancelled"
    assert "cancelled run cannot become running" in reply["status"]["reason"]
    run.refresh_from_db()
    assert (run.state, run.status_message, run.last_step) == ("cancelled", "", 5)


def test_a_draft_run_trained_by_hand_starts_running(client: Client, alice: User) -> None:
    run = make_run(alice, state=Run.State.DRAFT)
    token = services.run_token_issue(run)
    reply = post_batch(client, run, token, {"status": {"state": "running", "message": "step 1"}})
    assert reply.json()["status"] == {"state": "running", "applied": True}


def test_a_late_report_does_not_reopen_a_finished_run(client: Client, alice: User) -> None:
    run = make_run(alice, state=Run.State.COMPLETED)
    Run.objects.filter(pk=run.pk).update(status_message="done")
    token = services.run_token_issue(run)
    reply = post_batch(client, run, token, {"status": {"state": "running", "message": "step 3"}})
    assert reply.status_code == 200
    assert reply.json()["status"]["applied"] is False
    run.refresh_from_db()
    assert (run.state, run.status_message) == ("completed", "done")


def test_a_status_message_may_be_left_out(client: Client, run: Run, token: str) -> None:
    assert post_batch(client, run, token, {"status": {"state": "running"}}).status_code == 200


# --------------------------------------------------------------------------- auth


def test_it_needs_a_token(client: Client, run: Run) -> None:
    response = post_batch(client, run, "", {"points": [point(1)]})
    assert response.status_code == 401
    assert "token" in response.json()["error"]
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer mrl_wrong", "Basic abc", "Bearer", "mrl_x"])
def test_it_refuses_a_wrong_token(client: Client, run: Run, token: str, header: str) -> None:
    response = client.post(
        reverse("api:ingest", args=[run.pk]),
        data="{}",
        content_type="application/json",
        headers={"Authorization": header},
    )
    assert response.status_code == 401


def test_it_refuses_a_revoked_token(client: Client, run: Run, token: str) -> None:
    services.run_token_issue(run)  # the new token revokes the old one
    assert post_batch(client, run, token, {}).status_code == 401
    services.run_token_revoke(run)
    assert post_batch(client, run, token, {}).status_code == 401


def test_a_token_of_another_run_is_forbidden(
    client: Client, alice: User, run: Run, token: str
) -> None:
    other = make_run(alice, name="other")
    response = post_batch(client, other, token, {"points": [point(1)]})
    assert response.status_code == 403
    assert not MetricSeries.objects.filter(run=other).exists()


def test_a_valid_token_on_an_unknown_run_id_is_forbidden_not_not_found(
    client: Client, token: str
) -> None:
    response = client.post(
        reverse("api:ingest", args=[987654]),
        data="{}",
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 403


def test_get_is_not_allowed(client: Client, run: Run, token: str) -> None:
    response = client.get(
        reverse("api:ingest", args=[run.pk]), headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert "error" in response.json()


def test_it_needs_no_csrf_token(run: Run, token: str) -> None:
    client = Client(enforce_csrf_checks=True)
    assert post_batch(client, run, token, {"points": [point(1)]}).status_code == 200


# --------------------------------------------------------------------------- 400 / 413

BAD_BATCHES: list[tuple[Any, str]] = [
    ("{not json", "body: malformed JSON"),
    ('{"points": [{"policy": "a", "key": "k", "step": 1, "value": NaN}]}', "body: malformed"),
    ("[]", "body: must be a JSON object"),
    ({"pointz": []}, "pointz: unknown field"),
    ({"points": {}}, "points: must be a list"),
    ({"points": [1]}, "points[0]: must be an object"),
    ({"points": [{**point(1), "extra": 1}]}, "points[0].extra: unknown field"),
    ({"points": [{"policy": "a", "key": "k", "step": 1}]}, "points[0].value: missing"),
    ({"points": [point(1), point(2, True)]}, "points[1].value: must be a number"),
    ({"points": [point(1), point(2), point(3, "nan")]}, "points[2].value: must be a number"),
    ({"points": [point(1, None)]}, "points[0].value: must be a number"),
    ({"points": [point(-1)]}, "points[0].step: must be an integer"),
    ({"points": [point(1.5)]}, "points[0].step: must be an integer"),
    ({"points": [point(True)]}, "points[0].step: must be an integer"),
    ({"points": [point(2**31)]}, "points[0].step: must be an integer"),
    ({"points": [point(1, policy="p" * 65)]}, "points[0].policy: longer than 64"),
    ({"points": [point(1, policy="")]}, "points[0].policy: must not be empty"),
    ({"points": [point(1, policy=3)]}, "points[0].policy: must be a string"),
    ({"points": [point(1, key="k" * 129)]}, "points[0].key: longer than 128"),
    ({"points": [point(1, key="a\x00b")]}, "points[0].key: must not contain NUL"),
    ({"points": [{**point(1), "wall_time": "now"}]}, "points[0].wall_time: must be a number"),
    ({"events": [event(1, kind="gossip")]}, "events[0].kind: must be one of"),
    ({"events": [event(1, source="s" * 65)]}, "events[0].source: longer than 64"),
    ({"events": [event(1, target="")]}, "events[0].target: must not be empty"),
    ({"events": [event(1, prompt_id="x" * 129)]}, "events[0].prompt_id: longer than 128"),
    ({"events": [event(1, count=-2)]}, "events[0].count: must be an integer"),
    ({"events": [event(1, count=True)]}, "events[0].count: must be an integer"),
    ({"events": [event(1, weight="heavy")]}, "events[0].weight: must be a number or null"),
    ({"events": [{**event(1), "regime": "sgt"}]}, "events[0].regime: unknown field"),
    ({"status": {"state": "exploded", "message": ""}}, "status.state: must be one of"),
    ({"status": {"state": "cancelled", "message": ""}}, "status.state: must be one of"),
    ({"status": {"state": "running", "message": "m" * 501}}, "status.message: longer than 500"),
    ({"status": {"state": "running", "note": ""}}, "status.note: unknown field"),
    ({"status": "running"}, "status: must be an object"),
]


@pytest.mark.parametrize(("body", "message"), BAD_BATCHES)
def test_a_bad_batch_is_400_naming_the_field(
    client: Client, run: Run, token: str, body: Any, message: str
) -> None:
    response = post_batch(client, run, token, body)
    assert response.status_code == 400, response.content
    assert message in response.json()["error"]


def test_a_lone_surrogate_is_400(client: Client, run: Run, token: str) -> None:
    raw = '{"points": [{"policy": "\\ud800", "key": "k", "step": 1, "value": 1}]}'
    response = post_batch(client, run, token, raw)
    assert response.status_code == 400
    assert "points[0].policy" in response.json()["error"]


def test_a_rejected_batch_writes_nothing(client: Client, run: Run, token: str) -> None:
    post_batch(client, run, token, {"points": [point(1)]})
    before = snapshot(run)
    body = {
        "points": [point(s) for s in range(2, 500)] + [point(600, "oops")],
        "events": [event(3)],
        "status": {"state": "failed", "message": "boom"},
    }
    response = post_batch(client, run, token, body)
    assert response.status_code == 400
    assert "points[498].value" in response.json()["error"]
    assert snapshot(run) == before


def test_10001_points_are_413(client: Client, run: Run, token: str) -> None:
    response = post_batch(client, run, token, {"points": [point(s) for s in range(10_001)]})
    assert response.status_code == 413
    assert "10000" in response.json()["error"]
    assert not MetricSeries.objects.filter(run=run).exists()


def test_a_body_too_large_is_413(client: Client, run: Run, token: str) -> None:
    padding = " " * (MAX_BODY_BYTES + 1)
    response = post_batch(client, run, token, "{}" + padding)
    assert response.status_code == 413
    assert "bytes" in response.json()["error"]


def test_a_body_above_djangos_upload_limit_but_under_ours_is_read(
    client: Client, run: Run, token: str, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = post_batch(client, run, token, {"points": [point(s) for s in range(100)]})
    assert response.status_code == 200
    assert response.json()["accepted"] == 100
