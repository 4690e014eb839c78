"""Issue 35: the points' foreign key on vs off, interleaved, same server, same database.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench \
        .venv/bin/python bench/ingest_fk.py   # ROUNDS=6 BATCHES=10 by default

"fk" (before) re-adds the constraint migration metrics/0001 had (``DEFERRABLE INITIALLY
DEFERRED``, ``NOT VALID``) and skips ingestion's run lock; "nofk" (after) is the product.

HTTP part: bench/ingest.py's gunicorn (2 sync workers), fresh run a round, BATCHES fresh
10,000-point batches of 80 series (vs_mlflow's stream shape), ms/batch.
In-process part: metrics_ingest of a parsed 10,000-point batch, its commit timed apart
(the deferred FK check fires at commit); variant "before" = FK + no run lock.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any

import psycopg
import requests

from bench.ingest import free_port, fresh_app_database, run_beside, setup_run, start_server
from bench.vs_mlflow import warm_up_workers

ROUNDS = int(os.environ.get("ROUNDS", "6"))
BATCHES = int(os.environ.get("BATCHES", "10"))
POLICIES = ("llama", "qwen", "gpt2", "phi")
KEYS = tuple(f"train/metric_{k:02d}" for k in range(20))
FK = (
    "ALTER TABLE experiments_metricpoint ADD CONSTRAINT ab_point_series_fk FOREIGN KEY "
    "(series_id) REFERENCES experiments_metricseries(id) DEFERRABLE INITIALLY DEFERRED NOT VALID"
)
NOFK = "ALTER TABLE experiments_metricpoint DROP CONSTRAINT IF EXISTS ab_point_series_fk"


def load() -> str:
    """The 1-minute load average."""
    return open("/proc/loadavg").read().split()[0]


def bodies(n: int, step0: int) -> list[dict[str, Any]]:
    """``n`` batches of 10,000 points: every policy x key at consecutive steps."""
    out: list[dict[str, Any]] = []
    pts: list[dict[str, Any]] = []
    step = step0
    while len(out) < n:
        for p in POLICIES:
            for k in KEYS:
                pts.append(
                    {
                        "policy": p,
                        "key": k,
                        "step": step,
                        "value": (step % 97) / 97,
                        "wall_time": 1.7e9 + step,
                    }
                )
                if len(pts) == 10_000:
                    out.append({"points": pts})
                    pts = []
        step += 1
    return out


def main() -> None:
    env = fresh_app_database("fkab")
    url = env["DATABASE_URL"]
    import django

    django.setup()
    from django.db import connection, transaction

    from trainer.shipper import encode_body
    from webapp.metrics import ingest
    from webapp.metrics.batch import parse_batch

    first_run, _token, _session = setup_run()

    def new_run() -> tuple[Any, str]:
        return run_beside(first_run)

    admin = psycopg.connect(url, autocommit=True)
    encoded = [encode_body(b) for b in bodies(BATCHES, 0)]
    parsed_bodies = [json.dumps(b).encode() for b in bodies(BATCHES, 0)]
    port = free_port()
    server = start_server(env, port)
    warm_up_workers(new_run()[0], port)  # each gunicorn worker's lazy start, untimed
    http: dict[str, list[float]] = {"fk": [], "nofk": []}
    proc: dict[str, dict[str, list[float]]] = {
        v: {"body": [], "commit": [], "total": []} for v in ("fk", "nofk")
    }
    loads: list[str] = []
    real_lock = ingest._run_lock
    try:
        for r in range(ROUNDS):
            order = ("fk", "nofk") if r % 2 == 0 else ("nofk", "fk")
            for variant in order:
                admin.execute(NOFK)
                if variant == "fk":
                    admin.execute(FK)
                # HTTP
                run, token = new_run()
                s = requests.Session()
                s.headers["Authorization"] = f"Bearer {token}"
                s.headers["Content-Type"] = "application/json"
                loads.append(load())
                t0 = time.perf_counter()
                for body in encoded:
                    resp = s.post(f"http://127.0.0.1:{port}/api/v1/runs/{run.pk}/ingest", data=body)
                    resp.raise_for_status()
                    assert resp.json()["points"]["accepted"] == 10_000
                ms = (time.perf_counter() - t0) / BATCHES * 1000
                http[variant].append(ms)
                # in process ("fk" = before: the FK, no run lock; "nofk" = after)
                run, _ = new_run()
                ingest._run_lock = (lambda run_id: None) if variant == "fk" else real_lock
                b = c = tt = 0.0
                for raw in parsed_bodies:
                    batch = parse_batch(raw)
                    t0 = time.perf_counter()
                    with transaction.atomic():
                        ingest.metrics_ingest(run=run, batch=batch)
                        t1 = time.perf_counter()
                    t2 = time.perf_counter()
                    b += t1 - t0
                    c += t2 - t1
                    tt += t2 - t0
                ingest._run_lock = real_lock
                proc[variant]["body"].append(b / BATCHES * 1000)
                proc[variant]["commit"].append(c / BATCHES * 1000)
                proc[variant]["total"].append(tt / BATCHES * 1000)
                print(
                    f"round {r} {variant}: http {ms:.1f} ms/batch; in-process "
                    f"{tt / BATCHES * 1000:.1f} ms (commit {c / BATCHES * 1000:.1f}) "
                    f"load {loads[-1]}",
                    flush=True,
                )
            connection.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        admin.close()
    med = statistics.median
    print("\nmedians over", ROUNDS, "rounds (ms per 10,000-point batch):")
    for v in ("fk", "nofk"):
        print(
            f"  {v}: http {med(http[v]):.1f}; in-process total {med(proc[v]['total']):.1f} "
            f"= body {med(proc[v]['body']):.1f} + commit {med(proc[v]['commit']):.1f}"
        )
    ratios = [a / b for a, b in zip(http["fk"], http["nofk"], strict=True)]
    print(f"  http fk/nofk per round: {[round(x, 2) for x in ratios]}, median {med(ratios):.2f}")
    print("  loads:", loads)
    print("RAW", json.dumps({"http": http, "proc": proc, "loads": loads}))


if __name__ == "__main__":
    main()
