"""Write a batch's points to PostgreSQL: one binary COPY when all are new, else ON CONFLICT.

Why (issue 23): for a 10,000-point batch the one ``INSERT ... SELECT FROM unnest(...) ON
CONFLICT DO NOTHING`` took 70-130 ms (with the machine's load): ~40 ms in psycopg turning
four Python lists into arrays one element at a time, the rest in the server, where ON
CONFLICT inserts each row speculatively (three WAL records a row: the heap tuple, the
index entry and the confirmation). Now, from the batch's columns
(:class:`~webapp.metrics.batch.PointColumns`):

1. numpy sorts the rows by (series, step): the primary key's order;
2. one query reads each series' largest stored step (one index probe a series). When
   every point's step is above its series' largest (so none can be stored yet: a live
   run's batches, as a rule), they go in with one ``COPY ... FROM STDIN (FORMAT
   BINARY)`` straight into the table, its payload built by numpy in one go
   (:func:`copy_payload`; the server inserts them a page at a time: ~13 ms, payload
   included, on a lightly loaded machine);
3. otherwise (a replay, a late point), or when the COPY meets a key that a concurrent
   writer (a shipper's retry racing its first attempt, say) stored after the look, they
   go in with ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING``, the arrays
   sent as prebuilt binary array values (:func:`binary_array`: no per-element dumping).
   The COPY runs in a savepoint, so its unique violation leaves nothing behind.

Either statement inserts the rows in the same sorted order, and a failed COPY's rows are
gone before the INSERT starts: two writers of the same keys wait for each other, as
before, and never deadlock.

NaN and +-Infinity values are stored as such (binary float8). A missing wall time is NULL:
a field of length -1 in the COPY, and in the arrays a NaN that ``NULLIF`` turns back into
NULL (a wall time is finite or null, never NaN).

What is left per batch is PostgreSQL's own work: the inserts, and the foreign key's
check of each row at commit (one lookup a row: ~25 ms a batch on a lightly loaded
machine, 70-90 under load; the schema asks for it).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import psycopg
from django.db import connection, transaction
from psycopg.adapt import Dumper
from psycopg.pq import Format

from webapp.metrics.batch import PointColumns

__all__ = ["BinaryArray", "binary_array", "copy_payload", "points_insert"]

# --------------------------------------------------------------------------- encoders
# PostgreSQL's binary formats (docs: COPY, "Binary Format"; array_recv for arrays), all
# big-endian: numpy writes each row or element as one record of a structured dtype.

_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)  # flags, no extension
_COPY_TRAILER = struct.pack(">h", -1)
_COPY_ROW = np.dtype(
    [
        ("fields", ">i2"),
        ("series_id_size", ">i4"),
        ("series_id", ">i8"),
        ("step_size", ">i4"),
        ("step", ">i4"),
        ("value_size", ">i4"),
        ("value", ">f8"),
        ("wall_time_size", ">i4"),
        ("wall_time", ">f8"),  # left out where the wall time is NULL (its size is -1)
    ]
)


def copy_payload(
    series_ids: np.ndarray, steps: np.ndarray, values: np.ndarray, wall_times: np.ndarray
) -> bytes:
    """The whole ``COPY ... (series_id, step, value, wall_time) FROM STDIN (FORMAT
    BINARY)`` input for these rows: bigint, integer, float8, float8 (NULL where
    ``wall_times`` is NaN). ``steps`` must fit in an int4."""
    n = len(steps)
    rows = np.empty(n, _COPY_ROW)
    rows["fields"] = 4
    rows["series_id_size"], rows["series_id"] = 8, series_ids
    rows["step_size"], rows["step"] = 4, steps
    rows["value_size"], rows["value"] = 8, values
    nulls = np.isnan(wall_times)
    rows["wall_time_size"] = np.where(nulls, -1, 8)
    rows["wall_time"] = wall_times
    if not nulls.any():
        return _COPY_HEADER + rows.tobytes() + _COPY_TRAILER
    # A NULL field has no data: drop those rows' last 8 bytes (every row's byte layout is
    # one row of this matrix; the mask keeps row order).
    data = rows.view(np.uint8).reshape(n, _COPY_ROW.itemsize)
    keep = np.ones(data.shape, dtype=bool)
    keep[nulls, -_COPY_ROW["wall_time"].itemsize :] = False
    return _COPY_HEADER + data[keep].tobytes() + _COPY_TRAILER


class BinaryArray:
    """A one-dimensional PostgreSQL array without NULLs, already in the binary wire
    format: a query parameter that psycopg sends as it is (:class:`_BinaryArrayDumper`)."""

    __slots__ = ("data", "oid")

    def __init__(self, data: bytes, oid: int) -> None:
        self.data, self.oid = data, oid


# element wire type -> (element type oid, array type oid)
_ARRAY_TYPES = {">i8": (20, 1016), ">i4": (23, 1007), ">f8": (701, 1022)}


def binary_array(column: np.ndarray, wire: str) -> BinaryArray:
    """``column`` as an array of ``wire`` (``">i8"`` bigint, ``">i4"`` integer, ``">f8"``
    float8; NaN and infinities are kept)."""
    element_oid, array_oid = _ARRAY_TYPES[wire]
    if not len(column):
        return BinaryArray(struct.pack(">iiI", 0, 0, element_oid), array_oid)
    items = np.empty(len(column), [("size", ">i4"), ("item", wire)])
    items["size"], items["item"] = np.dtype(wire).itemsize, column
    header = struct.pack(">iiIii", 1, 0, element_oid, len(column), 1)  # 1 dim, no NULLs
    return BinaryArray(header + items.tobytes(), array_oid)


def id_array(ids: Sequence[int]) -> BinaryArray:
    """``ids`` as a bigint array parameter: psycopg's own list dumper quotes each element
    through a regular expression (at 2,000 series and seven columns, about 4 ms of a
    comparison's read); this is one numpy copy."""
    return binary_array(np.asarray(ids, dtype=np.int64), ">i8")


def int_array(values: Sequence[int]) -> BinaryArray:
    """``values`` as an integer (int4) array parameter, as :func:`id_array`."""
    return binary_array(np.asarray(values, dtype=np.int32), ">i4")


def knows_binary_arrays(cursor: psycopg.Cursor[Any]) -> psycopg.Cursor[Any]:
    """``cursor``, which now sends :class:`BinaryArray` parameters as they are."""
    cursor.adapters.register_dumper(BinaryArray, _BinaryArrayDumper)
    return cursor


class _BinaryArrayDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: BinaryArray) -> bytes:
        return obj.data

    def get_key(self, obj: BinaryArray, format: Any) -> Any:
        return (BinaryArray, obj.oid)  # a dumper per array type, which says its oid

    def upgrade(self, obj: BinaryArray, format: Any) -> Dumper:
        dumper = _BinaryArrayDumper(BinaryArray)
        dumper.oid = obj.oid
        return dumper


