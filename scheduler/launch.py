"""Queuing runs: an experiment's runs, a sweep's experiments, a finished run again.

Each run is queued in the database and its ``run_submit`` sent once the transaction
commits (:func:`scheduler.dispatch.enqueue_submit`); :mod:`scheduler.submit` takes it
from there.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from scheduler.dispatch import enqueue_submit
from webapp.runs import services
from webapp.runs.models import Experiment, Run, Sweep


def experiment_launch(experiment: Experiment) -> list[Run]:
    """Queue one run per seed of ``experiment``; each is submitted once this commits."""
    with transaction.atomic():
        runs = services.runs_create(experiment, state=Run.State.QUEUED)
        for run in runs:
            enqueue_submit(run)
    return runs


def sweep_launch(**sweep: Any) -> Sweep:
    """Create the sweep :func:`webapp.runs.services.sweep_create` describes (same
    keyword arguments) and launch each of its experiments, all or nothing."""
    with transaction.atomic():
        created = services.sweep_create(**sweep)
        for experiment in created.experiments.order_by("id"):
            experiment_launch(experiment)
    return created


def resubmit(run: Run) -> None:
    """Queue a finished run again (the run page's action); its job resumes from the last
    checkpoint."""
    with transaction.atomic():
        services.run_transition(run, Run.State.QUEUED, slurm_job_id="", node="")
        enqueue_submit(run)
