"""Rollups: per-block summaries of every series, so that reads touch a few thousand rows
whatever a series' length (issue 23).

A :class:`~webapp.metrics.models.SeriesRollup` row summarises one block of steps at
one level: 64 steps at level 0, 4x as many at each level up (``ROLLUP_SIZES`` in
:mod:`webapp.metrics.downsample`). It holds the block's point count, its lowest and highest
(value, step) and the sum of its values; the level-0 rows also hold the block's points
as packed columns, like a :class:`~webapp.metrics.models.SeriesPack`. So

- a downsampled read of a long series (the run page's charts, ``/series``) reads the
  blocks whose size fits its bucket width: a 1,000,000-point series in 999 buckets is
  about 3,900 rows of 256 steps instead of a million points
  (:func:`minmax_block_rows`, used by :mod:`webapp.metrics.selectors`);
- a comparison of runs that are not packed yet reads the level-0 blocks' packed points
  (:func:`chunk_columns`), at the speed of a pack, and only the steps after the last
  complete block from the points.

The raw points stay the source of truth while a run may still change; retention may drop
those of an old finished run once its packs and rollups hold them
(:mod:`webapp.metrics.retention`). Each series has a watermark,
``MetricSeries.rolled_through``: every block that ends at or before it is current; no
reader looks past it, and the steps after it are read from the points.

- **The sweep** (:func:`rollups_sweep`, each tick of beat's ``series_pack`` task, before
  the packing): for each run not packed yet (running, or finished and waiting for its
  packs, or given late points), it rolls every series up to its last step: level 0
  from the points (the 64-step block holding the last step with the points it has so
  far; the next sweep builds it again whole), each level above from the complete
  blocks of the one below, upserting stale rows, then raises the watermark to that
  step. Min/max reads use complete blocks only; comparisons read the partial one too.
- **Ingestion** (:func:`rollups_invalidate`): a new point at or below a series'
  watermark (a late point) lowers the watermark to the end of the 64-step block before
  it, in the ingestion's transaction; every block containing that step is then stale and
  the next sweep rebuilds from there. A replayed point is a duplicate, not new, and
  changes nothing.
- **The race** between the two is settled by the run's pack lock
  (:mod:`webapp.metrics.series_packs`): ingestion holds it shared, the sweep
  exclusively, trying without waiting (a run whose ingestion is in flight is left for the
  next tick), so the sweep never raises a watermark over a point it did not see.

PostgreSQL only, as packs (:func:`rollups_enabled`); the demo's SQLite reads the points.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from django.db import connection, transaction

from webapp.metrics import points_pg, series_packs
from webapp.metrics.downsample import ROLLUP_SIZES, BlockRun, StepRange
from webapp.metrics.models import MetricPoint, MetricSeries, SeriesRollup
from webapp.runs.models import Run

BASE = ROLLUP_SIZES[0]
"""Steps per level-0 block (64)."""
FANOUT = ROLLUP_SIZES[1] // ROLLUP_SIZES[0]
"""Blocks of one level per block of the next (4)."""


def rollups_enabled() -> bool:
    """Where packs are (PostgreSQL): the rollups share their lock and their sweep."""
    return series_packs.packs_enabled()


def _table(model: type) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def watermark_after(step: int) -> int:
    """The watermark that leaves every block containing ``step`` stale: the end of the
    last 64-step block before it."""
    return (step // BASE) * BASE - 1


def watermark_for(last_step: int) -> int:
    """The watermark the sweep gives a series whose highest step is ``last_step``: that
    step. The 64-step block holding it is stored with the points it has so far (the
    packed points that comparisons read); the coarser min/max reads use only complete
    blocks (:func:`webapp.metrics.downsample.cover`), and the next sweep rebuilds the
    partial block whole."""
    return last_step


# --------------------------------------------------------------------------- ingestion


_INVALIDATE_SQL = """
    UPDATE {series} s SET rolled_through = (n.low / {base}) * {base} - 1
    FROM unnest(%s::bigint[], %s::int[]) AS n(id, low)
    WHERE s.id = n.id AND s.rolled_through >= n.low
