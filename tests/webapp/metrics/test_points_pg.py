"""The PostgreSQL point writer (webapp.metrics.points_pg): its binary encoders read back by
PostgreSQL, and both of its paths (a binary COPY when every point is above its series'
last stored step, ON CONFLICT otherwise) through ``metrics_ingest``: non-finite values,
missing wall times, the extreme steps, repeats in a batch (the first wins), replays,
late points, the lowest new step per series, and a concurrent writer that stores some
of the keys between the writer's look and its COPY.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

import numpy as np
import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection

from tests.webapp.metrics.test_api_support import make_run, point
from webapp.metrics import ingest, points_pg
from webapp.metrics.batch import PointColumns, parse_batch
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

MAX_INT32 = 2**31 - 1
VALUES = np.array([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308, 0.1])


def _cursor() -> Any:
    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


# --------------------------------------------------------------------------- encoders


def test_copy_payload_is_read_back_by_postgres_as_written() -> None:
    n = len(VALUES)
    ids = np.array([1, 2**62, -5, 0, 7, 8, 9], dtype=np.int64)
    steps = np.array([0, MAX_INT32, -(2**31), -1, 1, 2, 3], dtype=np.int64)
    walls = np.array([1.7e9, math.nan, 0.0, math.nan, -1.5, math.nan, 2.0])
    payload = points_pg.copy_payload(ids, steps, VALUES, walls)
    with _cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE copy_check (series_id bigint, step int, value float8, "
            "wall_time float8) ON COMMIT DROP"
        )
        with cursor.copy(
            "COPY copy_check (series_id, step, value, wall_time) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.write(payload)
        cursor.execute("SELECT * FROM copy_check")
        rows = cursor.fetchall()
    assert len(rows) == n
    for (series_id, step, value, wall), i in zip(rows, range(n), strict=True):
        assert (series_id, step) == (ids[i], steps[i])
        assert math.isnan(value) if math.isnan(VALUES[i]) else value == VALUES[i]
        assert math.copysign(1, value) == math.copysign(1, VALUES[i])
        assert wall is None if math.isnan(walls[i]) else wall == walls[i]


@pytest.mark.parametrize(
    ("column", "wire", "type_name"),
    [
        (np.array([0, -1, 2**62, -(2**63)], dtype=np.int64), ">i8", "bigint[]"),
        (np.array([0, -1, MAX_INT32, -(2**31)], dtype=np.int64), ">i4", "integer[]"),
        (VALUES, ">f8", "double precision[]"),
        (np.array([], dtype=np.int64), ">i8", "bigint[]"),
    ],
)
def test_binary_arrays_are_read_back_by_postgres_as_written(
    column: np.ndarray, wire: str, type_name: str
) -> None:
    """Sent with their own type (no cast in the query), and read back element for element."""
    with _cursor() as cursor:
        cursor.adapters.register_dumper(points_pg.BinaryArray, points_pg._BinaryArrayDumper)
        array = points_pg.binary_array(column, wire)
        cursor.execute("SELECT %s, pg_typeof(%s)::text", [array, array], binary=True)
        got, got_type = cursor.fetchone()
    assert got_type == type_name
    back = np.array(got, dtype=column.dtype)
    np.testing.assert_array_equal(back, column)
    assert (np.signbit(back) == np.signbit(column)).all()


# --------------------------------------------------------------------------- both paths


def stored(run: Run) -> dict[tuple[str, str, int], tuple[float, float | None]]:
    rows = MetricPoint.objects.filter(series__run=run).values_list(
        "series__policy", "series__key", "step", "value", "wall_time"
    )
    return {(p, k, s): (v, w) for p, k, s, v, w in rows}


def ingest_raw(run: Run, document: dict[str, Any]) -> tuple[dict[str, Any], dict[int, int]]:
    """Ingest ``document`` (as the view does); the reply and the lows ``_points_store``
    returned."""
    lows_seen: list[dict[int, int]] = []
    store = ingest._points_store

    def spy(run_id: int, points: Any) -> tuple[int, dict[int, int]]:
        new, lows = store(run_id, points)
        lows_seen.append(lows)
        return new, lows

    ingest._points_store = spy  # type: ignore[assignment]
    try:
        batch = parse_batch(json.dumps(document).encode())
        reply = ingest.metrics_ingest(run=run, batch=batch).as_json()
    finally:
        ingest._points_store = store  # type: ignore[assignment]
    return reply, (lows_seen[0] if lows_seen else {})


def series_id(run: Run, policy: str, key: str = "train/reward_mean") -> int:
    return MetricSeries.objects.get(run=run, policy=policy, key=key).pk


@pytest.fixture
def run(alice: User) -> Run:
    return make_run(alice)


def test_fresh_points_go_in_whole_with_non_finite_values_and_extreme_steps(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = [
        point(0, "NaN"),
        point(1, "Infinity"),
        point(2, "-Infinity"),
        {**point(3, -0.0), "wall_time": None},
        {"policy": "a", "key": "train/reward_mean", "step": 4, "value": 2},  # no wall time
        point(MAX_INT32, 1e308),
        point(5, 0.25, policy="b"),
        point(5, 0.5, policy="b"),  # a repeat in the batch: the first wins
    ]
    copied = spy_on_copy(monkeypatch)
    reply, lows = ingest_raw(run, {"points": points})
    assert copied == [True]
    assert reply["points"] == {"accepted": 7, "duplicates": 1}
    got = stored(run)
    assert math.isnan(got[("a", "train/reward_mean", 0)][0])
    assert got[("a", "train/reward_mean", 1)] == (math.inf, 1.7e9)
    assert got[("a", "train/reward_mean", 2)] == (-math.inf, 1.7e9)
    value, wall = got[("a", "train/reward_mean", 3)]
    assert (value, math.copysign(1, value), wall) == (0.0, -1.0, None)
    assert got[("a", "train/reward_mean", 4)] == (2.0, None)
    assert got[("a", "train/reward_mean", MAX_INT32)] == (1e308, 1.7e9)
    assert got[("b", "train/reward_mean", 5)] == (0.25, 1.7e9)
    assert lows == {series_id(run, "a"): 0, series_id(run, "b"): 5}
    run.refresh_from_db()
    assert run.last_step == MAX_INT32


def test_a_replay_and_late_points_take_the_on_conflict_path(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = [point(s, s / 2, policy=p) for p in ("a", "b") for s in range(10, 20)]
    ingest_raw(run, {"points": first})
    copied = spy_on_copy(monkeypatch)
    reply, lows = ingest_raw(run, {"points": first})  # a replay: nothing new
    assert reply["points"] == {"accepted": 0, "duplicates": 20} and lows == {}
    assert copied == []  # nothing above the last steps: no COPY
    mixed = [
        point(15, 99.0),  # stored already: stays 7.5
        point(3, "NaN"),  # late: below a's last step
        {**point(4, 1.0), "wall_time": None},  # late, no wall time
        point(25, 2.0),  # new, above
        point(12, 3.0, policy="b"),  # stored already
        point(30, 4.0, policy="c"),  # a new series
    ]
    reply, lows = ingest_raw(run, {"points": mixed})
    assert copied == []  # late points in the batch: all of it by the INSERT
    assert reply["points"] == {"accepted": 4, "duplicates": 2}
    assert lows == {series_id(run, "a"): 3, series_id(run, "c"): 30}
    got = stored(run)
    assert got[("a", "train/reward_mean", 15)] == (7.5, 1.7e9)
    assert math.isnan(got[("a", "train/reward_mean", 3)][0])
    assert got[("a", "train/reward_mean", 4)] == (1.0, None)
    assert got[("a", "train/reward_mean", 25)] == (2.0, 1.7e9)
    assert len(got) == 20 + 4


def test_the_copy_falls_back_when_its_keys_were_stored_meanwhile(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that stored step 5 after the largest steps were read: the COPY's unique
    violation rolls back to its savepoint, and the ON CONFLICT path skips step 5."""
    ingest_raw(run, {"points": [point(0)]})
    sid = series_id(run, "a")
    largest = points_pg._largest_steps

    def stale(table: str, series: np.ndarray) -> np.ndarray:
        found = largest(table, series)
        MetricPoint.objects.create(series_id=sid, step=5, value=-1.0)  # "meanwhile"
        return found

    monkeypatch.setattr(points_pg, "_largest_steps", stale)
    copied = spy_on_copy(monkeypatch)
    reply, lows = ingest_raw(run, {"points": [point(s, float(s)) for s in range(1, 11)]})
    assert copied == [False]  # the COPY did not go through
    assert reply["points"] == {"accepted": 9, "duplicates": 1}
    assert lows == {sid: 1}
    got = stored(run)
    assert got[("a", "train/reward_mean", 5)] == (-1.0, None) and len(got) == 11


