"""Comparison latency: 50 runs x 8 metrics x 4 policies x 2,000 steps (3.2M points).

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench \\
        .venv/bin/python bench/compare.py [--reps 10] [--http-reps 5] [--export-reps 2]

Drops and recreates the database named in ``DATABASE_URL`` (its name must contain
"bench"), migrates it, creates 4 experiments (standalone, prp, xgrpo, sgt; 13/13/12/12
seeds = 50 runs) of a 4-policy pool through the real services, and fills every run x
policy x metric with 2,000 steps in one ``generate_series`` statement (then ``VACUUM
ANALYZE``). The runs are marked completed, as runs one compares are; the status sync's
sweep packs their series (webapp.metrics.series_packs), and comparisons read the
packs. Then, for group_by=regime, all 8 metrics and 4 policies, 500 buckets:

- in-process: :func:`webapp.compare.selectors.comparison_build` (the SQL and numpy part) and
  the JSON encoding, p50/p95 over ``--reps`` repetitions after a warm-up, for x = step
  and rollouts, smoothing off and on; and the compare page's default of two metrics
  (val/reward@1, train/reward_mean: 800,000 points). First, before the packing sweep,
  two cases (8 metrics; 2 metrics) twice, in-process and the first over HTTP: with no
  rollups (read from the points), then after the rollup sweep (timed) with the last
  ``--tail`` steps of every series left to the points, as for runs that just finished
  (the beat rolls up running runs every tick); then the packing sweep, timed;
- over HTTP: ``GET /api/v1/compare`` through gunicorn (2 sync workers), same cases,
  ``--http-reps`` each, and the summary table of val/reward@1;
- the PDF export (``/compare/export.pdf``, two columns) and the figure bundle
  (``/compare/export.zip``) over HTTP, ``--export-reps`` each.

Prints a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import free_port, fresh_app_database, percentile, rollup_sweep, start_server

REPO = Path(__file__).resolve().parents[1]
REGIME_SEEDS = {"standalone": 13, "prp": 13, "xgrpo": 12, "sgt": 12}
POLICIES = ("llama", "qwen", "gpt2", "phi")
METRICS = (
    "val/reward@1",
    "train/reward_mean",
    "actor/entropy",
    "actor/kl_coef",
    "actor/kl_loss",
    "response/length_mean",
    "perf/rollouts_total",
    "perf/response_tokens_total",
)
STEPS = 2000

FILL_SQL = """
    INSERT INTO experiments_metricpoint (series_id, step, value, wall_time)
    SELECT s.id, t,
           CASE s.key
               WHEN 'perf/rollouts_total' THEN 256.0 * (t + 1)
               WHEN 'perf/response_tokens_total' THEN 256.0 * (t + 1) * (90 + s.run_id %% 7)
               WHEN 'actor/kl_coef' THEN 0.001
               ELSE 0.3 + 0.4 * (1 - exp(-t / (300.0 + 20 * (s.run_id %% 5))))
                    + 0.03 * sin(t / 17.0 + s.id) + 0.02 * (random() - 0.5)
           END,
           1.7e9 + s.run_id * 100000 + 3.0 * t
    FROM experiments_metricseries AS s, generate_series(0, %(steps)s - 1) AS t
"""


def setup(url: str) -> tuple[list[int], str]:
    """The runs (through the services) and their series and points (SQL); run ids and a
    session cookie of their owner."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from webapp.core.services import lab_join
    from webapp.runs import services
    from webapp.runs.models import Run

    user = User.objects.create_user("bench", password="bench-password")
    lab_join(user)
    run_ids: list[int] = []
    for regime, seeds in REGIME_SEEDS.items():
        config = {
            "name": f"bench-{regime}",
            "regime": regime,
            "pool": [{"name": p, "model": "zoo:tiny-llama-char"} for p in POLICIES],
        }
        experiment = services.experiment_create(owner=user, config=config, seeds=list(range(seeds)))
        run_ids += [run.pk for run in services.runs_create(experiment)]
    # Runs one compares are done: the status sync's sweep packs their series.
    Run.objects.filter(pk__in=run_ids).update(state=Run.State.COMPLETED)
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO experiments_metricseries (run_id, policy, key) "
            "SELECT r, p, k FROM unnest(%s::bigint[]) AS r, unnest(%s::text[]) AS p, "
            "unnest(%s::text[]) AS k",
            [run_ids, list(POLICIES), list(METRICS)],
        )
        conn.execute("SELECT setseed(0.42)")
        conn.execute(FILL_SQL, {"steps": STEPS})
        conn.execute("VACUUM ANALYZE experiments_metricpoint")
        conn.execute("VACUUM ANALYZE experiments_metricseries")
        points = conn.execute("SELECT count(*) FROM experiments_metricpoint").fetchone()[0]
    print(f"filled {points:,} points in {time.perf_counter() - started:.1f} s", flush=True)
    client = Client()
    client.force_login(user)
    return run_ids, client.cookies["sessionid"].value


def query(run_ids: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "runs": ",".join(map(str, run_ids)),
        "group_by": "regime",
        "metric": list(METRICS),
        "policy": list(POLICIES),
        "buckets": "500",
        **extra,
    }


def in_process(params: dict[str, Any], reps: int) -> tuple[list[float], list[float], int]:
    """Build times, JSON-encode times, reply size in bytes."""
    from django.contrib.auth.models import User
    from django.http import QueryDict

    from webapp.compare.selectors import comparison_build, runs_for_spec
    from webapp.compare.serialize import comparison_json
    from webapp.compare.spec import ComparisonSpec
    from webapp.core.http import json_reply

    query_dict = QueryDict(mutable=True)
    for key, value in params.items():
        query_dict.setlist(key, value if isinstance(value, list) else [value])
    user = User.objects.get(username="bench")
    builds, encodes, size = [], [], 0
    for _ in range(reps + 1):  # the first is a warm-up
        started = time.perf_counter()
        spec = ComparisonSpec.from_query(query_dict)
        comparison = comparison_build(spec=spec, runs=runs_for_spec(user, spec))
        built = time.perf_counter()
        size = len(json_reply(comparison_json(comparison)).content)
        builds.append(built - started)
        encodes.append(time.perf_counter() - built)
    return builds[1:], encodes[1:], size