def _cursor() -> psycopg.Cursor[Any]:
    """A plain psycopg cursor on Django's connection (same transaction) that knows
    :class:`BinaryArray`."""
    connection.ensure_connection()
    return knows_binary_arrays(psycopg.Cursor(connection.connection))


# --------------------------------------------------------------------------- writing


def points_insert(
    table: str, columns: PointColumns, series_ids: Sequence[int]
) -> tuple[int, dict[int, int]]:
    """Insert ``columns`` (no repeated (pair, step)) into ``table`` (quoted), where
    ``series_ids[i]`` is the id of the series ``columns.pairs[i]``: the number of points
    that were new, and per series that got new points the lowest step among them."""
    ids = np.asarray(series_ids, dtype=np.int64)[columns.series]
    order = np.lexsort((columns.steps, ids))
    ids, steps = ids[order], columns.steps[order]
    values, wall_times = columns.values[order], columns.wall_times[order]
    series = np.unique(ids)
    largest = _largest_steps(table, series)[np.searchsorted(series, ids)]
    if (steps > largest).all() and _copy(table, ids, steps, values, wall_times):
        found, first = np.unique(ids, return_index=True)  # sorted: the first is the lowest
        return len(ids), dict(zip(found.tolist(), steps[first].tolist(), strict=True))
    return _insert_or_skip(table, ids, steps, values, wall_times)


def _largest_steps(table: str, series: np.ndarray) -> np.ndarray:
    """Each series' largest stored step, -1 where it has none (in ``series``' order)."""
    sql = (
        f"SELECT coalesce((SELECT max(p.step) FROM {table} p WHERE p.series_id = s.id), -1) "
        "FROM unnest(%s::bigint[]) WITH ORDINALITY AS s(id, n) ORDER BY s.n"
    )
    with _cursor() as cursor:
        cursor.execute(sql, [binary_array(series, ">i8")], binary=True)
        return np.array([largest for (largest,) in cursor.fetchall()], dtype=np.int64)


def _copy(
    table: str, ids: np.ndarray, steps: np.ndarray, values: np.ndarray, wall_times: np.ndarray
) -> bool:
    """COPY the rows in a savepoint; False (and nothing written) when one of them was
    stored meanwhile by a concurrent writer."""
    payload = copy_payload(ids, steps, values, wall_times)
    sql = f"COPY {table} (series_id, step, value, wall_time) FROM STDIN (FORMAT BINARY)"
    try:
        with transaction.atomic(), _cursor() as cursor, cursor.copy(sql) as copy:
            copy.write(payload)
    except psycopg.errors.UniqueViolation:
        return False
    return True


def _insert_or_skip(
    table: str, ids: np.ndarray, steps: np.ndarray, values: np.ndarray, wall_times: np.ndarray
) -> tuple[int, dict[int, int]]:
    """INSERT the rows, skipping the keys already stored: how many were new, and the
    lowest new step per series."""
    sql = (
        f"WITH new AS (INSERT INTO {table} (series_id, step, value, wall_time) "
        "SELECT u.series_id, u.step, u.value, nullif(u.wall_time, 'NaN') "
        "FROM unnest(%s::bigint[], %s::int[], %s::float8[], %s::float8[]) "
        "AS u(series_id, step, value, wall_time) "
        "ON CONFLICT DO NOTHING RETURNING series_id, step) "
        "SELECT series_id, min(step), count(*) FROM new GROUP BY series_id"
    )
    params = [
        binary_array(ids, ">i8"),
        binary_array(steps, ">i4"),
        binary_array(values, ">f8"),
        binary_array(wall_times, ">f8"),
    ]
    with _cursor() as cursor:
        cursor.execute(sql, params, binary=True)
        found = cursor.fetchall()
    return sum(n for _, _, n in found), {series_id: low for series_id, low, _ in found}
