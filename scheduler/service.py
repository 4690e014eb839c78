"""Submitting, tracking and cancelling runs: the services behind the Celery tasks.

- :func:`submit` claims a queued run with a conditional UPDATE (two workers can never
  both submit it), writes the job directory, and starts the job on the run's backend. It
  holds the run's submission lock meanwhile, so attempts never overlap; a later attempt
  (a worker crash after sbatch) adopts the job an earlier one started.
- :func:`sync` moves active runs through their states from what the backend reports;
  for a job the backend has forgotten it falls back to the run's own status reports and
  the exit-code file the job script leaves behind. A job killed at its time limit is
  resubmitted (a bounded number of times) and resumes from its last checkpoint.
- :func:`resend_stale_queued` and :func:`resend_stale_submissions` (beat, with the sync)
  send ``run_submit`` again for runs whose message or worker was lost.
- :func:`cancel` and :func:`resubmit` are the run page's actions.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from scheduler.backends import (
    Backend,
    BackendError,
    JobStatus,
    backend_named,
    log_tail,
    read_exit_code,
)
from scheduler.backends import write_run_files as _write_run_files
from scheduler.celery import app as celery_app
from scheduler.jobs import JobSpec, JobSpecError
from trainer.mwra import PlacementPlan
from webapp.experiments import series_packs, services
from webapp.experiments.models import Experiment, Run, Sweep

log = logging.getLogger(__name__)

ACTIVE_STATES = (Run.State.SUBMITTED, Run.State.PENDING, Run.State.RUNNING, Run.State.COMPLETING)
TIME_LIMIT_RESUMED = "resumed after the time limit"
RUN_SUBMIT = "scheduler.tasks.run_submit"
RUN_CANCEL = "scheduler.tasks.run_cancel"
"""The tasks this module sends, by name (scheduler/tasks.py registers them so)."""
"""How the note of the state change that queues a timed-out run again begins (the
resumes of a run are counted by it)."""
SUBMIT_LOCK_CLASS = 0x4D524C53
"""The namespace ("MRLS") of the runs' submission locks: advisory lock (this, run id)."""


def _seconds_setting(name: str) -> timedelta:
    """A ``SCHEDULER_*_SECONDS`` setting (read at each call: tests and admins change it)."""
    return timedelta(seconds=float(getattr(settings, name)))


class SubmitError(RuntimeError):
    """Submission failed for a reason retrying will not fix (shown as the run's reason)."""


def backend_of(run: Run) -> Backend:
    return backend_named(run.backend or settings.EXECUTOR)


def job_spec(run: Run) -> JobSpec:
    """The job of ``run``: paths, resources and placement from its experiment."""
    resources = run.experiment.resources or {}
    placement = resources.get("placement")
    plan = PlacementPlan.from_dict(placement) if placement else None
    devices = tuple(p.cuda_visible_devices for p in plan.policies) if plan else ()
    if plan is not None and plan.device == "cpu":
        devices = ()
    run_dir = Path(run.run_dir) if run.run_dir else settings.RUN_ROOT / f"run-{run.pk}"
    return JobSpec(
        run_id=run.pk,
        name=f"{run.name}-r{run.pk}"[-64:].lstrip("-_.") or f"run-{run.pk}",
        run_dir=run_dir.resolve(),
        python=settings.JOB_PYTHON,
        workdir=Path(settings.JOB_WORKDIR).resolve(),
        ingest_url=f"{settings.INGEST_BASE_URL.rstrip('/')}/api/v1/runs/{run.pk}/ingest",
        n_policies=len(run.config.get("pool", [])) or 1,
        partition=str(resources.get("partition", "") if run.backend == "slurm" else ""),
        account=str(resources.get("account", "")),
        qos=str(resources.get("qos", "")),
        time_limit=str(resources.get("time_limit") or settings.SLURM_TIME_LIMIT),
        nodes=plan.slurm.nodes if plan else 1,
        gpus_per_node=plan.slurm.gpus_per_node if plan else 0,
        cpus_per_task=plan.slurm.cpus_per_task if plan else 1,
        mem_gb=int(resources.get("mem_gb") or (plan.slurm.mem_gb if plan else 0) or 4),
        cuda_visible_devices=devices,
        zoo_dir=settings.ZOO_DIR,
    )


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


def _submit(run_id: int) -> str:
    run = Run.objects.select_related("experiment").get(pk=run_id)
    if run.state != Run.State.QUEUED and (run.slurm_job_id or run.state not in ACTIVE_STATES):
        return f"skipped: the run is {run.state}"
    try:
        spec = job_spec(run)
    except JobSpecError as exc:
        _fail(run, f"cannot build the job: {exc}")
        return "failed"
    if run.state == Run.State.QUEUED:
        # Before the claim: after it, an exit code can only be this submission's job's.
        spec.exit_code_path.unlink(missing_ok=True)
        if not services.run_transition(
            run, Run.State.SUBMITTED, backend=run.backend or settings.EXECUTOR
        ):
            return "skipped: another worker claimed it"
    else:
        # An earlier attempt claimed it and died before saving the job id. Mark this
        # attempt (updated_at): the re-send of stale submissions leaves it alone.
        services.run_transition(run, run.state)
    backend = backend_of(run)
    job_id = backend.find(spec)
    if job_id is None:
        ended = _end_of_unsaved_job(run, spec)
        if ended is not None:
            _apply(run, ended)
            return f"ended: the job ran without its id saved; the run is {run.state}"
        if run.state != Run.State.SUBMITTED:
            return "skipped: its job has reported but is not listed; trying again later"
        job_id = _start_job(run, backend, spec)
        if job_id is None:
            return "failed"
    _save_job_id(run, backend, spec, job_id)
    log.info("run %s submitted to %s as job %s", run.pk, backend.name, job_id)
    return f"submitted {job_id}"


