"""Write a validated ingestion batch (SPEC 8.1): idempotent, in bulk, in one transaction.

A point is keyed by (run, policy, key, step) and an event by (run, step, source, target,
kind, prompt_id); a key seen before (or earlier in the same batch) is a duplicate and
changes nothing, so a replayed batch is harmless.

On PostgreSQL each part is one set-based statement: the series are got-or-created with
``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING`` and then selected, the
points go in with one binary ``COPY`` when every point is above its series' last stored
step, else with one ``INSERT ... SELECT * FROM unnest(bigint[], int[], float8[],
float8[]) ON CONFLICT DO NOTHING``, both built from numpy columns
(:mod:`webapp.metrics.points_pg`; NaN and +-Infinity are stored as such), and the events
with one such INSERT. Elsewhere (SQLite,
the demo) ``bulk_create(ignore_conflicts=True)`` with counts from before and after;
SQLite stores NaN as NULL, which readers treat as NaN.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import Case, F, Max, Min, Q, Value, When
from django.utils import timezone

from webapp.metrics import points_pg, series_packs, series_rollups
from webapp.metrics.batch import (
    EventIn,
    IngestBatch,
    PointColumns,
    PointIn,
    StatusIn,
    first_events,
    first_of_each,
)
from webapp.metrics.models import MetricPoint, MetricSeries, TransferEvent
from webapp.runs import services
from webapp.runs.models import Run

SeriesKey = tuple[str, str]  # (policy, key)


@dataclass(frozen=True)
class StatusOutcome:
    """What became of a batch's ``status``: the run's state now, and whether it moved."""

    state: str
    applied: bool
    reason: str = ""

    def as_json(self) -> dict[str, Any]:
        reply: dict[str, Any] = {"state": self.state, "applied": self.applied}
        if self.reason:
            reply["reason"] = self.reason
        return reply


@dataclass(frozen=True)
class IngestResult:
    points_accepted: int = 0
    points_duplicates: int = 0
    events_accepted: int = 0
    events_duplicates: int = 0
    status: StatusOutcome | None = None

    def as_json(self) -> dict[str, Any]:
        """``{"accepted", "duplicates", "points": {...}, "events": {...}[, "status"]}``."""
        reply: dict[str, Any] = {
            "accepted": self.points_accepted + self.events_accepted,
            "duplicates": self.points_duplicates + self.events_duplicates,
            "points": {"accepted": self.points_accepted, "duplicates": self.points_duplicates},
            "events": {"accepted": self.events_accepted, "duplicates": self.events_duplicates},
        }
        if self.status is not None:
            reply["status"] = self.status.as_json()
        return reply


class RunGone(Exception):
    """The run was deleted after its token was checked, before its batch could be stored:
    nothing of the batch is (the reply a retry gets is a 401, the token being gone too)."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"run {run_id} was deleted; its batch is not stored")
        self.run_id = run_id


def metrics_ingest(*, run: Run, batch: IngestBatch) -> IngestResult:
    """Store ``batch`` for ``run`` (all or nothing) and apply its status report;
    :class:`RunGone` if the run was deleted meanwhile."""
    with transaction.atomic():
        _run_lock(run.pk)
        points = first_of_each(batch.points)
        events = first_events(batch.events)
        points_new = 0
        if points:
            # New points end the run's packed copies (a comparison's read cache), in this
            # transaction; the shared lock keeps a pack being built meanwhile from
            # missing them (webapp.metrics.series_packs).
            series_packs.ingest_lock(run.pk)
            points_new, lows = _points_store(run.pk, points)
            if points_new:
                series_packs.packs_drop(run.pk)
                # a late point makes the rollup blocks holding its step stale
                series_rollups.rollups_invalidate(lows)
        events_new = _events_store(run.pk, events) if events else 0
        step = batch.max_step
        if step is not None:
            _last_step_raise(run, step)
        outcome = _status_apply(run, batch.status) if batch.status is not None else None
    return IngestResult(
        points_accepted=points_new,
        points_duplicates=len(batch.points) - points_new,
        events_accepted=events_new,
        events_duplicates=len(batch.events) - events_new,
        status=outcome,
    )


# --------------------------------------------------------------------------- run facts


