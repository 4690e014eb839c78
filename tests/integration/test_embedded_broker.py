"""The demo's embedded broker under stress: four producer processes send 2,000 messages
while a real worker consumes them; each message is handled exactly once and the worker
never exits.

The worker polls every millisecond, so that it keeps reading at the head of the queue,
where a message is being written at the same moment: that is where kombu's filesystem
transport, the demo's broker before this one, hands out a message file its producer has
not filled yet and the worker dies of the ``JSONDecodeError`` (this very test, run on
``filesystem://``, killed the worker within seconds; see bench/RESULTS.md).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from scheduler.embedded_broker import broker_url
from tests.integration.conftest import REPO, database_url_of_the_tests, stop_process

pytestmark = pytest.mark.integration

PRODUCERS = 4
MESSAGES_PER_PRODUCER = 500


def test_every_message_is_handled_once_and_the_worker_survives(
    django_db_setup: None, tmp_path: Path
) -> None:
    record = tmp_path / "handled.txt"
    queue = f"mrl-stress-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "CELERY_BROKER_URL": broker_url(str(tmp_path / "broker.sqlite3")),
        "MRL_BROKER_POLLING_SECONDS": "0.001",
        "MRL_STRESS_RECORD": str(record),
        "DATABASE_URL": database_url_of_the_tests(),
    }
    argv = [sys.executable, "-m", "celery", "-A", "scheduler", "worker", "--pool=solo"]
    argv += ["--loglevel=INFO", "-Q", queue, "-I", "tests.integration.broker_stress"]
    argv += ["--without-mingle", "--without-gossip", "--without-heartbeat"]
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log_file:
        worker = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log_file, stderr=log_file)
    try:
        producer = [sys.executable, "-m", "tests.integration.broker_stress", "--queue", queue]
        producer += ["--count", str(MESSAGES_PER_PRODUCER), "--pause", "0.03"]
        producers = [
            subprocess.Popen([*producer, "--prefix", f"p{i}"], cwd=REPO, env=env)
            for i in range(PRODUCERS)
        ]
        assert [producer.wait(timeout=180) for producer in producers] == [0] * PRODUCERS

        expected = PRODUCERS * MESSAGES_PER_PRODUCER
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and worker.poll() is None:
            if record.exists() and len(record.read_text().splitlines()) >= expected:
                break
            time.sleep(0.2)
        time.sleep(1)  # a message handled twice would show up now
        log = log_path.read_text(errors="replace")
        assert worker.poll() is None, f"the worker exited ({worker.returncode}):\n{log[-3000:]}"
        handled = Counter(record.read_text().splitlines() if record.exists() else [])
        assert handled == Counter(
            f"p{i}-{j}" for i in range(PRODUCERS) for j in range(MESSAGES_PER_PRODUCER)
        ), f"missing: {expected - len(handled)}, twice: {[t for t, n in handled.items() if n > 1]}"
        assert "Unrecoverable error" not in log
    finally:
        stop_process(worker, timeout=30)


def test_producers_that_open_a_new_broker_at_the_same_moment_all_deliver(tmp_path: Path) -> None:
    """Eight processes publish their first message to a broker file that does not exist
    yet, at the same instant: each creates the tables and the queue's row or finds them,
    and none fails (kombu's check-then-create let two of them race, and the loser died of
    a ``UNIQUE`` constraint or of a "table already exists" error retried on a closed
    channel; see scheduler/embedded_broker.py)."""
    database = tmp_path / "broker.sqlite3"
    env = {**os.environ, "CELERY_BROKER_URL": broker_url(str(database))}
    start_at = time.time() + 6  # after every process has imported Celery
    producer = [sys.executable, "-m", "tests.integration.broker_stress", "--queue", "q-new"]
    producer += ["--count", "1", "--start-at", str(start_at)]
    processes = [
        subprocess.Popen(
            [*producer, "--prefix", f"p{i}"], cwd=REPO, env=env, stderr=subprocess.PIPE
        )
        for i in range(8)
    ]
    failures = [
        process.stderr.read().decode(errors="replace")[-1500:]
        for process in processes
        if process.wait(timeout=60) != 0 and process.stderr is not None
    ]
    assert failures == []
    with sqlite3.connect(database) as db:
        queues = db.execute("SELECT name FROM kombu_queue").fetchall()
        messages = db.execute("SELECT count(*) FROM kombu_message").fetchone()[0]
    assert queues == [("q-new",)]
    assert messages == 8
