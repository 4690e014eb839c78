"""One wire contract (:mod:`trainer.wire`): what the trainer's spool writer writes, the
batch parser accepts and the OpenAPI document describes; a record the writer refuses, the
parser refuses too. Event kinds come from the regime registry at each use: a toy regime
registered at run time is accepted by the writer, the parser, the OpenAPI enum, the
transfer log's filter and the model's choices, and refused again once it is gone."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webapp.metrics.test_api_support import event, post_batch
from tests.webapp.metrics.test_fuzz_ingest import validate
from trainer import spool, wire
from trainer.regimes import EventKind, RegimeSpec, registered
from webapp.metrics import batch
from webapp.metrics import views_schema as schema
from webapp.metrics.models import TransferEvent
from webapp.runs.models import Run

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TOY = RegimeSpec(
    name="wiretoy",
    label="Wire toy",
    summary="A regime that only declares an event kind.",
    implementation="tests.webapp.metrics.test_wire_contract:Nothing",
    order=90,
    colour="#123456",
    event_kinds=(EventKind("wire_hint", "whispered hint (wire toy)"),),
)

lone_surrogates = st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=2)
names = st.one_of(
    st.text(max_size=8),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8),
    lone_surrogates.map(lambda s: "a" + s),
    st.sampled_from(["", "\x00", "a\x00", "k" * 64, "k" * 65, "é" * 128, "k" * 129]),
)
steps = st.one_of(st.integers(0, 5), st.integers(wire.MAX_INT32 - 1, wire.MAX_INT32 + 1))
values = st.one_of(st.floats(), st.integers(-(2**53), 2**53))
texts = st.one_of(st.text(max_size=30), lone_surrogates, st.just("x" * 2500))
tokens = st.none() | st.lists(st.one_of(st.text(max_size=40), lone_surrogates), max_size=600)


def _line_as_batch(part: str, record: Any) -> bytes:
    """``record`` as the spool writes it, in a batch as the shipper sends it."""
    line = spool.encode_line(record).rstrip(b"\n")
    return b'{"' + part.encode() + b'": [' + line + b"]}"


def _schema(name: str) -> dict[str, Any]:
    return schema.openapi()["components"]["schemas"][name]


def _kinds(document: dict[str, Any], component: str) -> list[str]:
    """The event kinds ``component`` of the OpenAPI ``document`` lists."""
    kinds: list[str] = document["components"]["schemas"][component]["properties"]["kind"]["enum"]
    return kinds


@PROPERTY
@given(policy=names, key=names, step=steps, value=values)
def test_the_parser_accepts_exactly_the_points_the_writer_writes(
    policy: str, key: str, step: int, value: float
) -> None:
    try:
        record = spool.make_point(policy, key, step, value, wall_time=1.5)
    except wire.WireError as refused:
        naive = {"policy": policy, "key": key, "step": step, "value": wire.encode_value(value)}
        with pytest.raises(batch.BatchError) as caught:
            batch.parse_point("points[0]", naive)
        field = str(refused).split(":")[0].split(" ")[0]
        assert str(caught.value).startswith(f"points[0].{field}:")
        return
    parsed = batch.parse_batch(_line_as_batch("points", record)).points[0]
    assert parsed[:3] == (policy, key, step) and parsed.wall_time == 1.5
    assert parsed.value == value or (math.isnan(value) and math.isnan(parsed.value))
    assert not validate(json.loads(spool.encode_line(record)), _schema("Point"))


@PROPERTY
@given(
    source=names,
    prompt_id=names,
    count=steps,
    samples=st.lists(
        st.tuples(texts, tokens, st.none() | st.floats()).map(lambda s: spool.make_sample(*s)),
        max_size=6,
    ),
)
def test_the_parser_accepts_the_events_and_samples_the_writer_writes(
    source: str, prompt_id: str, count: int, samples: list[spool.Sample]
) -> None:
    try:
        record = spool.make_event(3, source, "b", "rollout", prompt_id, count, 0.5, samples)
    except wire.WireError:
        naive = event(3, source=source, prompt_id=prompt_id, count=count)
        with pytest.raises(batch.BatchError):
            batch.parse_event("events[0]", naive)
        return
    parsed = batch.parse_batch(_line_as_batch("events", record)).events[0]
    assert (parsed.source, parsed.prompt_id, parsed.count) == (source, prompt_id, count)
    assert parsed.samples == record["samples"] and len(record["samples"]) <= 4
    assert not validate(json.loads(spool.encode_line(record)), _schema("Event"))


def test_the_ingest_components_are_the_contracts_records() -> None:
    schemas = _schema("Batch"), _schema("Point"), _schema("Event")
    assert schemas == tuple(wire.json_schemas()[name] for name in ("Batch", "Point", "Event"))
    assert set(_schema("Sample")["properties"]) == batch.SAMPLE_FIELDS == wire.SAMPLE.allowed
    assert _schema("Event")["properties"]["samples"]["maxItems"] == wire.MAX_EVENT_SAMPLES
    assert _schema("Status")["properties"]["state"]["enum"] == list(wire.STATUS_STATES)
    assert batch.parse_batch(b"{}") == batch.IngestBatch()


@pytest.mark.django_db
def test_a_regime_registered_at_run_time_brings_its_event_kind_everywhere(
    client: Client, run: Run, token: str, alice: User
) -> None:
    body = {"events": [event(1, kind="wire_hint")]}
    refused = post_batch(client, run, token, body)
    assert refused.status_code == 400
    assert refused.json()["error"].startswith("events[0].kind: must be one of ['rollout'")
    client.force_login(alice)
    events_url = reverse("api:events", args=[run.pk])
    assert client.get(events_url, {"kind": "wire_hint"}).status_code == 400
    field = TransferEvent._meta.get_field("kind")
    with registered(TOY):
        assert post_batch(client, run, token, body).json()["events"]["accepted"] == 1
        listed = client.get(events_url, {"kind": "wire_hint"})
        assert [row["kind"] for row in listed.json()["events"]] == ["wire_hint"]
        served = client.get(reverse("api:schema")).json()
        assert _kinds(served, "Event")[-1] == _kinds(served, "EventRow")[-1] == "wire_hint"
        assert ("wire_hint", "whispered hint (wire toy)") in field.choices
        TransferEvent.objects.get(run=run, kind="wire_hint").full_clean()
    assert "wire_hint" not in [name for name, _ in field.choices]
    assert "wire_hint" not in _kinds(schema.openapi(), "Event")
    with pytest.raises(ValidationError):
        TransferEvent.objects.get(run=run, kind="wire_hint").full_clean()


@pytest.mark.django_db
def test_the_run_page_filters_by_kind_name_and_shows_its_label(
    client: Client, run: Run, alice: User
) -> None:
    """The filter offers the kinds the run's regime declares (an SGT run: successes)."""
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    kind_filter = page[page.index('<select name="kind">') :]
    kind_filter = kind_filter[: kind_filter.index("</select>")]
    assert kind_filter.count("<option") == 2  # "any" and SGT's one kind
    assert '<option value="success">rescued success (SGT)</option>' in kind_filter
