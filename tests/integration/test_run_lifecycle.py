"""A run's whole life through real parts: launched by the web layer's service, submitted
by a real Celery worker over Redis to the real one-node Slurm cluster (or the local
backend), trained by the real trainer on the tiny zoo, its metrics shipped to the live
server's ingestion API into Postgres, its state moved by the status sync.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User

from scheduler.launch import experiment_launch
from scheduler.tasks import runs_sync
from tests.integration.conftest import SchedulerWorld
from trainer import metrics as m
from webapp.metrics.models import MetricPoint
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

STEPS = 6
TRAIN_KEY = m.TRAIN_REWARD_MEAN
BACKENDS = ["local", pytest.param("slurm", marks=pytest.mark.slurm)]


def tiny_config(name: str, *, steps: int = STEPS, model: str = "zoo:tiny-gpt2-unigram") -> dict:
    return {
        "name": name,
        "regime": "sgt",
        "pool": [
            {"name": "llama", "model": "zoo:tiny-llama-char", "group_size": 4, "max_new_tokens": 8},
            {"name": "gpt2", "model": model, "group_size": 4, "max_new_tokens": 8},
        ],
        "task": {"levels": [1, 2], "val_size": 8},
        "steps": steps,
        "prompts_per_step": 4,
        "val_every": 3,
        "checkpoint_every": 2,
    }


def launch(owner: User, backend: str, **config: Any) -> Run:
    resources = {"backend": backend, "mem_gb": 2, "time_limit": "00:20:00"}
    if backend == "slurm":
        resources["partition"] = "debug"
    experiment = services.experiment_create(
        owner=owner, config=tiny_config(**config), seeds=[0], resources=resources
    )
    return experiment_launch(experiment)[0]


class Watcher:
    """Drives the status sync through the worker and records every state seen."""

    def __init__(self, world: SchedulerWorld, run: Run) -> None:
        self.world, self.run, self.states = world, run, [run.state]

    def until(
        self,
        done: Callable[[Run], bool],
        timeout: float = 240,
        on_poll: Callable[[Run], None] | None = None,
    ) -> Run:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs_sync.apply_async(queue=self.world.worker.queue)
            time.sleep(0.5)
            self.run.refresh_from_db()
            if self.run.state != self.states[-1]:
                self.states.append(self.run.state)
            if done(self.run):
                return self.run
            if on_poll is not None:
                on_poll(self.run)
        raise AssertionError(
            f"run {self.run.pk} stuck: states {self.states}, message {self.run.status_message!r}, "
            f"reason {self.run.failure_reason!r}\nworker log:\n{self.world.worker.log()[-3000:]}"
        )

    def until_state(
        self, *states: str, timeout: float = 240, on_poll: Callable[[Run], None] | None = None
    ) -> Run:
        return self.until(lambda run: run.state in states, timeout, on_poll)


def release_requeue_hold(run: Run) -> None:
    """Lift the hold Slurm puts on a requeued job, once the sync has seen it pending.

    Slurm lets a requeued job start again only after about two minutes (its BeginTime:
    121 s in 22.05); the tests lift that hold as an administrator can (``scontrol update
    StartTime=now``) so that the suite does not sleep through it. The job still goes
    through PENDING, and Slurm still starts it again; only the wait is cut.
    """
    if run.state != "pending" or not run.slurm_job_id:
        return
    job = subprocess.run(
        ["scontrol", "show", "job", run.slurm_job_id], capture_output=True, text=True, check=False
    ).stdout
    if "JobState=PENDING" in job and "Reason=BeginTime" in job:
        subprocess.run(
            ["scontrol", "update", f"JobId={run.slurm_job_id}", "StartTime=now"], check=False
        )


def history(run: Run) -> list[str]:
    """Every state the run entered, in order (recorded by each transition)."""
    return list(run.state_changes.order_by("at", "id").values_list("state", flat=True))


def every_policy(steps: list[int]) -> dict[str, list[int]]:
    """The same steps for both policies and the pool-wide aggregate."""
    return {policy: steps for policy in ("llama", "gpt2", m.POOL)}


def series_steps(run: Run, key: str) -> dict[str, list[int]]:
    rows = MetricPoint.objects.filter(series__run=run, series__key=key).order_by("step")
    steps: dict[str, list[int]] = {}
    for policy, step in rows.values_list("series__policy", "step"):
        steps.setdefault(policy, []).append(step)
    return steps


def occupy_the_cluster(seconds: int) -> str:
    """A job holding every CPU, so that the next one waits (PENDING) for a while."""
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--job-name=blocker",
            "--exclusive",
            "--mem=100M",
            "--output=/dev/null",
            f"--wrap=sleep {seconds}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().split(";")[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_completes_and_its_metrics_arrive(
    scheduler_world: SchedulerWorld, alice: User, backend: str
) -> None:
    if backend == "slurm":
        occupy_the_cluster(6)
    run = launch(alice, backend, name=f"complete-{backend}")
    watcher = Watcher(scheduler_world, run)
    run = watcher.until_state("completed", "failed", "cancelled")
    assert run.state == "completed", (run.failure_reason, watcher.states)
    expected = ["queued", "submitted", "running", "completed"]
    if backend == "slurm":
        expected = ["queued", "submitted", "pending", "running", "completed"]
    # "completing" (the trainer said it is done, the job has not ended yet) may be too
    # short to matter; everything else happens in this order, exactly once.
    assert [state for state in history(run) if state != "completing"] == expected
    assert run.exit_code == 0 and run.slurm_job_id and run.node
    assert series_steps(run, TRAIN_KEY) == every_policy(list(range(1, STEPS + 1)))
    assert set(series_steps(run, m.VAL_REWARD_AT_1)["gpt2"]) == {0, 3, 6}
    assert run.transfer_events.exists()  # SGT moved successes between the two
    assert run.last_step == STEPS


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_running_run_can_be_cancelled(
    scheduler_world: SchedulerWorld, alice: User, backend: str
) -> None:
    run = launch(alice, backend, name=f"cancel-{backend}", steps=200)
    watcher = Watcher(scheduler_world, run)
    watcher.until(lambda r: r.state == "running" and (r.last_step or 0) >= 1)
    scheduler_service_cancel(run)
    run = watcher.until_state("cancelled", "failed", "completed", timeout=90)
    assert run.state == "cancelled", (run.failure_reason, watcher.states)
    time.sleep(3)
    runs_sync.apply_async(queue=scheduler_world.worker.queue)
    time.sleep(2)
    run.refresh_from_db()
    assert run.state == "cancelled"  # the sync does not resurrect it
    assert (run.last_step or 0) < 200


def scheduler_service_cancel(run: Run) -> None:
    from django.db import transaction

    from scheduler.dispatch import enqueue_cancel

    with transaction.atomic():
        enqueue_cancel(run)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bad_model_path_fails_with_the_reason(
    scheduler_world: SchedulerWorld, alice: User, backend: str
) -> None:
    run = launch(alice, backend, name=f"badmodel-{backend}", model="/nonexistent/model-dir")
    run = Watcher(scheduler_world, run).until_state("failed", "completed", "cancelled")
    assert run.state == "failed"
    assert run.exit_code not in (0, None)
    assert "/nonexistent/model-dir" in run.failure_reason, run.failure_reason


@pytest.mark.slurm
def test_a_requeued_slurm_job_resumes_without_gaps_or_duplicates(
    scheduler_world: SchedulerWorld, alice: User
) -> None:
    steps = 10
    run = launch(alice, "slurm", name="requeue", steps=steps)
    watcher = Watcher(scheduler_world, run)
    watcher.until(lambda r: (r.last_step or 0) >= 3)
    subprocess.run(["scontrol", "requeue", run.slurm_job_id], check=True)
    run = watcher.until_state(
        "completed", "failed", "cancelled", timeout=300, on_poll=release_requeue_hold
    )
    assert run.state == "completed", (run.failure_reason, watcher.states)
    states = history(run)
    assert "pending" in states[states.index("running") :], states  # requeued, then resumed
    complete = list(range(1, steps + 1))
    assert series_steps(run, TRAIN_KEY) == every_policy(complete)
    log = (scheduler_world.run_root / f"run-{run.pk}" / "job" / "output.log").read_text()
    assert "--resume" in log


@pytest.mark.slurm
def test_the_time_limit_signal_checkpoints_and_requeues(
    scheduler_world: SchedulerWorld, alice: User
) -> None:
    """What Slurm sends 120 s before the time limit (USR1 to the batch shell), sent now."""
    steps = 10
    run = launch(alice, "slurm", name="timelimit", steps=steps)
    watcher = Watcher(scheduler_world, run)
    watcher.until(lambda r: (r.last_step or 0) >= 2)
    subprocess.run(["scancel", "--batch", "--signal=USR1", run.slurm_job_id], check=True)
    run = watcher.until_state(
        "completed", "failed", "cancelled", timeout=300, on_poll=release_requeue_hold
    )
    assert run.state == "completed", (run.failure_reason, watcher.states)
    complete = list(range(1, steps + 1))
    assert series_steps(run, TRAIN_KEY) == every_policy(complete)
    log = (scheduler_world.run_root / f"run-{run.pk}" / "job" / "output.log").read_text()
    assert "checkpoint and requeue" in log and "--resume" in log


@pytest.mark.parametrize("backend", ["local"])
def test_a_cancelled_run_resubmitted_resumes_from_its_checkpoint(
    scheduler_world: SchedulerWorld, alice: User, backend: str
) -> None:
    from django.db import transaction

    from scheduler.launch import resubmit

    steps = 10
    run = launch(alice, backend, name="resubmit", steps=steps)
    watcher = Watcher(scheduler_world, run)
    watcher.until(lambda r: (r.last_step or 0) >= 3)
    scheduler_service_cancel(run)
    watcher.until_state("cancelled")
    with transaction.atomic():
        resubmit(Run.objects.get(pk=run.pk))
    run = watcher.until_state("completed", "failed", timeout=300)
    assert run.state == "completed", (run.failure_reason, watcher.states)
    complete = list(range(1, steps + 1))
    assert series_steps(run, TRAIN_KEY) == every_policy(complete)
