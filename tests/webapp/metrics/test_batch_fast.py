"""The fast reading of a batch (orjson, points checked column by column) against the
reference reading (json, each record checked field by field): on any body, the fast one
either declines or gives the very batch the reference gives, and :func:`parse_batch`
answers as the reference does (same batch, or the same error naming the same field).
Also :class:`PointColumns`, the sequence of points the fast reading gives.

Pure: no database (webapp.metrics.batch is Django-free).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.webapp.metrics.test_api_support import event, point
from tests.webapp.metrics.test_fuzz_ingest import (
    batches,
    encode,
    encodings,
    finite,
    json_any,
    keys,
    policies,
    sometimes_bad,
    steps,
    values,
)
from webapp.metrics import batch as batch_rules
from webapp.metrics.batch import (
    BatchError,
    IngestBatch,
    PointColumns,
    PointIn,
    first_of_each,
    parse_batch,
)

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _same_number(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return type(a) is type(b) and ((math.isnan(a) and math.isnan(b)) or a == b)


def same_points(got: Any, wanted: Any) -> bool:
    """Equal sequences of PointIn, NaN equal to NaN, -0.0 and 0.0 told apart, and every
    field of the same type as the reference's (int steps, float values)."""
    got, wanted = list(got), list(wanted)
    return len(got) == len(wanted) and all(
        type(a) is PointIn
        and (a.policy, a.key) == (b.policy, b.key)
        and type(a.step) is type(b.step) is int
        and a.step == b.step
        and _same_number(a.value, b.value)
        and math.copysign(1, a.value) == math.copysign(1, b.value)
        and _same_number(a.wall_time, b.wall_time)
        for a, b in zip(got, wanted, strict=True)
    )


def same_batch(got: IngestBatch, wanted: IngestBatch) -> bool:
    return (
        same_points(got.points, wanted.points)
        and same_points(first_of_each(got.points), first_of_each(wanted.points))
        and got.max_step == wanted.max_step
        and got.events == wanted.events
        and got.status == wanted.status
    )


def reference(raw: bytes) -> IngestBatch | BatchError:
    try:
        return batch_rules._parse_reference(raw)
    except BatchError as exc:
        return exc


def check_agreement(raw: bytes) -> None:
    """The fast reading declines or agrees; parse_batch answers as the reference."""
    wanted = reference(raw)
    fast = batch_rules._parse_fast(raw)
    if isinstance(wanted, BatchError):
        assert fast is None
        with pytest.raises(BatchError) as got:
            parse_batch(raw)
        assert (str(got.value), got.value.status) == (str(wanted), wanted.status)
        return
    if fast is not None:
        assert same_batch(fast, wanted)
    assert same_batch(parse_batch(raw), wanted)


# --------------------------------------------------------------------------- properties

point_records = st.fixed_dictionaries(
    {
        "policy": sometimes_bad(policies),
        "key": sometimes_bad(keys),
        "step": sometimes_bad(steps),
        "value": sometimes_bad(values),
    },
    optional={"wall_time": sometimes_bad(st.none() | finite), "extra": json_any},
)
valid_points = st.fixed_dictionaries(
    {"policy": st.sampled_from(["a", "b", "é"]), "key": keys, "step": steps, "value": values},
    optional={"wall_time": st.none() | finite | st.integers(-(2**70), 2**70)},
)
point_batches = st.one_of(
    st.lists(valid_points, min_size=1, max_size=40),  # accepted, mostly
    st.lists(st.one_of(valid_points, valid_points, point_records), min_size=1, max_size=40),
).map(lambda points: {"points": points})


@PROPERTY
@given(document=point_batches, how=encodings)
@example(document={"points": [point(2**64)]}, how="ascii")  # orjson: a float; json: an int
@example(document={"points": [point(1, 2**64 + 1)]}, how="ascii")
@example(document={"points": [point(1, -(2**63) - 1)]}, how="ascii")
@example(document={"points": [point(1, 10**400)]}, how="ascii")  # out of range: 400
@example(document={"points": [{**point(1), "wall_time": 10**400}]}, how="ascii")
@example(document={"points": [{**point(1), "wall_time": 3}, point(2)]}, how="ascii")
@example(document={"points": [point(1), {**point(2), "wall_time": None}]}, how="ascii")
@example(document={"points": [point(1, "NaN"), point(1, "nan")]}, how="ascii")
@example(document={"points": [point(1, True)]}, how="ascii")
@example(document={"points": [point(True)]}, how="ascii")
@example(document={"points": [point(1, policy=["a"])]}, how="ascii")  # unhashable name
@example(document={"points": [point(1, policy=1)]}, how="ascii")
@example(document={"points": [point(1), point(1, 2.0)]}, how="ascii")  # the first wins
@example(document={"points": [point(0, -0.0), point(1, 0)]}, how="ascii")
@example(document={"points": [point(1, key="é\ud800")]}, how="surrogatepass")
@example(document={"points": [point(1), [1]]}, how="ascii")
@example(document={"points": [point(1), {"policy": "a"}]}, how="ascii")
def test_the_fast_reading_agrees_with_the_reference_on_points(
    document: dict[str, Any], how: str
) -> None:
    check_agreement(encode(document, how))


