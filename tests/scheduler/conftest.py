"""The scheduling services' fake backend and fixtures, shared by the unit tests here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from django.conf import settings

from scheduler import dispatch, run_job
from scheduler.backends import BackendError, JobStatus
from scheduler.jobs import JobSpec
from webapp.runs import services
from webapp.runs.models import Experiment, Run


class FakeBackend:
    name = "slurm"

    def __init__(self) -> None:
        self.submitted: list[JobSpec] = []
        self.cancelled: list[str] = []
        self.states: dict[str, JobStatus] = {}
        self.running: dict[str, str] = {}  # spec name -> job id, for find()
        self.fail_with: BackendError | None = None

    def submit(self, spec: JobSpec) -> str:
        if self.fail_with is not None:
            raise self.fail_with
        self.submitted.append(spec)
        job_id = str(100 + len(self.submitted))
        self.running[spec.name] = job_id
        return job_id

    def find(self, spec: JobSpec) -> str | None:
        return self.running.get(spec.name)

    def status(self, jobs: Mapping[str, JobSpec]) -> dict[str, JobStatus]:
        return {job_id: self.states[job_id] for job_id in jobs if job_id in self.states}

    def cancel(self, job_id: str, spec: JobSpec) -> None:
        self.cancelled.append(job_id)


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeBackend:
    fake = FakeBackend()
    monkeypatch.setattr(run_job, "backend_named", lambda name: fake)
    monkeypatch.setattr(settings, "RUN_ROOT", tmp_path / "runs")
    return fake


@pytest.fixture
def queued_run(make_experiment: Callable[..., Experiment]) -> Run:
    experiment = make_experiment(seeds=(0,))
    experiment.resources = {"backend": "slurm", "partition": "gpu", "mem_gb": 8}
    experiment.save()
    return services.runs_create(experiment, state=Run.State.QUEUED)[0]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The run ids ``run_submit`` is sent for, caught where the service hands its tasks to
    the broker (``send_task``, by name) instead of a broker."""
    ids: list[int] = []

    def send_task(name: str, args: list[int]) -> None:
        if name == dispatch.RUN_SUBMIT:
            ids.append(args[0])

    monkeypatch.setattr(dispatch.celery_app, "send_task", send_task)
    return ids
