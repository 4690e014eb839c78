"""Issue 44: the worst export the caps allow, of each kind, and the refused one.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench_exports \\
        .venv/bin/python bench/export_worst.py [--reps 2]

Builds a lab-size comparison in PostgreSQL (the database, ``mrl_bench...`` only, is dropped,
created and migrated): 200 runs of one experiment (seeds 0-199), each with 9
metrics x 4 policies x 250 steps (1.8M points) and 12 evaluated tasks per policy. Then,
through the whole view stack in this process (Django's test client: this process is the
web process), it times:

* the worst allowed export of each kind, at the caps of
  :mod:`webapp.compare.export_limits`: the curves of 16 runs grouped by seed (16
  groups x 36 panels x 138 buckets = 79,488 points) as PDF, SVG, PNG and the bundle
  (zip); the per-task bars of the same 16 groups (4 policies x 12 tasks x 16 groups =
  768 bars); the significance forest plot of 17 seeds, baseline seed 0 (2 metrics x 4
  policies x 16 groups = 128 rows);
* the issue's query, refused: 200 runs grouped by seed, 16 metrics, 8 policies, as
  ``bars.pdf?view=significance``, ``export.zip`` and ``export.pdf`` (time to the 400);

each ``--reps`` times (the best and the worst reported), with the web process's peak RSS
(``ru_maxrss``) before and after, and the figure children's peak RSS. The load average
is printed: on a shared machine the wall times move with it.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

RUNS = 200
STEPS = 250
METRICS = tuple(f"val/reward@1/slice{k}" for k in range(9))
CURVE_BUCKETS = 80_000 // (16 * 36)  # 138: 16 groups x 36 panels at the points cap
POLICIES = ("llama", "qwen", "gpt2", "_pool")
TASKS = tuple(f"task{k:02d}" for k in range(12))
ISSUE_METRICS = [f"val/reward@1/slice{k}" for k in range(16)]
ISSUE_POLICIES = [*POLICIES, "p4", "p5", "p6", "p7"]


def database_ready() -> None:
    """The bench's database, dropped (it must be a bench-only one), created, migrated."""
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    db = settings.DATABASES["default"]
    if not db["NAME"].startswith("mrl_bench"):
        raise SystemExit(f"{db['NAME']!r}: give a bench database (mrl_bench...): it is dropped")
    with psycopg.connect(
        host=db["HOST"],
        port=db["PORT"] or 5432,
        user=db["USER"],
        dbname="postgres",
        autocommit=True,
    ) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{db["NAME"]}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{db["NAME"]}"')
    call_command("migrate", verbosity=0)


