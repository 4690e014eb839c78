"""A task travels through the real Redis broker and runs in a real worker process."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduler.tasks import worker_heartbeat
from tests.integration.conftest import CeleryWorker, SchedulerWorld
from webapp.core.models import ServiceHeartbeat
from webapp.experiments.models import EvalSuite, Lab, TaskFileCheck

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
        reverse("experiments:suite_create"),
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
