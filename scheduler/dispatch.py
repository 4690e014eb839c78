"""The scheduler's Celery tasks by name, and sending them.

The scheduler's services send ``run_submit`` and ``run_cancel`` by name and never import
:mod:`scheduler.tasks`, which imports them (the layers point one way);
``scheduler/tasks.py`` registers its tasks under these names, and beat's schedule
(``CELERY_BEAT_SCHEDULE`` in ``webapp/settings.py``) spells the same names.
"""

from __future__ import annotations

import logging

from django.db import transaction

from scheduler.celery import app as celery_app
from webapp.runs.models import Run

log = logging.getLogger(__name__)

RUN_SUBMIT = "scheduler.tasks.run_submit"
RUN_CANCEL = "scheduler.tasks.run_cancel"
"""The tasks the services send, by name (scheduler/tasks.py registers them so)."""
EVALUATION_SUBMIT = "scheduler.tasks.evaluation_submit"
EVALUATION_CANCEL = "scheduler.tasks.evaluation_cancel"
"""An evaluation job's submission and cancellation (:mod:`scheduler.evaluations`)."""
EVALUATIONS_SYNC = "scheduler.tasks.evaluations_sync"
"""Beat's following of evaluation jobs (never sent)."""
SERIES_PACK = "scheduler.tasks.series_pack"
"""Beat's packing of finished runs' series (never sent: beat runs it on its own tick)."""
POINTS_RETENTION = "scheduler.tasks.points_retention"
"""Beat's dropping of old packed runs' raw points (never sent; :mod:`scheduler.packing`)."""
TASK_FILE_CHECK = "scheduler.tasks.task_file_check"
"""Reading an evaluation task file too large to read in a request
(:func:`webapp.registry.suite_checks.refresh`)."""
TASK_FILE_CHECKS_SYNC = "scheduler.tasks.task_file_checks_sync"
"""Beat's run of the file checks whose message was lost (never sent)."""
ZOO_BUILD = "scheduler.tasks.zoo_build"
"""Building a zoo recipe, from the compose page's button
(:mod:`webapp.registry.zoo_builds`)."""


def enqueue_submit(run: Run) -> None:
    """Send ``run_submit`` once the surrounding transaction commits.

    If the broker is unreachable the run stays queued and the sync's recovery
    (:func:`scheduler.sync.resend_stale_queued`) sends it again later (the claim in
    :func:`scheduler.submit.submit` makes a double send harmless).
    """
    transaction.on_commit(lambda: send(RUN_SUBMIT, run.pk))


def enqueue_cancel(run: Run) -> None:
    """Send ``run_cancel`` once the surrounding transaction commits."""
    transaction.on_commit(lambda: send(RUN_CANCEL, run.pk))


def enqueue_file_checks(check_ids: list[int]) -> None:
    """Send ``task_file_check`` for each pending check once the transaction commits (a
    lost message leaves the check pending; beat's sync runs it a minute later)."""
    for check_id in check_ids:
        transaction.on_commit(lambda check_id=check_id: send(TASK_FILE_CHECK, check_id))


def send_zoo_build(recipe: str, zoo_dir: str) -> bool:
    """Send ``zoo_build`` for ``recipe`` into ``zoo_dir`` now (the claim is a file, no
    transaction to wait for); False when the broker refused it (logged)."""
    try:
        celery_app.send_task(ZOO_BUILD, args=[recipe, zoo_dir])
    except Exception as exc:  # noqa: BLE001 - any broker failure: the page says so
        log.warning("could not enqueue %s for %s: %s", ZOO_BUILD, recipe, exc)
        return False
    return True


def send(task_name: str, object_id: int) -> None:
    """Send the task ``task_name`` for ``object_id`` (a run's, an evaluation's) by name; a
    broker failure is logged (the sync's recovery sends lost submissions again)."""
    try:
        celery_app.send_task(task_name, args=[object_id])
    except Exception as exc:  # noqa: BLE001 - any broker failure: the sync retries later
        log.warning("could not enqueue %s for %s: %s", task_name, object_id, exc)