"""


def rollups_invalidate(lows: Mapping[int, int]) -> int:
    """Lower the watermark of each series in ``lows`` (series id -> the lowest step of
    its newly stored points) that got a point at or below it; in the caller's
    transaction, which holds the run's pack lock. The number of series lowered: 0 for
    points that only extend their series, the common case (one UPDATE matching nothing)."""
    if not rollups_enabled() or not lows:
        return 0
    ids = sorted(lows)
    with connection.cursor() as cursor:
        cursor.execute(
            _INVALIDATE_SQL.format(series=_table(MetricSeries), base=BASE),
            [ids, [lows[pk] for pk in ids]],
        )
        return cursor.rowcount


# --------------------------------------------------------------------------- the sweep


_TARGETS_SQL = """
    SELECT s.id, s.rolled_through, hi.step
    FROM {series} s
    CROSS JOIN LATERAL (
        SELECT step FROM {points} WHERE series_id = s.id ORDER BY step DESC LIMIT 1
    ) AS hi
    WHERE s.run_id = %s
"""
_LEVEL0_SQL = """
    INSERT INTO {rollups} AS r (series_id, level, block, n_points, low_value, low_step,
        high_value, high_step, value_sum, steps, "values")
    SELECT series_id, 0, block, n, low[1], low[2]::int, high[1], high[2]::int, total,
           steps, vals
    FROM (
        SELECT p.series_id, p.step / {base} AS block, count(*) AS n,
               min(ARRAY[coalesce(p.value, 'NaN'), p.step::float8]) AS low,
               max(ARRAY[coalesce(p.value, 'NaN'), p.step::float8]) AS high,
               sum(coalesce(p.value, 'NaN')) AS total,
               string_agg(int4send(p.step), '' ORDER BY p.step) AS steps,
               string_agg(float8send(coalesce(p.value, 'NaN')), '' ORDER BY p.step) AS vals
        FROM {points} p
        JOIN unnest(%(ids)s::bigint[], %(froms)s::int[], %(tos)s::int[]) AS t(id, lo, hi)
          ON p.series_id = t.id AND p.step BETWEEN t.lo AND t.hi
        GROUP BY p.series_id, p.step / {base}
    ) AS g
    ON CONFLICT (series_id, level, block) DO UPDATE SET
        n_points = excluded.n_points, low_value = excluded.low_value,
        low_step = excluded.low_step, high_value = excluded.high_value,
        high_step = excluded.high_step, value_sum = excluded.value_sum,
        steps = excluded.steps, "values" = excluded."values"
"""
_LEVEL_UP_SQL = """
    INSERT INTO {rollups} AS r (series_id, level, block, n_points, low_value, low_step,
        high_value, high_step, value_sum)
    SELECT series_id, %(level)s, block, n, low[1], low[2]::int, high[1], high[2]::int, total
    FROM (
        SELECT c.series_id, c.block / {fanout} AS block, sum(c.n_points) AS n,
               min(ARRAY[c.low_value, c.low_step::float8]) AS low,
               max(ARRAY[c.high_value, c.high_step::float8]) AS high,
               sum(c.value_sum) AS total
        FROM {rollups} c
        JOIN unnest(%(ids)s::bigint[], %(froms)s::int[], %(tos)s::int[]) AS t(id, lo, hi)
          ON c.series_id = t.id AND c.level = %(level)s - 1 AND c.block BETWEEN t.lo AND t.hi
        GROUP BY c.series_id, c.block / {fanout}
    ) AS g
    ON CONFLICT (series_id, level, block) DO UPDATE SET
        n_points = excluded.n_points, low_value = excluded.low_value,
        low_step = excluded.low_step, high_value = excluded.high_value,
        high_step = excluded.high_step, value_sum = excluded.value_sum
