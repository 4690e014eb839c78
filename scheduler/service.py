"""Submitting, tracking and cancelling runs: the services behind the Celery tasks.

- :func:`submit` claims a queued run with a conditional UPDATE (two workers can never
  both submit it), writes the job directory, and starts the job on the run's backend. A
  retried submit (worker crash after sbatch) adopts the job it already started.
- :func:`sync` moves active runs through their states from what the backend reports;
  for a job the backend has forgotten it falls back to the run's own status reports and
  the exit-code file the job script leaves behind.
- :func:`cancel` and :func:`resubmit` are the run page's actions.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
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
from scheduler.jobs import JobSpec, JobSpecError
from trainer.mwra import PlacementPlan
from webapp.experiments import services
from webapp.experiments.models import Run

log = logging.getLogger(__name__)

ACTIVE_STATES = (Run.State.SUBMITTED, Run.State.PENDING, Run.State.RUNNING, Run.State.COMPLETING)
FORGOTTEN_GRACE = timedelta(seconds=60)
STALE_QUEUED = timedelta(seconds=60)
"""A run queued this long without being claimed gets its submit task sent again."""
"""A job missing from the backend this soon after submission is still starting."""


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
    """Submit queued run ``run_id``; return what happened ("submitted <id>", "skipped").

    Raises :class:`BackendError` with ``transient=True`` when the caller should retry.
    """
    run = Run.objects.select_related("experiment").get(pk=run_id)
    if run.state == Run.State.QUEUED:
        if not services.run_transition(
            run, Run.State.SUBMITTED, backend=run.backend or settings.EXECUTOR
        ):
            return "skipped: another worker claimed it"
    elif not (run.state == Run.State.SUBMITTED and not run.slurm_job_id):
        return f"skipped: the run is {run.state}"
    # Claimed (now or by an earlier attempt of this task that died before the job id).
    backend = backend_of(run)
    try:
        spec = job_spec(run)
    except JobSpecError as exc:
        _fail(run, f"cannot build the job: {exc}")
        return "failed"
    job_id = backend.find(spec)
    if job_id is None:
        token = services.run_token_issue(run)
        _write_run_files(spec, run.config, token, slurm=backend.name == "slurm")
        try:
            job_id = backend.submit(spec)
        except BackendError as exc:
            if exc.transient:
                raise
            _fail(run, f"submission failed: {exc}")
            return "failed"
    services.run_transition(
        run, Run.State.SUBMITTED, slurm_job_id=job_id, run_dir=str(spec.run_dir)
    )
    log.info("run %s submitted to %s as job %s", run.pk, backend.name, job_id)
    return f"submitted {job_id}"


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
            if status is not None and _apply(run, status):
                moved[status.state] = moved.get(status.state, 0) + 1
    return moved


def _forgotten(run: Run, spec: JobSpec) -> JobStatus | None:
    """The end of a job the backend no longer reports, from the exit-code file its script
    leaves in the run directory. (A run that reported its own end through the ingestion
    API is terminal already and never gets here.)"""
    if run.submitted_at and timezone.now() - run.submitted_at < FORGOTTEN_GRACE:
        return None
    code = read_exit_code(spec)
    if code == 0:
        return JobStatus("completed", 0)
    if code is not None:
        return JobStatus("failed", code, reason=f"exit code {code}")
    return JobStatus("failed", None, reason="the job disappeared without an exit status")


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
    from scheduler.tasks import run_submit

    transaction.on_commit(lambda: _send(run_submit, run.pk))


def _send(task: Any, run_id: int) -> None:
    try:
        task.delay(run_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure: the sync retries later
        log.warning("could not enqueue %s for run %s: %s", task.name, run_id, exc)


def resend_stale_queued(older_than: timedelta = STALE_QUEUED) -> int:
    """Re-send ``run_submit`` for queued runs nobody picked up (a lost message, a broker
    outage at launch time)."""
    from scheduler.tasks import run_submit

    cutoff = timezone.now() - older_than
    stale = list(
        Run.objects.filter(state=Run.State.QUEUED, queued_at__lt=cutoff).values_list(
            "pk", flat=True
        )
    )
    for run_id in stale:
        _send(run_submit, run_id)
    return len(stale)


def enqueue_cancel(run: Run) -> None:
    """Send ``run_cancel`` once the surrounding transaction commits."""
    from scheduler.tasks import run_cancel

    transaction.on_commit(lambda: _send(run_cancel, run.pk))
