"""A task travels through the real Redis broker and runs in a real worker process."""

from __future__ import annotations

import os
import time

import pytest

from scheduler.tasks import worker_heartbeat
from tests.integration.conftest import CeleryWorker
from webapp.core.models import ServiceHeartbeat

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
