"""Following runs' jobs, and recovering lost submissions: the services beat's
``runs_sync`` calls every few seconds.

- :func:`sync` moves active runs through their states from what the backend reports;
  for a job the backend has forgotten it falls back to the run's own status reports and
  the exit-code file the job script leaves behind. A job killed at its time limit is
  resubmitted (a bounded number of times) and resumes from its last checkpoint.
- :func:`resend_stale_queued` and :func:`resend_stale_submissions` send ``run_submit``
  again for runs whose message or worker was lost; :func:`start_waiting_local` sends it
  for runs that waited for a local slot, as slots free up.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from scheduler import local_slots
from scheduler.backends import JobStatus
from scheduler.dispatch import RUN_SUBMIT, enqueue_submit, send
from scheduler.jobs import JobSpec, JobSpecError
from scheduler.run_job import (
    ACTIVE_STATES,
    backend_of,
    fail,
    forgotten_status,
    job_spec,
    seconds_setting,
    status_apply,
)
from webapp.runs import services
from webapp.runs.models import Run

log = logging.getLogger(__name__)

TIME_LIMIT_RESUMED = "resumed after the time limit"
"""How the note of the state change that queues a timed-out run again begins (the
resumes of a run are counted by it)."""


def sync() -> dict[str, int]:
    """Move every active run to the state its job is in; return counts per new state."""
    moved: dict[str, int] = {}
    active = Run.objects.filter(state__in=ACTIVE_STATES).exclude(slurm_job_id="")
    by_backend: dict[str, list[Run]] = {}
    for run in active.select_related("experiment"):
        by_backend.setdefault(run.backend or settings.EXECUTOR, []).append(run)
    for runs in by_backend.values():
        backend = backend_of(runs[0])  # the same for every run of the group
        specs: dict[str, JobSpec] = {}
        for run in runs:
            try:
                specs[run.slurm_job_id] = job_spec(run)
            except JobSpecError as exc:
                fail(run, f"cannot track the job: {exc}")
        statuses = backend.status(specs)
        for run in runs:
            if run.slurm_job_id not in specs:
                continue
            status = statuses.get(run.slurm_job_id) or forgotten_status(
                run, specs[run.slurm_job_id]
            )
            if status is None:
                continue
            if status.timed_out and _resume_after_time_limit(run, status):
                moved[Run.State.QUEUED] = moved.get(Run.State.QUEUED, 0) + 1
            elif status_apply(run, status):
                moved[status.state] = moved.get(status.state, 0) + 1
    return moved


def _resume_after_time_limit(run: Run, status: JobStatus) -> bool:
    """End the attempt of a run whose job hit its time limit, then queue the run again:
    its next job resumes from the last checkpoint. True if it was queued.

    At most ``SCHEDULER_TIME_LIMIT_RESUMES`` times per run (a job that never reaches a
    checkpoint within its limit would loop); after that the run stays failed.
    """
    done = run.state_changes.filter(
        state=Run.State.QUEUED, note__startswith=TIME_LIMIT_RESUMED
    ).count()
    allowed = int(settings.SCHEDULER_TIME_LIMIT_RESUMES)
    if done >= allowed:
        status = dataclasses.replace(status, reason=f"{status.reason} (resumed {done} times)")
        status_apply(run, status)
        return False
    job_id, step = run.slurm_job_id, run.last_step or 0
    if not status_apply(run, status):
        return False  # the run changed meanwhile (cancelled)
    note = (
        f"{TIME_LIMIT_RESUMED}: job {job_id} stopped at step {step}; resuming from its last "
        f"checkpoint ({done + 1} of {allowed})"
    )
    with transaction.atomic():
        if services.run_transition(
            run, Run.State.QUEUED, slurm_job_id="", node="", status_message=note
        ):
            enqueue_submit(run)
    log.info("run %s: %s", run.pk, note)
    return True


def resend_stale_queued(older_than: timedelta | None = None) -> int:
    """Re-send ``run_submit`` for queued runs nobody picked up (a lost message, a broker
    outage at launch time), ``SCHEDULER_STALE_QUEUED_SECONDS`` after they were queued."""
    threshold = (
        seconds_setting("SCHEDULER_STALE_QUEUED_SECONDS") if older_than is None else older_than
    )
    cutoff = timezone.now() - threshold
    stale = Run.objects.filter(state=Run.State.QUEUED, queued_at__lt=cutoff)
    # A run waiting for a local slot was picked up: start_waiting_local sends it.
    return _resend(stale.exclude(status_message__startswith=local_slots.WAITING))


def start_waiting_local() -> int:
    """Send ``run_submit`` for the queued local runs that may start now, oldest first, as
    many as there are free local slots (``MRL_LOCAL_MAX_JOBS``); how many."""
    to_start = local_slots.runs_to_start()
    for run_id in to_start:
        send(RUN_SUBMIT, run_id)
    return len(to_start)


def resend_stale_submissions(older_than: timedelta | None = None) -> int:
    """Re-send ``run_submit`` for claimed runs whose job id was never saved: their worker
    died between the claim and saving it, and the broker gives its unacknowledged message
    back only after the visibility timeout (an hour). The new attempt adopts the job by its
    name if sbatch had started one, so no run gets a second job.

    A run still ``submitted`` is stale ``SCHEDULER_STALE_SUBMIT_SECONDS`` after its last
    attempt (each attempt marks ``updated_at``, so a retry waiting out its backoff is left
    alone); one its job's trainer has moved on (pending, running) is stale that long after
    its claim (its attempt only adopts: it never starts a job).
    """
    threshold = (
        seconds_setting("SCHEDULER_STALE_SUBMIT_SECONDS") if older_than is None else older_than
    )
    cutoff = timezone.now() - threshold
    unsaved = Run.objects.filter(state__in=ACTIVE_STATES, slurm_job_id="")
    still_submitting = Q(state=Run.State.SUBMITTED, updated_at__lt=cutoff)
    moved_on = ~Q(state=Run.State.SUBMITTED) & Q(submitted_at__lt=cutoff)
    return _resend(unsaved.filter(still_submitting | moved_on))


def _resend(runs: QuerySet[Run]) -> int:
    """Send ``run_submit`` for each run of the queryset ``runs``; how many."""
    stale = list(runs.values_list("pk", flat=True))
    for run_id in stale:
        send(RUN_SUBMIT, run_id)
    return len(stale)
