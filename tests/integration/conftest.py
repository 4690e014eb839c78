"""Real services for integration tests: a Celery worker consuming from Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

REPO = Path(__file__).resolve().parents[2]


@dataclass
class CeleryWorker:
    process: subprocess.Popen[bytes]
    queue: str
    log_path: Path
    supervisor_log_path: Path | None = None

    def log(self) -> str:
        """The worker's log, after the supervisor's lines when it is supervised."""
        logs = [self.supervisor_log_path, self.log_path]
        return "".join(p.read_text(errors="replace") for p in logs if p and p.exists())


def database_url_of_the_tests() -> str:
    """The URL of the test database, for the processes a test starts."""
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def start_celery_worker(
    tmp_path_factory: pytest.TempPathFactory,
    extra_env: dict[str, str] | None = None,
    *,
    beat: bool = False,
    supervised: bool = False,
    supervisor_args: tuple[str, ...] = (),
) -> CeleryWorker:
    """A real `celery worker` process, on its own queue, against the test database.

    With ``beat``, the worker embeds beat (``-B``), with a schedule file of its own:
    beat's tasks go to the worker's queue (its default queue), so a test can shorten
    their intervals through ``extra_env``. With ``supervised``, the process is the
    project's supervisor (scheduler/supervisor.py) running the worker and starting it
    again whenever it exits; its lines go to the same log, its arguments
    ``supervisor_args``.
    """
    broker = settings.CELERY_BROKER_URL
    if not broker.startswith("redis://"):
        raise pytest.UsageError(f"integration tests need a Redis broker, got {broker!r}")
    database_url = database_url_of_the_tests()
    queue = f"mrl-test-{uuid.uuid4().hex[:8]}"
    celery_dir = tmp_path_factory.mktemp("celery")
    log_path = celery_dir / "worker.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        **(extra_env or {}),
    }
    argv = [sys.executable, "-m", "celery", "-A", "scheduler", "worker", "--pool=solo"]
    argv += ["--loglevel=INFO", "-Q", queue, "-n", f"{queue}@%h"]
    argv += ["--without-mingle", "--without-gossip"]
    if beat:
        argv += ["-B", "--schedule", str(celery_dir / "celerybeat-schedule")]
    supervisor_log_path = None
    if supervised:
        supervisor = [sys.executable, "-m", "scheduler.supervisor", "--var-dir", str(celery_dir)]
        argv = [*supervisor, *supervisor_args, "--program", "worker", "--", *argv]
        supervisor_log_path, log_path = celery_dir / "supervisor.log", celery_dir / "log/worker.log"
    with (supervisor_log_path or log_path).open("wb") as log_file:
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    return CeleryWorker(process, queue, log_path, supervisor_log_path)


def stop_process(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL if ``process`` has not exited within ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_celery_worker(worker: CeleryWorker) -> None:
    stop_process(worker.process, timeout=30)


@pytest.fixture(scope="session")
def celery_worker(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    worker = start_celery_worker(tmp_path_factory)
    yield worker
    stop_celery_worker(worker)


@dataclass
class SchedulerWorld:
    """A Celery worker (Redis) that submits runs whose jobs report to the live server."""

    worker: CeleryWorker
    run_root: Path
    live_url: str


@pytest.fixture(scope="session")
def scheduler_world_session(
    live_server: Any,
    django_db_setup: None,
    zoo_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SchedulerWorld]:
    """The world's worker, started once a session; tests take :func:`scheduler_world`."""
    # pytest's tmp dirs hold no characters the job-path pattern refuses.
    run_root = tmp_path_factory.mktemp("runs")
    env = job_environment(live_server.url, run_root, zoo_dir)
    worker = start_celery_worker(tmp_path_factory, extra_env=env)
    yield SchedulerWorld(worker=worker, run_root=run_root, live_url=live_server.url)
    stop_celery_worker(worker)


@pytest.fixture
def scheduler_world(
    scheduler_world_session: SchedulerWorld, zoo_dir: Path
) -> Iterator[SchedulerWorld]:
    """The whole launch path: this process enqueues, a real worker submits to a real
    backend, the job's trainer ships to the live server, the test watches Postgres.

    This process sends to the worker's queue (and takes its RUN_ROOT and ZOO_DIR) only
    while the test that asked for the world runs: a later test of the same pytest worker
    that launches a run must not have it submitted, and its token replaced, by this one.
    """
    from scheduler.celery import app

    world = scheduler_world_session
    default_queue = app.conf.task_default_queue
    app.conf.task_default_queue = world.worker.queue
    try:
        with run_settings(world.run_root, zoo_dir):
            yield world
    finally:
        app.conf.task_default_queue = default_queue


def job_environment(live_url: str, run_root: Path, zoo_dir: Path) -> dict[str, str]:
    """What a worker needs so that its jobs run this checkout's trainer on the test zoo
    and report to the live server."""
    return {
        "MRL_INGEST_BASE_URL": live_url,
        "MRL_RUN_ROOT": str(run_root),
        "MRL_ZOO_DIR": str(zoo_dir),
        "MRL_JOB_PYTHON": sys.executable,
        "MRL_JOB_WORKDIR": str(REPO),
    }


@contextmanager
def run_settings(run_root: Path, zoo_dir: Path) -> Iterator[None]:
    """This process's RUN_ROOT and ZOO_DIR as the worker's, restored afterwards."""
    previous = {name: getattr(settings, name) for name in ("RUN_ROOT", "ZOO_DIR")}
    settings.RUN_ROOT, settings.ZOO_DIR = run_root, str(zoo_dir)
    try:
        yield
    finally:
        for name, value in previous.items():
            setattr(settings, name, value)