"""
_RAISE_SQL = """
    UPDATE {series} s SET rolled_through = t.mark
    FROM unnest(%s::bigint[], %s::int[]) AS t(id, mark) WHERE s.id = t.id
"""


@dataclass(frozen=True)
class Advance:
    """One series' watermark moving from ``old`` to ``new`` (both block ends)."""

    series_id: int
    old: int
    new: int

    def blocks(self, level: int) -> tuple[int, int]:
        """The blocks of ``level`` that end in (old, new]: (first, last); first > last
        when none does."""
        size = ROLLUP_SIZES[level]
        return (self.old + 1) // size, (self.new + 1) // size - 1


def rollups_sweep(max_runs: int) -> tuple[int, int]:
    """Roll up the series of up to ``max_runs`` runs that are not packed (running ones,
    finished ones waiting for their packs, those given late points), newest first as
    the packing does; (runs rolled, block rows written). A run whose ingestion is in
    flight is left for the next sweep."""
    if not rollups_enabled() or max_runs <= 0:
        return 0, 0
    run_ids = list(
        Run.objects.filter(series_packed=False, last_step__isnull=False)
        .order_by("-pk")
        .values_list("pk", flat=True)[:max_runs]
    )
    runs = blocks = 0
    for run_id in run_ids:
        written = run_rollup(run_id)
        if written is not None:
            runs, blocks = runs + 1, blocks + written
    return runs, blocks


def run_rollup(run_id: int) -> int | None:
    """Roll up every series of run ``run_id`` to its last step, in one
    transaction holding the run's pack lock; the number of block rows written, or None
    when the lock is taken (an ingestion in flight)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_xact_lock(%s, %s)", [series_packs.PACK_LOCK_CLASS, run_id]
        )
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(series_packs.SERIES_SCAN_SETTINGS_SQL)
        cursor.execute(
            _TARGETS_SQL.format(series=_table(MetricSeries), points=_table(MetricPoint)),
            [run_id],
        )
        advances = [
            Advance(pk, old, watermark_for(last))
            for pk, old, last in cursor.fetchall()
            if watermark_for(last) > old
        ]
        if not advances:
            return 0
        return _advance(cursor, advances)


def _advance(cursor: object, advances: Sequence[Advance]) -> int:
    rollups, points = _table(SeriesRollup), _table(MetricPoint)
    written = 0
    ids = [a.series_id for a in advances]
    params = {
        "ids": ids,
        # from the start of the block holding old + 1: a block left partial by the last
        # sweep is built again whole
        "froms": [(a.old + 1) // BASE * BASE for a in advances],
        "tos": [a.new for a in advances],
    }
    cursor.execute(_LEVEL0_SQL.format(rollups=rollups, points=points, base=BASE), params)
    written += cursor.rowcount
    for level in range(1, len(ROLLUP_SIZES)):
        spans = [(a.series_id, *a.blocks(level)) for a in advances]
        spans = [(pk, first, last) for pk, first, last in spans if first <= last]
        if not spans:
            break  # a level with no complete new block has none above it either
        params = {
            "level": level,
            "ids": [pk for pk, _, _ in spans],
            "froms": [first * FANOUT for _, first, _ in spans],
            "tos": [last * FANOUT + FANOUT - 1 for _, _, last in spans],
        }
        cursor.execute(_LEVEL_UP_SQL.format(rollups=rollups, fanout=FANOUT), params)
        written += cursor.rowcount
    cursor.execute(_RAISE_SQL.format(series=_table(MetricSeries)), [ids, [a.new for a in advances]])
    return written


# --------------------------------------------------------------------------- readers


MinMaxRow = tuple[int, int, float, int, float, int]
"""(first step of the block or bucket, points, lowest value, its step, highest value, its
step)."""

_BLOCKS_SQL = """
    SELECT r.block * %(size)s::bigint, r.n_points, r.low_value, r.low_step, r.high_value,
           r.high_step, r.level
    FROM {rollups} r
    JOIN unnest(%(levels)s::int[], %(firsts)s::int[], %(lasts)s::int[]) AS t(level, k1, k2)
      ON r.series_id = %(series)s AND r.level = t.level AND r.block BETWEEN t.k1 AND t.k2
