"""Batch parsing (pure), the portable (SQLite) write/read paths, and ``run_token``."""

from __future__ import annotations

import io
import json
import math
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from tests.webapp.metrics.test_api_support import event, make_run, point
from webapp.metrics import ingest, selectors
from webapp.metrics.batch import BatchError, IngestBatch, PointIn, first_of_each, parse_batch
from webapp.metrics.downsample import minmax_buckets
from webapp.metrics.models import MetricPoint
from webapp.runs import services
from webapp.runs.models import Run


def raw(body: Any) -> bytes:
    return json.dumps(body).encode()


# --------------------------------------------------------------------------- parsing


def test_it_parses_a_full_batch() -> None:
    batch = parse_batch(
        raw(
            {
                "points": [point(3, "-Infinity"), point(4, 2)],
                "events": [event(4, count=3, weight=0.5)],
                "status": {"state": "completing", "message": "saving"},
            }
        )
    )
    assert batch.points[0].value == -math.inf and batch.points[1].value == 2.0
    assert (batch.events[0].count, batch.events[0].weight) == (3, 0.5)
    assert batch.status is not None and batch.status.state == "completing"
    assert batch.max_step == 4


def test_optional_fields_have_defaults() -> None:
    batch = parse_batch(
        raw(
            {
                "points": [{"policy": "a", "key": "k", "step": 0, "value": 1}],
                "events": [
                    {"step": 1, "source": "a", "target": "b", "kind": "rollout", "prompt_id": "p"}
                ],
            }
        )
    )
    assert batch.points[0].wall_time is None
    assert (batch.events[0].count, batch.events[0].weight) == (1, None)
    assert parse_batch(b"{}") == IngestBatch()
    assert IngestBatch().max_step is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff", "body: not UTF-8"),
        (b"[" * 100_000, "body: malformed JSON"),
        (raw({"points": [point(1, 10**400)]}), "points[0].value: number out of range"),
        (
            b'{"points": [{"policy": "a", "key": "k", "step": 1, "value": 1, "wall_time": 1e400}]}',
            "points[0].wall_time: must be finite",
        ),
        (raw({"events": [event(1, weight=float("inf"))]}), "body: malformed JSON"),
    ],
)
def test_it_refuses_what_json_or_postgres_cannot_hold(body: bytes, message: str) -> None:
    with pytest.raises(BatchError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_batch(body)


def test_a_json_number_that_overflows_is_an_infinite_value() -> None:
    body = b'{"points": [{"policy": "a", "key": "k", "step": 1, "value": -1e400}]}'
    assert parse_batch(body).points[0].value == -math.inf


def test_too_many_points_or_events_is_413() -> None:
    with pytest.raises(BatchError) as points:
        parse_batch(raw({"points": [point(1)] * 10_001}))
    with pytest.raises(BatchError) as events:
        parse_batch(raw({"events": [event(1)] * 10_001}))
    assert points.value.status == events.value.status == 413


def test_repeated_keys_keep_the_first() -> None:
    kept = first_of_each(
        (
            PointIn("a", "k", 1, 1.0, None),
            PointIn("a", "k", 1, 2.0, None),
            PointIn("b", "k", 1, 3.0, None),
        )
    )
    assert [p.value for p in kept] == [1.0, 3.0]


# --------------------------------------------------------------------------- portable path


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def portable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take the code paths used on SQLite (the demo), on this PostgreSQL database."""
    for module in (ingest, selectors):
        monkeypatch.setattr(module, "connection", SimpleNamespace(vendor="sqlite"))


@pytest.mark.django_db
def test_the_portable_path_is_idempotent_too(alice: User, portable: None) -> None:
    run = make_run(alice)
    body = raw(
        {
            "points": [point(s, s * 1.5) for s in range(30)] + [point(30, "NaN")],
            "events": [event(1)],
        }
    )
    first = ingest.metrics_ingest(run=run, batch=parse_batch(body)).as_json()
    again = ingest.metrics_ingest(run=run, batch=parse_batch(body)).as_json()
    assert (first["accepted"], first["duplicates"]) == (32, 0)
    assert (again["accepted"], again["duplicates"]) == (0, 32)
    series_id = MetricPoint.objects.filter(series__run=run).values_list("series", flat=True)[0]
    found = selectors.series_points([series_id], max_points=10)[series_id]
    everything = [(s, s * 1.5) for s in range(30)] + [(30, math.nan)]
    assert found.n_points == 31 and found.downsampled
    assert len(found.points) == len(minmax_buckets(everything, 10))
    assert math.isnan(found.points[-1][1])


def test_a_null_value_reads_as_nan() -> None:
    assert math.isnan(selectors.as_float(None))
    assert selectors.as_float(2) == 2.0


# --------------------------------------------------------------------------- run_token


@pytest.mark.django_db
def test_run_token_prints_a_working_token_and_revokes_the_old_one(alice: User) -> None:
    run = make_run(alice)
    old = services.run_token_issue(run)
    out, err = io.StringIO(), io.StringIO()
    call_command("run_token", str(run.pk), stdout=out, stderr=err)
    token = out.getvalue().strip()
    assert token.startswith(services.TOKEN_PREFIX) and token != old
    assert services.run_for_token(token) == run
    assert services.run_for_token(old) is None
    assert f"/api/v1/runs/{run.pk}/ingest" in err.getvalue()


@pytest.mark.django_db
def test_run_token_of_an_unknown_run_fails() -> None:
    with pytest.raises(CommandError, match="no run #424242"):
        call_command("run_token", "424242")


@pytest.mark.django_db
def test_run_token_run_stays_in_its_state(alice: User) -> None:
    run = make_run(alice, state=Run.State.RUNNING)
    call_command("run_token", str(run.pk), stdout=io.StringIO(), stderr=io.StringIO())
    run.refresh_from_db()
    assert run.state == Run.State.RUNNING