@PROPERTY
@given(document=batches, how=encodings)
@example(document={"events": [event(2**64)]}, how="ascii")
@example(document={"events": [event(1, weight=2**70)]}, how="ascii")
@example(document={"points": [point(1)], "events": [event(1, kind="nope")]}, how="ascii")
@example(document={"points": [point(1)], "status": {"state": "running", "x": 1}}, how="ascii")
def test_the_fast_reading_agrees_with_the_reference_on_whole_batches(
    document: dict[str, Any], how: str
) -> None:
    check_agreement(encode(document, how))


@settings(PROPERTY, max_examples=150)
@given(raw=st.binary(max_size=64))
@example(raw=b"1e400")
@example(raw=b'{"points": [{"policy": "a", "key": "k", "step": 1, "value": 1e400}]}')
@example(raw=b'{"points": [{"policy": "a", "key": "k", "step": 1, "value": -1e400}]}')
@example(raw=b'{"points": [{"policy": "a", "key": "k", "step": 1, "value": NaN}]}')
@example(raw=b"\xef\xbb\xbf{}")
@example(raw=b'{"points": [], "points": 7}')
@example(raw=b"[" * 50_000)
def test_the_fast_reading_agrees_with_the_reference_on_any_bytes(raw: bytes) -> None:
    check_agreement(raw)


def test_a_big_batch_is_read_fast_and_the_same() -> None:
    points = [
        {
            "policy": f"p{i % 3}",
            "key": f"train/metric_{i % 20:02d}",
            "step": i // 60,
            "value": ["NaN", "Infinity", "-Infinity", i / 7, i][i % 5],
            **({} if i % 11 else {"wall_time": None}),
            **({"wall_time": 1.7e9 + i} if i % 3 == 0 else {}),
        }
        for i in range(10_000)
    ]
    points[5_000] = dict(points[4_999])  # a repeated key: the first wins
    raw = json.dumps({"points": points}).encode()
    fast = batch_rules._parse_fast(raw)
    assert isinstance(fast, IngestBatch) and isinstance(fast.points, PointColumns)
    check_agreement(raw)
    assert len(first_of_each(fast.points)) == 9_999


def test_too_many_points_is_still_413() -> None:
    with pytest.raises(BatchError) as error:
        parse_batch(json.dumps({"points": [point(1)] * 10_001}).encode())
    assert error.value.status == 413


# --------------------------------------------------------------------------- PointColumns


def test_point_columns_read_as_a_sequence_of_points() -> None:
    points = (
        PointIn("a", "k", 3, math.inf, None),
        PointIn("b", "k", 1, 0.5, 1.7e9),
        PointIn("a", "k", 3, 2.0, None),  # a repeat of the first
        PointIn("a", "j", 2**31 - 1, -math.inf, 0.0),
    )
    columns = PointColumns.of(points)
    assert columns.pairs == [("a", "k"), ("b", "k"), ("a", "j")]
    assert PointColumns.of(columns) is columns
    assert len(columns) == 4 and columns == points and list(columns) == list(points)
    assert columns[1] == points[1] and columns[-1] == points[-1]
    assert list(columns[1:3]) == list(points[1:3])
    assert same_points(first_of_each(columns), first_of_each(points))
    assert first_of_each(columns[1:]) == points[1:]
    assert columns.max_step() == 2**31 - 1 and PointColumns.of(()).max_step() is None
    nan = PointColumns.of((PointIn("a", "k", 0, math.nan, None),))
    assert math.isnan(nan[0].value) and nan[0].wall_time is None
    with pytest.raises(ValueError, match="length"):
        PointColumns([("a", "k")], np.zeros(2), np.zeros(1), np.zeros(1), np.zeros(1))


def test_point_columns_tell_apart_every_int4_step_of_every_pair() -> None:
    low, high = -(2**31), 2**31 - 1
    points = [
        PointIn(p, "k", s, float(i), None)
        for i, (p, s) in enumerate(
            [("a", low), ("b", low), ("a", high), ("b", high), ("a", -1), ("a", 0), ("b", -1)]
        )
    ]
    columns = PointColumns.of(points + points[::-1])
    assert first_of_each(columns) == points


def test_the_batch_max_step_counts_point_columns_and_events() -> None:
    raw = json.dumps({"points": [point(7), point(3)], "events": [event(9)]}).encode()
    batch = parse_batch(raw)
    assert isinstance(batch.points, PointColumns) and batch.max_step == 9
    assert parse_batch(json.dumps({"points": [point(7), point(3)]}).encode()).max_step == 7
