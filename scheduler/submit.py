"""Submitting a run: the service behind the ``run_submit`` task.

:func:`submit` claims a queued run with a conditional UPDATE (two workers can never both
submit it), writes the job directory, and starts the job on the run's backend. It holds
the run's submission lock meanwhile, so attempts never overlap; a later attempt (a worker
crash after sbatch) adopts the job an earlier one started.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from scheduler import local_slots
from scheduler.backends import Backend, BackendError, JobStatus, read_exit_code
from scheduler.backends import write_run_files as _write_run_files
from scheduler.jobs import JobSpec, JobSpecError
from scheduler.run_job import (
    ACTIVE_STATES,
    backend_of,
    exit_status,
    fail,
    forgotten_status,
    job_spec,
    status_apply,
)
from webapp.runs import services
from webapp.runs.models import Run

log = logging.getLogger(__name__)

SUBMIT_LOCK_CLASS = 0x4D524C53
"""The namespace ("MRLS") of the runs' submission locks: advisory lock (this, run id)."""


class SubmitError(RuntimeError):
    """Submission failed for a reason retrying will not fix (shown as the run's reason)."""


def submit(run_id: int) -> str:
    """Submit run ``run_id``; return what happened ("submitted <id>", "skipped: ...").

    A queued run is claimed; a claimed one whose job id no attempt saved (its worker died)
    is taken over: its job, if sbatch started one, is found by name and adopted, so a run
    never gets two jobs. Attempts hold the run's submission lock, so they never overlap.

    Raises :class:`BackendError` with ``transient=True`` when the caller should retry.
    """
    with submission_lock(run_id) as held:
        if not held:
            return "skipped: another attempt is submitting this run"
        return _submit(run_id)


@contextmanager
def submission_lock(run_id: int) -> Iterator[bool]:
    """Try to take run ``run_id``'s submission lock; yield whether it was taken.

    A PostgreSQL session-level advisory lock: a worker killed mid-submission releases it
    with its connection. Other databases (the demo's SQLite, one worker) need none.
    """
    if connection.vendor != "postgresql":
        yield True
        return
    key = [SUBMIT_LOCK_CLASS, run_id & 0x7FFFFFFF]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", key)
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with suppress(DatabaseError), connection.cursor() as cursor:
                # A lost connection has released it already.
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", key)


def fail_submission(run_id: int, reason: str) -> None:
    """Give up on submitting ``run_id`` (no more retries): it fails with ``reason``."""
    fail(Run.objects.get(pk=run_id), reason)


def _submit(run_id: int) -> str:
    run = Run.objects.select_related("experiment").get(pk=run_id)
    if run.state != Run.State.QUEUED and (run.slurm_job_id or run.state not in ACTIVE_STATES):
        return f"skipped: the run is {run.state}"
    try:
        spec = job_spec(run)
    except JobSpecError as exc:
        fail(run, f"cannot build the job: {exc}")
        return "failed"
    if run.state == Run.State.QUEUED:
        # Before the claim: after it, an exit code can only be this submission's job's.
        spec.exit_code_path.unlink(missing_ok=True)
        claimed = _claim_local(run) if local_slots.is_local(run) else _claim(run)
        if claimed is not None:
            return claimed
    else:
        # An earlier attempt claimed it and died before saving the job id. Mark this
        # attempt (updated_at): the re-send of stale submissions leaves it alone.
        services.run_transition(run, run.state)
    backend = backend_of(run)
    job_id = backend.find(spec)
    if job_id is None:
        ended = _end_of_unsaved_job(run, spec)
        if ended is not None:
            status_apply(run, ended)
            return f"ended: the job ran without its id saved; the run is {run.state}"
        if run.state != Run.State.SUBMITTED:
            return "skipped: its job has reported but is not listed; trying again later"
        job_id = _start_job(run, backend, spec)
        if job_id is None:
            return "failed"
    _save_job_id(run, backend, spec, job_id)
    log.info("run %s submitted to %s as job %s", run.pk, backend.name, job_id)
    return f"submitted {job_id}"


def _claim(run: Run) -> str | None:
    """Claim queued ``run`` (queued -> submitted); None when claimed, else what happened.
    A status message saying it waited for a local slot goes."""
    facts: dict[str, str] = {"backend": run.backend or settings.EXECUTOR}
    if run.status_message.startswith(local_slots.WAITING):
        facts["status_message"] = ""
    if not services.run_transition(run, Run.State.SUBMITTED, **facts):
        return "skipped: another worker claimed it"
    return None


def _claim_local(run: Run) -> str | None:
    """:func:`_claim` for a local run, only while a local slot is free for it: else it
    stays queued, its status message saying it waits (beat starts it when a slot frees)."""
    with local_slots.slots_lock():
        waiting = local_slots.wait_reason(run)
        if waiting is None:
            return _claim(run)
    if run.status_message != waiting:
        Run.objects.filter(pk=run.pk, state=Run.State.QUEUED).update(status_message=waiting)
    return f"waiting: {waiting}"


def _start_job(run: Run, backend: Backend, spec: JobSpec) -> str | None:
    """Write the job directory and start the job; its id, or None (the run failed)."""
    token = services.run_token_issue(run)
    _write_run_files(spec, run.config, token, slurm=backend.name == "slurm")
    try:
        return backend.submit(spec)
    except BackendError as exc:
        if exc.transient:
            raise
        fail(run, f"submission failed: {exc}")
        return None


def _end_of_unsaved_job(run: Run, spec: JobSpec) -> JobStatus | None:
    """How the job of a claimed run whose id was never saved ended, if the backend no
    longer lists it: by the exit code its script wrote (cleared before the claim); or, once
    its trainer has reported (so a job ran), as a forgotten job after the grace."""
    code = read_exit_code(spec)
    if code is not None:
        return exit_status(code)
    if run.state == Run.State.SUBMITTED:
        return None  # no job ran: start one
    return forgotten_status(run, spec)


def _save_job_id(run: Run, backend: Backend, spec: JobSpec, job_id: str) -> None:
    """Save ``job_id`` on the run, in whatever active state its job's own reports may have
    moved it to meanwhile. A run cancelled before the id was saved (cancel had no job to
    stop) gets its job cancelled now."""
    saved = Run.objects.filter(pk=run.pk, state__in=ACTIVE_STATES, slurm_job_id="").update(
        slurm_job_id=job_id, run_dir=str(spec.run_dir), updated_at=timezone.now()
    )
    run.refresh_from_db()
    if not saved and run.state == Run.State.CANCELLED:
        log.warning("run %s was cancelled before job %s was saved: cancelling it", run.pk, job_id)
        backend.cancel(job_id, spec)
