"""Evaluation jobs: a suite on checkpoints of a run, queued, submitted, followed and
cancelled like a training job, on the run's backend (Slurm or local).

An :class:`~webapp.evals.models.Evaluation` runs from its own directory,
``<run_dir>/evals/job-<id>/`` (``suite.json``, the script, ``output.log``,
``exit-code``, ``results/``): ``python -m trainer eval-run`` scores the chosen
checkpoints of every policy (and the base models, at step 0) and ships the
``eval/<suite>/<task>/...`` points to the run's ingestion endpoint with the run's token,
after each (policy, checkpoint), so the run page's table fills in as it goes.

- :func:`queue` creates one and sends ``evaluation_submit`` once the transaction commits.
- :func:`submit` claims a queued evaluation with a conditional UPDATE (a replayed message
  is skipped), writes the job directory and starts the job.
- :func:`sync` (beat's ``evaluations_sync``) moves active evaluations to their job's
  state, queues the automatic evaluation of runs that completed with an experiment's
  ``auto_eval_suite``, and re-sends queued evaluations whose message was lost.
- :func:`cancel` stops the job.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TypedDict

from django.conf import settings
from django.db import transaction
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
from scheduler.dispatch import EVALUATION_CANCEL, EVALUATION_SUBMIT, send
from scheduler.jobs import EvalCommand, JobSpec, JobSpecError, render_eval_script
from scheduler.run_job import job_spec, last_words, seconds_setting
from webapp.evals.models import Evaluation
from webapp.registry.models import EvalSuite
from webapp.runs import services
from webapp.runs.models import Run

log = logging.getLogger(__name__)

ACTIVE = (Evaluation.State.SUBMITTED, Evaluation.State.PENDING, Evaluation.State.RUNNING)
"""The states of an evaluation that has (or is getting) a job."""
SUITE_FILE = "suite.json"
JOB_STATES = {
    "pending": Evaluation.State.PENDING,
    "running": Evaluation.State.RUNNING,
    "completing": Evaluation.State.RUNNING,
    "completed": Evaluation.State.COMPLETED,
    "failed": Evaluation.State.FAILED,
    "cancelled": Evaluation.State.CANCELLED,
}
"""A backend's job states in an evaluation's vocabulary."""


# --- queue ---------------------------------------------------------------------------------
def queue(
    run: Run,
    suite: EvalSuite,
    *,
    owner: object,
    steps: str = "final",
    include_base: bool = True,
    automatic: bool = False,
) -> Evaluation:
    """Queue an evaluation of ``run`` on ``suite``; its job is submitted once this commits.
    The suite is copied: editing it later does not change what this evaluation runs."""
    with transaction.atomic():
        evaluation = Evaluation.objects.create(
            run=run,
            suite=suite,
            suite_config=suite.config,
            owner=owner,
            steps=steps,
            include_base=include_base,
            automatic=automatic,
            backend=run.backend or settings.EXECUTOR,
        )
        transaction.on_commit(lambda: send(EVALUATION_SUBMIT, evaluation.pk))
    return evaluation


# --- the job -------------------------------------------------------------------------------
def job_dir(evaluation: Evaluation) -> Path:
    """``<run_dir>/evals/job-<id>``: the evaluation job's own directory."""
    return job_spec(evaluation.run).run_dir / "evals" / f"job-{evaluation.pk}"


def eval_job_spec(evaluation: Evaluation) -> JobSpec:
    """The evaluation's job: the run's job (paths, ingest URL, Slurm options), one task
    in the evaluation's own directory, one GPU if the run had any."""
    run_spec = job_spec(evaluation.run)
    name = f"eval{evaluation.pk}-{evaluation.run.name}"[:64].rstrip("-_.")
    return JobSpec(
        run_id=run_spec.run_id,
        name=name,
        run_dir=run_spec.run_dir,
        python=run_spec.python,
        workdir=run_spec.workdir,
        ingest_url=run_spec.ingest_url,
        partition=run_spec.partition,
        account=run_spec.account,
        qos=run_spec.qos,
        time_limit=run_spec.time_limit,
        gpus_per_node=min(run_spec.gpus_per_node, 1),
        cpus_per_task=run_spec.cpus_per_task,
        mem_gb=run_spec.mem_gb,
        zoo_dir=run_spec.zoo_dir,
        job_dir=job_dir(evaluation),
    )


def eval_command(evaluation: Evaluation, spec: JobSpec) -> EvalCommand:
    return EvalCommand(
        suite_path=spec.own_dir / SUITE_FILE,
        steps=evaluation.steps,
        include_base=evaluation.include_base,
        device="cuda" if spec.gpus_per_node else "cpu",
    )


def backend_of(evaluation: Evaluation) -> Backend:
    return backend_named(evaluation.backend or settings.EXECUTOR)


