"""The wire contract (:mod:`trainer.wire`): one definition, torch-free and Django-free,
that the spool writer checks every record against; event kinds read from the registry at
each call."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import spool, wire
from trainer.regimes import EventKind, RegimeSpec, registered

ROOT = Path(__file__).resolve().parents[3]

TOY = RegimeSpec(
    name="wiretoy",
    label="Wire toy",
    summary="A regime that only declares an event kind.",
    implementation="tests.trainer.transport.test_wire:Nothing",
    order=90,
    colour="#123456",
    event_kinds=(EventKind("wire_hint", "whispered hint (wire toy)"),),
)


def test_the_contract_imports_without_torch_or_django() -> None:
    code = (
        "import sys, trainer.wire as w; w.event_kind_names(); w.json_schemas(); "
        "assert 'torch' not in sys.modules and 'django' not in sys.modules"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_the_spool_writes_the_contracts_fields_in_its_order() -> None:
    assert spool.POINT_FIELDS == wire.POINT.names == ("policy", "key", "step", "value", "wall_time")
    assert wire.EVENT.names == spool.EVENT_WRITTEN_FIELDS + spool.EVENT_OPTIONAL_FIELDS
    assert spool.EVENT_OPTIONAL_FIELDS == ("samples",)
    assert wire.SAMPLE.written == ("text", "truncated")
    assert wire.POINT.required == {"policy", "key", "step", "value"}
    assert wire.BATCH.required == frozenset()
    point = spool.make_point("p", "k", 1, math.inf, wall_time=1.0)
    assert tuple(point) == wire.POINT.written and point["value"] == "Infinity"
    assert spool.MAX_SAMPLE_TEXT == wire.SAMPLE["text"].max_length == wire.MAX_SAMPLE_TEXT


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: spool.make_point("p" * 65, "k", 0, 1.0), "policy: longer than 64 characters"),
        (lambda: spool.make_point("p", "k" * 129, 0, 1.0), "key: longer than 128 characters"),
        (lambda: spool.make_point("p", "a\x00b", 0, 1.0), "key: must not contain NUL"),
        (lambda: spool.make_point("p", "a\udc80", 0, 1.0), "key: is not valid UTF-8"),
        (lambda: spool.make_point("p", "k", 2**31, 1.0), r"step must be an integer in \[0, "),
        (lambda: spool.make_event(0, "a", "b", "success", "q" * 129), "prompt_id: longer than"),
        (lambda: spool.make_event(0, "a", "b", "success", "q", count=2**31), "count must be"),
        (lambda: spool.make_event(0, "", "b", "success", "q"), "source must be a non-empty"),
    ],
)
def test_the_writer_refuses_what_the_contract_refuses(call: object, message: str) -> None:
    with pytest.raises(wire.WireError, match=message) as caught:
        call()  # type: ignore[operator]
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)


def test_at_the_limits_the_writer_writes() -> None:
    point = spool.make_point("p" * 64, "k" * 128, wire.MAX_INT32, 1.0, wall_time=0.0)
    assert len(point["policy"]) == 64 and point["step"] == wire.MAX_INT32
    event = spool.make_event(0, "é" * 64, "b", "success", "q" * 128, count=wire.MAX_INT32)
    assert event["count"] == wire.MAX_INT32


def test_event_kinds_are_read_from_the_registry_at_each_call() -> None:
    assert wire.event_kind_names() == ("rollout", "advantage_stats", "success", "sft_sample")
    assert "wire_hint" not in wire.EVENT_KINDS
    with pytest.raises(wire.WireError, match="kind must be one of"):
        spool.make_event(1, "a", "b", "wire_hint", "q")
    with registered(TOY):
        assert "wire_hint" in wire.EVENT_KINDS and wire.EVENT_KINDS[-1] == "wire_hint"
        assert ("wire_hint", "whispered hint (wire toy)") in wire.event_kind_choices()
        assert spool.make_event(1, "a", "b", "wire_hint", "q")["kind"] == "wire_hint"
        schemas = wire.json_schemas()
        assert schemas["Event"]["properties"]["kind"]["enum"][-1] == "wire_hint"
    assert list(wire.EVENT_KINDS) == ["rollout", "advantage_stats", "success", "sft_sample"]
    assert wire.json_schemas()["Event"]["properties"]["kind"]["enum"] == list(wire.EVENT_KINDS)


def test_clip_text_makes_any_text_acceptable() -> None:
    text, cut = wire.clip_text("a\x00b\udc80" + "x" * 10, 5)
    assert (text, cut) == ("a\ufffdb?x", True)
    assert wire.SAMPLE["text"].text_problem(text) is None
    assert wire.clip_text("plain", 5) == ("plain", False)


def test_the_field_definitions_are_checked() -> None:
    with pytest.raises(ValueError, match="has items"):
        wire.Field("list", "array")
    with pytest.raises(ValueError, match="has a record"):
        wire.Field("thing", "object")
    with pytest.raises(ValueError, match="twice"):
        wire.Record("R", "", (wire.Field("a", "boolean"), wire.Field("a", "boolean")))
    with pytest.raises(KeyError, match="no field 'nope'"):
        wire.POINT["nope"]