"""
_RAW_BUCKETS_SQL = """
    SELECT min(p.step), count(*), min(ARRAY[p.value, p.step::float8]),
           max(ARRAY[p.value, p.step::float8])
    FROM {points} p
    JOIN unnest(%(froms)s::int[], %(tos)s::int[]) AS t(lo, hi)
      ON p.series_id = %(series)s AND p.step BETWEEN t.lo AND t.hi
    GROUP BY p.step / %(width)s
"""


def minmax_block_rows(
    cursor: object, series_id: int, blocks: Sequence[BlockRun], raw: Sequence[StepRange], width: int
) -> list[MinMaxRow]:
    """The min/max summaries that make up a range planned by
    :func:`webapp.metrics.downsample.cover`: one row per rollup block, and one per bucket of
    ``width`` steps of the raw ranges. Each row lies within one bucket of ``width``
    (a multiple of every block size used)."""
    found: list[MinMaxRow] = []
    if blocks:
        # one statement per size: the block's first step is block * size
        by_level: dict[int, list[BlockRun]] = {}
        for run in blocks:
            by_level.setdefault(run[0], []).append(run)
        for level, runs in by_level.items():
            cursor.execute(
                _BLOCKS_SQL.format(rollups=_table(SeriesRollup)),
                {
                    "size": ROLLUP_SIZES[level],
                    "series": series_id,
                    "levels": [r[0] for r in runs],
                    "firsts": [r[1] for r in runs],
                    "lasts": [r[2] for r in runs],
                },
            )
            found.extend(row[:6] for row in cursor.fetchall())
    if raw:
        cursor.execute(
            _RAW_BUCKETS_SQL.format(points=_table(MetricPoint)),
            {
                "series": series_id,
                "froms": [lo for lo, _ in raw],
                "tos": [hi for _, hi in raw],
                "width": width,
            },
        )
        for first, count, low, high in cursor.fetchall():
            found.append((first, count, low[0], int(low[1]), high[0], int(high[1])))
    return found


_WATERMARKS_SQL = "SELECT id, rolled_through FROM {series} WHERE id = ANY(%s::bigint[])"


def watermarks(series_ids: Sequence[int]) -> dict[int, int]:
    """Each series' ``rolled_through`` (-1 without rollups)."""
    if not rollups_enabled() or not series_ids:
        return {pk: -1 for pk in series_ids}
    with connection.cursor() as cursor:
        cursor.execute(_WATERMARKS_SQL.format(series=_table(MetricSeries)), [list(series_ids)])
        return dict(cursor.fetchall())


