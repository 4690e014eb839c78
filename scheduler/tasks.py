"""Celery tasks. Each takes ids or plain values, re-fetches, and calls one service."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from typing import Protocol

from celery import Task, shared_task
from celery.signals import worker_init, worker_ready
from django.conf import settings

from scheduler import cancel, dispatch, evaluations, packing, submit, sync, watchdog
from scheduler.backends import BackendError
from webapp.core.services import heartbeat_record
from webapp.registry import suite_checks, zoo_builds

logger = logging.getLogger(__name__)


@shared_task(name="scheduler.tasks.worker_heartbeat")
def worker_heartbeat() -> dict[str, object]:
    """Record that a worker is alive (beat sends this every MRL_WORKER_HEARTBEAT_SECONDS);
    return who ran it."""
    heartbeat = heartbeat_record(
        service="celery-worker", hostname=socket.gethostname(), pid=os.getpid()
    )
    return {"hostname": heartbeat.hostname, "pid": heartbeat.pid, "id": heartbeat.pk}


@worker_ready.connect
def _heartbeat_on_worker_start(**_: object) -> None:
    """Report in as soon as a worker starts, not only at beat's first tick (30 s later)."""
    worker_heartbeat.apply()


@worker_init.connect
def _watch_the_worker(sender: object, **_: object) -> None:
    """A worker that can no longer consume exits non-zero (see scheduler/watchdog.py)."""
    config = watchdog.WatchdogConfig(
        stall_seconds=settings.WORKER_STALL_SECONDS,
        stop_grace_seconds=settings.WORKER_STOP_GRACE_SECONDS,
    )
    watchdog.start(sender, config)


# --- runs ----------------------------------------------------------------------------------
# Transient backend errors (slurmctld down, a timeout) are retried with exponential
# backoff; anything else, or running out of retries, fails the run with a reason the run
# page shows.
MAX_RETRIES = 8


def _backoff(retries: int) -> float:
    return float(min(120, 2 ** (retries + 1)))


class _TaskRequest(Protocol):
    retries: int
    """How many times the task was retried so far."""


class _RetryingTask(Protocol):
    """What :func:`_with_retries` uses of a bound task (celery's ``Task`` has both)."""

    @property
    def request(self) -> _TaskRequest: ...

    def retry(self, *, exc: Exception, countdown: float) -> Exception:
        """The exception to raise to send the task again after ``countdown`` seconds."""


def _with_retries(
    task: _RetryingTask,
    call: Callable[[], str],
    on_error: Callable[[BackendError], str] | None = None,
) -> str:
    """``call()``, for a task bound with ``max_retries=MAX_RETRIES``: a transient
    BackendError while ``task`` has retries left sends it again after :func:`_backoff`
    (``task.retry`` raises celery's Retry). A permanent error, or a transient one with the
    retries spent, goes to ``on_error`` (what it returns is the task's result) or, without
    one, is raised again (the task fails)."""
    try:
        return call()
    except BackendError as exc:
        if exc.transient and task.request.retries < MAX_RETRIES:
            raise task.retry(exc=exc, countdown=_backoff(task.request.retries)) from exc
        if on_error is None:
            raise
        return on_error(exc)


@shared_task(bind=True, name=dispatch.RUN_SUBMIT, max_retries=MAX_RETRIES)
def run_submit(self: Task, run_id: int) -> str:
    """Claim queued run ``run_id`` and start its job (idempotent: a replay is skipped)."""

    def fail(exc: BackendError) -> str:
        submit.fail_submission(run_id, f"submission failed: {exc}")
        return "failed"

    return _with_retries(self, lambda: submit.submit(run_id), fail)


@shared_task(name="scheduler.tasks.runs_sync")
def runs_sync() -> dict[str, int]:
    """Beat: move every active run to its job's state; re-send lost submissions; start
    the local runs that waited for a slot."""
    sync.resend_stale_queued()
    sync.resend_stale_submissions()
    try:
        moved = sync.sync()
    except BackendError as exc:  # the next tick tries again
        logger.warning("status sync skipped: %s", exc)
        moved = {}
    sync.start_waiting_local()
    return moved


@shared_task(name=dispatch.SERIES_PACK)
def series_pack() -> int:
    """Beat: roll up the series of the runs not packed yet, then pack the series of a
    few finished runs for comparisons; how many runs were packed."""
    packing.roll_up_runs()
    return packing.pack_finished_runs()


@shared_task(name=dispatch.POINTS_RETENTION)
def points_retention() -> int:
    """Beat (hourly): drop the raw points of old packed runs when
    ``MRL_RAW_POINT_RETENTION_DAYS`` is set; how many runs'."""
    return packing.drop_old_points()


@shared_task(name=dispatch.TASK_FILE_CHECK, soft_time_limit=suite_checks.WORKER_SECONDS + 60)
def task_file_check(check_id: int) -> str:
    """Read a task file too large for a request and store what it holds (its check)."""
    return suite_checks.refresh(check_id)


@shared_task(name=dispatch.TASK_FILE_CHECKS_SYNC)
def task_file_checks_sync() -> int:
    """Beat: run the file checks left pending (their message lost); how many ran."""
    stale = suite_checks.stale_pending_ids()
    for check_id in stale:
        suite_checks.refresh(check_id)
    return len(stale)


@shared_task(name=dispatch.ZOO_BUILD)
def zoo_build(recipe: str, zoo_dir: str) -> str:
    """Build the zoo recipe ``recipe`` into ``zoo_dir`` (the compose page's "Build" button),
    recording its progress for the page; "ready" or "failed"."""
    return zoo_builds.run_build(recipe, zoo_dir)


@shared_task(bind=True, name=dispatch.RUN_CANCEL, max_retries=MAX_RETRIES)
def run_cancel(self: Task, run_id: int) -> str:
    """Stop run ``run_id``'s job and mark it cancelled."""
    return _with_retries(self, lambda: cancel.cancel(run_id))


# --- evaluations ---------------------------------------------------------------------------
@shared_task(bind=True, name=dispatch.EVALUATION_SUBMIT, max_retries=MAX_RETRIES)
def evaluation_submit(self: Task, evaluation_id: int) -> str:
    """Claim queued evaluation ``evaluation_id`` and start its job (a replay is skipped)."""
    return _with_retries(self, lambda: evaluations.submit(evaluation_id))


@shared_task(name=dispatch.EVALUATIONS_SYNC)
def evaluations_sync() -> dict[str, int]:
    """Beat: follow evaluation jobs, queue automatic evaluations, re-send lost ones."""
    try:
        return evaluations.sync()
    except BackendError as exc:  # the next tick tries again
        logger.warning("evaluation sync skipped: %s", exc)
        return {}


@shared_task(bind=True, name=dispatch.EVALUATION_CANCEL, max_retries=MAX_RETRIES)
def evaluation_cancel(self: Task, evaluation_id: int) -> str:
    """Stop evaluation ``evaluation_id``'s job and mark it cancelled."""
    return _with_retries(self, lambda: evaluations.cancel(evaluation_id))
