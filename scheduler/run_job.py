"""A run's job, shared by the submit, sync and cancel services: its spec and its
backend, and recording on the run what the backend (or the job's exit-code file) says of
the job.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from scheduler.backends import Backend, JobStatus, backend_named, log_tail, read_exit_code
from scheduler.jobs import PATH, JobSpec, JobSpecError, placement_fields
from trainer.mwra import PlacementPlan
from trainer.rendezvous import read_worker_records
from webapp.core.digits import ascii_digits
from webapp.runs import services
from webapp.runs.models import Run

log = logging.getLogger(__name__)

ACTIVE_STATES = (Run.State.SUBMITTED, Run.State.PENDING, Run.State.RUNNING, Run.State.COMPLETING)
"""The states of a run that has (or is getting) a job."""
LAUNCHER_NOISE = ("srun:", "slurmstepd", "[job]")


def seconds_setting(name: str) -> timedelta:
    """A ``SCHEDULER_*_SECONDS`` setting (read at each call: tests and admins change it)."""
    return timedelta(seconds=float(getattr(settings, name)))


def backend_of(run: Run) -> Backend:
    """The backend ``run``'s job runs on: the run's own, else ``settings.EXECUTOR``."""
    return backend_named(run.backend or settings.EXECUTOR)


def job_python(partition: str) -> str:
    """The Python a Slurm job on ``partition`` runs: the partition's own ``"python"`` in
    ``settings.PARTITIONS`` (``MRL_PARTITIONS``; e.g. the GPU nodes' environment), else
    ``settings.JOB_PYTHON``. A partition's python that is not a plain absolute path is a
    :class:`~scheduler.jobs.JobSpecError` on ``python`` that names the setting."""
    entry = settings.PARTITIONS.get(partition) if partition else None
    python = entry.get("python") if isinstance(entry, dict) else None
    if python is None or python == "":
        return str(settings.JOB_PYTHON)
    if not isinstance(python, str) or PATH.fullmatch(python) is None:
        raise JobSpecError(
            "python",
            f"MRL_PARTITIONS[{partition!r}]['python'] = {python!r} is not allowed; "
            "expected an absolute path of [A-Za-z0-9_./+-]",
        )
    return python


def job_spec(run: Run) -> JobSpec:
    """The job of ``run``: paths, resources and placement from its experiment; its Python
    is the partition's (:func:`job_python`) for a Slurm run."""
    resources = run.experiment.resources or {}
    placement = resources.get("placement")
    plan = PlacementPlan.from_dict(placement) if placement else None
    partition = str(resources.get("partition", "") if run.backend == "slurm" else "")
    run_dir = Path(run.run_dir) if run.run_dir else settings.RUN_ROOT / f"run-{run.pk}"
    return JobSpec(
        run_id=run.pk,
        name=f"{run.name}-r{run.pk}"[-64:].lstrip("-_.") or f"run-{run.pk}",
        run_dir=run_dir.resolve(),
        python=job_python(partition),
        workdir=Path(settings.JOB_WORKDIR).resolve(),
        ingest_url=f"{settings.INGEST_BASE_URL.rstrip('/')}/api/v1/runs/{run.pk}/ingest",
        n_policies=len(run.config.get("pool", [])) or 1,
        partition=partition,
        account=str(resources.get("account", "")),
        qos=str(resources.get("qos", "")),
        time_limit=str(resources.get("time_limit") or settings.SLURM_TIME_LIMIT),
        mem_gb=int(resources.get("mem_gb") or (plan.slurm.mem_gb if plan else 0) or 4),
        zoo_dir=settings.ZOO_DIR,
        **placement_fields(plan, slurm=run.backend == "slurm"),
    )


def fail(run: Run, reason: str) -> None:
    """Fail ``run`` with ``reason``, unless it has ended meanwhile."""
    run.refresh_from_db()
    if not run.is_terminal:
        services.run_transition(run, Run.State.FAILED, failure_reason=reason[:2000])


def forgotten_status(run: Run, spec: JobSpec) -> JobStatus | None:
    """The end of a job the backend no longer reports, from the exit-code file its script
    leaves in the run directory. (A run that reported its own end through the ingestion
    API is terminal already and never gets here.)"""
    grace = seconds_setting("SCHEDULER_FORGOTTEN_GRACE_SECONDS")
    if run.submitted_at and timezone.now() - run.submitted_at < grace:
        return None
    code = read_exit_code(spec)
    if code is not None:
        return exit_status(code)
    return JobStatus("failed", None, reason="the job disappeared without an exit status")


def exit_status(code: int) -> JobStatus:
    """The end of a job known only by the exit code its script wrote."""
    if code == 0:
        return JobStatus("completed", 0)
    return JobStatus("failed", code, reason=f"exit code {code}")


def status_apply(run: Run, status: JobStatus) -> bool:
    """Record ``status`` on ``run``; True when the state changed."""
    facts: dict[str, object] = {}
    if status.node:
        facts["node"] = status.node[:255]
    nodes = worker_nodes(run)
    if nodes and nodes != run.worker_nodes:
        facts["worker_nodes"] = nodes
    if status.exit_code is not None:
        facts["exit_code"] = status.exit_code
    if status.state == Run.State.FAILED:
        reason = status.reason or "the job failed"
        log_text = log_tail(job_spec(run).log_path, 16384)
        lost = failed_workers(log_text, run.policy_names)
        if lost:
            reason = "; ".join(lost) + f" ({reason})"  # which worker, where: first
        if run.failure_reason and run.failure_reason not in reason:
            reason = f"{run.failure_reason}\n{reason}"  # the trainer's own words first
        tail = last_words(log_text)
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


def worker_nodes(run: Run) -> dict[str, str]:
    """policy -> node, from the records the run's workers wrote in its run directory
    (:func:`trainer.rendezvous.write_worker_record`); empty when none has started."""
    try:
        run_dir = job_spec(run).run_dir
    except JobSpecError:
        return {}
    records = read_worker_records(run_dir)
    return {name: str(record.get("node", ""))[:255] for name, record in records.items()}


SRUN_TASK_FAILURE = re.compile(
    r"^srun: error: (?P<node>[A-Za-z0-9_.-]+): tasks? (?P<tasks>[0-9,\-]+): (?P<what>.+)$"
)
"""srun's line for tasks that ended badly: ``srun: error: node2: task 1: Killed`` or
``srun: error: node1: tasks 0-1: Exited with exit code 1``."""


def failed_workers(log: str, policy_names: list[str]) -> list[str]:
    """Which workers srun saw end badly, by policy, rank and node, from the job log:
    ``["worker of policy 'b' (rank 1) on node node2: Killed"]``, in the order srun
    reported them; empty when srun reported none (one-task jobs, the local backend).
    Ranks are pool indices (one srun task per policy, in pool order).

    Workers that were "Terminated" are never named: srun stops the others that way after
    the first failure (``--kill-on-bad-exit``), and Slurm stops them all that way at a
    cancel or the time limit, where the job's own reason says why."""
    found: list[tuple[str, str]] = []
    for line in log.splitlines():
        match = SRUN_TASK_FAILURE.match(line.strip())
        if match is None:
            continue
        what = match["what"].strip()
        for rank in _task_ranks(match["tasks"]):
            who = f"rank {rank} (not in the pool)"
            if 0 <= rank < len(policy_names):
                who = f"policy {policy_names[rank]!r} (rank {rank})"
            text = f"worker of {who} on node {match['node']}: {what}"
            if all(text != seen for seen, _ in found):
                found.append((text, what))
    return [text for text, what in found if what != "Terminated"]


def _task_ranks(tasks: str) -> list[int]:
    """srun's task list (``1``, ``0-2``, ``0,3``) as ranks."""
    ranks: list[int] = []
    for part in tasks.split(","):
        first_text, _, last_text = part.partition("-")
        first = ascii_digits(first_text, max_digits=6)
        last = ascii_digits(last_text, max_digits=6) if last_text else first
        if first is not None and last is not None:
            ranks += range(first, last + 1)
    return ranks


def last_words(log: str, lines: int = 5) -> list[str]:
    """The job's own last lines (the trainer's error), without srun/slurmstepd chatter."""
    own = [line for line in log.strip().splitlines() if not line.startswith(LAUNCHER_NOISE)]
    return own[-lines:]
