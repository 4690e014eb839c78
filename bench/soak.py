"""Soak: 8 fake trainers stream metrics for 10 minutes while users browse.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench \\
        .venv/bin/python bench/soak.py [--minutes 10] [--trainers 8] [--browsers 2]

Drops and recreates the bench database, starts gunicorn (2 workers) like bench/ingest.py,
creates one run per trainer, and then, for ``--minutes``:

- each trainer thread sends one step at a time the way the shipper does (4 policies x
  20 keys = 80 points, plus 2 transfer events, per POST; a replay of the previous batch
  every 10th step, as after a lost reply), as fast as the server takes them;
- each browser thread logs in and loops over what the run page polls (status, keys, the
  series of 6 metrics, events summary) and the runs list, for a random run.

It reports sustained points/s, p50/p95/max latency of ingest POSTs and page/API GETs, the
number of non-2xx replies, and checks that every run's stored series are complete
(steps x 80 points, no gaps, no duplicates: the primary key forbids them).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import (
    free_port,
    fresh_app_database,
    percentile,
    start_server,
)

POLICIES = ("llama", "qwen", "gpt2", "phi")
KEYS = (*tuple(f"train/metric_{k:02d}" for k in range(19)), "val/reward@1")
PAGE_KEYS = ("val/reward@1", "train/metric_00", "train/metric_01", "train/metric_02")


def step_body(step: int) -> dict:
    now = time.time()
    points = [
        {"policy": p, "key": k, "step": step, "value": random.random(), "wall_time": now}
        for p in POLICIES
        for k in KEYS
    ]
    events = [
        {"step": step, "source": "llama", "target": t, "kind": "success",
         "prompt_id": f"p-{step}", "count": 1, "weight": None}
        for t in ("qwen", "gpt2")
    ]  # fmt: skip
    return {"points": points, "events": events, "status": {"state": "running", "message": ""}}


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ingest: list[float] = []
        self.reads: list[float] = []
        self.errors: dict[str, int] = {}
        self.accepted = 0
        self.steps: dict[int, int] = {}

    def error(self, what: str) -> None:
        with self.lock:
            self.errors[what] = self.errors.get(what, 0) + 1


def trainer(base: str, run_id: int, token: str, stop: float, stats: Stats) -> None:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    url = f"{base}/api/v1/runs/{run_id}/ingest"
    step, previous = 0, None
    while time.monotonic() < stop:
        body = step_body(step)
        for attempt in [body] + ([previous] if previous and step % 10 == 0 else []):
            started = time.perf_counter()
            try:
                reply = session.post(url, json=attempt, timeout=30)
            except requests.RequestException:
                stats.error("ingest: connection")
                time.sleep(0.5)
                continue
            elapsed = time.perf_counter() - started
            with stats.lock:
                stats.ingest.append(elapsed)
                if reply.ok:
                    stats.accepted += reply.json()["points"]["accepted"]
            if not reply.ok:
                stats.error(f"ingest: {reply.status_code}")
        previous = body
        step += 1
    with stats.lock:
        stats.steps[run_id] = step


def browser(base: str, run_ids: list[int], stop: float, stats: Stats) -> None:
    session = requests.Session()
    session.get(f"{base}/accounts/login/", timeout=10)
    session.post(
        f"{base}/accounts/login/",
        data={"username": "soak", "password": "soak-password",
              "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        timeout=10,
    )  # fmt: skip
    while time.monotonic() < stop:
        run_id = random.choice(run_ids)
        api = f"{base}/api/v1/runs/{run_id}"
        for url, params in [
            (f"{base}/runs/{run_id}/", None),
            (f"{api}/status", None),
            (f"{api}/keys", None),
            (f"{api}/series", [("key", k) for k in PAGE_KEYS] + [("max_points", "2000")]),
            (f"{api}/events/summary", None),
            (f"{base}/runs/", None),
        ]:
            started = time.perf_counter()
            try:
                reply = session.get(url, params=params, timeout=30)
            except requests.RequestException:
                stats.error("read: connection")
                continue
            with stats.lock:
                stats.reads.append(time.perf_counter() - started)
            if not reply.ok:
                stats.error(f"read {url.rsplit('/', 1)[-1] or 'page'}: {reply.status_code}")
        time.sleep(1.0)  # the run page polls every 2 s; two browsers ~ one per second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--trainers", type=int, default=8)
    parser.add_argument("--browsers", type=int, default=2)
    args = parser.parse_args()

    env = fresh_app_database("soak")

    import django

    django.setup()
    from django.contrib.auth.models import User

    from webapp.core.services import lab_join
    from webapp.metrics.models import MetricPoint, MetricSeries
    from webapp.runs import services

    user = User.objects.create_user("soak", password="soak-password")
    lab_join(user)
    config = {
        "name": "soak",
        "pool": [{"name": p, "model": "zoo:tiny-llama-char"} for p in POLICIES],
    }
    experiment = services.experiment_create(
        owner=user, config=config, seeds=list(range(args.trainers))
    )
    runs = services.runs_create(experiment)
    tokens = {run.pk: services.run_token_issue(run) for run in runs}

    port = free_port()
    server = start_server(env, port)
    base = f"http://127.0.0.1:{port}"
    stats = Stats()
    started = time.monotonic()
    stop = started + args.minutes * 60
    threads = [
        threading.Thread(target=trainer, args=(base, run_id, token, stop, stats))
        for run_id, token in tokens.items()
    ] + [
        threading.Thread(target=browser, args=(base, list(tokens), stop, stats))
        for _ in range(args.browsers)
    ]
    load = []
    try:
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            time.sleep(10)
            load.append(os.getloadavg()[0])
        elapsed = time.monotonic() - started
    finally:
        server.terminate()

    incomplete = []
    for run_id, steps in stats.steps.items():
        expected = steps * len(POLICIES) * len(KEYS)
        stored = MetricPoint.objects.filter(series__run_id=run_id).count()
        n_series = MetricSeries.objects.filter(run_id=run_id).count()
        if stored != expected or n_series != len(POLICIES) * len(KEYS):
            incomplete.append((run_id, stored, expected))

    def ms(values: list[float], q: float) -> str:
        return f"{percentile(values, q) * 1e3:.0f}"

    total_steps = sum(stats.steps.values())
    print(f"\n{args.trainers} trainers, {args.browsers} browsers, {elapsed / 60:.1f} min")
    print("| measurement | result |\n| --- | --- |")
    print(f"| points stored | {stats.accepted:,} ({total_steps:,} steps) |")
    print(f"| sustained ingestion | {stats.accepted / elapsed:,.0f} points/s |")
    print(
        f"| ingest POST latency p50 / p95 / max (ms) | {ms(stats.ingest, 0.5)} / "
        f"{ms(stats.ingest, 0.95)} / {max(stats.ingest) * 1e3:.0f} |"
    )
    print(
        f"| page + read API latency p50 / p95 / max (ms) | {ms(stats.reads, 0.5)} / "
        f"{ms(stats.reads, 0.95)} / {max(stats.reads) * 1e3:.0f} ({len(stats.reads):,} GETs) |"
    )
    print(f"| non-2xx replies or connection errors | {sum(stats.errors.values())} {stats.errors} |")
    print(f"| load average (mean over the run) | {statistics.mean(load):.1f} |")
    print(f"| series complete (no gap, no duplicate) | {incomplete if incomplete else 'yes'} |")


if __name__ == "__main__":
    main()
