"""The dashboard at lab scale: 500 runs, 20 users, 50 million metric points.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench_scale \\
        .venv/bin/python bench/scale.py [--reps 20] [--reuse] [--runs 500]

Drops and recreates the database named in ``DATABASE_URL`` (its name must contain
"bench"), migrates it and builds a lab through the real services: 20 users in one lab
(so every list shows all 500 runs), 100 experiments of a 4-policy pool (the four
regimes in turn, a quarter with ReMix), 5 seeds each = 500 runs, most completed, some
running, failed or cancelled, with tags. Then, directly in SQL, each run gets 100 series
(4 policies and ``_pool`` x 20 metric keys) of 1,000 steps = 100,000 points, written in
the order ingestion writes them (step by step, every series of the run at each step;
runs one after another), and the sharing runs get 2 transfer events per step. In all
50,000,000 points; ``VACUUM ANALYZE`` afterwards, as autovacuum would. ``--runs N`` (a
multiple of 5) builds N / 5 experiments instead of 100: ``--runs 2000`` is four times the
lab, 200,000,000 points (issue 35); the summary gives the fill rate.

Two connections write the points at once, each run after run, as concurrent runs
ingest. ``--reuse`` keeps a database that an earlier run of this script filled (checked
by its point count; migrations newer than it are applied) and only measures.

Measured over HTTP through gunicorn (2 sync workers; the figure is the client's wall
time on loopback, so server time plus well under a millisecond), ``--reps`` requests per
page after one warm-up, each on a different random run or page where the page takes one:

- the dashboard, the experiment list and the run list (first page, a deep page, sorted,
  filtered);
- the run page: its HTML, and the requests its script makes on load (keys, every series
  downsampled to 2,000 points, the 5-s incremental poll, status, transfer log and matrix);
- a 50-run comparison: the compare page and its data request (the page's default of 2
  metrics, and 8 metrics), and the summary table. Most runs are finished: the status
  sync's sweep packs their series (webapp.metrics.series_packs), which comparisons
  then read. So the two data requests are measured first with no packs and no rollups
  (as if neither sweep had ever run), then again after the rollup sweep (which the beat
  runs every tick over running runs; timed) with the last ``ROLLUP_TAIL`` steps of
  every series left to the points (the seconds before the packing sweep reaches a run
  that just finished), then the packing sweep over every finished run is timed, then
  everything else runs with packs.

Also: database size, total and per million points. Prints markdown for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import (
    database_url,
    free_port,
    fresh_app_database,
    percentile,
    rollup_sweep,
    start_server,
)

REPO = Path(__file__).resolve().parents[1]
USERS = 20
EXPERIMENTS = 100
ROLLUP_TAIL = 10  # steps a run makes after the beat's last rollup tick (5 s at 2 steps/s)
SEEDS = 5
POLICIES = ("llama", "qwen", "gpt2", "phi")
REGIMES = ("standalone", "prp", "xgrpo", "sgt")
STEPS = 1000
FILL_WRITERS = 2  # connections writing points at once (one per core here)
KEYS = (
    "val/reward@1",
    "train/reward_mean",
    "train/reward_std",
    "train/accuracy",
    "actor/entropy",
    "actor/kl_loss",
    "actor/kl_coef",
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/clip_frac",
    "response/length_mean",
    "response/length_max",
    "response/self_reflection_rate",
    "perf/rollouts_total",
    "perf/response_tokens_total",
    "perf/step_seconds",
    "transfer/in",
    "transfer/out",
    "train/advantage_mean",
    "train/solved_frac",
)
SERIES_PER_RUN = (len(POLICIES) + 1) * len(KEYS)


def lab_points(runs: int = EXPERIMENTS * SEEDS) -> int:
    """The points a lab of ``runs`` runs holds (:data:`POINTS` for the default 500)."""
    return runs * SERIES_PER_RUN * STEPS


POINTS = lab_points()


# One run's points in ingestion order: at each step, every series of the run.
FILL_RUN_SQL = """
    INSERT INTO experiments_metricpoint (series_id, step, value, wall_time)
    SELECT s.id, t,
           CASE s.key
               WHEN 'perf/rollouts_total' THEN 256.0 * t
               WHEN 'perf/response_tokens_total' THEN 256.0 * t * (90 + s.run_id %% 7)
               WHEN 'actor/kl_coef' THEN 0.001
               ELSE 0.3 + 0.4 * (1 - exp(-t / (300.0 + 20 * (s.run_id %% 5))))
                    + 0.03 * sin(t / 17.0 + s.id) + 0.02 * (random() - 0.5)
           END,
           1.7e9 + s.run_id * 100000 + 3.0 * t
    FROM generate_series(1, %(steps)s) AS t, experiments_metricseries AS s
    WHERE s.run_id = %(run)s
    ORDER BY t, s.id