def submit(evaluation_id: int) -> str:
    """Claim queued evaluation ``evaluation_id`` and start its job; what happened.

    Raises :class:`BackendError` with ``transient=True`` when the caller should retry
    (the claim is undone first, so the retry finds it queued)."""
    evaluation = Evaluation.objects.select_related("run__experiment").get(pk=evaluation_id)
    if evaluation.state != Evaluation.State.QUEUED:
        return f"skipped: the evaluation is {evaluation.state}"
    try:
        spec = eval_job_spec(evaluation)
        command = eval_command(evaluation, spec)
    except JobSpecError as exc:
        _finish(evaluation, Evaluation.State.FAILED, failure_reason=f"cannot build the job: {exc}")
        return "failed"
    if not _move(evaluation, Evaluation.State.QUEUED, Evaluation.State.SUBMITTED):
        return "skipped: another worker claimed it"
    backend = backend_of(evaluation)
    try:
        _write_job_files(evaluation, spec, command, slurm=backend.name == "slurm")
        job_id = backend.submit(spec)
    except BackendError as exc:
        if exc.transient:
            _move(evaluation, Evaluation.State.SUBMITTED, Evaluation.State.QUEUED)
            raise
        _finish(evaluation, Evaluation.State.FAILED, failure_reason=f"submission failed: {exc}")
        return "failed"
    except OSError as exc:
        _finish(evaluation, Evaluation.State.FAILED, failure_reason=f"cannot write the job: {exc}")
        return "failed"
    saved = Evaluation.objects.filter(pk=evaluation.pk, state=Evaluation.State.SUBMITTED).update(
        job_id=job_id, submitted_at=timezone.now(), updated_at=timezone.now()
    )
    if not saved:  # cancelled meanwhile: stop the job it had no id to stop
        backend.cancel(job_id, spec)
        return f"cancelled job {job_id}: the evaluation was cancelled meanwhile"
    log.info("evaluation %s submitted to %s as job %s", evaluation.pk, backend.name, job_id)
    return f"submitted {job_id}"


def _write_job_files(
    evaluation: Evaluation, spec: JobSpec, command: EvalCommand, *, slurm: bool
) -> None:
    """The job directory (suite, script) and a working run token for the job to ship
    with: the run's token file, unless it is missing or no longer the run's token."""
    spec.own_dir.mkdir(parents=True, exist_ok=True)
    for stale in (spec.exit_code_path, spec.own_dir / "cancelled", spec.own_dir / "pid"):
        stale.unlink(missing_ok=True)
    command.suite_path.write_text(json.dumps(evaluation.suite_config, indent=2))
    spec.script_path.write_text(render_eval_script(spec, command, slurm=slurm))
    _ensure_run_token(evaluation.run, spec.token_path)


def _ensure_run_token(run: Run, path: Path) -> None:
    """Leave a valid token of ``run`` in ``path``. The token file of a run still running
    is its job's and is left alone; a finished run whose token was revoked (or whose file
    is gone) gets a new one."""
    try:
        current = path.read_text().strip()
    except OSError:
        current = ""
    run.refresh_from_db(fields=["token_hash", "state"])
    if current and run.token_hash == services.token_hash(current):
        return
    if not run.is_terminal and current:
        return  # the training job's own token: replacing it would cut the job off
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also when the file was there already
    with os.fdopen(fd, "w") as token_file:
        token_file.write(services.run_token_issue(run))


# --- sync ----------------------------------------------------------------------------------
def sync() -> dict[str, int]:
    """Beat: follow every active evaluation's job; queue automatic evaluations; re-send
    lost submissions. Counts per new state (``queued`` counts automatic ones)."""
    moved: dict[str, int] = {}
    active = Evaluation.objects.filter(state__in=ACTIVE).exclude(job_id="")
    by_backend: dict[str, list[Evaluation]] = {}
    for evaluation in active.select_related("run__experiment"):
        by_backend.setdefault(evaluation.backend or settings.EXECUTOR, []).append(evaluation)
    for evaluations in by_backend.values():
        specs = {e.job_id: eval_job_spec(e) for e in evaluations}
        statuses = backend_of(evaluations[0]).status(specs)
        for evaluation in evaluations:
            status = statuses.get(evaluation.job_id) or _forgotten(
                evaluation, specs[evaluation.job_id]
            )
            if status is not None and _apply(evaluation, status, specs[evaluation.job_id]):
                moved[evaluation.state] = moved.get(evaluation.state, 0) + 1
    queued = queue_automatic()
    if queued:
        moved[Evaluation.State.QUEUED] = queued
    _resend_stale_queued()
    return moved