def spy_on_copy(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each ``_copy`` call answered (True: the rows went in)."""
    answers: list[bool] = []
    copy = points_pg._copy

    def spy(*args: Any) -> bool:
        answers.append(copy(*args))
        return answers[-1]

    monkeypatch.setattr(points_pg, "_copy", spy)
    return answers


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_writer_of_the_same_keys_is_waited_for_and_skipped(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another session inserts step 5 (uncommitted) after the look; the COPY waits for it,
    fails when it commits, and the batch goes in without it: no error, no duplicate."""
    run = make_run(alice)
    ingest_raw(run, {"points": [point(0)]})
    sid = series_id(run, "a")
    settings = connection.settings_dict
    other = psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        password=settings["PASSWORD"] or None,
    )
    largest = points_pg._largest_steps
    inserted = threading.Event()

    def insert_then_commit() -> None:
        other.execute(
            f"INSERT INTO {MetricPoint._meta.db_table} (series_id, step, value) "
            "VALUES (%s, 5, -1.0)",
            [sid],
        )
        inserted.set()
        time.sleep(0.5)  # the COPY waits on the row meanwhile
        other.commit()

    def look_then_race(table: str, series: np.ndarray) -> np.ndarray:
        found = largest(table, series)
        threading.Thread(target=insert_then_commit).start()
        assert inserted.wait(10)
        return found

    monkeypatch.setattr(points_pg, "_largest_steps", look_then_race)
    copied = spy_on_copy(monkeypatch)
    try:
        started = time.monotonic()
        reply, lows = ingest_raw(run, {"points": [point(s, float(s)) for s in range(1, 11)]})
        waited = time.monotonic() - started
    finally:
        other.close()
    assert copied == [False] and waited >= 0.4  # it waited for the other, then fell back
    assert reply["points"] == {"accepted": 9, "duplicates": 1}
    assert lows == {sid: 1}
    assert stored(run)[("a", "train/reward_mean", 5)] == (-1.0, None)


def test_points_given_as_point_in_are_written_the_same(run: Run) -> None:
    """``_points_store`` takes any sequence of PointIn (the reference reading's tuple)."""
    batch = parse_batch(json.dumps({"points": [point(2), point(1, "NaN")]}).encode())
    points = tuple(batch.points)
    assert not isinstance(points, PointColumns)
    new, lows = ingest._points_store(run.pk, points)
    assert new == 2 and lows == {series_id(run, "a"): 1}
    assert ingest._points_store(run.pk, points) == (0, {})