def _start_job(run: Run, backend: Backend, spec: JobSpec) -> str | None:
    """Write the job directory and start the job; its id, or None (the run failed)."""
    token = services.run_token_issue(run)
    _write_run_files(spec, run.config, token, slurm=backend.name == "slurm")
    try:
        return backend.submit(spec)
    except BackendError as exc:
        if exc.transient:
            raise
        _fail(run, f"submission failed: {exc}")
        return None


def _end_of_unsaved_job(run: Run, spec: JobSpec) -> JobStatus | None:
    """How the job of a claimed run whose id was never saved ended, if the backend no
    longer lists it: by the exit code its script wrote (cleared before the claim); or, once
    its trainer has reported (so a job ran), as a forgotten job after the grace."""
    code = read_exit_code(spec)
    if code is not None:
        return _exit_status(code)
    if run.state == Run.State.SUBMITTED:
        return None  # no job ran: start one
    return _forgotten(run, spec)


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


def fail_submission(run_id: int, reason: str) -> None:
    """Give up on submitting ``run_id`` (no more retries): it fails with ``reason``."""
    _fail(Run.objects.get(pk=run_id), reason)


def _fail(run: Run, reason: str) -> None:
    run.refresh_from_db()
    if not run.is_terminal:
        services.run_transition(run, Run.State.FAILED, failure_reason=reason[:2000])


def sync() -> dict[str, int]:
    """Move every active run to the state its job is in; return counts per new state."""
    moved: dict[str, int] = {}
    active = Run.objects.filter(state__in=ACTIVE_STATES).exclude(slurm_job_id="")
    by_backend: dict[str, list[Run]] = {}
    for run in active.select_related("experiment"):
        by_backend.setdefault(run.backend or settings.EXECUTOR, []).append(run)
    for name, runs in by_backend.items():
        backend = backend_named(name)
        specs = {}
        for run in runs:
            try:
                specs[run.slurm_job_id] = job_spec(run)
            except JobSpecError as exc:
                _fail(run, f"cannot track the job: {exc}")
        statuses = backend.status(specs)
        for run in runs:
            if run.slurm_job_id not in specs:
                continue
            status = statuses.get(run.slurm_job_id) or _forgotten(run, specs[run.slurm_job_id])
            if status is None:
                continue
            if status.timed_out and _resume_after_time_limit(run, status):
                moved[Run.State.QUEUED] = moved.get(Run.State.QUEUED, 0) + 1
            elif _apply(run, status):
                moved[status.state] = moved.get(status.state, 0) + 1
    return moved


def pack_finished_runs() -> int:
    """Pack the series of a few finished runs that are not all packed yet
    (``PACK_RUNS_PER_SYNC``; :func:`webapp.experiments.series_packs.packs_sweep`), so
    that comparisons read packs. A read cache: a failure is logged, the next tick tries
    again, and comparisons read the points meanwhile. The number of runs packed."""
    try:
        runs, series = series_packs.packs_sweep(settings.PACK_RUNS_PER_SYNC)
    except DatabaseError as exc:
        log.warning("packing finished runs' series failed: %s", exc)
        return 0
    if runs:
        log.info("packed %d series of %d finished runs", series, runs)
    return runs


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
        _apply(run, status)
        return False
    job_id, step = run.slurm_job_id, run.last_step or 0
    if not _apply(run, status):
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


def _forgotten(run: Run, spec: JobSpec) -> JobStatus | None:
    """The end of a job the backend no longer reports, from the exit-code file its script
    leaves in the run directory. (A run that reported its own end through the ingestion
    API is terminal already and never gets here.)"""
    grace = _seconds_setting("SCHEDULER_FORGOTTEN_GRACE_SECONDS")
    if run.submitted_at and timezone.now() - run.submitted_at < grace:
        return None
    code = read_exit_code(spec)
    if code is not None:
        return _exit_status(code)
    return JobStatus("failed", None, reason="the job disappeared without an exit status")


def _exit_status(code: int) -> JobStatus:
    """The end of a job known only by the exit code its script wrote."""
    if code == 0:
        return JobStatus("completed", 0)
    return JobStatus("failed", code, reason=f"exit code {code}")