"""

# Each series' lowest and highest step, which ingestion keeps as it stores the points
# (webapp.metrics.ingest) and a comparison's step range reads.
FILL_STEP_RANGES_SQL = """
    UPDATE experiments_metricseries AS s SET first_step = r.lo, last_step = r.hi
    FROM (SELECT series_id, min(step) AS lo, max(step) AS hi
          FROM experiments_metricpoint GROUP BY series_id) AS r
    WHERE s.id = r.series_id
"""

# Two events per step for runs of a sharing regime: a rollout handed on, a success.
FILL_EVENTS_SQL = """
    INSERT INTO experiments_transferevent
        (run_id, step, source, target, kind, prompt_id, count, weight)
    SELECT r.id, t, (%(policies)s::text[])[1 + t %% 4], (%(policies)s::text[])[1 + (t + 1) %% 4],
           e.kind, 'p' || (t * 7 %% 512), 1 + t %% 3, NULL
    FROM experiments_run AS r, generate_series(1, %(steps)s) AS t,
         unnest(ARRAY['rollout', 'success']) AS e(kind)
    WHERE r.regime <> 'standalone'
"""


def build_lab(steps: int = STEPS, experiments: int = EXPERIMENTS) -> list[int]:
    """Users, experiments and runs through the services; run ids. ``steps``: each run's
    length (bench/vs_mlflow.py's ``--lab-reads`` builds shorter labs); ``experiments`` of
    :data:`SEEDS` runs each."""
    import django

    django.setup()
    from django.contrib.auth.models import User

    from webapp.core.services import lab_join
    from webapp.runs import services
    from webapp.runs.models import Run, Tag

    users = []
    for index in range(USERS):
        user = User.objects.create_user(f"user{index:02d}", password="bench-password")
        lab = lab_join(user)
        users.append(user)
    tags = [Tag.objects.create(lab=lab, name=name) for name in ("baseline", "paper", "ablation")]
    run_ids: list[int] = []
    for index in range(experiments):
        regime = REGIMES[index % len(REGIMES)]
        config: dict[str, Any] = {
            "name": f"{regime}-pool{index:03d}",
            "regime": regime,
            "pool": [{"name": p, "model": "zoo:tiny-llama-char"} for p in POLICIES],
            "steps": steps,
        }
        if index % 4 == 1:
            config["off_policy"] = "remix"
        experiment = services.experiment_create(
            owner=users[index % USERS],
            config=config,
            seeds=list(range(SEEDS)),
            description=f"lab-scale experiment {index}",
        )
        for run in services.runs_create(experiment):
            run_ids.append(run.pk)
            if run.pk % 7 == 0:
                run.tags.add(tags[run.pk % len(tags)])
    # States as a lab would have them: most runs done, a few live or broken.
    states = {0: "running", 1: "failed", 2: "cancelled"}
    for run_id in run_ids:
        state = states.get(run_id % 25, "completed")
        Run.objects.filter(pk=run_id).update(
            state=state,
            backend="slurm",
            slurm_job_id=str(100000 + run_id),
            node="gpu-node-01",
            last_step=steps,
            status_message=f"step {steps}/{steps}",
        )
    return run_ids


def fill(url: str, run_ids: list[int], writers: int = FILL_WRITERS, steps: int = STEPS) -> float:
    """Series, points and transfer events, in SQL. ``writers`` connections write points
    at once, each run by run in ingestion order, as concurrent runs ingest (their pages
    interleave in the heap as they would); ``steps`` points a series. The seconds the
    points took to write (before the step ranges, events and ``VACUUM ANALYZE``)."""
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO experiments_metricseries (run_id, policy, key) "
            "SELECT r, p, k FROM unnest(%s::bigint[]) AS r, unnest(%s::text[]) AS p, "
            "unnest(%s::text[]) AS k ORDER BY r, p, k",
            [run_ids, [*POLICIES, "_pool"], list(KEYS)],
        )
    done = 0
    lock = threading.Lock()

    def write(share: list[int], seed: float) -> None:
        nonlocal done
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            conn.execute("SELECT setseed(%s)", [seed])
            for run_id in share:
                conn.execute(FILL_RUN_SQL, {"steps": steps, "run": run_id})
                with lock:
                    done += 1
                    if done % 50 == 0:
                        elapsed = time.perf_counter() - started
                        eta = elapsed / done * (len(run_ids) - done)
                        print(f"  {done}/{len(run_ids)} runs filled, {elapsed:.0f} s, "
                              f"~{eta:.0f} s left", flush=True)  # fmt: skip

    with ThreadPoolExecutor(writers) as pool:
        shares = [run_ids[index::writers] for index in range(writers)]
        for future in [pool.submit(write, share, 0.1 * (1 + i)) for i, share in enumerate(shares)]:
            future.result()
    points_seconds = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FILL_STEP_RANGES_SQL)
        conn.execute(FILL_EVENTS_SQL, {"steps": steps, "policies": list(POLICIES)})
        print(f"filled in {time.perf_counter() - started:.0f} s; vacuum analyze", flush=True)
        for table in ("metricpoint", "metricseries", "transferevent", "run"):
            conn.execute(f"VACUUM ANALYZE experiments_{table}")
    print(f"ready after {time.perf_counter() - started:.0f} s", flush=True)
    return points_seconds


def packs_forget(url: str) -> None:
    """No series packs, no run marked packed: as if the status sync had never swept."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE experiments_seriespack")
        conn.execute("UPDATE experiments_run SET series_packed = false WHERE series_packed")


