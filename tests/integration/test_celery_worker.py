"""A task travels through the real Redis broker and runs in a real worker process."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduler.tasks import worker_heartbeat
from tests.integration.conftest import (
    CeleryWorker,
    SchedulerWorld,
    start_celery_worker,
    stop_celery_worker,
)
from webapp.core.models import Lab, ServiceHeartbeat
from webapp.registry.models import EvalSuite, TaskFileCheck

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_worker_runs_a_task_sent_through_redis(celery_worker: CeleryWorker) -> None:
    worker_heartbeat.apply_async(queue=celery_worker.queue)

    deadline = time.monotonic() + 90
    heartbeat = None
    while heartbeat is None and time.monotonic() < deadline:
        assert celery_worker.process.poll() is None, f"worker died:\n{celery_worker.log()}"
        heartbeat = ServiceHeartbeat.objects.filter(service="celery-worker").first()
        time.sleep(0.2)

    assert heartbeat is not None, f"the task never ran; worker log:\n{celery_worker.log()}"
    # It ran in the worker process (--pool=solo runs tasks in the main process), not here.
    assert heartbeat.pid == celery_worker.process.pid
    assert heartbeat.pid != os.getpid()
    assert "scheduler.tasks.worker_heartbeat" in celery_worker.log()


def test_a_large_task_file_is_read_by_the_worker(
    scheduler_world: SchedulerWorld, lab: Lab, alice: User, tmp_path: Path
) -> None:
    """Issue 36: a task file too large for a request is checked by the real worker (sent
    by the suite form's view through Redis), and the suite's page then shows its items."""
    big = tmp_path / "big.jsonl"
    big.write_text((json.dumps({"problem": "x" * 100, "answer": "2"}) + "\n") * 20_000)
    client = Client()
    client.force_login(alice)

    saved = client.post(
        reverse("registry:suite_create"),
        {"name": "big", "description": "", "suite_file": "", "tasks": f"t math {big}"},
    )

    assert saved.status_code == 302
    deadline = time.monotonic() + 90
    while TaskFileCheck.objects.get().state != "done" and time.monotonic() < deadline:
        assert scheduler_world.worker.process.poll() is None, scheduler_world.worker.log()
        time.sleep(0.2)
    check = TaskFileCheck.objects.get()
    assert (check.state, check.items, check.error) == ("done", 20_000, ""), (
        scheduler_world.worker.log()
    )
    detail = client.get(EvalSuite.objects.get().get_absolute_url()).content.decode()
    assert "20000 items" in detail and "1 file readable" in detail
    assert "scheduler.tasks.task_file_check" in scheduler_world.worker.log()


def _within(condition: Callable[[], Any], what: str, timeout: float, log: Callable[[], str]) -> Any:
    """``condition()``'s first truthy value; fails after ``timeout`` with the log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{log()[-4000:]}")


def test_a_sigstopped_worker_on_redis_is_replaced_by_one_that_consumes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Issue 31, on Redis: the supervised worker is SIGSTOPped; its supervisor sees its
    liveness file go stale, SIGKILLs it and starts a new process, which takes a task sent
    through Redis (the new pid's heartbeat moves past its start-up one)."""
    stall = 10
    worker = start_celery_worker(
        tmp_path_factory, supervised=True, supervisor_args=("--worker-stall-seconds", str(stall))
    )
    state_path = worker.log_path.parent.parent / "run" / "supervisor.json"

    def worker_pid() -> int | None:
        try:
            return json.loads(state_path.read_text())["programs"]["worker"]["pid"]
        except (OSError, ValueError):
            return None

    def seen_at(pid: int) -> datetime | None:
        return ServiceHeartbeat.objects.filter(pid=pid).values_list("seen_at", flat=True).first()

    def consumes(pid: int, what: str) -> None:
        """``pid`` runs a task sent through Redis (after its start-up heartbeat, which
        the worker records itself)."""
        started = _within(lambda: seen_at(pid), f"{what}: its start-up heartbeat", 90, worker.log)
        worker_heartbeat.apply_async(queue=worker.queue)
        _within(lambda: (seen_at(pid) or started) > started, what, 60, worker.log)

    first = 0
    try:
        first = _within(worker_pid, "the supervised worker", 60, worker.log)
        consumes(first, "the first worker to consume")
        os.kill(first, signal.SIGSTOP)
        stopped_at = time.monotonic()
        second = _within(
            lambda: (pid := worker_pid()) not in (None, first) and pid,
            "a new worker in place of the stopped one",
            stall + 45,
            worker.log,
        )
        assert time.monotonic() - stopped_at >= stall - 1
        with pytest.raises(ProcessLookupError):
            os.kill(first, 0)  # SIGKILLed and reaped
        consumes(second, "the new worker to consume")
        log = worker.log()
        assert f"worker (pid {first}) has not beaten for " in log
        assert f"worker (pid {first}) was killed by SIGKILL" in log
        assert worker.process.poll() is None  # the supervisor itself goes on
    finally:
        if first:
            with suppress(ProcessLookupError):
                os.kill(first, signal.SIGCONT)
        stop_celery_worker(worker)