def _forgotten(evaluation: Evaluation, spec: JobSpec) -> JobStatus | None:
    """The end of a job the backend no longer lists: its exit-code file, or failed once
    the grace has passed without one."""
    code = read_exit_code(spec)
    if code is not None:
        return JobStatus("completed", 0) if code == 0 else JobStatus("failed", code)
    grace = seconds_setting("SCHEDULER_FORGOTTEN_GRACE_SECONDS")
    if evaluation.submitted_at and timezone.now() - evaluation.submitted_at < grace:
        return None
    return JobStatus("failed", None, reason="the job disappeared without an exit status")


class _JobFacts(TypedDict, total=False):
    """What a job's status records on its evaluation (its fields, set by the UPDATE)."""

    node: str
    exit_code: int
    failure_reason: str


def _apply(evaluation: Evaluation, status: JobStatus, spec: JobSpec) -> bool:
    """Record ``status`` on ``evaluation``; True when its state changed."""
    target = JOB_STATES.get(status.state, Evaluation.State.PENDING)
    if target == evaluation.state:
        return False
    facts: _JobFacts = {"node": status.node[:255]} if status.node else {}
    if status.exit_code is not None:
        facts["exit_code"] = status.exit_code
    if target == Evaluation.State.FAILED:
        reason = status.reason or f"exit code {status.exit_code}"
        tail = last_words(log_tail(spec.log_path, 16384))
        facts["failure_reason"] = (reason + ("\n" + "\n".join(tail) if tail else ""))[:4000]
    if target in Evaluation.TERMINAL_STATES:
        return _finish(evaluation, target, **facts)
    return _move(evaluation, evaluation.state, target, **facts)


def queue_automatic() -> int:
    """Queue the evaluation of each completed run whose experiment names an
    ``auto_eval_suite`` and that has no automatic evaluation yet (base models and the
    final checkpoint); how many were queued."""
    runs = (
        Run.objects.filter(state=Run.State.COMPLETED, experiment__auto_eval_suite__isnull=False)
        .exclude(evaluations__automatic=True)
        .select_related("experiment__auto_eval_suite", "experiment__owner")[:20]
    )
    count = 0
    for run in runs:
        suite = run.experiment.auto_eval_suite
        assert suite is not None
        queue(run, suite, owner=run.experiment.owner, automatic=True)
        count += 1
    return count


def _resend_stale_queued() -> None:
    """Send ``evaluation_submit`` again for evaluations queued for a while (a message lost
    with a broker outage); the claim makes a double send harmless."""
    stale = timezone.now() - seconds_setting("SCHEDULER_STALE_QUEUED_SECONDS")
    waiting = Evaluation.objects.filter(state=Evaluation.State.QUEUED, updated_at__lt=stale)
    for evaluation_id in waiting.values_list("pk", flat=True)[:50]:
        Evaluation.objects.filter(pk=evaluation_id).update(updated_at=timezone.now())
        send(EVALUATION_SUBMIT, evaluation_id)


# --- cancel --------------------------------------------------------------------------------
def request_cancel(evaluation: Evaluation) -> str:
    """The run page's cancel: a queued evaluation is cancelled at once, one with a job
    through ``evaluation_cancel``; what the page says."""
    if evaluation.is_terminal:
        return f"The evaluation is already {evaluation.state}."
    if _finish(evaluation, Evaluation.State.CANCELLED, only_from=(Evaluation.State.QUEUED,)):
        return "Evaluation cancelled."
    transaction.on_commit(lambda: send(EVALUATION_CANCEL, evaluation.pk))
    return "Cancelling: the evaluation job is being stopped."


def cancel(evaluation_id: int) -> str:
    """Stop evaluation ``evaluation_id``'s job and mark it cancelled."""
    evaluation = Evaluation.objects.select_related("run__experiment").get(pk=evaluation_id)
    if evaluation.is_terminal:
        return f"skipped: the evaluation is {evaluation.state}"
    if evaluation.job_id:
        backend_of(evaluation).cancel(evaluation.job_id, eval_job_spec(evaluation))
    _finish(evaluation, Evaluation.State.CANCELLED, failure_reason="cancelled by the user")
    return "cancelled"


# --- state ---------------------------------------------------------------------------------
def _move(evaluation: Evaluation, source: str, target: str, **facts: object) -> bool:
    """``source`` -> ``target`` by a conditional UPDATE (False: it was not in ``source``)."""
    moved = Evaluation.objects.filter(pk=evaluation.pk, state=source).update(
        state=target, updated_at=timezone.now(), **facts
    )
    evaluation.refresh_from_db()
    return bool(moved)


def _finish(
    evaluation: Evaluation,
    state: str,
    *,
    only_from: tuple[str, ...] = (Evaluation.State.QUEUED, *ACTIVE),
    **facts: object,
) -> bool:
    """End ``evaluation`` in ``state`` unless it has ended already."""
    now = timezone.now()
    moved = Evaluation.objects.filter(Q(state__in=only_from), pk=evaluation.pk).update(
        state=state, finished_at=now, updated_at=now, **facts
    )
    evaluation.refresh_from_db()
    return bool(moved)