def over_http(
    session: requests.Session, url: str, params: dict[str, Any], reps: int
) -> tuple[list[float], int]:
    """Request times after one warm-up, and the reply's size in bytes."""
    warm_up = session.get(url, params=params)
    warm_up.raise_for_status()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        response = session.get(url, params=params)
        response.raise_for_status()
        times.append(time.perf_counter() - started)
    return times, len(warm_up.content)


def ms(times: list[float]) -> str:
    return f"{percentile(times, 0.5) * 1000:,.0f} / {percentile(times, 0.95) * 1000:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="in-process repetitions per case")
    parser.add_argument("--http-reps", type=int, default=5, help="HTTP repetitions per case")
    parser.add_argument("--export-reps", type=int, default=2, help="repetitions per export")
    parser.add_argument(
        "--tail",
        type=int,
        default=10,
        help="steps of each run left after the last rollup tick (a run that just finished; "
        "the beat ticks every 5 s: 10 steps at 2 steps/s)",
    )
    args = parser.parse_args()

    env = fresh_app_database("compare")
    url = env["DATABASE_URL"]
    print("migrated", flush=True)
    run_ids, session_id = setup(url)

    cases = [
        ("x=step, no smoothing", {"x": "step"}),
        ("x=step, EMA 0.6", {"x": "step", "smooth": "0.6"}),
        ("x=rollouts, no smoothing", {"x": "rollouts"}),
        ("x=rollouts, EMA 0.6", {"x": "rollouts", "smooth": "0.6"}),
    ]
    rows: list[tuple[str, ...]] = []
    http_rows: list[tuple[str, str]] = []
    page_default = {"x": "step", "smooth": "0.6", "metric": list(METRICS[:2])}
    not_packed = [
        ("x=step, no smoothing", {"x": "step"}),
        ("2 metrics, x=step, EMA 0.6", page_default),
    ]
    port = free_port()
    server = start_server(env, port)
    try:
        session = requests.Session()
        session.cookies.set("sessionid", session_id)
        base = f"http://127.0.0.1:{port}"

        def not_packed_rows(state: str) -> None:
            for label, extra in not_packed:
                builds, encodes, size = in_process(query(run_ids, **extra), args.reps)
                rows.append((f"{state}: {label}", ms(builds), ms(encodes), f"{size / 1e6:.1f} MB"))
                print(rows[-1], flush=True)
            params = query(run_ids, x="step")
            times, _ = over_http(session, f"{base}/api/v1/compare", params, args.http_reps)
            http_rows.append((f"GET /api/v1/compare, {state}: x=step, no smoothing", ms(times)))
            print(http_rows[-1], flush=True)

        not_packed_rows("not packed, no rollups (reads the points)")
        rollup_sweep(run_ids, STEPS - 1, args.tail)
        not_packed_rows(f"not packed, rolled up but the last {args.tail} steps")
        from webapp.metrics.series_packs import packs_sweep

        started = time.perf_counter()
        swept, series = packs_sweep(max_runs=len(run_ids))  # what the status sync does
        print(f"the sync's sweep packed {series:,} series of {swept} runs in "
              f"{time.perf_counter() - started:.1f} s", flush=True)  # fmt: skip
        for label, extra in [
            *cases,
            ("2 metrics (the page's default), x=step, EMA 0.6", page_default),
        ]:
            builds, encodes, size = in_process(query(run_ids, **extra), args.reps)
            rows.append((label, ms(builds), ms(encodes), f"{size / 1e6:.1f} MB"))
            print(rows[-1], flush=True)

        for label, extra in cases:
            params = query(run_ids, **extra)
            times, _ = over_http(session, f"{base}/api/v1/compare", params, args.http_reps)
            http_rows.append((f"GET /api/v1/compare, {label}", ms(times)))
            print(http_rows[-1], flush=True)
        summary, _ = over_http(
            session,
            f"{base}/api/v1/compare/summary",
            query(run_ids, table_metric="val/reward@1"),
            args.http_reps,
        )
        http_rows.append(("GET /api/v1/compare/summary (val/reward@1)", ms(summary)))
        for label, fmt in (("PDF export, two columns", "pdf"), ("figure bundle (zip)", "zip")):
            params = query(run_ids, x="step", smooth="0.6", columns="2")
            url = f"{base}/compare/export.{fmt}"
            times, size = over_http(session, url, params, args.export_reps)
            http_rows.append((f"{label}, 32 panels ({size / 1e6:.1f} MB)", ms(times)))
            print(http_rows[-1], flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(env["MRL_VAR_DIR"], ignore_errors=True)

    points = len(run_ids) * len(POLICIES) * len(METRICS) * STEPS
    print(f"\n{len(run_ids)} runs x {len(METRICS)} metrics x {len(POLICIES)} policies x "
          f"{STEPS:,} steps = {points:,} points; 500 buckets; group_by=regime\n")  # fmt: skip
    print("| in-process | build p50 / p95 (ms) | JSON encode p50 / p95 (ms) | reply |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("\n| over HTTP (gunicorn, 2 workers) | p50 / p95 (ms) |\n| --- | --- |")
    for label, result in http_rows:
        print(f"| {label} | {result} |")
    print(json.dumps(vars(args)))


if __name__ == "__main__":
    main()
