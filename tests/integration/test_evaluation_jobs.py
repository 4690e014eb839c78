"""Evaluation jobs through real parts: a run trained by a real Celery worker on the local
backend or the real one-node Slurm cluster, then evaluated on the synthetic suite by an
evaluation job the same worker submits to the same backend; the job's
``python -m trainer eval-run`` ships its points to the live server's ingestion API, and
beat's ``evaluations_sync`` (driven by the test) follows the job to its end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from scheduler import evaluations as jobs
from scheduler.backends import group_members
from scheduler.tasks import evaluations_sync
from tests.integration.conftest import SchedulerWorld
from tests.integration.test_run_lifecycle import BACKENDS, STEPS, Watcher, launch, tiny_config
from trainer.config import RunConfig
from trainer.evals.suite import SuiteConfig
from trainer.evals.synthetic import write_synthetic_suite
from trainer.run import CONFIG_FILE
from webapp.evals.models import Evaluation
from webapp.metrics.models import MetricPoint
from webapp.registry.models import EvalSuite
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

ITEMS = 4


def synthetic_suite(owner: User, directory: Path, *, size: int = ITEMS) -> EvalSuite:
    config = SuiteConfig.from_file(write_synthetic_suite(directory, seed=0, size=size))
    return EvalSuite.objects.create(
        lab=owner.lab_memberships.get().lab,
        owner=owner,
        name=config.name,
        tasks=config.to_dict()["tasks"],
    )


def long_suite(owner: User, path: Path, *, items: int) -> EvalSuite:
    """One exact-match task of ``items`` prompts: an evaluation that takes a while."""
    rows = [{"prompt": f"Say {i}.", "answer": str(i)} for i in range(items)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = {"name": "echo", "type": "exact_match", "path": str(path), "limit": None}
    return EvalSuite.objects.create(
        lab=owner.lab_memberships.get().lab, owner=owner, name="long", tasks=[task]
    )


def follow(world: SchedulerWorld, evaluation: Evaluation, *states: str, timeout: float = 240):
    """Drive ``evaluations_sync`` through the worker until ``evaluation`` is in one of
    ``states``; the states it went through."""
    seen = [evaluation.state]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        evaluations_sync.apply_async(queue=world.worker.queue)
        time.sleep(0.5)
        evaluation.refresh_from_db()
        if evaluation.state != seen[-1]:
            seen.append(evaluation.state)
        if evaluation.state in states:
            return seen
    log = jobs.eval_job_spec(evaluation).log_path
    raise AssertionError(
        f"evaluation {evaluation.pk} stuck: {seen}, reason {evaluation.failure_reason!r}\n"
        f"job log:\n{log.read_text()[-3000:] if log.exists() else '(none)'}\n"
        f"worker log:\n{world.worker.log()[-3000:]}"
    )


def eval_points(run: Run, suite: str) -> dict[tuple[str, str], dict[int, float]]:
    """(policy, key) -> {step: value} of the run's ``eval/<suite>/...`` points."""
    rows = MetricPoint.objects.filter(series__run=run, series__key__startswith=f"eval/{suite}/")
    found: dict[tuple[str, str], dict[int, float]] = {}
    for policy, key, step, value in rows.values_list(
        "series__policy", "series__key", "step", "value"
    ):
        found.setdefault((policy, key), {})[step] = value
    return found


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_completed_run_is_evaluated_automatically_on_its_backend(
    scheduler_world: SchedulerWorld, alice: User, backend: str, tmp_path: Path
) -> None:
    suite = synthetic_suite(alice, tmp_path / "suite")
    run = launch(alice, backend, name=f"auto-eval-{backend}")
    services.experiment_auto_eval_set(run.experiment, suite)
    run = Watcher(scheduler_world, run).until_state("completed", "failed", "cancelled")
    assert run.state == "completed", run.failure_reason

    deadline = time.monotonic() + 60
    while not run.evaluations.exists() and time.monotonic() < deadline:
        evaluations_sync.apply_async(queue=scheduler_world.worker.queue)
        time.sleep(0.5)
    evaluation = run.evaluations.get()
    seen = follow(scheduler_world, evaluation, "completed", "failed", "cancelled")

    assert evaluation.state == "completed", (seen, evaluation.failure_reason)
    assert evaluation.automatic and evaluation.backend == backend and evaluation.job_id
    if backend == "slurm":
        assert "pending" in seen or "running" in seen
    points = eval_points(run, suite.name)
    tasks = [task["name"] for task in suite.tasks]
    for policy in run.policy_names:
        for task in tasks:
            # The base model at step 0, the final checkpoint at the run's last step.
            assert set(points[(policy, f"eval/synthetic/{task}/accuracy")]) == {0, STEPS}
            assert points[(policy, f"eval/synthetic/{task}/n")] == {0: ITEMS, STEPS: ITEMS}
    assert run.evaluations.count() == 1  # the sync queues a run's automatic one once
    results = jobs.eval_job_spec(evaluation).own_dir / "results"
    assert (results / "done.json").is_file()


def test_an_evaluation_is_cancelled_with_its_job(
    scheduler_world: SchedulerWorld, alice: User, tmp_path: Path
) -> None:
    run = finished_run_without_training(alice, scheduler_world.run_root)
    suite = long_suite(alice, tmp_path / "long.jsonl", items=4000)
    evaluation = jobs.queue(run, suite, owner=alice, steps="none", include_base=True)
    follow(scheduler_world, evaluation, "running")

    assert jobs.request_cancel(evaluation).startswith("Cancelling")
    follow(scheduler_world, evaluation, "cancelled", "completed", "failed", timeout=60)

    assert evaluation.state == "cancelled"
    assert not group_members(int(evaluation.job_id))  # the whole process group is gone
    run.refresh_from_db()
    assert run.state == "completed"  # the run itself is untouched


def finished_run_without_training(owner: User, run_root: Path) -> Run:
    """A completed run whose directory holds only its config: enough for evaluating its
    base models (the training is not what this test is about)."""
    experiment = services.experiment_create(
        owner=owner, config=tiny_config("cancel-eval"), seeds=[0], resources={"backend": "local"}
    )
    run = services.runs_create(experiment, state=Run.State.COMPLETED)[0]
    run_dir = run_root / f"run-{run.pk}"
    run_dir.mkdir()
    (run_dir / CONFIG_FILE).write_text(RunConfig.from_dict(run.config).to_json())
    Run.objects.filter(pk=run.pk).update(run_dir=str(run_dir), backend="local")
    run.refresh_from_db()
    return run