def lab_build() -> tuple[Any, list[int]]:
    """The bench user (in a fresh lab) and its 200 runs with their points."""
    from django.contrib.auth.models import User
    from django.db import connection

    from tests.fixtures_db import pool_config
    from webapp.core.models import Lab
    from webapp.core.services import lab_join
    from webapp.metrics.models import MetricPoint, MetricSeries
    from webapp.runs import services

    user = User.objects.create_user("export-bench", password="export-bench-password")
    lab_join(user, Lab.objects.create(name="export bench"))
    experiment = services.experiment_create(
        owner=user, config=pool_config(name="export-bench", regime="sgt"), seeds=list(range(RUNS))
    )
    runs = services.runs_create(experiment)
    series = MetricSeries.objects.bulk_create(
        MetricSeries(run=run, policy=policy, key=key)
        for run in runs
        for policy in POLICIES
        for key in (*METRICS, *(f"eval/synthetic/{task}/accuracy" for task in TASKS))
    )
    curves = [s.pk for s in series if not s.key.startswith("eval/")]
    evals = [s.pk for s in series if s.key.startswith("eval/")]
    table = MetricPoint._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {table} (series_id, step, value, wall_time)
                SELECT s, t, 0.3 + t / 1000.0 + ((s * 7919 + t * 104729) %% 1000) / 20000.0,
                       1.7e9 + t
                FROM unnest(%s::bigint[]) AS s, generate_series(0, {STEPS - 1}) AS t""",
            [curves],
        )
        cursor.execute(
            f"""INSERT INTO {table} (series_id, step, value, wall_time)
                SELECT s, t, CASE WHEN t = 0 THEN 0.2 ELSE 0.4 + (s %% 37) / 100.0 END,
                       1.7e9 + t
                FROM unnest(%s::bigint[]) AS s, unnest(ARRAY[0, {STEPS - 1}]) AS t""",
            [evals],
        )
    return user, [run.pk for run in runs]


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()

    import django

    django.setup()
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    setup_test_environment()  # the test client's hosts; nothing else changes
    database_ready()
    started = time.perf_counter()
    user, run_ids = lab_build()
    print(
        f"lab: {RUNS} runs, {RUNS * len(METRICS) * len(POLICIES) * STEPS:,} curve points, "
        f"built in {time.perf_counter() - started:.1f} s; load {load_average()}"
    )
    client = Client()
    client.force_login(user)

    sixteen = ",".join(map(str, run_ids[:16]))
    seventeen = ",".join(map(str, run_ids[:17]))
    curves = {
        "runs": sixteen,
        "group_by": "seed",
        "metric": list(METRICS),
        "policy": list(POLICIES),
        "buckets": str(CURVE_BUCKETS),
        "band": "ci95",
        "columns": "2",
    }
    bars = {
        "runs": sixteen,
        "group_by": "seed",
        "policy": list(POLICIES),
        "view": "tasks",
        "columns": "2",
    }
    significance = {
        "runs": seventeen,
        "group_by": "seed",
        "metric": list(METRICS[:2]),
        "policy": list(POLICIES),
        "view": "significance",
        "baseline": "0",
        "columns": "2",
    }
    issue = {
        "runs": ",".join(map(str, run_ids)),
        "group_by": "seed",
        "metric": ISSUE_METRICS,
        "policy": ISSUE_POLICIES,
    }
    cases: list[tuple[str, str, str, dict[str, Any], int]] = [
        ("curves 16 groups x 36 panels x 138 (79,488 points)", "compare:export", fmt, curves, 200)
        for fmt in ("pdf", "svg", "png", "zip", "csv")
    ]
    cases += [
        ("bars 4 policies x 12 tasks x 16 groups (768 bars)", "compare:bars_file", fmt, bars, 200)
        for fmt in ("pdf", "svg", "png")
    ]
    cases += [
        (
            "forest 2 metrics x 4 policies x 16 groups (128 rows)",
            "compare:bars_file",
            fmt,
            significance,
            200,
        )
        for fmt in ("pdf", "svg", "png")
    ]
    cases += [
        (
            "issue's query, refused (200 runs by seed, 16 metrics, 8 policies)",
            url,
            fmt,
            {**issue, **extra},
            400,
        )
        for url, fmt, extra in (
            ("compare:bars_file", "pdf", {"view": "significance"}),
            ("compare:export", "zip", {}),
            ("compare:export", "pdf", {}),
        )
    ]
    rss_before = peak_rss_mb()
    print(f"web process peak RSS before the exports: {rss_before:.0f} MB")
    print("| export | format | status | bytes | best s | worst s |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for name, url, fmt, query, expected in cases:
        times = []
        for _ in range(args.reps):
            begun = time.perf_counter()
            response = client.get(reverse(url, args=[fmt]), query)
            times.append(time.perf_counter() - begun)
            assert response.status_code == expected, (name, fmt, response.content[:400])
        size = len(response.content)
        print(
            f"| {name} | {fmt} | {response.status_code} | {size:,} | {min(times):.2f} | "
            f"{max(times):.2f} |",
            flush=True,
        )
        if expected == 400:
            print(f"|   message: {response.json()['error']} | | | | | |")
    print(
        f"web process peak RSS after: {peak_rss_mb():.0f} MB (before: {rss_before:.0f} MB); "
        f"figure children's peak RSS: {peak_rss_mb(resource.RUSAGE_CHILDREN):.0f} MB; "
        f"load {load_average()}"
    )


if __name__ == "__main__":
    main()
