"""Our ingestion API against an MLflow tracking server on the same PostgreSQL (issue 9).

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench \\
        .venv/bin/python bench/vs_mlflow.py [--points 400000] [--fetches 10]

One stream of metrics, 4 policies x 20 keys x 5,000 steps = 400,000 points (``--points``
takes a prefix of it: whole steps of all 80 series), goes to each side with its best
batch API, from one client posting one batch after the other:

- ours: ``POST /api/v1/runs/<id>/ingest`` with ``requests``, 10,000 points a batch (the
  API's maximum), gunicorn with 2 sync workers (bench/ingest.py's server), the database
  named in ``DATABASE_URL`` (dropped and recreated; its name must contain "bench");
- MLflow: ``MlflowClient().log_batch`` with 1,000 metrics a call (MLflow's limit,
  ``MAX_METRICS_PER_BATCH``), one MLflow run per policy (``--mlflow-layout
  policy-in-key`` puts all 80 series in one run as "llama/train/metric_00" instead),
  ``mlflow server --workers 2`` (uvicorn), backend store ``MLFLOW_DATABASE_URL``
  (default ``postgres://postgres@127.0.0.1:5432/mrl_bench_mlflow``, also dropped and
  recreated; its name must contain "bench").

Each side's timing covers its client's encoding (ours the trainer's shipper's,
``trainer.shipper.encode_body``: orjson, as the shipper sends since issue 23, json before;
MLflow's protobuf-to-JSON inside ``log_batch``) and the HTTP round trips; the point records
themselves (dicts; ``Metric`` objects) are built before the clock starts. Then one full
series (llama, train/metric_00: ``--points`` / 80 steps) is fetched back ``--fetches``
times after one warm-up: ours with ``GET .../series?key=&policy=&max_points=10000`` (raw,
not downsampled, logged-in session), MLflow's with ``MlflowClient().get_metric_history``;
both are checked against the stream, point for point.

MLflow is not one of our dependencies: it lives in its own environment, ``.venv-bench``
(git-ignored), which this script creates on first use, the equivalent of

    python3 -m venv .venv-bench
    .venv-bench/bin/pip install mlflow==3.17.2 'psycopg[binary]'

(psycopg 3, the driver SQLAlchemy 2.1 uses for ``postgresql://``, is the PostgreSQL driver
of MLflow's SQLAlchemy store, as it is ours). The MLflow server and
the MLflow client half of the benchmark (this file, ``--mlflow-client URI``, which prints
its results as JSON) run from that environment; our half runs in this process.

``--lab-reads`` (issue 34) measures the reads a notebook makes instead, at lab scale:
bench/scale.py's lab (500 runs of 20 users, 4 policies and ``_pool`` x 20 keys a run;
``--lab-steps`` points a series, 1,000 in scale.py) on both sides, the points written in
SQL on both (log_batch's 5,700 points/s would take hours), then, ``--reps`` times after a
warm-up:

- listing the 500 runs with their final values: ours ``GET /api/v1/runs?limit=500`` with
  the 20 keys as ``metric`` (final and best of every policy: the 100 values MLflow's
  latest metrics hold), and with one key; MLflow ``mlflow.search_runs`` of the
  experiment (a DataFrame of every run's params, tags and latest metrics);
- 8 keys of 50 random runs' history, every point: ours one ``GET .../history`` a run
  (8 keys x 5 policies), MLflow ``MlflowClient.get_metric_history`` per run and key (40
  calls a run, 2,000 in all: MLflow has one metric per call);
- the same two through our client (``Lab.runs``, ``Lab.history``: DataFrames included).

One MLflow run per run of ours, the policy in the key ("llama/val/reward@1"), the run's
config flattened into params, regime, seed and owner as tags. Ours reads with a
personal token, after the rollup sweep over every run (as the beat leaves a lab).

Prints a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
BENCH_VENV = REPO / ".venv-bench"
MLFLOW_VERSION = "3.17.2"  # the newest installable from PyPI on 2026-11-30 (3.18.0's
# mlflow-skinny was not published yet)
POLICIES = ("llama", "qwen", "gpt2", "phi")
KEYS = tuple(f"train/metric_{k:02d}" for k in range(20))
FULL_STREAM = len(POLICIES) * len(KEYS) * 5_000
OUR_BATCH = 10_000
MLFLOW_BATCH = 1_000
FETCH_POLICY, FETCH_KEY = POLICIES[0], KEYS[0]


# --------------------------------------------------------------------------- the stream


def value_of(policy: int, key: int, step: int) -> float:
    """A deterministic value in [0, 1) for every point: both sides get the same numbers."""
    return ((step * 7919 + key * 104_729 + policy * 31) % 10_007) / 10_007


def stream(n_points: int) -> list[tuple[str, str, int, float, float]]:
    """The first ``n_points`` of the stream, (policy, key, step, value, wall_time), in the
    order a trainer logs them: step by step, every policy x key at each step."""
    points = []
    step = 0
    while len(points) < n_points:
        for p, policy in enumerate(POLICIES):
            for k, key in enumerate(KEYS):
                points.append((policy, key, step, value_of(p, k, step), 1.7e9 + step))
        step += 1
    return points[:n_points]


def expected_series(n_points: int) -> list[tuple[int, float]]:
    return [(s, v) for p, k, s, v, _ in stream(n_points) if (p, k) == (FETCH_POLICY, FETCH_KEY)]


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {"p50": at(0.5), "p95": at(0.95), "n": len(times)}


# --------------------------------------------------------------------------- MLflow client
# Runs under .venv-bench/bin/python: the standard library and mlflow only.


def mlflow_client(uri: str, n_points: int, fetches: int, layout: str) -> dict[str, Any]:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("vs-mlflow-bench")
    if layout == "run-per-policy":
        runs = {p: client.create_run(experiment, run_name=p).info.run_id for p in POLICIES}

        def target(policy: str, key: str) -> tuple[str, str]:
            return runs[policy], key
    else:
        run_id = client.create_run(experiment, run_name="all-policies").info.run_id
        runs = dict.fromkeys(POLICIES, run_id)

        def target(policy: str, key: str) -> tuple[str, str]:
            return run_id, f"{policy}/{key}"

    # The batches, in stream order: a batch goes out when its run has 1,000 metrics ready.
    calls: list[tuple[str, list[Any]]] = []
    pending: dict[str, list[Any]] = {}
    for policy, key, step, value, wall_time in stream(n_points):
        run_id, name = target(policy, key)
        metrics = pending.setdefault(run_id, [])
        metrics.append(Metric(name, value, int(wall_time * 1000), step))
        if len(metrics) == MLFLOW_BATCH:
            calls.append((run_id, metrics))
            pending[run_id] = []
    calls.extend((run_id, metrics) for run_id, metrics in pending.items() if metrics)

    started = time.perf_counter()
    for run_id, metrics in calls:
        client.log_batch(run_id, metrics=metrics)
    seconds = time.perf_counter() - started

    fetch_run, fetch_key = target(FETCH_POLICY, FETCH_KEY)
    expected = expected_series(n_points)
    history = client.get_metric_history(fetch_run, fetch_key)  # warm-up, and the check
    got = sorted((m.step, m.value) for m in history)
    if got != expected:
        sys.exit(f"MLflow gave back {len(got)} points, not the {len(expected)} logged")
    times = []
    for _ in range(fetches):
        t0 = time.perf_counter()
        history = client.get_metric_history(fetch_run, fetch_key)
        times.append(time.perf_counter() - t0)
        assert len(history) == len(expected)
    import psycopg
    import sqlalchemy

    return {
        "points": n_points,
        "calls": len(calls),
        "seconds": seconds,
        "fetch": summary(times),
        "series_points": len(expected),
        "versions": {
            "mlflow": mlflow.__version__,
            "sqlalchemy": sqlalchemy.__version__,
            "mlflow psycopg": psycopg.__version__,
        },
    }


# --------------------------------------------------------------------------- the bench environment


def bench_python() -> Path:
    """``.venv-bench/bin/python`` with mlflow==MLFLOW_VERSION, made on first use."""
    python = BENCH_VENV / "bin" / "python"
    probe = [str(python), "-c", "import mlflow, psycopg; print(mlflow.__version__)"]
    if python.exists():
        found = subprocess.run(probe, capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip() == MLFLOW_VERSION:
            return python
    print(f"creating {BENCH_VENV} with mlflow=={MLFLOW_VERSION} (once)", flush=True)
    subprocess.run(["python3", "-m", "venv", str(BENCH_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"mlflow=={MLFLOW_VERSION}", "psycopg[binary]"],
        check=True,
    )
    subprocess.run(probe, check=True, capture_output=True)
    return python


def mlflow_database_url() -> str:
    url = os.environ.get(
        "MLFLOW_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/mrl_bench_mlflow"
    )
    name = urlparse(url).path.lstrip("/")
    if "bench" not in name:
        sys.exit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    return url


def start_mlflow(python: Path, store: str, artifacts: Path, port: int, log: Path) -> Any:
    import requests

    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    server = subprocess.Popen(
        [str(python.parent / "mlflow"), "server", "--backend-store-uri", store,
         "--default-artifact-root", artifacts.as_uri(), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "2"],
        cwd=artifacts, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,  # mlflow starts uvicorn's processes: stop them as one group
    )  # fmt: skip
    deadline = time.monotonic() + 240  # the first start creates MLflow's schema
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"mlflow server exited ({server.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                return server
        except requests.RequestException:  # refused, or a read timeout on a busy machine
            pass
        time.sleep(0.5)
    stop_group(server)
    sys.exit(f"mlflow server did not answer /health within 240 s:\n{log.read_text()[-3000:]}")


def stop_group(server: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


# --------------------------------------------------------------------------- our side


def warm_up_workers(run: Any, port: int, rounds: int = 3) -> None:
    """Have each of gunicorn's two workers serve ingestion before the clock starts: a
    worker's first batch pays its lazy start (about 1.5 s here: imports, the database
    connection), which is no part of ingesting. Small batches go to a run of their own
    (the measured run's series stay fresh), two at once, so both workers take some.
    Until issue 35 the second worker's start was timed (1.5 of the 3.4 s).
    """
    from concurrent.futures import ThreadPoolExecutor

    import requests

    from bench.ingest import run_beside

    warm_run, warm_token = run_beside(run)
    headers = {
        "Authorization": f"Bearer {warm_token}",
        "Content-Type": "application/json",
    }
    url = f"http://127.0.0.1:{port}/api/v1/runs/{warm_run.pk}/ingest"

    def post(step: int) -> None:
        body = {"points": [{"policy": POLICIES[0], "key": KEYS[0], "step": step, "value": 0.0}]}
        requests.post(url, data=json.dumps(body), headers=headers, timeout=60).raise_for_status()

    with ThreadPoolExecutor(max_workers=2) as pool:
        for round_index in range(rounds):
            list(pool.map(post, (2 * round_index, 2 * round_index + 1)))


def ours(n_points: int, fetches: int) -> dict[str, Any]:
    import requests

    from bench.ingest import free_port, fresh_app_database, setup_run, start_server
    from trainer.shipper import encode_body

    wall0 = time.perf_counter()
    env = fresh_app_database("vs-mlflow")
    run, token, session_id = setup_run()
    port = free_port()
    server = start_server(env, port)
    base = f"http://127.0.0.1:{port}/api/v1/runs/{run.pk}"
    points = [
        {"policy": p, "key": k, "step": s, "value": v, "wall_time": w}
        for p, k, s, v, w in stream(n_points)
    ]
    chunks = [points[i : i + OUR_BATCH] for i in range(0, len(points), OUR_BATCH)]
    try:
        warm_up_workers(run, port)
        ingest = requests.Session()
        ingest.headers["Authorization"] = f"Bearer {token}"
        ingest.headers["Content-Type"] = "application/json"
        accepted = 0
        load = os.getloadavg()[0]
        started = time.perf_counter()
        for chunk in chunks:
            response = ingest.post(f"{base}/ingest", data=encode_body({"points": chunk}))
            response.raise_for_status()
            accepted += response.json()["accepted"]
        seconds = time.perf_counter() - started
        assert accepted == n_points, (accepted, n_points)

        reader = requests.Session()
        reader.cookies.set("sessionid", session_id)
        params = {"key": FETCH_KEY, "policy": FETCH_POLICY, "max_points": 10_000}
        expected = expected_series(n_points)
        reply = reader.get(f"{base}/series", params=params)  # warm-up, and the check
        reply.raise_for_status()
        (series,) = reply.json()["series"]
        got = [(s, v) for s, v in series["points"]]
        if series["downsampled"] or got != expected:
            sys.exit(f"our API gave back {len(got)} points, not the {len(expected)} ingested")
        times = []
        for _ in range(fetches):
            t0 = time.perf_counter()
            reply = reader.get(f"{base}/series", params=params)
            body = reply.json()
            times.append(time.perf_counter() - t0)
            assert len(body["series"][0]["points"]) == len(expected)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(env["MRL_VAR_DIR"], ignore_errors=True)

    import django
    import gunicorn
    import psycopg

    return {
        "points": n_points,
        "calls": len(chunks),
        "seconds": seconds,
        "load": load,
        "fetch": summary(times),
        "series_points": len(expected),
        "wall": time.perf_counter() - wall0,
        "versions": {
            "django": django.get_version(),
            "psycopg": psycopg.__version__,
            "gunicorn": gunicorn.__version__,
        },
    }


def theirs(n_points: int, fetches: int, layout: str) -> dict[str, Any]:
    from bench.ingest import free_port, recreate_database

    wall0 = time.perf_counter()
    python = bench_python()
    url = mlflow_database_url()
    recreate_database(url)
    store = urlparse(url)._replace(scheme="postgresql+psycopg").geturl()
    work = Path(tempfile.mkdtemp(prefix="mrl-bench-mlflow-"))
    port = free_port()
    server = start_mlflow(python, store, work, port, work / "server.log")
    try:
        load = os.getloadavg()[0]
        client = subprocess.run(
            [str(python), __file__, "--mlflow-client", f"http://127.0.0.1:{port}",
             "--points", str(n_points), "--fetches", str(fetches), "--mlflow-layout", layout],
            cwd=REPO, check=True, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"},
        )  # fmt: skip
    finally:
        stop_group(server)
        shutil.rmtree(work, ignore_errors=True)
    result = json.loads(client.stdout.strip().splitlines()[-1])
    result["load"] = load
    result["wall"] = time.perf_counter() - wall0
    return result


# --------------------------------------------------------------------------- reads at lab scale

LAB_HISTORY_RUNS, LAB_HISTORY_KEYS = 50, 8


def lab_keys() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """bench/scale.py's policies (``_pool`` too) and keys, without importing Django."""
    sys.path.insert(0, str(REPO))
    from bench import scale

    return (*scale.POLICIES, "_pool"), scale.KEYS


def timed_reps(reps: int, action: Any) -> tuple[list[float], Any]:
    """``action()`` once to warm up (its result kept), then ``reps`` timed calls."""
    result = action()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times, result


# Runs under .venv-bench/bin/python: the standard library, mlflow and psycopg only.
MLFLOW_FILL_SQL = """
    INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan)
    SELECT p || '/' || k, 0.3 + 0.4 * (1 - exp(-t / 300.0)) + 0.02 * (random() - 0.5),
           (1.7e12 + t * 3000)::bigint, %(run)s, t, false
    FROM generate_series(1, %(steps)s) AS t, unnest(%(policies)s::text[]) AS p,
         unnest(%(keys)s::text[]) AS k
    ORDER BY t
"""
MLFLOW_LATEST_SQL = """
    INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid)
    SELECT key, value, timestamp, step, is_nan, run_uuid FROM metrics
    WHERE run_uuid = %(run)s AND step = %(steps)s
"""


def mlflow_lab_client(uri: str, store: str, steps: int, reps: int) -> dict[str, Any]:
    import random

    import mlflow
    import psycopg
    from mlflow import MlflowClient
    from mlflow.entities import Param, RunTag

    policies, keys = lab_keys()
    client = MlflowClient(tracking_uri=uri)
    mlflow.set_tracking_uri(uri)
    experiment = client.create_experiment("lab")
    started = time.perf_counter()
    run_ids = []
    for index in range(500):
        regime = ("standalone", "prp", "xgrpo", "sgt")[index // 5 % 4]
        run = client.create_run(
            experiment,
            run_name=f"{regime}-pool{index // 5:03d}-s{index % 5}",
            tags={"regime": regime, "seed": str(index % 5), "owner": f"user{index // 5 % 20:02d}"},
        )
        params = [
            Param(f"grpo.{name}", str(value))
            for name, value in (("kl_coef", 0.001), ("clip_eps", 0.2), ("epochs", 1))
        ]
        params += [Param("regime", regime), Param("steps", str(steps))]
        params.append(Param("seed", str(index % 5)))
        params += [Param(f"pool.{i}.name", name) for i, name in enumerate(policies[:-1])]
        client.log_batch(run.info.run_id, params=params, tags=[RunTag("lab", "Lab")])
        client.set_terminated(run.info.run_id)
        run_ids.append(run.info.run_id)
    runs_seconds = time.perf_counter() - started
    database = store.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        for run_id in run_ids:
            params = {"run": run_id, "steps": steps, "policies": list(policies), "keys": list(keys)}
            conn.execute(MLFLOW_FILL_SQL, params)
            conn.execute(MLFLOW_LATEST_SQL, params)
        conn.execute("VACUUM ANALYZE metrics")
        conn.execute("VACUUM ANALYZE latest_metrics")
        points = conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
    fill_seconds = time.perf_counter() - started

    def search() -> Any:
        found = mlflow.search_runs(experiment_ids=[experiment], max_results=500)
        assert len(found) == 500 and f"metrics.{policies[0]}/{keys[0]}" in found.columns
        return found

    search_times, table = timed_reps(reps, search)
    rng = random.Random(7)
    history_keys = [f"{p}/{k}" for p in policies for k in keys[:LAB_HISTORY_KEYS]]

    def histories() -> int:
        total = 0
        for run_id in rng.sample(run_ids, LAB_HISTORY_RUNS):
            for key in history_keys:
                found = client.get_metric_history(run_id, key)
                assert len(found) == steps, (key, len(found))
                total += len(found)
        return total

    history_times, history_points = timed_reps(reps, histories)
    return {
        "points": points,
        "runs_seconds": runs_seconds,
        "fill_seconds": fill_seconds,
        "search": summary(search_times),
        "search_columns": len(table.columns),
        "history": summary(history_times),
        "history_points": history_points,
        "history_calls": LAB_HISTORY_RUNS * len(history_keys),
        "versions": {"mlflow": mlflow.__version__},
    }


def lab_reads_theirs(steps: int, reps: int) -> dict[str, Any]:
    from bench.ingest import free_port, recreate_database

    wall0 = time.perf_counter()
    python = bench_python()
    url = mlflow_database_url()
    recreate_database(url)
    store = urlparse(url)._replace(scheme="postgresql+psycopg").geturl()
    work = Path(tempfile.mkdtemp(prefix="mrl-bench-mlflow-"))
    port = free_port()
    server = start_mlflow(python, store, work, port, work / "server.log")
    try:
        client = subprocess.run(
            [str(python), __file__, "--mlflow-lab-client", f"http://127.0.0.1:{port}",
             "--mlflow-store", store, "--lab-steps", str(steps), "--reps", str(reps)],
            cwd=REPO, check=True, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"},
        )  # fmt: skip
    finally:
        stop_group(server)
        shutil.rmtree(work, ignore_errors=True)
    result = json.loads(client.stdout.strip().splitlines()[-1])
    result["wall"] = time.perf_counter() - wall0
    return result


def lab_reads_ours(steps: int, reps: int) -> dict[str, Any]:
    import random

    import requests

    from bench import scale
    from bench.ingest import database_url, free_port, fresh_app_database, start_server

    wall0 = time.perf_counter()
    env = fresh_app_database("vs-mlflow-lab")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from mutual_rl_lab_client import Lab

    from webapp.core.services import personal_token_create
    from webapp.metrics.series_rollups import run_rollup

    url = database_url()
    started = time.perf_counter()
    run_ids = scale.build_lab(steps=steps)
    scale.fill(url, run_ids, steps=steps)
    fill_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for run_id in run_ids:
        run_rollup(run_id)
    rollup_seconds = time.perf_counter() - started
    points = scale.point_count(url)
    token = personal_token_create(user=User.objects.get(username="user00"), name="bench").secret
    policies, keys = lab_keys()
    port = free_port()
    server = start_server(env, port)
    base = f"http://127.0.0.1:{port}"
    try:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"

        def listing(metrics: tuple[str, ...]) -> Any:
            params = {"limit": 500, "metric": list(metrics)}
            reply = session.get(f"{base}/api/v1/runs", params=params, timeout=300)
            reply.raise_for_status()
            body = reply.json()
            assert body["count"] == 500 and body["total"] == 500
            assert all(len(run["metrics"]) == len(metrics) for run in body["runs"])
            assert all(
                run["metrics"][metrics[0]][policies[0]]["final_step"] == steps
                for run in body["runs"]
                if run["state"] != "draft"
            )
            return len(reply.content)

        list_all_times, list_all_bytes = timed_reps(reps, lambda: listing(keys))
        list_one_times, list_one_bytes = timed_reps(reps, lambda: listing(keys[:1]))
        rng = random.Random(7)
        history_keys = list(keys[:LAB_HISTORY_KEYS])

        def histories() -> int:
            total = 0
            for run_id in rng.sample(run_ids, LAB_HISTORY_RUNS):
                address = f"{base}/api/v1/runs/{run_id}/history"
                reply = session.get(address, params={"key": history_keys}, timeout=300)
                reply.raise_for_status()
                series = reply.json()["series"]
                assert len(series) == len(policies) * LAB_HISTORY_KEYS
                assert all(len(s["step"]) == steps for s in series)
                total += sum(len(s["step"]) for s in series)
            return total

        history_times, history_points = timed_reps(reps, histories)
        lab = Lab(base, token=token)
        client_list_times, table = timed_reps(reps, lambda: lab.runs(metrics=keys, limit=500))
        assert len(table) == 500
        client_history_times, long = timed_reps(
            reps, lambda: lab.history(rng.sample(run_ids, LAB_HISTORY_RUNS), history_keys)
        )
        assert len(long) == LAB_HISTORY_RUNS * len(policies) * LAB_HISTORY_KEYS * steps
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(env["MRL_VAR_DIR"], ignore_errors=True)
    return {
        "points": points,
        "fill_seconds": fill_seconds,
        "rollup_seconds": rollup_seconds,
        "list_all": summary(list_all_times),
        "list_all_bytes": list_all_bytes,
        "list_one": summary(list_one_times),
        "list_one_bytes": list_one_bytes,
        "history": summary(history_times),
        "history_points": history_points,
        "client_list": summary(client_list_times),
        "client_list_columns": len(table.columns),
        "client_history": summary(client_history_times),
        "wall": time.perf_counter() - wall0,
    }


def lab_reads(steps: int, reps: int, only: str | None = None) -> None:
    """``--lab-reads``: both sides, then the markdown table (``only``: one side's JSON)."""
    sys.path.insert(0, str(REPO))
    if only is not None:
        side = lab_reads_ours if only == "ours" else lab_reads_theirs
        print(f"{only}: {json.dumps(side(steps, reps))}", flush=True)
        return
    uptime = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    print(f"uptime: {uptime()}", flush=True)
    mine = lab_reads_ours(steps, reps)
    print(f"ours: {json.dumps(mine)}", flush=True)
    print(f"uptime: {uptime()}", flush=True)
    other = lab_reads_theirs(steps, reps)
    print(f"mlflow: {json.dumps(other)}", flush=True)
    print(f"uptime: {uptime()}", flush=True)

    def ms(found: dict[str, float]) -> str:
        return f"{found['p50'] * 1000:,.0f} / {found['p95'] * 1000:,.0f} ms"

    def ratio(theirs: dict[str, float], ours: dict[str, float]) -> str:
        return f"{theirs['p50'] / ours['p50']:.1f}x"

    n_keys = len(lab_keys()[1])
    points = mine["history_points"]
    rows = [
        (f"list 500 runs with the final values of all {n_keys} keys x 5 policies "
         f"(ours: final and best; {mine['list_all_bytes'] / 1e6:.1f} MB)",
         ms(mine["list_all"]), ms(other["search"]), ratio(other["search"], mine["list_all"])),
        (f"list 500 runs with one key's final and best (ours; "
         f"{mine['list_one_bytes'] / 1e6:.1f} MB)",
         ms(mine["list_one"]), "(the same search_runs)", ratio(other["search"], mine["list_one"])),
        (f"history of 8 keys x 5 policies of 50 runs, every point ({points:,} points; ours 50 "
         f"requests, MLflow {other['history_calls']:,} get_metric_history calls)",
         ms(mine["history"]), ms(other["history"]), ratio(other["history"], mine["history"])),
        ("the same through our client: Lab.runs(metrics=20 keys, limit=500) -> DataFrame "
         f"({mine['client_list_columns']} columns) vs mlflow.search_runs -> DataFrame "
         f"({other['search_columns']} columns)",
         ms(mine["client_list"]), ms(other["search"]), ratio(other["search"], mine["client_list"])),
        ("the same through our client: Lab.history(50 runs, 8 keys) -> long DataFrame",
         ms(mine["client_history"]), ms(other["history"]),
         ratio(other["history"], mine["client_history"])),
        ("points in the database; fill (SQL) seconds",
         f"{mine['points']:,}; {mine['fill_seconds']:.0f} s (+ rollup sweep "
         f"{mine['rollup_seconds']:.0f} s)",
         f"{other['points']:,}; {other['fill_seconds']:.0f} s (500 runs through the API: "
         f"{other['runs_seconds']:.0f} s)", ""),
    ]  # fmt: skip
    print(f"\nlab: 500 runs x 100 series x {steps} steps; p50 / p95 of {reps} after a warm-up; "
          f"MLflow {other['versions']['mlflow']}")  # fmt: skip
    print("\n| request | ours | MLflow | MLflow / ours (p50) |\n| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--points", type=int, default=FULL_STREAM, help="a prefix of the 400,000-point stream"
    )
    parser.add_argument("--fetches", type=int, default=10, help="fetches per latency figure")
    parser.add_argument(
        "--mlflow-layout", choices=("run-per-policy", "policy-in-key"), default="run-per-policy"
    )
    parser.add_argument("--mlflow-client", metavar="URI", help=argparse.SUPPRESS)
    parser.add_argument(
        "--lab-reads", action="store_true", help="the notebook's reads at lab scale instead"
    )
    parser.add_argument("--lab-steps", type=int, default=1000, help="points a series (lab)")
    parser.add_argument("--reps", type=int, default=5, help="timed repeats (lab reads)")
    parser.add_argument(
        "--only", choices=("ours", "mlflow"), help="lab reads: measure one side, print its JSON"
    )
    parser.add_argument("--mlflow-lab-client", metavar="URI", help=argparse.SUPPRESS)
    parser.add_argument("--mlflow-store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mlflow_lab_client:
        lab = (args.mlflow_lab_client, args.mlflow_store, args.lab_steps, args.reps)
        print(json.dumps(mlflow_lab_client(*lab)))
        return
    if args.lab_reads:
        lab_reads(args.lab_steps, args.reps, args.only)
        return
    step = len(POLICIES) * len(KEYS)
    if args.points <= 0 or args.points % step:
        parser.error(f"--points must be a positive multiple of {step} (whole steps)")
    if args.mlflow_client:
        print(
            json.dumps(
                mlflow_client(args.mlflow_client, args.points, args.fetches, args.mlflow_layout)
            )
        )
        return

    sys.path.insert(0, str(REPO))
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    mine = ours(args.points, args.fetches)
    print(f"ours: {json.dumps(mine)}", flush=True)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    other = theirs(args.points, args.fetches, args.mlflow_layout)
    print(f"mlflow: {json.dumps(other)}", flush=True)
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")

    ours_rate = mine["points"] / mine["seconds"]
    their_rate = other["points"] / other["seconds"]
    n = mine["series_points"]

    def ms(value: float) -> str:
        return f"{value * 1000:.0f} ms"

    rows = [
        (
            f"ingest {args.points:,} points (80 series), points/s",
            f"{ours_rate:,.0f} ({mine['calls']} x {OUR_BATCH:,}, "
            f"{mine['seconds'] / mine['calls'] * 1000:.0f} ms/batch)",
            f"{their_rate:,.0f} ({other['calls']} x {MLFLOW_BATCH:,}, "
            f"{other['seconds'] / other['calls'] * 1000:.0f} ms/batch)",
            f"{ours_rate / their_rate:.1f}x",
        ),
        (
            "ingest wall time",
            f"{mine['seconds']:.1f} s",
            f"{other['seconds']:.1f} s",
            f"{other['seconds'] / mine['seconds']:.1f}x",
        ),
    ]
    for q in ("p50", "p95"):
        rows.append(
            (
                f"fetch one full series ({n:,} points), {q} of {args.fetches}",
                ms(mine["fetch"][q]),
                ms(other["fetch"][q]),
                f"{other['fetch'][q] / mine['fetch'][q]:.1f}x",
            )
        )
    rows.append(
        (
            "side's total wall time (database, server start, ingest, fetches)",
            f"{mine['wall']:.0f} s",
            f"{other['wall']:.0f} s",
            "",
        )
    )
    rows.append(("1-min load average at the start of ingestion", f"{mine['load']:.1f}",
                 f"{other['load']:.1f}", ""))  # fmt: skip
    versions = {**mine["versions"], **other["versions"]}
    print(f"\nMLflow layout: {args.mlflow_layout}; versions: {json.dumps(versions)}")
    print("\n| measurement | ours | MLflow | ours vs MLflow |\n| --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
