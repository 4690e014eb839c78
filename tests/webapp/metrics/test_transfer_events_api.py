"""The transfer panel's API: the summary follows the log's filters; an event's detail says
what crossed (the ``samples`` a trainer ships with it); bad samples are refused with 400."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.metrics.test_api_support import event, make_run, post_batch
from tests.webapp.metrics.test_fuzz_ingest import assert_reply_matches, validate
from trainer import spool
from webapp.metrics import batch
from webapp.metrics.models import TransferEvent
from webapp.metrics.views_schema import OPENAPI
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

SAMPLE = {
    "text": "7 + 5 = \\boxed{12} ✓",
    "tokens": ["7", "Ġ+", "Ġ5", "Ġ=", "<eos>"],
    "reward": 1.0,
}


@pytest.fixture
def filled(client: Client, run: Run, token: str) -> Run:
    events = [
        event(1, "a", "b", "success", count=2, samples=[SAMPLE, {"text": "12"}]),
        event(2, "a", "b", "rollout", weight=0.5),
        event(2, "b", "a", "rollout", prompt_id="q-1"),
        event(9, "b", "a", "advantage_stats", count=3),
        event(10, "a", "b", "success", prompt_id="q-2"),
    ]
    assert post_batch(client, run, token, {"events": events}).status_code == 200
    return run


def _get(client: Client, name: str, run: Run, **params: Any) -> Any:
    return client.get(reverse(name, args=[run.pk]), params)


def _detail(client: Client, run: Run, event_id: int) -> Any:
    return client.get(reverse("api:event_detail", args=[run.pk, event_id]))


# --------------------------------------------------------------------------- summary


@pytest.mark.parametrize(
    ("params", "matrix", "over_time"),
    [
        ({}, [[0, 4], [4, 0]], {"success": 3, "rollout": 2, "advantage_stats": 3}),
        ({"source": "b"}, [[0, 0], [4, 0]], {"rollout": 1, "advantage_stats": 3}),
        ({"target": "b"}, [[0, 4], [0, 0]], {"success": 3, "rollout": 1}),
        ({"kind": "rollout"}, [[0, 1], [1, 0]], {"rollout": 2}),
        ({"step_min": 2, "step_max": 9}, [[0, 1], [4, 0]], {"rollout": 2, "advantage_stats": 3}),
        ({"source": "a", "kind": "success", "step_min": 5}, [[0, 1], [0, 0]], {"success": 1}),
    ],
)
def test_the_summary_counts_only_the_events_the_log_shows(
    client: Client,
    alice: User,
    filled: Run,
    params: dict[str, Any],
    matrix: list[list[int]],
    over_time: dict[str, int],
) -> None:
    client.force_login(alice)
    summary = _get(client, "api:events_summary", filled, **params).json()
    log = _get(client, "api:events", filled, **params).json()
    assert summary["policies"] == ["a", "b"]  # the pool, whatever the filters
    assert summary["matrix"] == matrix
    counted: dict[str, int] = {}
    for row in summary["over_time"]:
        counted[row["kind"]] = counted.get(row["kind"], 0) + row["count"]
    assert counted == over_time
    assert summary["total"] == sum(e["count"] for e in log["events"]) == sum(over_time.values())


def test_a_filter_that_matches_nothing_gives_an_empty_summary(
    client: Client, alice: User, filled: Run
) -> None:
    client.force_login(alice)
    summary = _get(client, "api:events_summary", filled, source="nobody").json()
    assert (summary["matrix"], summary["over_time"], summary["total"]) == ([[0, 0], [0, 0]], [], 0)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"kind": "gossip"}, "kind: must be one of"),
        ({"step_min": "x"}, "step_min: must be an integer"),
        ({"step_min": 5, "step_max": 2}, "step_min: 5 is above step_max"),
        ({"source": "a\x00"}, "source"),
    ],
)
def test_bad_summary_filters_are_400(
    client: Client, alice: User, filled: Run, params: dict[str, Any], message: str
) -> None:
    client.force_login(alice)
    response = _get(client, "api:events_summary", filled, **params)
    assert response.status_code == 400
    assert message in response.json()["error"]


# --------------------------------------------------------------------------- detail


def test_an_event_s_detail_holds_what_crossed(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    rows = _get(client, "api:events", filled).json()["events"]
    assert [row["has_samples"] for row in rows] == [True, False, False, False, False]
    assert "samples" not in rows[0]  # the list stays small
    detail = _detail(client, filled, rows[0]["id"]).json()
    assert detail["regime"] == "sgt"
    assert detail["event"] == rows[0]
    assert detail["samples"] == [
        {**SAMPLE, "truncated": False},
        {"text": "12", "truncated": False},
    ]
    assert detail["limits"] == {"samples": 4, "text": 2000, "tokens": 512}


def test_an_event_without_samples_says_none_were_recorded(
    client: Client, alice: User, filled: Run
) -> None:
    client.force_login(alice)
    old = TransferEvent.objects.get(run=filled, step=2, source="a")
    assert old.samples is None
    assert _detail(client, filled, old.pk).json()["samples"] is None
    assert _detail(client, filled, old.pk).json()["no_text"] is None


def test_a_kind_that_never_carries_text_says_what_crossed_instead(
    client: Client, alice: User, filled: Run
) -> None:
    """XGRPO's declaration says only reward statistics cross."""
    client.force_login(alice)
    stats = TransferEvent.objects.get(run=filled, kind="advantage_stats")
    detail = _detail(client, filled, stats.pk).json()
    assert detail["samples"] is None
    assert detail["no_text"] == (
        "Only reward statistics crossed (a group baseline), no text: nothing more to show."
    )


