"""Real services for integration tests: a Celery worker consuming from Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings

REPO = Path(__file__).resolve().parents[2]


@dataclass
class CeleryWorker:
    process: subprocess.Popen[bytes]
    queue: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def celery_worker(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    """A real `celery worker` process, on its own queue, against the test database."""
    broker = settings.CELERY_BROKER_URL
    if not broker.startswith("redis://"):
        raise pytest.UsageError(f"integration tests need a Redis broker, got {broker!r}")
    db = settings.DATABASES["default"]
    database_url = (
        f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )
    queue = f"mrl-test-{uuid.uuid4().hex[:8]}"
    log_path = tmp_path_factory.mktemp("celery") / "worker.log"
    env = {**os.environ, "DATABASE_URL": database_url, "CELERY_BROKER_URL": broker}
    argv = [sys.executable, "-m", "celery", "-A", "scheduler", "worker", "--pool=solo"]
    argv += ["--loglevel=INFO", "-Q", queue, "-n", f"{queue}@%h"]
    argv += ["--without-mingle", "--without-gossip"]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    worker = CeleryWorker(process=process, queue=queue, log_path=log_path)
    yield worker
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
