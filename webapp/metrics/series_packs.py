"""Packed copies of finished series, so that comparisons read whole series fast.

A 50-run comparison reads every point of hundreds of series. From the points table that
is an index-only scan plus an aggregate per series: about 165 ns a point (330 ms for 8
metrics x 5 policies x 50 runs x 1,000 steps at lab scale, ``bench/scale.py``). A
:class:`~webapp.metrics.models.SeriesPack` holds the same points as two byte strings
(int4 steps, float8 values), which PostgreSQL hands back at about 25 ns a point.

Life of a pack (PostgreSQL only; elsewhere :func:`packs_enabled` is False):

- Each tick of beat's packing task packs every series of a few finished runs not yet
  marked ``Run.series_packed``, and marks them (:func:`packs_sweep`, called by
  ``scheduler.tasks.series_pack``): runs that just finished, were cancelled, got late
  points, or finished before packing existed. A running run's series change every
  step and are never packed.
- Readers (:func:`series_packs`) only read: a series without a pack is read from its
  points until the sweep gets to its run, so a GET never writes.
- Ingestion calls :func:`ingest_lock` at the start of its transaction and
  :func:`packs_drop` when it wrote new points: the run's packs are gone, and its mark
  cleared, in the same transaction, so a pack never outlives a change of its series.
- Retention (:mod:`webapp.metrics.retention`) may drop a packed run's raw points: the
  pack is then the series' only copy. :func:`ingest_lock` writes such points back first
  (:func:`points_restore`), so a late batch never drops the only copy.
- The race between the sweep and ingestion: the sweep takes the run's advisory lock
  ``(PACK_LOCK_CLASS, run id)`` exclusively, without waiting (a run whose ingestion is in
  flight is left for the next tick), in the transaction that packs the run and sets its
  mark. Its next statement's snapshot then holds every ingestion that committed before,
  and an ingestion that starts meanwhile waits on its shared lock until the sweep
  commits, then deletes what it built and clears the mark.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from django.db import connection, transaction

from trainer import metrics as m
from webapp.metrics import points_pg
from webapp.metrics.models import MetricPoint, MetricSeries, SeriesPack
from webapp.runs.models import Run

PACK_LOCK_CLASS = 0x4D524C50
"""The namespace ("MRLP") of the runs' pack locks: advisory lock (this, run id)."""

Packed = tuple[bytes, bytes]
"""(steps as big-endian int4, values as big-endian float8), aligned."""

SERIES_SCAN_SETTINGS_SQL = (
    "SELECT set_config('work_mem', '64MB', true), set_config('jit', 'off', true), "
    "set_config('enable_hashagg', 'off', true)"
)
"""For the rest of the transaction: stream the primary key's index in series order into a
GroupAggregate (no hash table to build), and skip JIT, whose compiling costs more than
it saves here."""


def packs_enabled() -> bool:
    return connection.vendor == "postgresql"


def _table(model: type[Any]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def ingest_lock(run_id: int) -> None:
    """Hold the run's pack lock (shared) until the current transaction ends; for a packed
    run, first write back the points that retention dropped (:func:`points_restore`), so
    that the batch meets every point it would have met and the packs, which the batch
    may drop, are never their only copy. One statement for a running run, as before: the
    mark is read with the lock (a run with dropped points is marked packed before the
    lock is taken, and only this transaction's :func:`packs_drop` unmarks it)."""
    if not packs_enabled():
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT pg_advisory_xact_lock_shared(%s, %s), EXISTS (SELECT 1 FROM {_table(Run)} "
            "WHERE id = %s AND series_packed)",
            [PACK_LOCK_CLASS, run_id, run_id],
        )
        packed = cursor.fetchone()[1]
    if packed:
        points_restore(run_id)


CLOCK_POLICY = m.POOL
CLOCK_KEY = m.STEP_S
"""The series a run whose raw points were dropped keeps raw (:mod:`webapp.metrics.retention`):
the pool's step time, written at every step with the step's wall time (the run's clock)."""

_DROPPED_OF_RUN_SQL = """
    SELECT k.series_id, k.steps, k."values" FROM {packs} k
    JOIN {series} s ON s.id = k.series_id
    WHERE s.run_id = %(run)s
          AND NOT EXISTS (SELECT 1 FROM {points} p WHERE p.series_id = k.series_id)
"""


def points_restore(run_id: int) -> int:
    """Write back the raw points of run ``run_id``'s series that retention dropped (a
    pack and no points), from their packs, each with the wall time of the run's clock at
    its step, as retention checked it was; in the caller's transaction, which holds the
    run's pack lock. The number of points written (0, one index probe a packed series,
    when nothing was dropped)."""
    sql = _DROPPED_OF_RUN_SQL.format(
        packs=_table(SeriesPack), series=_table(MetricSeries), points=_table(MetricPoint)
    )
    packs = list(binary_stream(sql, {"run": run_id}))
    if not packs:
        return 0
    clock = dict(
        MetricPoint.objects.filter(
            series__run_id=run_id,
            series__policy=CLOCK_POLICY,
            series__key=CLOCK_KEY,
            wall_time__isnull=False,
        ).values_list("step", "wall_time")
    )
    ids, steps, values = [], [], []
    for pk, step_bytes, value_bytes in sorted(packs, key=lambda row: row[0]):
        series_steps = np.frombuffer(bytes(step_bytes), dtype=">i4").astype(np.int64)
        order = np.argsort(series_steps, kind="stable")
        steps.append(series_steps[order])
        values.append(np.frombuffer(bytes(value_bytes), dtype=">f8")[order])
        ids.append(np.full(len(order), pk, dtype=np.int64))
    all_steps = np.concatenate(steps)
    walls = np.array([clock.get(step, np.nan) for step in all_steps.tolist()], dtype=np.float64)
    payload = points_pg.copy_payload(
        np.concatenate(ids), all_steps, np.concatenate(values).astype(np.float64), walls
    )
    table = _table(MetricPoint)
    import psycopg

    connection.ensure_connection()
    sql = f"COPY {table} (series_id, step, value, wall_time) FROM STDIN (FORMAT BINARY)"
    try:
        # a savepoint: a concurrent batch of the run restoring the same points first
        # (both hold the lock shared) makes this one's COPY fail whole, and that is fine
        with (
            transaction.atomic(),
            psycopg.Cursor(connection.connection) as cursor,
            cursor.copy(sql) as copy,
        ):
            copy.write(payload)
    except psycopg.errors.UniqueViolation:
        return 0
    return len(all_steps)


def packs_drop(run_id: int) -> None:
    """Clear the run's ``series_packed`` mark and delete its packs (in the caller's
    transaction, which holds :func:`ingest_lock`). Only the sweep builds packs, and it
    marks the run in the same transaction, so a run without the mark has none: a
    running run's ingestion pays one conditional UPDATE that matches nothing."""
    if not packs_enabled():
        return
    if not Run.objects.filter(pk=run_id, series_packed=True).update(series_packed=False):
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_table(SeriesPack)} WHERE series_id IN "
            f"(SELECT id FROM {_table(MetricSeries)} WHERE run_id = %s)",
            [run_id],
        )