def test_the_detail_is_404_outside_the_run_and_401_anonymous(
    client: Client, alice: User, charlie: User, filled: Run
) -> None:
    theirs = TransferEvent.objects.filter(run=filled).first()
    assert theirs is not None
    assert _detail(client, filled, theirs.pk).status_code == 401
    client.force_login(alice)
    other = make_run(alice, name="other")
    assert _detail(client, other, theirs.pk).status_code == 404
    assert _detail(client, filled, 10**30).status_code == 404
    assert client.post(reverse("api:event_detail", args=[filled.pk, theirs.pk])).status_code == 405
    client.force_login(charlie)
    assert _detail(client, filled, theirs.pk).status_code == 404


# --------------------------------------------------------------------------- ingestion


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ("text", "events[0].samples: must be a list"),
        ([{"text": "x"}] * 5, "events[0].samples: 5 samples; at most 4"),
        ([{}], "events[0].samples[0].text: missing"),
        ([{"text": "x", "html": "<b>"}], "events[0].samples[0].html: unknown field"),
        ([{"text": 3}], "events[0].samples[0].text: must be a string"),
        ([{"text": "x" * 2001}], "events[0].samples[0].text: longer than 2000"),
        ([{"text": "a\x00b"}], "events[0].samples[0].text: must not contain NUL"),
        ([{"text": "x", "tokens": "x"}], "events[0].samples[0].tokens: must be a list"),
        ([{"text": "x", "tokens": ["x"] * 513}], "events[0].samples[0].tokens: 513 tokens"),
        ([{"text": "x", "tokens": ["x" * 33]}], "events[0].samples[0].tokens[0]: longer than 32"),
        ([{"text": "x", "tokens": [None]}], "events[0].samples[0].tokens[0]: must be a string"),
        ([{"text": "x", "reward": "NaN"}], "events[0].samples[0].reward: must be a number"),
        ([{"text": "x", "truncated": 1}], "events[0].samples[0].truncated: must be true or false"),
        ([{"text": "x", "finished": "no"}], "events[0].samples[0].finished: must be true, false"),
        ([{"text": "x", "finished": 0}], "events[0].samples[0].finished: must be true, false"),
        ([{"text": "x", "reason": 1}], "events[0].samples[0].reason: must be a string"),
        ([{"text": "x", "reason": "r" * 301}], "events[0].samples[0].reason: longer than 300"),
    ],
)
def test_bad_samples_are_refused_with_400_and_nothing_is_written(
    client: Client, run: Run, token: str, samples: Any, message: str
) -> None:
    response = post_batch(client, run, token, {"events": [event(1, samples=samples)]})
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert not TransferEvent.objects.filter(run=run).exists()


def test_samples_at_the_limits_are_stored_as_sent(client: Client, run: Run, token: str) -> None:
    samples = [
        {"text": "é" * 2000, "tokens": ["▁" * 32] * 512, "reward": None, "truncated": True},
        {"text": ""},
        {"text": "x", "tokens": None},
        {"text": "🙂", "tokens": [""]},
    ]
    events = [event(1, samples=samples), event(2, samples=None), event(3, samples=[])]
    reply = post_batch(client, run, token, {"events": events})
    assert reply.status_code == 200 and reply.json()["events"]["accepted"] == 3
    stored = {e.step: e.samples for e in TransferEvent.objects.filter(run=run)}
    assert stored[1] == [
        samples[0],
        {"text": "", "truncated": False},
        {"text": "x", "truncated": False},
        {"text": "🙂", "tokens": [""], "truncated": False},
    ]
    assert stored[2] is None and stored[3] == []
    # A resend is a duplicate and changes nothing, samples included.
    again = post_batch(client, run, token, {"events": [event(1, samples=[{"text": "other"}])]})
    assert again.json()["events"] == {"accepted": 0, "duplicates": 1}
    assert TransferEvent.objects.get(run=run, step=1).samples == stored[1]