def rollups_forget(url: str) -> None:
    """No rollups: as if the beat's rollup sweep had never run."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE experiments_seriesrollup")
        conn.execute(
            "UPDATE experiments_metricseries SET rolled_through = -1 WHERE rolled_through >= 0"
        )


def sweep_timed(url: str, max_runs: int) -> tuple[int, int, float]:
    """Forget every pack, then pack every finished run (of at most ``max_runs``) as the
    status sync's sweep does; (runs, series, seconds)."""
    from webapp.metrics import series_packs

    packs_forget(url)
    started = time.perf_counter()
    runs, series = series_packs.packs_sweep(max_runs=max_runs)
    return runs, series, time.perf_counter() - started


def point_count(url: str) -> int:
    try:
        with psycopg.connect(url) as conn:
            return conn.execute("SELECT count(*) FROM experiments_metricpoint").fetchone()[0]
    except psycopg.Error:
        return 0


def sizes(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT pg_database_size(current_database()), "
            "pg_table_size('experiments_metricpoint'), "
            "pg_indexes_size('experiments_metricpoint'), "
            "pg_total_relation_size('experiments_transferevent'), "
            "(SELECT count(*) FROM experiments_transferevent)"
        ).fetchone()
    names = ("database", "points_heap", "points_index", "events", "n_events")
    return dict(zip(names, row, strict=True))


def session_for(username: str) -> str:
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.get(username=username))
    return client.cookies["sessionid"].value


Params = dict[str, Any]
Case = tuple[str, Callable[[], tuple[str, Params]]]


def timed(
    session: requests.Session, base: str, make: Callable[[], tuple[str, Params]], reps: int
) -> tuple[list[float], int]:
    """Request times (one warm-up first) and the warm-up reply's size in bytes."""
    path, params = make()
    warm_up = session.get(base + path, params=params, timeout=120)
    warm_up.raise_for_status()
    times = []
    for _ in range(reps):
        path, params = make()
        started = time.perf_counter()
        response = session.get(base + path, params=params, timeout=120)
        elapsed = time.perf_counter() - started
        response.raise_for_status()
        times.append(elapsed)
    return times, len(warm_up.content)


