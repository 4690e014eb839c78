"""Cancelling a run: the service behind the ``run_cancel`` task, which the run page's
action sends (:func:`scheduler.dispatch.enqueue_cancel`)."""

from __future__ import annotations

from scheduler.run_job import backend_of, job_spec
from webapp.runs import services
from webapp.runs.models import Run


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