def _apply(run: Run, status: JobStatus) -> bool:
    """Record ``status`` on ``run``; True when the state changed."""
    facts: dict[str, object] = {}
    if status.node:
        facts["node"] = status.node[:255]
    if status.exit_code is not None:
        facts["exit_code"] = status.exit_code
    if status.state == Run.State.FAILED:
        reason = status.reason or "the job failed"
        if run.failure_reason and run.failure_reason not in reason:
            reason = f"{run.failure_reason}\n{reason}"  # the trainer's own words first
        tail = last_words(log_tail(job_spec(run).log_path, 16384))
        facts["failure_reason"] = (reason + ("\n" + "\n".join(tail) if tail else ""))[:4000]
    if status.state == run.state:
        if facts and any(getattr(run, k) != v for k, v in facts.items()):
            services.run_transition(run, run.state, **facts)
        return False
    try:
        return services.run_transition(run, status.state, **facts)
    except services.TransitionError:
        log.warning("run %s: ignoring %s -> %s", run.pk, run.state, status.state)
        return False


LAUNCHER_NOISE = ("srun:", "slurmstepd", "[job]")


def last_words(log: str, lines: int = 5) -> list[str]:
    """The job's own last lines (the trainer's error), without srun/slurmstepd chatter."""
    own = [line for line in log.strip().splitlines() if not line.startswith(LAUNCHER_NOISE)]
    return own[-lines:]


def cancel(run_id: int) -> str:
    """Cancel ``run_id``: stop its job if it has one, then mark it cancelled."""
    run = Run.objects.select_related("experiment").get(pk=run_id)
    if run.is_terminal:
        return f"skipped: the run is {run.state}"
    if run.slurm_job_id:
        backend_of(run).cancel(run.slurm_job_id, job_spec(run))
    run.refresh_from_db()
    if not run.is_terminal:
        services.run_transition(run, Run.State.CANCELLED, failure_reason="cancelled by the user")
    return "cancelled"


def experiment_launch(experiment: Experiment) -> list[Run]:
    """Queue one run per seed of ``experiment``; each is submitted once this commits."""
    with transaction.atomic():
        runs = services.runs_create(experiment, state=Run.State.QUEUED)
        for run in runs:
            enqueue_submit(run)
    return runs


def sweep_launch(**sweep: Any) -> Sweep:
    """Create the sweep :func:`webapp.experiments.services.sweep_create` describes (same
    keyword arguments) and launch each of its experiments, all or nothing."""
    with transaction.atomic():
        created = services.sweep_create(**sweep)
        for experiment in created.experiments.order_by("id"):
            experiment_launch(experiment)
    return created


def resubmit(run: Run) -> None:
    """Queue a finished run again; its job resumes from the last checkpoint."""
    with transaction.atomic():
        services.run_transition(run, Run.State.QUEUED, slurm_job_id="", node="")
        enqueue_submit(run)


def enqueue_submit(run: Run) -> None:
    """Send ``run_submit`` once the surrounding transaction commits.

    If the broker is unreachable the run stays queued and :func:`sync` sends it again
    later (the claim in :func:`submit` makes a double send harmless).
    """
    transaction.on_commit(lambda: _send(RUN_SUBMIT, run.pk))


def _send(task_name: str, run_id: int) -> None:
    """Send the task ``task_name`` for ``run_id`` by name (this module never imports the
    tasks, which import it: the layers point one way)."""
    try:
        celery_app.send_task(task_name, args=[run_id])
    except Exception as exc:  # noqa: BLE001 - any broker failure: the sync retries later
        log.warning("could not enqueue %s for run %s: %s", task_name, run_id, exc)


def resend_stale_queued(older_than: timedelta | None = None) -> int:
    """Re-send ``run_submit`` for queued runs nobody picked up (a lost message, a broker
    outage at launch time), ``SCHEDULER_STALE_QUEUED_SECONDS`` after they were queued."""
    threshold = (
        _seconds_setting("SCHEDULER_STALE_QUEUED_SECONDS") if older_than is None else older_than
    )
    cutoff = timezone.now() - threshold
    return _resend(Run.objects.filter(state=Run.State.QUEUED, queued_at__lt=cutoff))


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
        _seconds_setting("SCHEDULER_STALE_SUBMIT_SECONDS") if older_than is None else older_than
    )
    cutoff = timezone.now() - threshold
    unsaved = Run.objects.filter(state__in=ACTIVE_STATES, slurm_job_id="")
    still_submitting = Q(state=Run.State.SUBMITTED, updated_at__lt=cutoff)
    moved_on = ~Q(state=Run.State.SUBMITTED) & Q(submitted_at__lt=cutoff)
    return _resend(unsaved.filter(still_submitting | moved_on))


def _resend(runs: Any) -> int:
    """Send ``run_submit`` for each run of the queryset ``runs``; how many."""
    stale = list(runs.values_list("pk", flat=True))
    for run_id in stale:
        _send(RUN_SUBMIT, run_id)
    return len(stale)


def enqueue_cancel(run: Run) -> None:
    """Send ``run_cancel`` once the surrounding transaction commits."""
    transaction.on_commit(lambda: _send(RUN_CANCEL, run.pk))