# One row per series: the points of its head span (before its first whole block in the
# range), its level-0 blocks' packed points, the points of its tail span (after the
# watermark), each part one index range scan inside a LATERAL subquery, so the
# aggregates need no hash of the blocks (a join over all the series sorted 46,000 blocks
# of 800 bytes first: 3x slower). The points come in no particular order (bucketing
# needs none); the two aggregates of a part see its rows in the same order, so steps and
# values line up (an ORDER BY would sort every series' blocks: 10% of the read). An
# empty span (lo > hi) is a one-time filter: no index probe (another 20%, lab scale).
_CHUNKS_SQL = """
    SELECT t.id,
           coalesce(h.steps, '') || coalesce(c.steps, '') || coalesce(r.steps, ''),
           coalesce(h.vals, '') || coalesce(c.vals, '') || coalesce(r.vals, '')
    FROM unnest(%(ids)s::bigint[], %(head_los)s::int[], %(head_his)s::int[],
                %(firsts)s::int[], %(lasts)s::int[], %(tail_los)s::int[], %(tail_his)s::int[])
         AS t(id, head_lo, head_hi, first, last, tail_lo, tail_hi)
    CROSS JOIN LATERAL ({raw} AND t.head_lo <= t.head_hi
                        AND p.step BETWEEN t.head_lo AND t.head_hi) AS h
    CROSS JOIN LATERAL (
        SELECT string_agg(b.steps, '') AS steps, string_agg(b."values", '') AS vals
        FROM {rollups} b
        WHERE t.first <= t.last
              AND b.series_id = t.id AND b.level = 0 AND b.block BETWEEN t.first AND t.last
    ) AS c
    CROSS JOIN LATERAL ({raw} AND t.tail_lo <= t.tail_hi
                        AND p.step BETWEEN t.tail_lo AND t.tail_hi) AS r
    WHERE coalesce(h.steps, c.steps, r.steps) IS NOT NULL
"""
_RAW_SPAN_SQL = """
    SELECT string_agg(int4send(p.step), '') AS steps,
           string_agg(float8send(coalesce(p.value, 'NaN')), '') AS vals
    FROM {points} p
    WHERE p.series_id = t.id
"""
_EMPTY = (1, 0)
"""A span of no steps (or blocks)."""


def chunk_spans(lo: int, hi: int, mark: int) -> tuple[tuple[int, int], ...]:
    """For a series with watermark ``mark`` (-1: no rollups), the parts of the steps
    [lo, hi] :func:`chunk_columns` reads: (the head's steps, the level-0 blocks, the
    tail's steps), each an inclusive (first, last) range, (1, 0) when empty. The blocks
    are those that start in the range, up to the one holding its last rolled step (a
    block holds its points up to the watermark, and maybe a few after ``hi``); the head
    is the steps before the first of them, the tail the steps after the watermark."""
    first = -(-lo // BASE)  # the first block that starts in the range
    last = min(hi, mark) // BASE  # the block holding the range's last rolled step
    if mark < 0 or first > last:
        return (lo, hi), _EMPTY, _EMPTY
    head = (lo, first * BASE - 1) if lo < first * BASE else _EMPTY
    tail = (mark + 1, hi) if mark < hi else _EMPTY
    return head, (first, last), tail


def chunk_columns(
    series_ids: Sequence[int], lo: int, hi: int
) -> Iterator[tuple[int, bytes, bytes]]:
    """Every point with a step in [lo, hi] of each of ``series_ids`` that has one, as
    packed columns (big-endian int4 steps, float8 values, aligned, in no particular
    order), one row per series, and maybe a few after ``hi`` (the rest of its last
    block: the caller filters): the level-0 blocks of :func:`chunk_spans` from their
    packed points, the rest from the points table. Each row as soon as PostgreSQL sends
    it (:func:`series_packs.binary_stream`); on the caller's transaction."""
    if not series_ids:
        return
    marks = watermarks(series_ids)
    spans = [chunk_spans(lo, hi, marks.get(pk, -1)) for pk in series_ids]
    heads, blocks, tails = zip(*spans, strict=True)
    ints = points_pg.int_array
    params = {
        "ids": points_pg.id_array(series_ids),
        "head_los": ints([head[0] for head in heads]),
        "head_his": ints([head[1] for head in heads]),
        "firsts": ints([block[0] for block in blocks]),
        "lasts": ints([block[1] for block in blocks]),
        "tail_los": ints([tail[0] for tail in tails]),
        "tail_his": ints([tail[1] for tail in tails]),
    }
    raw = _RAW_SPAN_SQL.format(points=_table(MetricPoint))
    sql = _CHUNKS_SQL.format(rollups=_table(SeriesRollup), raw=raw)
    for pk, steps, values in series_packs.binary_stream(sql, params):
        yield pk, bytes(steps), bytes(values)