_READ_SQL = """
    SELECT series_id, steps, "values" FROM {packs} WHERE series_id = ANY(%(ids)s::bigint[])
"""
# Every point of each series, aggregated off the primary key's index-only scan (which
# covers ``value``): all the aggregates of a group see its rows in the same order, so
# the two strings line up.
_BUILD_SQL = """
    INSERT INTO {packs} (series_id, steps, "values")
    SELECT series_id, string_agg(int4send(step), ''),
           string_agg(float8send(coalesce(value, 'NaN')), '')
    FROM {points}
    WHERE series_id = ANY(%(ids)s::bigint[])
    GROUP BY series_id
    ON CONFLICT (series_id) DO NOTHING
"""


def binary_stream(sql: str, params: dict[str, object]) -> Iterator[tuple]:
    """Rows of ``sql`` in binary (bytea as bytes), on Django's connection and transaction
    (Django's own cursors bind client-side and cannot ask for binary results), each as
    soon as PostgreSQL sends it (libpq's single-row mode), so the caller works on one
    row while the server makes the next: a comparison
    buckets each series as it arrives, and reading and bucketing 3.2M points take about
    as long as the slower of the two instead of their sum (``bench/compare.py``). Consume
    it whole before the connection's next statement."""
    import psycopg

    connection.ensure_connection()
    with points_pg.knows_binary_arrays(psycopg.Cursor(connection.connection)) as cursor:
        yield from cursor.stream(sql, params, binary=True)


def series_packs(series_ids: Sequence[int]) -> Iterator[tuple[int, Packed]]:
    """(series id, pack) of those of ``series_ids`` that have one (none where
    :func:`packs_enabled` is False), each as soon as it is read (:func:`binary_stream`)."""
    if not packs_enabled() or not series_ids:
        return
    sql = _READ_SQL.format(packs=_table(SeriesPack))
    for pk, steps, values in binary_stream(sql, {"ids": points_pg.id_array(series_ids)}):
        yield pk, (bytes(steps), bytes(values))


def packs_sweep(max_runs: int) -> tuple[int, int]:
    """Pack every series of up to ``max_runs`` finished runs not marked
    ``series_packed`` (newest first) and mark them; (runs packed, series built). A run
    whose ingestion is in flight is left for the next sweep."""
    if not packs_enabled() or max_runs <= 0:
        return 0, 0
    run_ids = (
        Run.objects.filter(state__in=Run.TERMINAL_STATES, series_packed=False)
        .order_by("-pk")
        .values_list("pk", flat=True)[:max_runs]
    )
    runs = series = 0
    for run_id in list(run_ids):
        built = _pack_run(run_id)
        if built is not None:
            runs, series = runs + 1, series + built
    return runs, series


def _pack_run(run_id: int) -> int | None:
    """Pack the run's series that have no pack and mark the run, in one transaction that
    holds the run's pack lock; the number built, or None when the lock is taken."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [PACK_LOCK_CLASS, run_id])
            if not cursor.fetchone()[0]:
                return None
            cursor.execute(SERIES_SCAN_SETTINGS_SQL)
            series_ids = list(
                MetricSeries.objects.filter(run_id=run_id, pack__isnull=True).values_list(
                    "id", flat=True
                )
            )
            built = 0
            if series_ids:
                sql = _BUILD_SQL.format(packs=_table(SeriesPack), points=_table(MetricPoint))
                cursor.execute(sql, {"ids": series_ids})
                built = cursor.rowcount
        Run.objects.filter(pk=run_id).update(series_packed=True)
    return built
