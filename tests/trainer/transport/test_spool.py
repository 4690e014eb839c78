"""The append-only spool: exact record fields, whole lines, resume truncation."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

import pytest

from trainer import spool as spool_module
from trainer.spool import (
    EVENT_WRITTEN_FIELDS,
    POINT_FIELDS,
    Spool,
    SpoolOffsets,
    complete_length,
    decode_value,
    make_event,
    make_point,
    read_complete_lines,
    read_events,
    read_points,
    read_truncations,
)


def _points(n: int, policy: str = "qwen", start: int = 0) -> list[dict]:
    return [
        make_point(policy, "train/loss", step, step / 10, wall_time=1.5)
        for step in range(start, start + n)
    ]


# --------------------------------------------------------------------------- records


def test_make_point_has_exactly_the_contract_fields() -> None:
    point = make_point("qwen-math", "train/reward_mean", 12, 0.41, wall_time=1764470000.1)
    assert point == {
        "policy": "qwen-math",
        "key": "train/reward_mean",
        "step": 12,
        "value": 0.41,
        "wall_time": 1764470000.1,
    }
    assert tuple(point) == POINT_FIELDS


def test_make_point_defaults_wall_time_to_now_and_turns_ints_into_floats() -> None:
    point = make_point("p", "k", 0, 3)
    assert isinstance(point["value"], float)
    assert abs(point["wall_time"] - time.time()) < 5


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(math.nan, "NaN"), (math.inf, "Infinity"), (-math.inf, "-Infinity"), ("NaN", "NaN")],
)
def test_non_finite_values_are_encoded_as_strings(value: float | str, encoded: str) -> None:
    point = make_point("p", "k", 1, value, wall_time=0.0)
    assert point["value"] == encoded
    decoded = decode_value(point["value"])
    assert math.isnan(decoded) if encoded == "NaN" else decoded == float(encoded.lower())


def test_decode_value_passes_numbers_and_refuses_other_strings() -> None:
    assert decode_value(0.25) == 0.25
    assert decode_value(3) == 3.0
    with pytest.raises(ValueError):
        decode_value("nan")
    with pytest.raises(TypeError):
        decode_value(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"policy": "", "key": "k", "step": 0, "value": 1.0},
        {"policy": 3, "key": "k", "step": 0, "value": 1.0},
        {"policy": "p", "key": "k", "step": -1, "value": 1.0},
        {"policy": "p", "key": "k", "step": 1.0, "value": 1.0},
        {"policy": "p", "key": "k", "step": True, "value": 1.0},
        {"policy": "p", "key": "k", "step": 0, "value": "0.5"},
        {"policy": "p", "key": "k", "step": 0, "value": None},
        {"policy": "p", "key": "k", "step": 0, "value": True},
        {"policy": "p", "key": "k", "step": 0, "value": 1.0, "wall_time": math.nan},
    ],
)
def test_make_point_refuses_wrong_types(kwargs: dict) -> None:
    with pytest.raises(TypeError):
        make_point(**kwargs)


def test_make_event_has_exactly_the_contract_fields() -> None:
    event = make_event(12, "llama", "qwen-math", "success", "arith-00017")
    assert event == {
        "step": 12,
        "source": "llama",
        "target": "qwen-math",
        "kind": "success",
        "prompt_id": "arith-00017",
        "count": 1,
        "weight": None,
    }
    assert tuple(event) == EVENT_WRITTEN_FIELDS
    assert make_event(1, "a", "b", "rollout", "x", count=4, weight=0.5)["weight"] == 0.5


def test_make_event_validates() -> None:
    with pytest.raises(ValueError):
        make_event(1, "a", "b", "gossip", "x")
    with pytest.raises(TypeError):
        make_event(1, "a", "b", "rollout", "x", count=-1)
    with pytest.raises(TypeError):
        make_event(1, "a", "b", "rollout", "x", weight=math.inf)


def test_spool_offsets_round_trip_and_validate() -> None:
    offsets = SpoolOffsets(metrics=10, events=3)
    assert SpoolOffsets.from_dict(json.loads(json.dumps(offsets.to_dict()))) == offsets
    with pytest.raises(ValueError):
        SpoolOffsets.from_dict({"metrics": 1})
    with pytest.raises(ValueError):
        SpoolOffsets(metrics=-1, events=0)


# --------------------------------------------------------------------------- writing


def test_lines_are_compact_json_with_nothing_else(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.append_points([make_point("p", "loss", 1, math.nan, wall_time=2.0)])
        spool.append_events([make_event(1, "a", "b", "advantage_stats", "q1", weight=0.5)])
    metrics = (tmp_path / "metrics.jsonl").read_bytes()
    assert metrics == b'{"policy":"p","key":"loss","step":1,"value":"NaN","wall_time":2.0}\n'
    assert (tmp_path / "events.jsonl").read_bytes() == (
        b'{"step":1,"source":"a","target":"b","kind":"advantage_stats",'
        b'"prompt_id":"q1","count":1,"weight":0.5}\n'
    )


def test_append_validates_plain_dicts(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        raw = {"policy": "p", "key": "k", "step": 3, "value": math.inf, "wall_time": 1.0}
        spool.append_points([raw])
        with pytest.raises(ValueError, match="exactly the fields"):
            spool.append_points([{**raw, "extra": 1}])
        with pytest.raises(ValueError, match="exactly the fields"):
            spool.append_events([{"step": 1}])
    assert [p["value"] for p in read_points(tmp_path)] == ["Infinity"]
    assert list(read_events(tmp_path)) == []


def test_each_append_is_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[bytes] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    with Spool(tmp_path) as spool:
        monkeypatch.setattr(spool_module.os, "write", counting_write)
        spool.append_points(_points(500))
        spool.append_events([make_event(s, "a", "b", "rollout", f"q{s}") for s in range(50)])
        spool.append_points([])
        monkeypatch.undo()
    assert len(writes) == 2
    assert writes[0].count(b"\n") == 500 and writes[1].count(b"\n") == 50


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:

        def writer(policy: str) -> None:
            for start in range(0, 200, 20):
                spool.append_points(_points(20, policy=policy, start=start))

        threads = [threading.Thread(target=writer, args=(f"p{i}",)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    points = list(read_points(tmp_path))
    assert len(points) == 8 * 200
    assert {(p["policy"], p["step"]) for p in points} == {
        (f"p{i}", s) for i in range(8) for s in range(200)
    }


def test_fsync_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(spool_module.os, "fsync", calls.append)
    with Spool(tmp_path) as spool:
        spool.append_points(_points(3))
        assert calls == []
        spool.sync()
        assert len(calls) == 2
    with Spool(tmp_path, fsync_every_write=True) as spool:
        spool.append_points(_points(3))
        assert len(calls) == 3


def test_closed_spool_refuses_writes(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.close()
    with pytest.raises(ValueError, match="closed"):
        spool.append_points(_points(1))


# --------------------------------------------------------------------------- torn lines


def test_open_drops_a_torn_last_line(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.append_points(_points(3))
    good = (tmp_path / "metrics.jsonl").read_bytes()
    (tmp_path / "metrics.jsonl").write_bytes(good + b'{"policy":"p","ke')
    (tmp_path / "events.jsonl").write_bytes(b'{"step":')
    with Spool(tmp_path) as spool:
        assert spool.offsets() == SpoolOffsets(metrics=len(good), events=0)
        spool.append_points(_points(1, start=3))
    assert [p["step"] for p in read_points(tmp_path)] == [0, 1, 2, 3]


def test_readers_skip_a_torn_last_line(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.append_points(_points(2))
    with open(tmp_path / "metrics.jsonl", "ab") as handle:
        handle.write(b'{"policy":"p","key":"k","step":9')
    assert [p["step"] for p in read_points(tmp_path)] == [0, 1]
    lines, end = read_complete_lines(tmp_path / "metrics.jsonl")
    assert len(lines) == 2 and end == complete_length(tmp_path / "metrics.jsonl")
    assert list(read_events(tmp_path / "missing")) == []


def test_complete_length_scans_back_over_long_tails(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a\n" + b"x" * 10_000)
    assert complete_length(path, chunk=64) == 2
    assert complete_length(path, limit=1) == 0
    assert complete_length(tmp_path / "missing") == 0


# --------------------------------------------------------------------------- resume


def test_truncate_rewinds_to_checkpoint_offsets(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.append_points(_points(5))
        spool.append_events([make_event(1, "a", "b", "success", "q1")])
        spool.sync()
        checkpoint = spool.offsets().to_dict()
        spool.append_points(_points(5, start=5))
        spool.append_events([make_event(7, "a", "b", "success", "q7")])
    with Spool(tmp_path) as spool:  # the resumed run
        cut = spool.truncate(SpoolOffsets.from_dict(checkpoint))
        assert cut == SpoolOffsets.from_dict(checkpoint) == spool.offsets()
        spool.append_points(_points(5, start=5))
    assert [p["step"] for p in read_points(tmp_path)] == list(range(10))
    assert [e["step"] for e in read_events(tmp_path)] == [1]
    assert read_truncations(tmp_path) == (
        [cut],
        (tmp_path / "spool_truncations.jsonl").stat().st_size,
    )


def test_truncate_beyond_the_end_or_mid_line_is_made_safe(tmp_path: Path) -> None:
    with Spool(tmp_path) as spool:
        spool.append_points(_points(2))
        size = spool.offsets().metrics
        cut = spool.truncate(SpoolOffsets(metrics=size + 100, events=0))
        assert cut.metrics == size
        cut = spool.truncate(SpoolOffsets(metrics=size - 3, events=0))
        first_line = (tmp_path / "metrics.jsonl").read_bytes()
        assert cut.metrics == len(first_line) and first_line.count(b"\n") == 1
    assert len(read_truncations(tmp_path)[0]) == 2
