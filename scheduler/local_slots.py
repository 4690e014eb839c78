"""The local backend's concurrency limit: at most ``settings.LOCAL_MAX_JOBS`` local jobs
run at once (``MRL_LOCAL_MAX_JOBS``; default half the cores, at least 2), so a sweep of
15 runs on a laptop does not start 15 trainers on two cores.

A queued local run is claimed only while a slot is free and it is among the oldest
queued local runs (first come, first served); otherwise it stays queued with a
``status_message`` that says it waits (:data:`WAITING`). Beat's ``runs_sync`` sends
``run_submit`` again for the waiting runs as slots free up (:func:`runs_to_start`).
The check and the claim happen under one lock (:func:`slots_lock`), so two workers never
both take the last slot.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet

from scheduler.run_job import ACTIVE_STATES
from webapp.runs.models import Run

WAITING = "waiting for a local slot"
"""How the status message of a queued run waiting for a slot begins."""

SLOTS_LOCK_KEY = (0x4D524C53, 0x7FFFFFFF)
"""The PostgreSQL advisory lock (in the runs' submission-lock namespace, "MRLS") that
guards the check-and-claim; run ids never reach 2^31 - 1."""


def is_local(run: Run) -> bool:
    return (run.backend or settings.EXECUTOR) == "local"


def local_queued() -> QuerySet[Run]:
    """Queued runs bound for the local backend, oldest first."""
    local = Q(backend="local")
    if settings.EXECUTOR == "local":
        local |= Q(backend="")
    return Run.objects.filter(local, state=Run.State.QUEUED).order_by("queued_at", "pk")


def local_running() -> int:
    """Local runs that have (or are getting) a job."""
    return Run.objects.filter(backend="local", state__in=ACTIVE_STATES).count()


def free_slots() -> int:
    return max(0, int(settings.LOCAL_MAX_JOBS) - local_running())


def wait_reason(run: Run) -> str | None:
    """Why queued local run ``run`` may not start now, or None when it may: a free slot,
    and no older queued local run waiting for it. Call under :func:`slots_lock`."""
    free = free_slots()
    ahead = list(local_queued().values_list("pk", flat=True)[:free]) if free else []
    if run.pk in ahead:
        return None
    limit = int(settings.LOCAL_MAX_JOBS)
    running = limit - free
    return (
        f"{WAITING}: {running} of {limit} local jobs running (MRL_LOCAL_MAX_JOBS); it starts "
        "when one ends"
    )


def runs_to_start() -> list[int]:
    """The waiting runs that may start now: those among the oldest queued local runs, as
    many as there are free slots, that were turned away before (a run not yet picked up
    has its message on the way). Beat sends ``run_submit`` for them."""
    free = free_slots()
    if not free:
        return []
    first = local_queued().values_list("pk", "status_message")[:free]
    return [pk for pk, message in first if message.startswith(WAITING)]


@contextmanager
def slots_lock() -> Iterator[None]:
    """Hold the local slots' lock: a PostgreSQL session advisory lock (released with a
    killed worker's connection); on other databases (the demo's SQLite) an exclusive
    ``flock`` on ``<var>/local-slots.lock``, which every worker process of the machine
    shares."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s, %s)", SLOTS_LOCK_KEY)
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", SLOTS_LOCK_KEY)
        return
    path = settings.VAR_DIR / "local-slots.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