def cases(
    run_ids: list[int], sharing_run_ids: list[int], experiment_ids: list[int]
) -> tuple[list[Case], list[Case]]:
    """(label, () -> (path, params)) for every page and request measured: the
    comparisons measured before the sweep packs the runs, and the rest. The transfer
    requests go to runs of a sharing regime (standalone runs have no events)."""
    rng = random.Random(7)
    one = lambda: rng.choice(run_ids)  # noqa: E731 - a tiny local helper
    sharing = lambda: rng.choice(sharing_run_ids)  # noqa: E731
    all_keys = {"max_points": "2000"}
    fifty = lambda: ",".join(map(str, rng.sample(run_ids, 50)))  # noqa: E731
    compare_query = {"group_by": "regime", "x": "step", "smooth": "0.6"}
    unpacked = [
        ("compare data, 50 runs, 2 metrics, not packed yet",
         lambda: ("/api/v1/compare", {"runs": fifty(), **compare_query,
                                      "metric": ["val/reward@1", "train/reward_mean"]})),
        ("compare data, 50 runs, 8 metrics, not packed yet",
         lambda: ("/api/v1/compare", {"runs": fifty(), **compare_query,
                                      "metric": list(KEYS[:8])})),
    ]  # fmt: skip
    return unpacked, [
        ("dashboard", lambda: ("/", {})),
        ("experiment list, page 1", lambda: ("/experiments/", {})),
        ("experiment list, deep page",
         lambda: ("/experiments/", {"page": rng.randint(2, 4)})),
        ("run list, page 1", lambda: ("/runs/", {})),
        ("run list, deep page", lambda: ("/runs/", {"page": rng.randint(5, 10)})),
        ("run list, sorted by state", lambda: ("/runs/", {"sort": "state"})),
        ("run list, filtered (regime=sgt, state=completed)",
         lambda: ("/runs/", {"regime": "sgt", "state": "completed"})),
        ("experiment page", lambda: (f"/experiments/{rng.choice(experiment_ids)}/", {})),
        ("run page (HTML)", lambda: (f"/runs/{one()}/", {})),
        ("run page: keys (100 series)", lambda: (f"/api/v1/runs/{one()}/keys", {})),
        ("run page: every series, <=2,000 points each (100k points)",
         lambda: (f"/api/v1/runs/{one()}/series", all_keys)),
        ("run page: one metric, 5 policies",
         lambda: (f"/api/v1/runs/{one()}/series", {"key": "val/reward@1", **all_keys})),
        ("run page: 5-s poll (after_step, every series)",
         lambda: (f"/api/v1/runs/{one()}/series", {"after_step": STEPS - 2, **all_keys})),
        ("run page: status", lambda: (f"/api/v1/runs/{one()}/status", {})),
        ("run page: transfer log (50 rows)",
         lambda: (f"/api/v1/runs/{sharing()}/events", {"limit": 50})),
        ("run page: transfer matrix",
         lambda: (f"/api/v1/runs/{sharing()}/events/summary", {})),
        ("run page: transfer matrix, filtered (source, steps 200-600)",
         lambda: (f"/api/v1/runs/{sharing()}/events/summary",
                  {"source": "qwen", "step_min": 200, "step_max": 600})),
        ("run page: transfer log, filtered (source -> target)",
         lambda: (f"/api/v1/runs/{sharing()}/events",
                  {"source": "llama", "target": "gpt2", "limit": 50})),
        ("run page: one curve as CSV (5 policies x 1,000 steps)",
         lambda: (f"/runs/{one()}/metric.csv", {"key": "val/reward@1"})),
        ("compare page (HTML), 50 runs", lambda: ("/compare/", {"runs": fifty()})),
        ("compare data, 50 runs, 2 metrics (page default)",
         lambda: ("/api/v1/compare", {"runs": fifty(), **compare_query,
                                      "metric": ["val/reward@1", "train/reward_mean"]})),
        ("compare data, 50 runs, 8 metrics",
         lambda: ("/api/v1/compare", {"runs": fifty(), **compare_query,
                                      "metric": list(KEYS[:8])})),
        ("compare summary, 50 runs",
         lambda: ("/api/v1/compare/summary", {"runs": fifty(), "group_by": "regime",
                                       "metric": "val/reward@1"})),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20, help="requests per page after a warm-up")
    parser.add_argument("--reuse", action="store_true", help="keep a database already filled")
    parser.add_argument(
        "--runs",
        type=int,
        default=EXPERIMENTS * SEEDS,
        help=f"runs in the lab, a multiple of {SEEDS} (2000: four times the lab, 200M points)",
    )
    args = parser.parse_args()
    if args.runs < SEEDS or args.runs % SEEDS:
        parser.error(f"--runs must be a positive multiple of {SEEDS}; got {args.runs}")
    expected_points = lab_points(args.runs)

    url = database_url()
    fill_seconds: float | None = None
    if args.reuse and point_count(url) == expected_points:
        from bench.ingest import app_environment

        env = app_environment("scale")
        # A database filled by an older version gets the newer migrations (indexes).
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True
        )
        import django

        django.setup()
        print(f"reusing {expected_points:,} points", flush=True)
        packs_forget(url)  # the first comparisons are measured without packs
        rollups_forget(url)  # ... and without rollups
    else:
        env = fresh_app_database("scale")
        fill_seconds = fill(url, build_lab(experiments=args.runs // SEEDS))
    from webapp.runs.models import Experiment, Run

    run_ids = list(Run.objects.values_list("pk", flat=True))
    sharing_run_ids = list(Run.objects.exclude(regime="standalone").values_list("pk", flat=True))
    experiment_ids = list(Experiment.objects.values_list("pk", flat=True))
    db = sizes(url)

    port = free_port()
    server = start_server(env, port)
    rows = []
    try:
        session = requests.Session()
        session.cookies.set("sessionid", session_for("user00"))
        base = f"http://127.0.0.1:{port}"
        unpacked, packed = cases(run_ids, sharing_run_ids, experiment_ids)
        rolled = [(f"{label}, rolled up but the last {ROLLUP_TAIL} steps", make)
                  for label, make in unpacked]  # fmt: skip
        measured = [*unpacked, *rolled, *packed]
        for index, (label, make) in enumerate(measured):
            if index == len(unpacked):  # the beat's rollup sweep, over the runs' lives
                rollup_sweep(run_ids, STEPS - 1, ROLLUP_TAIL)
            if index == len(unpacked) + len(rolled):  # the packing sweep, from no packs
                swept_runs, swept_series, sweep_seconds = sweep_timed(url, len(run_ids))
            times, size = timed(session, base, make, args.reps)
            p50, p95 = percentile(times, 0.5) * 1000, percentile(times, 0.95) * 1000
            rows.append((label, p50, p95, size))
            print(f"{label}: p50 {p50:,.0f} ms, p95 {p95:,.0f} ms, {size / 1e3:,.0f} kB",
                  flush=True)  # fmt: skip
    finally:
        server.terminate()
        server.wait()

    points = point_count(url)
    with psycopg.connect(url) as conn:
        packs, pack_bytes = conn.execute(
            "SELECT count(*), pg_total_relation_size('experiments_seriespack') "
            "FROM experiments_seriespack"
        ).fetchone()
        rollups, rollup_bytes = conn.execute(
            "SELECT count(*), pg_total_relation_size('experiments_seriesrollup') "
            "FROM experiments_seriesrollup"
        ).fetchone()
    print(f"\n{len(run_ids)} runs, {USERS} users, {points:,} points, "
          f"{db['n_events']:,} transfer events; {args.reps} requests per row\n")  # fmt: skip
    print("| page / request | p50 ms | p95 ms | reply |")
    print("| --- | ---: | ---: | ---: |")
    for label, p50, p95, size in rows:
        mark = "" if p95 < 300 else " **>300**"
        print(f"| {label} | {p50:,.0f} | {p95:,.0f}{mark} | {size / 1e3:,.0f} kB |")
    per_million = (db["points_heap"] + db["points_index"]) / (points / 1e6)
    print(
        f"\nDatabase {db['database'] / 2**30:.2f} GiB; points table "
        f"{db['points_heap'] / 2**30:.2f} GiB + index {db['points_index'] / 2**30:.2f} GiB "
        f"= {per_million / 2**20:.1f} MiB per million points; transfer events "
        f"{db['events'] / 2**20:.0f} MiB; series packs of every finished run: {packs:,} "
        f"({pack_bytes / 2**20:.0f} MiB); rollup blocks: {rollups:,} "
        f"({rollup_bytes / 2**20:.0f} MiB, {rollup_bytes / points:.1f} bytes a point)"
    )
    if fill_seconds is not None:
        print(
            f"Fill: {points:,} points written in {fill_seconds:,.0f} s by {FILL_WRITERS} "
            f"connections = {points / fill_seconds:,.0f} points/s"
        )
    print(
        f"The sync's packing sweep over every finished run, from no packs: {swept_runs} runs, "
        f"{swept_series:,} series in {sweep_seconds:.1f} s "
        f"({sweep_seconds / max(swept_runs, 1) * 1000:.0f} ms a run of "
        f"{SERIES_PER_RUN * STEPS:,} points)"
    )


if __name__ == "__main__":
    main()