def _run_lock(run_id: int) -> None:
    """Hold the run's row ``FOR KEY SHARE`` until the transaction ends, or :class:`RunGone`.

    The points have no foreign key in the database (checking it at commit was the largest
    part of a 10,000-point batch, issue 35), so nothing in PostgreSQL stops a delete of
    the run from committing between this batch's look at its series and its points'
    commit, which would leave the points orphaned. This lock is what stops it: a delete
    of the run takes the row ``FOR UPDATE`` before it collects what to delete
    (:mod:`webapp.metrics.deletion`), so it waits for this batch and then deletes its
    points too, or it came first and this batch finds no row and stores nothing.

    The run's row rather than the batch's series rows: one row however many series the
    batch has (a row lock writes the row's header), and it covers the series the batch
    creates and its events too. ``KEY SHARE`` conflicts only with a delete (or a key
    change): the ingest's own ``UPDATE`` of the run, other batches, the state machine
    and the pack and rollup sweeps never wait on it. Elsewhere (SQLite, the demo: one
    writer at a time) an existence check is enough.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {_table(Run)} WHERE id = %s FOR KEY SHARE", [run_id])
            found = cursor.fetchone() is not None
    else:
        found = Run.objects.filter(pk=run_id).exists()
    if not found:
        raise RunGone(run_id)


FIRST_TRAINED_STEP = 1
"""Step 0 is the evaluation of the untrained models (see webapp.runs.progress)."""


def _last_step_raise(run: Run, step: int) -> None:
    """``run.last_step = max(run.last_step, step)``, race-free (a conditional UPDATE).

    The same UPDATE sets the run's pace mark (``pace_step``, ``pace_at``) at the first
    trained step of each job (none yet, or one set before the job's ``started_at``): the
    list pages' ETA counts from it, so a job's start-up does not slow its step rate.
    """
    stale = Q(last_step__isnull=True) | Q(last_step__lt=step)
    facts: dict[str, Any] = {"last_step": step}
    if step >= FIRST_TRAINED_STEP:
        new_job = Q(pace_at__isnull=True) | Q(pace_at__lt=F("started_at"))
        facts["pace_step"] = Case(When(new_job, then=Value(step)), default=F("pace_step"))
        facts["pace_at"] = Case(When(new_job, then=Value(timezone.now())), default=F("pace_at"))
    if Run.objects.filter(stale, pk=run.pk).update(**facts):
        run.last_step = step


def _status_apply(run: Run, status: StatusIn) -> StatusOutcome:
    """Move the run to ``status.state`` where the state machine allows it.

    A run that a backend runs (it has a job id) only goes to ``completing`` on the trainer's
    "completed" or "failed": the status sync finishes it with the job's exit code.
    A move it forbids (a cancelled or completed run getting a late "running") is not an
    error: the batch is accepted and the reply says why the state stayed. The message is
    stored too, unless the run has already finished (a cancelled run is never resurrected,
    and its last words stay).
    """
    run.refresh_from_db(fields=["state", "slurm_job_id"])
    facts: dict[str, Any] = {"status_message": status.message}
    if status.state == Run.State.FAILED and status.message:
        facts["failure_reason"] = status.message
    target = status.state
    if run.slurm_job_id and target in (Run.State.COMPLETED, Run.State.FAILED):
        # The trainer is done, its job is not yet: the status sync records the job's end
        # (exit code, node) and makes the run completed or failed.
        target = Run.State.COMPLETING
    try:
        moved = services.run_transition(run, target, **facts)
    except services.TransitionError as exc:
        if not run.is_terminal:
            Run.objects.filter(pk=run.pk).update(status_message=status.message)
            run.status_message = status.message
        return StatusOutcome(state=run.state, applied=False, reason=str(exc))
    if not moved:
        run.refresh_from_db(fields=["state"])
        return StatusOutcome(run.state, applied=False, reason="the run's state changed meanwhile")
    return StatusOutcome(state=run.state, applied=True)


# --------------------------------------------------------------------------- points


def _points_store(run_id: int, points: Sequence[PointIn]) -> tuple[int, dict[int, int]]:
    """Insert ``points`` (no repeated keys): the number that were new, and per series that
    got new points the lowest step among them (what the rollups need to know; none on the
    portable path, which has no rollups)."""
    columns = PointColumns.of(points)
    pairs = sorted(columns.pairs)
    if connection.vendor == "postgresql":
        ids = _series_ids_postgres(run_id, pairs)
        new, lows = _points_insert_postgres(columns, ids)
        if new:
            _step_ranges_widen(columns, ids)
        return new, lows
    ids = _series_ids_portable(run_id, pairs)
    new = _points_insert_portable(points, ids)
    if new:
        _step_ranges_widen(columns, ids)
    return new, {}


# Each series' lowest and highest step (MetricSeries.first_step / last_step) widened to
# the batch's, on the rows whose range the batch extends (a replay writes nothing). The
# rows are locked in id order first, so two batches of one run never deadlock on them.
# A NULL range (points written other than by ingestion) is read from the points, which
# hold this batch's already: a one-time filter, so a known range costs no probe.
_STEP_RANGE_SQL = """
    WITH widened AS (
        SELECT s.id, b.lo, b.hi FROM {series} s
        JOIN unnest(%s::bigint[], %s::int[], %s::int[]) AS b(id, lo, hi) ON s.id = b.id
        WHERE s.first_step IS NULL OR s.last_step IS NULL
              OR s.first_step > b.lo OR s.last_step < b.hi
        ORDER BY s.id FOR NO KEY UPDATE OF s
    )
    UPDATE {series} s SET
        first_step = least(coalesce(s.first_step, (
            SELECT min(p.step) FROM {points} p WHERE p.series_id = s.id)), w.lo),
        last_step = greatest(coalesce(s.last_step, (
            SELECT max(p.step) FROM {points} p WHERE p.series_id = s.id)), w.hi)
    FROM widened w WHERE s.id = w.id
"""


def _step_ranges_widen(columns: PointColumns, ids: dict[SeriesKey, int]) -> None:
    """Keep each series' ``first_step``/``last_step`` (what a comparison's step range
    reads instead of probing the points) equal to its points' lowest and highest step,
    in the transaction that stored ``columns``: one UPDATE on PostgreSQL. The batch's
    duplicates count too; they are stored already, so within the range."""
    n = len(columns.pairs)
    lows = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    highs = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lows, columns.series, columns.steps)
    np.maximum.at(highs, columns.series, columns.steps)
    spans = {
        ids[pair]: (lo, hi)
        for pair, lo, hi in zip(columns.pairs, lows.tolist(), highs.tolist(), strict=True)
        if lo <= hi  # a pair with points
    }
    if connection.vendor == "postgresql":
        series = sorted(spans)
        sql = _STEP_RANGE_SQL.format(series=_table(MetricSeries), points=_table(MetricPoint))
        with connection.cursor() as cursor:
            cursor.execute(
                sql, [series, [spans[pk][0] for pk in series], [spans[pk][1] for pk in series]]
            )
        return
    _step_ranges_widen_portable(spans)


def _step_ranges_widen_portable(spans: dict[int, tuple[int, int]]) -> None:
    """:func:`_step_ranges_widen` elsewhere (SQLite, the demo): read, widen, write back
    the rows that change. Race-free there: the points just written hold the database's
    write lock until the transaction ends."""
    rows = MetricSeries.objects.filter(pk__in=spans).only("pk", "first_step", "last_step")
    unknown = [row.pk for row in rows if row.first_step is None or row.last_step is None]
    stored = {
        found["series_id"]: (found["lo"], found["hi"])
        for found in MetricPoint.objects.filter(series_id__in=unknown)
        .values("series_id")
        .annotate(lo=Min("step"), hi=Max("step"))
    }
    changed = []
    for row in rows:
        lo, hi = spans[row.pk]
        first, last = row.first_step, row.last_step
        if row.pk in unknown:
            first, last = stored.get(row.pk, (lo, hi))
        first, last = min(first, lo), max(last, hi)
        if (first, last) != (row.first_step, row.last_step):
            row.first_step, row.last_step = first, last
            changed.append(row)
    MetricSeries.objects.bulk_update(changed, ["first_step", "last_step"])


def _table(model: type[Any]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _series_select_postgres(run_id: int, pairs: Sequence[SeriesKey]) -> dict[SeriesKey, int]:
    sql = (
        f"SELECT s.id, s.policy, s.key FROM {_table(MetricSeries)} s "
        "JOIN unnest(%s::text[], %s::text[]) AS t(policy, key) "
        "ON s.policy = t.policy AND s.key = t.key WHERE s.run_id = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [[p for p, _ in pairs], [k for _, k in pairs], run_id])
        return {(policy, key): pk for pk, policy, key in cursor.fetchall()}


def _series_ids_postgres(run_id: int, pairs: Sequence[SeriesKey]) -> dict[SeriesKey, int]:
    """Ids of the series (run, policy, key) for ``pairs``, creating the missing ones."""
    ids = _series_select_postgres(run_id, pairs)
    missing = [pair for pair in pairs if pair not in ids]
    if missing:
        sql = (
            f"INSERT INTO {_table(MetricSeries)} (run_id, policy, key) "
            "SELECT %s, t.policy, t.key FROM unnest(%s::text[], %s::text[]) AS t(policy, key) "
            "ON CONFLICT DO NOTHING"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [run_id, [p for p, _ in missing], [k for _, k in missing]])
        ids.update(_series_select_postgres(run_id, missing))
    return ids


def _bulk_execute(sql: str, params: Sequence[Any]) -> int:
    """Run one statement with server-side binding; the number of rows it touched.

    Django binds parameters client-side (a 10,000-element array becomes a long SQL
    literal); a plain psycopg cursor on the same connection, in the same transaction,
    sends the arrays in binary instead, which is several times faster.
    """
    import psycopg

    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(sql, params, binary=True)
        return cursor.rowcount


def _points_insert_postgres(
    columns: PointColumns, ids: dict[SeriesKey, int]
) -> tuple[int, dict[int, int]]:
    series_ids = [ids[pair] for pair in columns.pairs]
    return points_pg.points_insert(_table(MetricPoint), columns, series_ids)


def _series_ids_portable(run_id: int, pairs: Sequence[SeriesKey]) -> dict[SeriesKey, int]:
    MetricSeries.objects.bulk_create(
        [MetricSeries(run_id=run_id, policy=policy, key=key) for policy, key in pairs],
        ignore_conflicts=True,
    )
    wanted = set(pairs)
    rows = MetricSeries.objects.filter(
        run_id=run_id, policy__in={p for p, _ in pairs}, key__in={k for _, k in pairs}
    ).values_list("id", "policy", "key")
    return {(policy, key): pk for pk, policy, key in rows if (policy, key) in wanted}


def _points_insert_portable(points: Sequence[PointIn], ids: dict[SeriesKey, int]) -> int:
    series = MetricPoint.objects.filter(series_id__in=set(ids.values()))
    before = series.count()
    MetricPoint.objects.bulk_create(
        [
            MetricPoint(
                series_id=ids[(p.policy, p.key)], step=p.step, value=p.value, wall_time=p.wall_time
            )
            for p in points
        ],
        ignore_conflicts=True,
        batch_size=500,
    )
    return series.count() - before


# --------------------------------------------------------------------------- events

_EVENT_COLUMNS = ("step", "source", "target", "kind", "prompt_id", "count", "weight", "samples")


def _samples_json(samples: list[dict[str, Any]] | None) -> str | None:
    return None if samples is None else json.dumps(samples, ensure_ascii=False)


def _events_store(run_id: int, events: Sequence[EventIn]) -> int:
    """Insert ``events`` (no repeated keys); the number that were new."""
    if connection.vendor != "postgresql":
        return _events_insert_portable(run_id, events)
    # EventIn's fields in _EVENT_COLUMNS' order, the samples as JSON text
    rows = sorted((*e[:7], _samples_json(e.samples)) for e in events)
    columns = [list(column) for column in zip(*rows, strict=True)]
    sql = (
        f"INSERT INTO {_table(TransferEvent)} (run_id, {', '.join(_EVENT_COLUMNS)}) "
        "SELECT %s, u.step, u.source, u.target, u.kind, u.prompt_id, u.count, u.weight, "
        "u.samples::jsonb FROM unnest(%s::int[], %s::text[], %s::text[], %s::text[], "
        "%s::text[], %s::int[], %s::float8[], %s::text[]) "
        "AS u(step, source, target, kind, prompt_id, count, weight, samples) "
        "ON CONFLICT DO NOTHING"
    )
    return _bulk_execute(sql, [run_id, *columns])


def _events_insert_portable(run_id: int, events: Sequence[EventIn]) -> int:
    existing = TransferEvent.objects.filter(run_id=run_id)
    before = existing.count()
    TransferEvent.objects.bulk_create(
        [
            TransferEvent(run_id=run_id, **{name: getattr(e, name) for name in _EVENT_COLUMNS})
            for e in events
        ],
        ignore_conflicts=True,
        batch_size=500,
    )
    return existing.count() - before
