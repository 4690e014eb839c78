"""Demo soak: the embedded demo with a launch every 20 s for 30 minutes.

    .venv/bin/python bench/demo_soak.py [--minutes 30] [--every 20] [--steps 24]

The demo exactly as `make demo` runs it, in a fresh directory (bench/out/demo_soak/var):
SQLite, the embedded SQLite broker, the local backend, gunicorn, the worker and beat
under ``python -m scheduler.supervisor``. Then, for ``--minutes``:

- a "researcher" logs in and presses Launch on one small experiment (2 tiny policies,
  ``--steps`` steps: long enough that two runs train at once) every ``--every`` seconds,
  through the real form POST;
- a "viewer" loops over what a researcher looks at: the dashboard, the runs list, the
  experiment page, the newest run's page and what it polls (status, keys, series,
  events summary, worker state), timing each request.

Afterwards it waits (at most ``--drain-minutes``) for the last runs to finish and reports:
worker deaths (the supervisor's restarts of the worker, and watchdog exits), runs lost
(still queued: never submitted) or stuck (neither finished nor moving), failed runs with
their reasons, run durations, and p50/p95/max per page. Target: 0 deaths, 0 stuck runs.
The summary is printed and written to bench/out/demo_soak/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.ingest import free_port, percentile  # noqa: E402

OUT = REPO / "bench" / "out" / "demo_soak"
FINISHED = {"completed", "failed", "cancelled"}
CREATE_EXPERIMENT = """
from django.contrib.auth import get_user_model
from webapp.runs import services
config = {{
    "name": "soak", "regime": "sgt",
    "pool": [
        {{"name": "llama", "model": "zoo:tiny-llama-char", "group_size": 4, "max_new_tokens": 8}},
        {{"name": "gpt2", "model": "zoo:tiny-gpt2-unigram", "group_size": 4, "max_new_tokens": 8}},
    ],
    "task": {{"levels": [1, 2], "val_size": 8}},
    "steps": {steps}, "prompts_per_step": 4, "val_every": 3, "checkpoint_every": 2,
}}
experiment = services.experiment_create(
    owner=get_user_model().objects.get(username="demo"), config=config, seeds=[0],
    resources={{"backend": "local", "mem_gb": 2, "time_limit": "00:20:00"}},
)
print(experiment.pk)
"""


class Demo:
    """`make demo`'s processes in a fresh var directory."""

    def __init__(self, var_dir: Path) -> None:
        self.var_dir = var_dir
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.env = {
            k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}
        }
        self.env |= {
            "MRL_VAR_DIR": str(var_dir),
            "MRL_ZOO_DIR": os.environ.get("MRL_ZOO_DIR", str(REPO / "var" / "zoo")),
            "MRL_INGEST_BASE_URL": self.base,
            "DEBUG": "false",
        }
        self.supervisor: subprocess.Popen[bytes] | None = None

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            check=True,
            timeout=600,
        )
        return done.stdout.decode()

    def start(self) -> None:
        shutil.rmtree(self.var_dir, ignore_errors=True)
        self.var_dir.mkdir(parents=True)
        subprocess.run(
            [sys.executable, "-m", "trainer", "zoo", "build", "--zoo-dir", self.env["MRL_ZOO_DIR"]],
            cwd=REPO,
            check=True,
        )
        self.manage("migrate", "--noinput", "-v", "0")
        self.manage("demo_setup")
        argv = [sys.executable, "-m", "scheduler.supervisor", "--port", str(self.port)]
        argv += ["--var-dir", str(self.var_dir)]
        out = (self.var_dir / "supervisor.out").open("wb")
        self.supervisor = subprocess.Popen(argv, cwd=REPO, env=self.env, stderr=out)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.base}/healthz", timeout=2).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise RuntimeError("the demo did not come up")

    def stop(self) -> None:
        if self.supervisor is not None:
            self.supervisor.send_signal(signal.SIGTERM)
            self.supervisor.wait(timeout=120)

    def runs(self) -> list[tuple[int, str, str, str, str]]:
        """(id, state, status message, created, finished) of every run."""
        with sqlite3.connect(self.var_dir / "demo.sqlite3", timeout=30) as db:
            return db.execute(
                "SELECT id, state, status_message, created_at, finished_at FROM experiments_run"
            ).fetchall()

    def supervisor_log(self) -> str:
        return (self.var_dir / "supervisor.out").read_text(errors="replace")