def test_the_trainer_cuts_to_the_bounds_the_server_enforces() -> None:
    assert (spool.MAX_EVENT_SAMPLES, spool.MAX_SAMPLE_TEXT) == (
        batch.MAX_EVENT_SAMPLES,
        batch.MAX_SAMPLE_TEXT,
    )
    assert (spool.MAX_SAMPLE_TOKENS, spool.MAX_TOKEN_CHARS) == (
        batch.MAX_SAMPLE_TOKENS,
        batch.MAX_TOKEN_CHARS,
    )
    long = spool.make_sample("y" * 5000 + "\x00", ["t" * 40] * 600, reward=float("nan"))
    record = spool.make_event(1, "a", "b", "rollout", "p", samples=[long] * 6)
    parsed = batch.parse_event("events[0]", record)
    assert parsed.samples is not None and len(parsed.samples) == 4
    first = parsed.samples[0]
    assert len(first["text"]) == 2000 and len(first["tokens"]) == 512
    assert first["truncated"] is True and "reward" not in first


def test_the_replies_match_the_schema(client: Client, alice: User, filled: Run) -> None:
    client.force_login(alice)
    first = TransferEvent.objects.filter(run=filled).order_by("step").first()
    assert first is not None
    detail_path = "/api/v1/runs/{run_id}/events/{event_id}"
    assert_reply_matches(_detail(client, filled, first.pk), detail_path)
    assert_reply_matches(_detail(client, filled, first.pk + 999), detail_path)
    events = _get(client, "api:events", filled, kind="success")
    assert_reply_matches(events, "/api/v1/runs/{run_id}/events")
    summary = _get(client, "api:events_summary", filled, source="a", step_max=3)
    assert_reply_matches(summary, "/api/v1/runs/{run_id}/events/summary")
    bad = _get(client, "api:events_summary", filled, step_min=-1)
    assert bad.status_code == 400
    assert_reply_matches(bad, "/api/v1/runs/{run_id}/events/summary")
    record = event(1, samples=[SAMPLE])
    assert not validate(record, OPENAPI["components"]["schemas"]["Event"])
    assert validate(
        event(1, samples=[{"text": "x"}] * 5), OPENAPI["components"]["schemas"]["Event"]
    )


# --------------------------------------------------------------------------- why it counted

UNFINISHED = {
    "text": "Computing 1 (1 + 1) is a classic reminder that some",
    "reward": 1.0,
    "finished": False,
    "reason": "last number 1 = 1 (no box); cut off at max_new_tokens",
}


def test_samples_with_and_without_finished_and_reason_are_accepted_and_shown(
    client: Client, alice: User, run: Run, token: str
) -> None:
    """A trainer since issue 45 says whether each response finished and why it counted;
    an older one says neither; a null is "not recorded", as for the reward."""
    events = [
        event(1, samples=[UNFINISHED, {**SAMPLE, "finished": True, "reason": "\\boxed{12} = 12"}]),
        event(2, samples=[SAMPLE]),  # an older trainer's sample
        event(3, samples=[{"text": "12", "finished": None, "reason": None}]),
    ]
    reply = post_batch(client, run, token, {"events": events})
    assert reply.status_code == 200 and reply.json()["events"]["accepted"] == 3
    client.force_login(alice)
    rows = {row["step"]: row for row in _get(client, "api:events", run).json()["events"]}
    detail = _detail(client, run, rows[1]["id"])
    assert detail.json()["samples"] == [
        {**UNFINISHED, "truncated": False},
        {**SAMPLE, "finished": True, "reason": "\\boxed{12} = 12", "truncated": False},
    ]
    assert_reply_matches(detail, "/api/v1/runs/{run_id}/events/{event_id}")
    assert _detail(client, run, rows[2]["id"]).json()["samples"] == [{**SAMPLE, "truncated": False}]
    assert _detail(client, run, rows[3]["id"]).json()["samples"] == [
        {"text": "12", "truncated": False}
    ]


def test_the_trainer_s_samples_carry_finished_and_a_reason_cut_to_the_bound() -> None:
    sample = spool.make_sample("x", ["x"], 1.0, finished=False, reason="why " * 100)
    assert sample["finished"] is False and len(sample["reason"]) == 300
    assert sample["truncated"] is False  # the flag is about the text and its tokens
    record = spool.make_event(1, "a", "b", "success", "p", samples=[sample])
    (parsed,) = batch.parse_event("events[0]", record).samples or []
    assert parsed == sample
    old = spool.make_sample("x")
    assert "finished" not in old and "reason" not in old
