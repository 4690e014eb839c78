"""Series rollups (issue 23) on PostgreSQL: reads from rollups equal reads from the raw
points, through real ingestion, the sweep, late points and replays."""

from __future__ import annotations

import math
import random

import numpy as np
import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Count
from django.test import Client

from tests.webapp.metrics.test_api_support import fill_series, make_run, point, post_batch
from tests.webapp.metrics.test_ingest_without_fk import Worker
from tests.webapp.metrics.test_series_downsample import same
from webapp.compare.selectors import buckets_portable, buckets_postgres
from webapp.metrics import selectors, series_packs, series_rollups
from webapp.metrics.downsample import Point, bucket_width, cover, minmax_buckets, rollup_size_for
from webapp.metrics.models import MetricPoint, MetricSeries, SeriesPack, SeriesRollup
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

NAN, INF = math.nan, math.inf
KEY = "train/reward_mean"


def wire(value: float) -> float | str:
    """A value as the ingestion API takes it (non-finite ones as strings)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def ship(client: Client, run: Run, token: str, points: list[Point], key: str = KEY) -> dict:
    """POST ``points`` through the real ingestion API, in batches of 10,000."""
    reply: dict = {"accepted": 0, "duplicates": 0}
    for at in range(0, len(points), 10_000):
        body = {"points": [point(s, wire(v), key=key) for s, v in points[at : at + 10_000]]}
        response = post_batch(client, run, token, body)
        assert response.status_code == 200, response.content
        for name in ("accepted", "duplicates"):
            reply[name] += response.json()[name]
    return reply


def stored(series_id: int, after: int = -1) -> list[Point]:
    """The raw points of a series: the source of truth."""
    rows = (
        MetricPoint.objects.filter(series_id=series_id, step__gt=after)
        .order_by("step")
        .values_list("step", "value")
    )
    return [(step, selectors.as_float(value)) for step, value in rows]


def read(series_id: int, max_points: int, after: int = -1) -> selectors.SeriesPoints:
    return selectors.series_points([series_id], max_points=max_points, after_step=after)[series_id]


def assert_reads_match_the_points(series_id: int) -> None:
    for max_points, after in [(2000, -1), (200, -1), (64, -1), (50, 5000), (10, 130), (4, -1)]:
        truth = stored(series_id, after)
        got = read(series_id, max_points, after)
        assert got.n_points == len(truth), (max_points, after)
        assert same(got.points, minmax_buckets(truth, max_points)), (max_points, after)


def noisy(steps: list[int], seed: int) -> list[Point]:
    """Values with NaN, infinities and ties at a few steps."""
    rng = random.Random(seed)
    special = [NAN, INF, -INF, 0.0, 0.0]
    return [(s, rng.choice(special) if rng.random() < 0.02 else rng.gauss(0, 1)) for s in steps]


def series_id_of(run: Run, key: str = KEY) -> int:
    return MetricSeries.objects.get(run=run, policy="a", key=key).pk


def rollup_rows(series_id: int) -> int:
    return SeriesRollup.objects.filter(series_id=series_id).count()


def watermark(series_id: int) -> int:
    return MetricSeries.objects.get(pk=series_id).rolled_through


# --------------------------------------------------------------------------- the sweep


def test_the_sweep_rolls_up_complete_blocks_and_reads_match_the_points(
    client: Client, run: Run, token: str
) -> None:
    steps = sorted(random.Random(1).sample(range(60_000), 20_000))  # gaps, uneven blocks
    ship(client, run, token, noisy(steps, seed=1))
    series_id = series_id_of(run)
    assert watermark(series_id) == -1 and rollup_rows(series_id) == 0
    assert_reads_match_the_points(series_id)  # before any rollup: from the points

    assert series_rollups.run_rollup(run.pk) > 0
    mark = watermark(series_id)
    assert mark == steps[-1]  # its 64-step block stored with the points it has so far
    by_level = dict(
        SeriesRollup.objects.filter(series_id=series_id)
        .values_list("level")
        .annotate(n=Count("block"))
    )
    assert set(by_level) == {0, 1, 2, 3, 4}  # 64 .. 16,384 steps: 65,536 > 60,000
    # every level's blocks hold every rolled point once
    for level in by_level:
        total = sum(
            SeriesRollup.objects.filter(series_id=series_id, level=level).values_list(
                "n_points", flat=True
            )
        )
        size = 64 * 4**level
        complete = (mark + 1) // size * size  # above level 0, whole blocks only
        assert total == (len(steps) if level == 0 else sum(1 for s in steps if s < complete))
    assert_reads_match_the_points(series_id)
    assert series_rollups.run_rollup(run.pk) == 0  # nothing new: nothing written


def test_a_long_read_touches_blocks_not_points(run: Run) -> None:
    series_id = fill_series(run, 300_000, spike=123_456)
    Run.objects.filter(pk=run.pk).update(last_step=299_999)
    series_rollups.run_rollup(run.pk)
    width = bucket_width(0, 299_999, 2000)
    blocks, raw = cover(0, 299_999, watermark(series_id), rollup_size_for(width))
    with connection.cursor() as cursor:
        rows = series_rollups.minmax_block_rows(cursor, series_id, blocks, raw, width)
    assert len(rows) < 3000  # 300,000 points in 256-step blocks, plus the raw tail
    assert sum(row[1] for row in rows) == 300_000
    got = read(series_id, 2000)
    assert (123_456, 1000.0) in got.points and (100_000, -1000.0) in got.points
    assert same(got.points, minmax_buckets(stored(series_id), 2000))


def test_late_points_make_their_blocks_stale_until_the_next_sweep(
    client: Client, run: Run, token: str
) -> None:
    ship(client, run, token, [(s, math.sin(s)) for s in range(0, 40_000, 2)])  # even steps
    series_id = series_id_of(run)
    series_rollups.run_rollup(run.pk)
    assert watermark(series_id) == 39_998
    # late points: odd steps in the middle, a new global maximum and minimum among them
    late = [(s, 0.25) for s in range(10_001, 10_400, 2)] + [(20_001, 99.0), (30_001, -99.0)]
    reply = ship(client, run, token, late)
    assert reply["accepted"] == len(late)
    assert watermark(series_id) == 10_001 // 64 * 64 - 1  # before the earliest late point
    assert_reads_match_the_points(series_id)  # stale blocks are not read
    got = read(series_id, 2000)
    assert (20_001, 99.0) in got.points and (30_001, -99.0) in got.points

    series_rollups.run_rollup(run.pk)
    assert watermark(series_id) == 39_998
    assert_reads_match_the_points(series_id)


def test_a_replayed_batch_changes_no_rollup(client: Client, run: Run, token: str) -> None:
    points = noisy(list(range(30_000)), seed=3)
    ship(client, run, token, points)
    series_id = series_id_of(run)
    series_rollups.run_rollup(run.pk)
    mark, rows = watermark(series_id), rollup_rows(series_id)
    reply = ship(client, run, token, points[5_000:15_000])  # the shipper's replay
    assert reply == {"accepted": 0, "duplicates": 10_000}
    assert watermark(series_id) == mark and rollup_rows(series_id) == rows
    assert_reads_match_the_points(series_id)


def test_the_sweep_skips_a_run_whose_ingestion_is_in_flight(
    client: Client, run: Run, token: str
) -> None:
    ship(client, run, token, [(s, 1.0) for s in range(1_000)])
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"]
    ) as other:
        other.execute(
            "SELECT pg_advisory_lock_shared(%s, %s)", [series_packs.PACK_LOCK_CLASS, run.pk]
        )
        assert series_rollups.run_rollup(run.pk) is None
        other.execute("SELECT pg_advisory_unlock_all()")
    assert series_rollups.run_rollup(run.pk) > 0


def test_the_sweep_takes_running_and_unpacked_runs_only(
    client: Client, run: Run, token: str
) -> None:
    ship(client, run, token, [(s, 1.0) for s in range(1_000)])
    runs, blocks = series_rollups.rollups_sweep(10)
    assert runs == 1 and blocks == 16 + 3  # 16 blocks of 64 steps (one partial), 3 of 256
    Run.objects.filter(pk=run.pk).update(series_packed=True)
    ship(client, run, token, [(s, 1.0) for s in range(1_000, 2_000)])  # clears the mark
    assert Run.objects.get(pk=run.pk).series_packed is False
    runs, _ = series_rollups.rollups_sweep(10)
    assert runs == 1
    Run.objects.filter(pk=run.pk).update(series_packed=True)
    assert series_rollups.rollups_sweep(10) == (0, 0)


# --------------------------------------------------------------------------- comparisons


@pytest.mark.parametrize(
    ("lo", "hi", "mark", "spans"),
    [
        (0, 1_999, -1, ((0, 1_999), (1, 0), (1, 0))),  # no rollups: all from the points
        (0, 1_999, 1_983, ((1, 0), (0, 30), (1_984, 1_999))),  # the last 16 steps raw
        (0, 1_999, 1_999, ((1, 0), (0, 31), (1, 0))),  # rolled up to the end
        (37, 4_001, 9_999, ((37, 63), (1, 62), (1, 0))),  # a head before block 1
        (37, 100, 9_999, ((37, 63), (1, 1), (1, 0))),  # block 1 runs past hi
        (10, 20, 9_999, ((10, 20), (1, 0), (1, 0))),  # no block starts in the range
        (0, 500, 40, ((1, 0), (0, 0), (41, 500))),  # the watermark inside block 0
        (64, 500, 40, ((64, 500), (1, 0), (1, 0))),  # the watermark before the range
    ],
)
def test_chunk_spans_cover_the_range_once(
    lo: int, hi: int, mark: int, spans: tuple[tuple[int, int], ...]
) -> None:
    assert series_rollups.chunk_spans(lo, hi, mark) == spans
    (head_lo, head_hi), (first, last), (tail_lo, tail_hi) = spans
    steps = list(range(head_lo, head_hi + 1))
    steps += [s for b in range(first, last + 1) for s in range(b * 64, b * 64 + 64) if s <= mark]
    steps += list(range(tail_lo, tail_hi + 1))
    assert sorted(s for s in steps if s <= hi) == list(range(lo, hi + 1))
    assert len(steps) == len(set(steps))


def test_comparison_buckets_of_an_unpacked_run_read_from_blocks_equal_the_points(
    client: Client, run: Run, token: str
) -> None:
    steps = sorted(random.Random(4).sample(range(5_000), 3_000))
    ship(client, run, token, noisy(steps, seed=4))
    ship(client, run, token, noisy(list(range(0, 5_000, 10)), seed=5), key="val/reward@1")
    ids = [series_id_of(run), series_id_of(run, "val/reward@1")]
    series_rollups.run_rollup(run.pk)
    ship(client, run, token, [(4_321, 7.0), (4_323, NAN)])  # late: stale blocks
    for lo, hi, size in [(0, 4_999, 500), (37, 4_001, 123), (100, 100, 1)]:
        fast = buckets_postgres(ids, lo, hi, size, wall=False)
        truth = buckets_portable(ids, lo, hi, size)
        for pk in ids:
            assert np.array_equal(fast[pk].present, truth[pk].present)
            assert np.allclose(fast[pk].step, truth[pk].step, equal_nan=True)
            assert np.allclose(fast[pk].value, truth[pk].value, equal_nan=True)
    columns = list(series_rollups.chunk_columns(ids[:1], 0, 4_999))
    assert len(columns) == 1  # one row per series
    got = sorted(
        zip(
            np.concatenate([np.frombuffer(s, ">i4") for _, s, _ in columns]).tolist(),
            np.concatenate([np.frombuffer(v, ">f8") for _, _, v in columns]).tolist(),
            strict=True,
        )
    )
    assert same(got, stored(ids[0]))


def test_one_read_streams_packed_rolled_up_raw_and_empty_series_alike(
    client: Client, run: Run, token: str, alice: User
) -> None:
    # A finished, packed run; a running run rolled up, then given newer points; a
    # running run never rolled up; and a series with no point in the range.
    done = make_run(alice, name="done")
    done_token = services.run_token_issue(done)
    ship(client, done, done_token, noisy(list(range(0, 3_000, 3)), seed=7))
    Run.objects.filter(pk=done.pk).update(state=Run.State.COMPLETED)
    assert series_packs.packs_sweep(max_runs=10) == (1, 1)
    ship(client, run, token, noisy(list(range(2_000)), seed=8))
    series_rollups.run_rollup(run.pk)
    ship(client, run, token, noisy(list(range(2_000, 2_100)), seed=9))  # after the watermark
    raw = make_run(alice, name="raw")
    raw_token = services.run_token_issue(raw)
    ship(client, raw, raw_token, noisy(list(range(5, 2_500, 7)), seed=10))
    ship(client, raw, raw_token, [(9_000, 1.0)], key="val/reward@1")
    ids = [series_id_of(done), series_id_of(run), series_id_of(raw)]
    ids.append(series_id_of(raw, "val/reward@1"))
    assert SeriesPack.objects.filter(series_id=ids[0]).exists() and watermark(ids[1]) == 1_999
    for lo, hi, size in [(0, 2_999, 300), (41, 2_050, 97)]:
        fast = buckets_postgres(ids, lo, hi, size, wall=False)
        truth = buckets_portable(ids, lo, hi, size)
        assert set(fast) == set(ids)
        assert not fast[ids[3]].present.any()  # its one point is after hi
        for pk in ids:
            assert np.array_equal(fast[pk].present, truth[pk].present), (pk, lo)
            assert np.allclose(fast[pk].step, truth[pk].step, equal_nan=True)
            assert np.allclose(fast[pk].value, truth[pk].value, equal_nan=True)


def test_a_block_left_partial_by_one_sweep_is_built_whole_by_the_next(
    client: Client, run: Run, token: str
) -> None:
    ship(client, run, token, [(s, float(s)) for s in range(100)])
    series_id = series_id_of(run)
    series_rollups.run_rollup(run.pk)
    assert watermark(series_id) == 99
    ship(client, run, token, [(s, float(s)) for s in range(100, 200)])  # 100-127 join block 1
    for expected_mark in (99, 199):  # before the next sweep (raw after 99), then after it
        assert watermark(series_id) == expected_mark
        columns = list(series_rollups.chunk_columns([series_id], 0, 199))
        assert len(columns) == 1
        steps = np.sort(np.concatenate([np.frombuffer(s, ">i4") for _, s, _ in columns]))
        assert steps.tolist() == list(range(200))
        series_rollups.run_rollup(run.pk)
    block = SeriesRollup.objects.get(series_id=series_id, level=0, block=1)
    assert block.n_points == 64 and len(block.steps) == 64 * 4


@pytest.mark.django_db(transaction=True)  # the sweep commits on its own connection
def test_a_sweep_that_commits_during_a_comparison_read_counts_no_point_twice(
    client: Client, run: Run, token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read takes each series' watermark, then its blocks up to it and its points
    after it. A sweep committing in between rebuilds the last block with the points
    after the old watermark: read in two snapshots, those points would come twice (from
    the block and from the points table)."""
    ship(client, run, token, [(s, 0.0) for s in range(100)])
    series_id = series_id_of(run)
    series_rollups.run_rollup(run.pk)  # watermark 99: block 1 holds steps 64-99
    ship(client, run, token, [(s, 1.0) for s in range(100, 128)])  # after it: raw
    read_watermarks = series_rollups.watermarks

    def watermarks_then_a_sweep(series_ids: list[int]) -> dict[int, int]:
        marks = read_watermarks(series_ids)
        sweep = Worker(lambda: series_rollups.run_rollup(run.pk))
        sweep.start()
        assert sweep.finish() and sweep.error is None  # block 1 again, now 64-127
        return marks

    monkeypatch.setattr(series_rollups, "watermarks", watermarks_then_a_sweep)
    lo, hi, size = 0, 127, 43  # steps 99, 100 and 101 share bucket 33
    got = buckets_postgres([series_id], lo, hi, size, wall=False)[series_id]
    assert watermark(series_id) == 127  # the sweep did commit inside the read
    truth = buckets_portable([series_id], lo, hi, size)[series_id]
    assert got.value[33] == pytest.approx(2 / 3)  # (0 + 1 + 1) / 3, not (0 + 4 x 1) / 5
    assert np.array_equal(got.present, truth.present)
    assert np.allclose(got.step, truth.step) and np.allclose(got.value, truth.value)
