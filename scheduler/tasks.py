"""Celery tasks. Each takes ids or plain values, re-fetches, and calls one service."""

from __future__ import annotations

import os
import socket

from celery import shared_task
from celery.signals import worker_ready

from webapp.core.services import heartbeat_record


@shared_task(name="scheduler.tasks.worker_heartbeat")
def worker_heartbeat() -> dict[str, object]:
    """Record that a worker is alive (beat sends this every 30 s); return who ran it."""
    heartbeat = heartbeat_record(
        service="celery-worker", hostname=socket.gethostname(), pid=os.getpid()
    )
    return {"hostname": heartbeat.hostname, "pid": heartbeat.pid, "id": heartbeat.pk}


@worker_ready.connect
def _heartbeat_on_worker_start(**_: object) -> None:
    """Report in as soon as a worker starts, not only at beat's first tick (30 s later)."""
    worker_heartbeat.apply()
