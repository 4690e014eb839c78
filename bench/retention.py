"""What retention saves (issue 35): table and index bytes a point, before and after the raw
points of packed runs are dropped, on a lab filled as ``bench/scale.py`` fills it.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench_hd \\
        .venv/bin/python bench/retention.py [--steps 200]

Drops and recreates the database named in ``DATABASE_URL`` (its name must contain
"bench"), builds ``bench/scale.py``'s lab (500 runs of 4 policies + ``_pool`` x 20 keys,
plus each run's clock series ``_pool`` ``perf/step_s``: 101 series a run) with ``--steps``
steps a series, written in ingestion order. Then, as beat would: rolls every run up, packs
every finished run, and drops the raw points of the finished runs
(:func:`webapp.metrics.retention.drop_packed_points`, everything finished 30+ days ago).
Prints the sizes (heap, index, rollups, packs) after each stage, per point, and the
sizes after ``VACUUM FULL`` (what a deployment gets back from the disk only by rewriting
the table: ``VACUUM FULL``, ``pg_repack``, or dropping whole partitions), and the time of a
downsampled read of a 100,000-point series before and after its raw points are dropped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import database_url, fresh_app_database
from bench.scale import build_lab, fill

MIB = 1024 * 1024

SIZES_SQL = """
    SELECT pg_table_size('experiments_metricpoint'), pg_indexes_size('experiments_metricpoint'),
           pg_total_relation_size('experiments_seriesrollup'),
           pg_total_relation_size('experiments_seriespack'),
           pg_database_size(current_database()),
           (SELECT count(*) FROM experiments_metricpoint)
"""


def sizes(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute(SIZES_SQL).fetchone()
    assert row is not None
    names = ("heap", "index", "rollups", "packs", "database", "points")
    return dict(zip(names, row, strict=True))


def line(stage: str, found: dict[str, int], per: int) -> str:
    """A markdown row: each size in MiB and in bytes a point of the lab (``per``)."""
    cells = [
        f"{found[name] / MIB:,.0f} MiB ({found[name] / per:.1f})"
        for name in ("heap", "index", "rollups", "packs", "database")
    ]
    return f"| {stage} | {found['points']:,} | " + " | ".join(cells) + " |"


def add_clocks(url: str, run_ids: list[int]) -> None:
    """Each run's clock series (the pool's step time), filled with the others."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO experiments_metricseries (run_id, policy, key) "
            "SELECT r, '_pool', 'perf/step_s' FROM unnest(%s::bigint[]) AS r",
            [run_ids],
        )


def long_series_read(url: str, points: int, reps: int) -> tuple[float, float]:
    """Median ms of ``series_points(max_points=2000)`` on a ``points``-point series of a
    finished, rolled-up, packed run: with its raw points, then with them dropped."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from webapp.metrics import retention, selectors, series_packs, series_rollups
    from webapp.metrics.models import MetricSeries
    from webapp.runs import services
    from webapp.runs.models import Run

    owner = User.objects.get(username="user00")
    config = {"name": "long", "pool": [{"name": "a", "model": "zoo:tiny-llama-char"}]}
    experiment = services.experiment_create(owner=owner, config=config, seeds=[0])
    run = services.runs_create(experiment)[0]
    series = MetricSeries.objects.create(run=run, policy="a", key="train/reward_mean")
    clock = MetricSeries.objects.create(run=run, policy="_pool", key="perf/step_s")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO experiments_metricpoint (series_id, step, value, wall_time) "
            "SELECT %s, s, sin(s / 5000.0) + ((s::bigint * 7919) %% 1000) / 1000.0, "
            "1.7e9 + s FROM generate_series(0, %s - 1) AS s",
            [series.pk, points],
        )
        cursor.execute(
            "INSERT INTO experiments_metricpoint (series_id, step, value, wall_time) "
            "SELECT %s, s, 2.5, 1.7e9 + s FROM generate_series(0, %s - 1) AS s",
            [clock.pk, points],
        )
    Run.objects.filter(pk=run.pk).update(
        state=Run.State.COMPLETED,
        last_step=points - 1,
        finished_at=timezone.now() - dt.timedelta(days=100),
    )
    series_rollups.run_rollup(run.pk)
    series_packs.packs_sweep(max_runs=1)

    def median_ms() -> float:
        times = []
        for _ in range(reps):
            started = time.perf_counter()
            selectors.series_points([series.pk], max_points=2000)
            times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)

    before = median_ms()
    retention.drop_run_points(run.pk)
    return before, median_ms()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="points a series")
    parser.add_argument("--long", type=int, default=100_000, help="the long series' points")
    args = parser.parse_args()
    url = database_url()
    fresh_app_database("retention")
    started = time.perf_counter()
    run_ids = build_lab(args.steps)
    add_clocks(url, run_ids)
    fill(url, run_ids, steps=args.steps)
    print(f"lab built in {time.perf_counter() - started:.0f} s", flush=True)

    from django.db import connection
    from django.utils import timezone

    from webapp.metrics import retention, series_packs, series_rollups
    from webapp.runs.models import Run

    rows = []
    lab = sizes(url)["points"]
    rows.append(line("raw points only (as ingested)", sizes(url), lab))
    started = time.perf_counter()
    for run_id in run_ids:
        series_rollups.run_rollup(run_id)
    rolled = time.perf_counter() - started
    started = time.perf_counter()
    series_packs.packs_sweep(max_runs=len(run_ids))
    packed = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE experiments_seriesrollup")
        cursor.execute("VACUUM ANALYZE experiments_seriespack")
    rows.append(line("+ rollups (every run) and packs (finished runs)", sizes(url), lab))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM FULL experiments_metricpoint")
    rows.append(line("same, points table rewritten (VACUUM FULL)", sizes(url), lab))
    Run.objects.filter(state__in=Run.TERMINAL_STATES).update(
        finished_at=timezone.now() - dt.timedelta(days=100)
    )
    started = time.perf_counter()
    done = retention.drop_packed_points(30)
    dropped = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE experiments_metricpoint")
    rows.append(line("raw points of finished runs dropped, VACUUM", sizes(url), lab))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM FULL experiments_metricpoint")
    rows.append(line("same, points table rewritten (VACUUM FULL)", sizes(url), lab))
    before, after = long_series_read(url, args.long, 9)

    points = sum(run.points_dropped for run in done)
    print()
    print(
        f"{len(run_ids)} runs x {lab // len(run_ids) // args.steps} series x {args.steps} "
        f"steps = {lab:,} points; rollup "
        f"sweep {rolled:.1f} s, pack sweep {packed:.1f} s, retention {dropped:.1f} s "
        f"({len(done)} runs, {points:,} points dropped)"
    )
    print()
    print("| stage | raw points | points heap | points index | rollups | packs | database |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    print()
    print(
        f"series_points(max_points=2000) of a {args.long:,}-point series, median of 9: "
        f"{before:.1f} ms from the rollups and points, {after:.1f} ms from its pack "
        "(raw points dropped)"
    )


if __name__ == "__main__":
    main()