def logged_in(base: str) -> requests.Session:
    session = requests.Session()
    session.get(f"{base}/accounts/login/", timeout=30)
    reply = session.post(
        f"{base}/accounts/login/",
        data={"username": "demo", "password": "demo-password",
              "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        timeout=30,
    )  # fmt: skip
    reply.raise_for_status()
    return session


def researcher(base: str, experiment_id: int, every: float, stop: float, launches: list) -> None:
    session = logged_in(base)
    next_at = time.monotonic()
    while next_at < stop:
        time.sleep(max(0.0, next_at - time.monotonic()))
        page = session.get(f"{base}/experiments/{experiment_id}/", timeout=30)
        reply = session.post(
            f"{base}/experiments/{experiment_id}/launch/",
            data={"csrfmiddlewaretoken": session.cookies["csrftoken"]},
            timeout=30,
            allow_redirects=False,
        )
        launches.append((time.monotonic(), page.status_code, reply.status_code))
        next_at += every


def viewer(base: str, experiment_id: int, stop: float, timings: dict, errors: list) -> None:
    session = logged_in(base)
    while time.monotonic() < stop:
        runs_page = session.get(f"{base}/runs/", timeout=30)
        run_ids = [int(i) for i in re.findall(r'href="/runs/(\d+)/"', runs_page.text)]
        newest = max(run_ids, default=None)
        pages = [
            ("dashboard", f"{base}/", None),
            ("runs list", f"{base}/runs/", None),
            ("experiment page", f"{base}/experiments/{experiment_id}/", None),
            ("worker state", f"{base}/api/v1/worker", None),
        ]
        if newest is not None:
            api = f"{base}/api/v1/runs/{newest}"
            pages += [
                ("run page", f"{base}/runs/{newest}/", None),
                ("run status", f"{api}/status", None),
                ("run keys", f"{api}/keys", None),
                ("run series", f"{api}/series", [("key", "train/reward"), ("key", "val/reward@1")]),
                ("run events summary", f"{api}/events/summary", None),
            ]
        for name, url, params in pages:
            started = time.perf_counter()
            try:
                reply = session.get(url, params=params, timeout=30)
                if not reply.ok:
                    errors.append(f"{name}: {reply.status_code}")
            except requests.RequestException as exc:
                errors.append(f"{name}: {exc}")
                continue
            timings[name].append(time.perf_counter() - started)
        time.sleep(1.0)


def summarize(demo: Demo, launches: list, timings: dict, errors: list, minutes: float) -> dict:
    runs = demo.runs()
    log = demo.supervisor_log()
    worker_log = (demo.var_dir / "log" / "worker.log").read_text(errors="replace")
    durations = []
    for _, state, _, created, finished in runs:
        if state == "completed" and finished:
            durations.append(_seconds_between(created, finished))
    return {
        "minutes": minutes,
        "launches": len(launches),
        "launch_replies": sorted({reply for _, _, reply in launches}),
        "runs": len(runs),
        "completed": sum(state == "completed" for _, state, *_ in runs),
        "failed": [(i, message) for i, state, message, *_ in runs if state == "failed"],
        "lost (still queued)": [i for i, state, *_ in runs if state == "queued"],
        "stuck (not finished)": [(i, s) for i, s, *_ in runs if s not in FINISHED | {"queued"}],
        "worker deaths": len(re.findall(r"\] worker \(pid \d+\) ", log)),
        "watchdog exits": worker_log.count("watchdog:"),
        "unrecoverable errors": worker_log.count("Unrecoverable error"),
        "restarts of any program": len(re.findall(r"starting it again", log)),
        "run seconds p50/max": [
            round(percentile(durations, 0.5), 1) if durations else None,
            round(max(durations), 1) if durations else None,
        ],
        "http errors": errors[:20],
        "pages ms p50/p95/max (n)": {
            name: [
                round(1000 * percentile(values, 0.5)),
                round(1000 * percentile(values, 0.95)),
                round(1000 * max(values)),
                len(values),
            ]
            for name, values in sorted(timings.items())
        },
    }


def _seconds_between(start: str, end: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--every", type=float, default=20, help="seconds between launches")
    parser.add_argument("--steps", type=int, default=24, help="training steps of each run")
    parser.add_argument("--drain-minutes", type=float, default=10)
    args = parser.parse_args()

    demo = Demo(OUT / "var")
    demo.start()
    try:
        experiment_id = int(
            demo.manage("shell", "-c", CREATE_EXPERIMENT.format(steps=args.steps)).split()[-1]
        )
        stop = time.monotonic() + 60 * args.minutes
        launches: list = []
        timings: dict[str, list[float]] = defaultdict(list)
        errors: list[str] = []
        threads = [
            threading.Thread(
                target=researcher, args=(demo.base, experiment_id, args.every, stop, launches)
            ),
            threading.Thread(target=viewer, args=(demo.base, experiment_id, stop, timings, errors)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        drain_until = time.monotonic() + 60 * args.drain_minutes
        while time.monotonic() < drain_until:
            if all(state in FINISHED for _, state, *_ in demo.runs()):
                break
            time.sleep(2)
        summary = summarize(demo, launches, timings, errors, args.minutes)
    finally:
        demo.stop()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
