"""Ingestion throughput and series-query latency through the real HTTP API on PostgreSQL.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench \\
        .venv/bin/python bench/ingest.py [--points 200000] [--queries 40]

Drops and recreates the database named in ``DATABASE_URL`` (its name must contain
"bench"), migrates it, starts gunicorn (2 sync workers) on a free port in a subprocess,
and with ``requests`` from one client, the way the trainer's shipper sends:

1. posts ``--points`` points in batches of 1,000 and of 10,000 (fresh, then the same
   batches again: all duplicates), and reports points/s;
2. fills one series with 1,000,000 points (one ``generate_series`` statement, then
   ``VACUUM ANALYZE``) and times ``GET .../series?key=big`` (max_points=2000, min/max
   buckets) from the points, then runs the rollup sweep over the run (timed: what the
   beat's ticks do over a run's life) and times it again from the rollups, and the live
   page's incremental ``after_step`` query (the last 100 steps), p50/p95 over
   ``--queries`` requests each; also ``.../keys``.

Prints a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psycopg
import requests

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("llama", "qwen", "gpt2")
KEYS_PER_POLICY = 20
BIG_SERIES = 1_000_000


def database_url() -> str:
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mrl_bench")
    name = urlparse(url).path.lstrip("/")
    if "bench" not in name:
        sys.exit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    return url


def recreate_database(url: str) -> None:
    parsed = urlparse(url)
    admin = parsed._replace(path="/postgres").geturl()
    name = parsed.path.lstrip("/")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def app_environment(name: str, **extra_env: str) -> dict[str, str]:
    """The environment (also applied to this process) a bench app server and Django run
    with, on the bench database of ``DATABASE_URL``."""
    work = Path(tempfile.mkdtemp(prefix=f"mrl-bench-{name}-"))
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "MRL_VAR_DIR": str(work),
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DEBUG": "false",
        "SECRET_KEY": "bench-" + "x" * 60,
        "LOG_LEVEL": "WARNING",
        **extra_env,
    }
    os.environ.update(env)
    return env


def fresh_app_database(name: str, **extra_env: str) -> dict[str, str]:
    """Recreate and migrate the bench database of ``DATABASE_URL``; return
    :func:`app_environment`."""
    env = app_environment(name, **extra_env)
    recreate_database(env["DATABASE_URL"])
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True)
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "webapp.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "2", "--timeout", "120", "--log-level", "warning"],
        cwd=REPO, env=env,
    )  # fmt: skip
    # Patient: on a loaded machine /healthz can take seconds (a timeout is not an answer).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).ok:
                return server
        except requests.RequestException:
            pass
        time.sleep(0.2)
    server.kill()
    sys.exit("gunicorn did not answer /healthz within 120 s")


def setup_run() -> tuple[Any, str, str]:
    """A user in a lab with one run; its ingestion token and a session cookie."""
    import django

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from webapp.core.services import lab_join
    from webapp.runs import services

    user = User.objects.create_user("bench", password="bench-password")
    lab_join(user)
    config = {
        "name": "bench",
        "regime": "sgt",
        "pool": [{"name": p, "model": "zoo:tiny-llama-char"} for p in POLICIES],
    }
    experiment = services.experiment_create(owner=user, config=config, seeds=[0])
    run = services.runs_create(experiment)[0]
    token = services.run_token_issue(run)
    client = Client()
    client.force_login(user)
    return run, token, client.cookies["sessionid"].value


def run_beside(run: Any) -> tuple[Any, str]:
    """A new run of ``run``'s owner and config (an experiment of its own) and its ingest
    token: a fresh run for each round of a benchmark, or for warming the server up."""
    from webapp.runs import services

    experiment = services.experiment_create(
        owner=run.experiment.owner, config=run.experiment.config, seeds=[0]
    )
    fresh = services.runs_create(experiment)[0]
    return fresh, services.run_token_issue(fresh)


def batches(n_points: int, size: int, step0: int) -> list[bytes]:
    """Bodies of ``size`` points each: every policy x key at consecutive steps."""
    keys = [(p, f"train/metric_{k:02d}") for p in POLICIES for k in range(KEYS_PER_POLICY)]
    bodies, step, points = [], step0, []
    while len(bodies) * size < n_points:
        for policy, key in keys:
            points.append(
                {"policy": policy, "key": key, "step": step, "value": (step % 97) / 97,
                 "wall_time": 1.7e9 + step}
            )  # fmt: skip
            if len(points) == size:
                bodies.append(json.dumps({"points": points}).encode())
                points = []
        step += 1
    return bodies


def post_all(session: requests.Session, url: str, bodies: list[bytes]) -> tuple[float, int, int]:
    accepted = duplicates = 0
    started = time.perf_counter()
    for body in bodies:
        response = session.post(url, data=body, headers={"Content-Type": "application/json"})
        response.raise_for_status()
        reply = response.json()
        accepted += reply["accepted"]
        duplicates += reply["duplicates"]
    return time.perf_counter() - started, accepted, duplicates


def fill_big_series(url: str, run_id: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        series_id = conn.execute(
            "INSERT INTO experiments_metricseries (run_id, policy, key) "
            "VALUES (%s, 'llama', 'big') RETURNING id",
            [run_id],
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO experiments_metricpoint (series_id, step, value, wall_time) "
            "SELECT %s, s, sin(s / 5000.0) + ((s::bigint * 7919) %% 1000) / 1000.0, NULL "
            "FROM generate_series(0, %s - 1) AS s",
            [series_id, BIG_SERIES],
        )
        conn.execute("VACUUM ANALYZE experiments_metricpoint")


def rollup_sweep(run_ids: list[int], last_step: int, tail: int) -> None:
    """Roll up every series of ``run_ids`` (what the beat's sweep does tick by tick over
    the runs' lives; timed and printed), then leave each series' steps after ``last_step
    - tail`` to the points, as if they had come after the last tick: runs that just
    finished. Needs Django set up on the bench database."""
    from django.db import connection

    from webapp.metrics.series_rollups import run_rollup

    started = time.perf_counter()
    blocks = sum(run_rollup(run_id) or 0 for run_id in run_ids)
    print(f"the rollup sweep wrote {blocks:,} blocks of {len(run_ids)} runs in "
          f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
    tail_to_points(run_ids, last_step, tail)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE experiments_seriesrollup")


def tail_to_points(run_ids: list[int], last_step: int, tail: int) -> None:
    """Lower the watermark of every rolled-up series of ``run_ids`` so that its steps
    after ``last_step - tail`` are read from the points (the block holding them too)."""
    from webapp.metrics.models import MetricSeries
    from webapp.metrics.series_rollups import watermark_after

    mark = watermark_after(last_step + 1 - tail)
    MetricSeries.objects.filter(run_id__in=run_ids, rolled_through__gt=mark).update(
        rolled_through=mark
    )


def latencies(session: requests.Session, url: str, params: dict[str, Any], n: int) -> list[float]:
    session.get(url, params=params).raise_for_status()  # warm-up
    times = []
    for _ in range(n):
        started = time.perf_counter()
        response = session.get(url, params=params)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
    return times


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200_000, help="points per batch size")
    parser.add_argument("--queries", type=int, default=40, help="requests per latency figure")
    args = parser.parse_args()

    env = fresh_app_database("ingest")
    url = env["DATABASE_URL"]
    run, token, session_id = setup_run()
    port = free_port()
    server = start_server(env, port)
    base = f"http://127.0.0.1:{port}/api/v1/runs/{run.pk}"
    rows: list[tuple[str, str]] = []
    ingested = 0
    try:
        ingest = requests.Session()
        ingest.headers["Authorization"] = f"Bearer {token}"
        for size, step0 in ((1_000, 0), (10_000, 100_000)):
            bodies = batches(args.points, size, step0)
            n = len(bodies) * size
            for label in ("fresh", "replayed (all duplicates)"):
                seconds, accepted, duplicates = post_all(ingest, f"{base}/ingest", bodies)
                assert accepted + duplicates == n
                assert (accepted == n) if label == "fresh" else (duplicates == n)
                ingested += accepted
                rows.append(
                    (
                        f"ingest {n:,} points, batches of {size:,}, {label}",
                        f"{n / seconds:,.0f} points/s "
                        f"({seconds / len(bodies) * 1000:.0f} ms/batch)",
                    )
                )
                print(rows[-1], flush=True)

        fill_big_series(url, run.pk)
        reader = requests.Session()
        reader.cookies.set("sessionid", session_id)
        # Before the beat's rollup sweep has seen it: every point is read.
        times = latencies(reader, f"{base}/series", {"key": "big"}, args.queries)
        rows.append(
            (
                "series, 1,000,000 points, max_points=2000, not rolled up yet (from the points)",
                f"p50 {percentile(times, 0.5) * 1000:.0f} ms, "
                f"p95 {percentile(times, 0.95) * 1000:.0f} ms "
                f"(mean {statistics.mean(times) * 1000:.0f} ms, n={len(times)})",
            )
        )
        print(rows[-1], flush=True)
        from webapp.metrics.series_rollups import run_rollup

        started = time.perf_counter()
        blocks = run_rollup(run.pk)  # what each tick of the beat's sweep does, all at once
        rows.append(
            (
                "rollup sweep of the run (the 1,000,000-point series and the rest)",
                f"{time.perf_counter() - started:.1f} s, {blocks:,} blocks",
            )
        )
        print(rows[-1], flush=True)
        checks = (
            ("series, 1,000,000 points, max_points=2000 (rollups)", "series", {"key": "big"}),
            (
                "series, 1,000,000 points, after_step (last 100 steps)",
                "series",
                {"key": "big", "after_step": BIG_SERIES - 101},
            ),
            (
                f"keys ({len(POLICIES) * KEYS_PER_POLICY + 1} series, "
                f"{ingested + BIG_SERIES:,} points)",
                "keys",
                {},
            ),
        )
        for label, endpoint, params in checks:
            times = latencies(reader, f"{base}/{endpoint}", params, args.queries)
            rows.append(
                (
                    label,
                    f"p50 {percentile(times, 0.5) * 1000:.0f} ms, "
                    f"p95 {percentile(times, 0.95) * 1000:.0f} ms "
                    f"(mean {statistics.mean(times) * 1000:.0f} ms, n={len(times)})",
                )
            )
            print(rows[-1], flush=True)
        reply = reader.get(f"{base}/series", params={"key": "big"}).json()
        print(f"points returned for the 1M series: {len(reply['series'][0]['points'])}")
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(env["MRL_VAR_DIR"], ignore_errors=True)

    print("\n| measurement | result |\n| --- | --- |")
    for label, result in rows:
        print(f"| {label} | {result} |")


if __name__ == "__main__":
    main()
