"""The shipper against a real (small, scriptable) HTTP server implementing SPEC 8.1."""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.trainer.ingest_server import MAX_NAME, TOKEN, Ingest, event_key, point_key
from trainer.shipper import FatalShipError, Shipper, TransientShipError
from trainer.spool import (
    EVENT_KINDS,
    Spool,
    SpoolOffsets,
    make_event,
    make_point,
    read_events,
    read_points,
)

# --------------------------------------------------------------------------- helpers


class MaxJitter(random.Random):
    """'Full jitter' that always picks the ceiling, so delays are predictable."""

    def uniform(self, a: float, b: float) -> float:
        return b


class RecordingSleep:
    """An injected sleep that records the delays and barely sleeps."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        time.sleep(min(delay, 0.005))


def make_shipper(run_dir: Path, ingest: Ingest, token: str = TOKEN, **kwargs: Any) -> Shipper:
    kwargs.setdefault("sleep", RecordingSleep())
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("timeout", 5.0)
    return Shipper(run_dir, ingest.url, token, **kwargs)


def write_spool(run_dir: Path, n_points: int, n_events: int = 0, start: int = 0) -> Spool:
    spool = Spool(run_dir)
    fill(spool, n_points, n_events, start)
    return spool


def fill(spool: Spool, n_points: int, n_events: int = 0, start: int = 0) -> None:
    policies = ("qwen-math", "llama")
    spool.append_points(
        make_point(policies[i % 2], f"train/m{i % 3}", step, step * 0.5, wall_time=time.time())
        for i, step in enumerate(range(start, start + n_points))
    )
    spool.append_events(
        make_event(step, "llama", "qwen-math", EVENT_KINDS[step % 3], f"arith-{step:05d}")
        for step in range(start, start + n_events)
    )


def spool_keys(run_dir: Path) -> tuple[set, set]:
    return {point_key(p) for p in read_points(run_dir)}, {
        event_key(e) for e in read_events(run_dir)
    }


def assert_server_has_exactly_the_spool(run_dir: Path, ingest: Ingest) -> None:
    points, events = spool_keys(run_dir)
    assert set(ingest.state.points) == points
    assert set(ingest.state.events) == events


def wait_for(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


# --------------------------------------------------------------------------- shipping


def test_everything_arrives_exactly_once_in_capped_batches(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 1234, 321).close()
    shipper = make_shipper(tmp_path, ingest, max_points_per_batch=100, max_events_per_batch=50)
    assert shipper.drain() is True
    assert_server_has_exactly_the_spool(tmp_path, ingest)
    batches = ingest.state.ok_batches()
    assert max(len(b.get("points", [])) for b in batches) == 100
    assert max(len(b.get("events", [])) for b in batches) == 50
    assert len(batches) == 13 == shipper.stats.batches
    assert shipper.stats.accepted == 1234 + 321 and shipper.stats.duplicates == 0
    assert shipper.stats.retries == shipper.stats.rejected == 0
    sizes = SpoolOffsets(
        (tmp_path / "metrics.jsonl").stat().st_size, (tmp_path / "events.jsonl").stat().st_size
    )
    assert shipper.cursor == sizes
    assert json.loads((tmp_path / "ship_cursor.json").read_text())["metrics"] == sizes.metrics
    assert sorted(os.listdir(tmp_path)) == ["events.jsonl", "metrics.jsonl", "ship_cursor.json"]
    assert shipper.ship_once() == 0
    assert len(ingest.state.log) == 13


def test_non_finite_values_travel_as_strings(tmp_path: Path, ingest: Ingest) -> None:
    with Spool(tmp_path) as spool:
        spool.append_points(
            make_point("p", "loss", step, value, wall_time=1.0)
            for step, value in enumerate([math.nan, math.inf, -math.inf, 0.5])
        )
    assert make_shipper(tmp_path, ingest).drain()
    values = [ingest.state.points[("p", "loss", step)]["value"] for step in range(4)]
    assert values == ["NaN", "Infinity", "-Infinity", 0.5]
    assert b"NaN" in ingest.state.log[0]["raw"] and b'"NaN"' in ingest.state.log[0]["raw"]


def test_backoff_on_503_grows_and_is_capped(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 10).close()
    ingest.state.script.extend([503] * 6)
    sleep = RecordingSleep()
    shipper = make_shipper(
        tmp_path, ingest, sleep=sleep, backoff_base=0.1, backoff_max=1.0, rng=MaxJitter()
    )
    assert shipper.drain() is True
    assert sleep.delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert shipper.stats.retries == 6
    assert_server_has_exactly_the_spool(tmp_path, ingest)


def test_full_jitter_stays_below_the_ceiling(tmp_path: Path, ingest: Ingest) -> None:
    shipper = make_shipper(tmp_path, ingest, backoff_base=0.5, backoff_max=30.0)
    delays = [shipper.backoff_delay(attempt) for attempt in range(12) for _ in range(20)]
    assert all(0 <= d <= 30.0 for d in delays)
    assert all(shipper.backoff_delay(0) <= 0.5 for _ in range(50))
    assert shipper.backoff_delay(1000) <= 30.0


def test_429_honours_retry_after(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 3).close()
    ingest.state.script.append((429, "7"))
    sleep = RecordingSleep()
    shipper = make_shipper(tmp_path, ingest, sleep=sleep)
    with pytest.raises(TransientShipError) as caught:
        shipper.ship_once()
    assert caught.value.retry_after == 7.0
    ingest.state.script.append((429, "7"))
    assert shipper.drain()
    assert sleep.delays == [7.0]


def test_dropped_connection_is_transient_and_moves_nothing(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 5).close()
    ingest.state.script.append("drop")
    shipper = make_shipper(tmp_path, ingest)
    with pytest.raises(TransientShipError, match="could not reach"):
        shipper.ship_once()
    assert shipper.cursor == SpoolOffsets(0, 0)
    assert shipper.ship_once() == 5
    assert_server_has_exactly_the_spool(tmp_path, ingest)


def test_unreachable_server_is_transient(tmp_path: Path) -> None:
    write_spool(tmp_path, 1).close()
    shipper = Shipper(tmp_path, "http://127.0.0.1:9/api/v1/runs/7/ingest", TOKEN, timeout=1.0)
    with pytest.raises(TransientShipError) as caught:
        shipper.ship_once()
    assert TOKEN not in str(caught.value) and caught.value.__cause__ is None


def test_drain_gives_up_at_the_deadline_then_finishes(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 20).close()
    ingest.state.down = True
    shipper = make_shipper(tmp_path, ingest, sleep=time.sleep, backoff_base=0.02)
    started = time.monotonic()
    assert shipper.drain(deadline=started + 0.3) is False
    assert time.monotonic() - started < 2.0
    assert shipper.stats.retries >= 2 and shipper.cursor == SpoolOffsets(0, 0)
    ingest.state.down = False
    assert shipper.drain(deadline=time.monotonic() + 5) is True
    assert_server_has_exactly_the_spool(tmp_path, ingest)


# --------------------------------------------------------------------------- resuming


def test_restart_resumes_from_the_cursor(tmp_path: Path, ingest: Ingest) -> None:
    spool = write_spool(tmp_path, 50, 10)
    assert make_shipper(tmp_path, ingest).drain()
    fill(spool, 7, 3, start=50)
    spool.close()
    requests_before = len(ingest.state.log)
    restarted = make_shipper(tmp_path, ingest)
    assert restarted.drain()
    new = ingest.state.ok_batches()[requests_before:]
    assert sum(len(b.get("points", [])) for b in new) == 7
    assert sum(len(b.get("events", [])) for b in new) == 3
    assert restarted.stats.accepted == 10 and restarted.stats.duplicates == 0
    assert_server_has_exactly_the_spool(tmp_path, ingest)


def test_lost_cursor_resends_as_duplicates_and_changes_nothing(
    tmp_path: Path, ingest: Ingest
) -> None:
    write_spool(tmp_path, 30, 5).close()
    assert make_shipper(tmp_path, ingest).drain()
    stored = (dict(ingest.state.points), dict(ingest.state.events))
    (tmp_path / "ship_cursor.json").write_text("{not json")
    again = make_shipper(tmp_path, ingest)
    assert again.drain()
    assert again.stats.accepted == 0 and again.stats.duplicates == 35
    assert (ingest.state.points, ingest.state.events) == stored


def test_trainer_truncation_moves_the_cursor_back(tmp_path: Path, ingest: Ingest) -> None:
    spool = write_spool(tmp_path, 20, 4)
    checkpoint = spool.offsets()
    fill(spool, 20, 4, start=20)
    shipper = make_shipper(tmp_path, ingest)
    assert shipper.drain()
    # The resumed run cuts back and rewrites more than it cut before the shipper looks
    # again: sizes alone would not show it, the truncation log does.
    spool.truncate(checkpoint)
    fill(spool, 30, 6, start=20)
    spool.close()
    assert shipper.drain()
    assert shipper.stats.duplicates == 20 + 4 and shipper.stats.accepted == 40 + 8 + 10 + 2
    assert_server_has_exactly_the_spool(tmp_path, ingest)


def test_file_shorter_than_the_cursor_clamps(tmp_path: Path, ingest: Ingest) -> None:
    spool = write_spool(tmp_path, 10)
    half = spool.offsets().metrics
    fill(spool, 10, start=10)
    spool.close()
    assert make_shipper(tmp_path, ingest).drain()
    os.truncate(tmp_path / "metrics.jsonl", half)  # cut behind everyone's back
    restarted = make_shipper(tmp_path, ingest)
    assert restarted.cursor.metrics > half
    assert restarted.pending() is False
    assert restarted.cursor.metrics == half
    with Spool(tmp_path) as spool:
        fill(spool, 3, start=10)
    assert restarted.drain()
    assert restarted.stats.duplicates == 3
    assert restarted.cursor.metrics == (tmp_path / "metrics.jsonl").stat().st_size


def test_a_torn_last_line_waits_until_it_is_complete(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 3).close()
    line = json.dumps(make_point("p", "late", 3, 1.0, wall_time=1.0), separators=(",", ":"))
    with open(tmp_path / "metrics.jsonl", "ab") as handle:
        handle.write(line[:20].encode())
    shipper = make_shipper(tmp_path, ingest)
    assert shipper.drain()
    assert len(ingest.state.points) == 3 and ("p", "late", 3) not in ingest.state.points
    with open(tmp_path / "metrics.jsonl", "ab") as handle:
        handle.write(line[20:].encode() + b"\n")
    assert shipper.ship_once() == 1
    assert ("p", "late", 3) in ingest.state.points


# --------------------------------------------------------------------------- refusals


def test_401_is_fatal_and_the_cursor_stays(
    tmp_path: Path, ingest: Ingest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    write_spool(tmp_path, 5).close()
    shipper = make_shipper(tmp_path, ingest, token="revoked-token-abc")
    with pytest.raises(FatalShipError, match="token") as caught:
        shipper.drain()
    assert caught.value.status_code == 401
    assert "revoked-token-abc" not in str(caught.value) + caplog.text + repr(shipper)
    assert shipper.cursor == SpoolOffsets(0, 0)
    assert not (tmp_path / "ship_cursor.json").exists()
    assert len(list(read_points(tmp_path))) == 5 and ingest.state.points == {}


def test_403_is_fatal(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 1).close()
    ingest.state.script.append(403)
    with pytest.raises(FatalShipError, match="another run") as caught:
        make_shipper(tmp_path, ingest).ship_once()
    assert caught.value.status_code == 403


def test_wrong_url_is_fatal(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 1).close()
    shipper = Shipper(tmp_path, ingest.url.replace("/7/", "/8/"), TOKEN)
    with pytest.raises(FatalShipError, match="404"):
        shipper.ship_once()


def test_the_token_is_redacted_from_server_messages(
    tmp_path: Path, ingest: Ingest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    write_spool(tmp_path, 2).close()
    ingest.state.script.append("echo")
    shipper = make_shipper(tmp_path, ingest)
    with pytest.raises(TransientShipError) as caught:
        shipper.ship_once()
    assert "<token>" in str(caught.value) and TOKEN not in str(caught.value)
    ingest.state.script.append("echo")
    assert shipper.drain()
    assert TOKEN not in caplog.text


def test_400_sets_the_batch_aside_and_moves_on(tmp_path: Path, ingest: Ingest) -> None:
    with Spool(tmp_path) as spool:
        spool.append_points([make_point("p", "k" * (MAX_NAME + 1), 0, 1.0, wall_time=1.0)])
        spool.append_events([make_event(0, "a", "b", "success", "q0")])
        fill(spool, 8)
    shipper = make_shipper(tmp_path, ingest, max_points_per_batch=4, max_events_per_batch=4)
    assert shipper.drain()
    rejected = [
        json.loads(line) for line in (tmp_path / "ship_rejected.jsonl").read_text().splitlines()
    ]
    assert len(rejected) == 1
    assert rejected[0]["status_code"] == 400 and "points[0].key" in rejected[0]["message"]
    assert len(rejected[0]["points"]) == 4 and len(rejected[0]["events"]) == 1
    assert shipper.stats.rejected == 5
    assert len(ingest.state.points) == 5  # the 4 + 1 after the rejected batch
    assert shipper.ship_once() == 0


def test_unparseable_spool_lines_are_set_aside(tmp_path: Path, ingest: Ingest) -> None:
    with Spool(tmp_path) as spool:
        fill(spool, 2)
    with open(tmp_path / "metrics.jsonl", "ab") as handle:
        handle.write(b"\x00\x00garbage\n")
    with Spool(tmp_path) as spool:
        fill(spool, 2, start=2)
    shipper = make_shipper(tmp_path, ingest)
    assert shipper.drain()
    assert len(ingest.state.points) == 4 and shipper.stats.rejected == 1
    assert "garbage" in (tmp_path / "ship_rejected.jsonl").read_text()


def test_413_halves_the_caps(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 300, 10).close()
    ingest.state.max_points = 40
    shipper = make_shipper(tmp_path, ingest, max_points_per_batch=100)
    assert shipper.drain()
    assert shipper.max_points_per_batch == 25 and shipper.max_events_per_batch == 2
    assert max(len(b.get("points", [])) for b in ingest.state.ok_batches()) <= 40
    assert_server_has_exactly_the_spool(tmp_path, ingest)
    assert shipper.stats.retries == 0 and shipper.stats.rejected == 0


# --------------------------------------------------------------------------- status


def test_status_is_sent_once_until_acknowledged(tmp_path: Path, ingest: Ingest) -> None:
    shipper = make_shipper(tmp_path, ingest)
    shipper.set_status("running", "step 12/200")
    assert shipper.pending()
    ingest.state.script.append(503)
    assert shipper.drain()
    assert ingest.state.statuses == [{"state": "running", "message": "step 12/200"}]
    assert shipper.ship_once() == 0 and len(ingest.state.log) == 2
    write_spool(tmp_path, 2).close()
    shipper.set_status("succeeded", "done")
    assert shipper.ship_once() == 2
    assert ingest.state.ok_batches()[-1]["status"] == {"state": "succeeded", "message": "done"}
    assert not shipper.pending()


# --------------------------------------------------------------------------- background


def test_background_thread_ships_new_lines_and_stop_drains(tmp_path: Path, ingest: Ingest) -> None:
    spool = Spool(tmp_path)
    shipper = make_shipper(tmp_path, ingest, max_points_per_batch=50)
    shipper.start(poll_interval=0.02)
    with pytest.raises(RuntimeError):
        shipper.start()
    fill(spool, 40, 5)
    wait_for(lambda: len(ingest.state.points) == 40 and len(ingest.state.events) == 5)
    ingest.state.script.extend([503, "drop", 500])
    for start in range(40, 400, 30):
        fill(spool, 30, 2, start=start)
    shipper.set_status("succeeded", "done")
    assert shipper.stop(timeout=5.0) is True
    spool.close()
    assert_server_has_exactly_the_spool(tmp_path, ingest)
    assert shipper.stats.retries >= 1 and shipper.fatal_error is None
    assert ingest.state.statuses[-1]["state"] == "succeeded"


def test_background_thread_stops_on_a_fatal_error(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 5).close()
    shipper = make_shipper(tmp_path, ingest, token="wrong")
    shipper.start(poll_interval=0.02)
    wait_for(lambda: shipper.fatal_error is not None)
    assert shipper.fatal_error.status_code == 401
    assert shipper.stop(timeout=1.0) is False
    assert shipper.cursor == SpoolOffsets(0, 0)


def test_session_can_be_injected(tmp_path: Path, ingest: Ingest) -> None:
    write_spool(tmp_path, 2).close()
    with requests.Session() as session:
        assert make_shipper(tmp_path, ingest, session=session).ship_once() == 2
