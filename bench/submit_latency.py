"""Submission latency: from the "Launch" form POST to the run's Slurm (or local) job id.

    PYTHONPATH=. DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench \\
        CELERY_BROKER_URL=redis://127.0.0.1:6379/0 .venv/bin/python bench/submit_latency.py

Needs the one-node Slurm cluster (`scripts/slurm-dev-cluster start`) and Redis. Drops and
recreates the bench database, starts gunicorn and a real Celery worker (Redis, its own
queue), logs in over HTTP, and for each backend posts the experiment's launch form
``--launches`` times (one seed each). Per launch it times (a) the POST until its redirect
and (b) the POST until the run has its job id in Postgres (the worker claimed it, wrote
the job directory and ran ``sbatch --parsable``, or started the local process group).
Each job is cancelled as soon as it has its id. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.ingest import (
    REPO,
    free_port,
    fresh_app_database,
    percentile,
    start_server,
)


def login(base: str) -> requests.Session:
    session = requests.Session()
    session.get(f"{base}/accounts/login/", timeout=10)
    response = session.post(
        f"{base}/accounts/login/",
        data={
            "username": "bench",
            "password": "bench-password",
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        timeout=10,
    )
    response.raise_for_status()
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=20, help="launches per backend")
    args = parser.parse_args()

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    env = fresh_app_database(
        "submit",
        CELERY_BROKER_URL=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
        CELERY_TASK_DEFAULT_QUEUE=queue,
    )
    env["MRL_RUN_ROOT"] = os.environ["MRL_RUN_ROOT"] = f"{env['MRL_VAR_DIR']}/runs"

    import django

    django.setup()
    from django.contrib.auth.models import User

    from scheduler.cancel import cancel
    from webapp.core.services import lab_join
    from webapp.runs import services
    from webapp.runs.models import Run

    user = User.objects.create_user("bench", password="bench-password")
    lab_join(user)
    experiments = {}
    for backend in ("slurm", "local"):
        config = {
            "name": f"latency-{backend}",
            "pool": [
                {"name": "llama", "model": "zoo:tiny-llama-char"},
                {"name": "gpt2", "model": "zoo:tiny-gpt2-unigram"},
            ],
            "steps": 1,
        }
        resources = {"backend": backend, "mem_gb": 1, "partition": "debug"}
        if backend == "local":
            resources["partition"] = "local"
        experiments[backend] = services.experiment_create(
            owner=user, config=config, seeds=[0], resources=resources
        )

    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "scheduler", "worker", "--pool=solo",
         "-Q", queue, "--loglevel=WARNING", "--without-mingle", "--without-gossip"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    port = free_port()
    server = start_server(env, port)
    base = f"http://127.0.0.1:{port}"
    rows = []
    try:
        session = login(base)
        time.sleep(3)  # the worker connects to Redis
        for backend, experiment in experiments.items():
            posted, with_job = [], []
            for _ in range(args.launches):
                known = set(experiment.runs.values_list("pk", flat=True))
                start = time.perf_counter()
                response = session.post(
                    f"{base}/experiments/{experiment.pk}/launch/",
                    headers={"X-CSRFToken": session.cookies["csrftoken"]},
                    allow_redirects=False,
                    timeout=30,
                )
                posted.append(time.perf_counter() - start)
                assert response.status_code == 302, response.status_code
                deadline = time.monotonic() + 60
                run = None
                while time.monotonic() < deadline:
                    run = experiment.runs.exclude(pk__in=known).exclude(slurm_job_id="").first()
                    if run is not None:
                        break
                    time.sleep(0.005)
                assert run is not None, "no job id within 60 s"
                with_job.append(time.perf_counter() - start)
                cancel(run.pk)
            rows.append((backend, posted, with_job))
    finally:
        server.terminate()
        worker.terminate()
        for run in Run.objects.exclude(slurm_job_id="").exclude(state="cancelled"):
            cancel(run.pk)

    print(f"\n{args.launches} launches per backend; milliseconds\n")
    print("| backend | form POST -> redirect, p50 / p95 | form POST -> job id, p50 / p95 |")
    print("| --- | --- | --- |")

    def ms(values: list[float]) -> str:
        return f"{percentile(values, 0.5) * 1e3:.0f} / {percentile(values, 0.95) * 1e3:.0f}"

    for backend, posted, with_job in rows:
        print(f"| {backend} | {ms(posted)} | {ms(with_job)} |")


if __name__ == "__main__":
    main()
