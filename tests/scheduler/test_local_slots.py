"""The local backend's concurrency limit (scheduler/local_slots.py): at most
MRL_LOCAL_MAX_JOBS local jobs at once, the rest queued and told why, first come first
served, started by beat as slots free up."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduler.backends import JobStatus
from scheduler.submit import submit
from scheduler.sync import resend_stale_queued
from scheduler.tasks import runs_sync
from tests.scheduler.conftest import FakeBackend
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def local_runs(make_experiment: Callable[..., Experiment], settings: Any) -> list[Run]:
    """Four queued local runs (one experiment, seeds 0-3), a limit of two."""
    settings.LOCAL_MAX_JOBS = 2
    experiment = make_experiment(seeds=(0, 1, 2, 3))
    experiment.resources = {"backend": "local", "partition": "local"}
    experiment.save()
    return services.runs_create(experiment, state=Run.State.QUEUED)


def states(runs: list[Run]) -> list[str]:
    return [Run.objects.get(pk=run.pk).state for run in runs]


def test_only_the_limit_starts_and_the_rest_wait_queued_saying_why(
    backend: FakeBackend, local_runs: list[Run], client: Client, alice: User
) -> None:
    answers = [submit(run.pk) for run in local_runs]
    assert answers[:2] == ["submitted 101", "submitted 102"]
    assert all(answer.startswith("waiting: waiting for a local slot") for answer in answers[2:])
    assert states(local_runs) == ["submitted", "submitted", "queued", "queued"]
    assert len(backend.submitted) == 2
    waiting = Run.objects.get(pk=local_runs[2].pk)
    assert waiting.status_message == (
        "waiting for a local slot: 2 of 2 local jobs running (MRL_LOCAL_MAX_JOBS); it starts "
        "when one ends"
    )
    client.force_login(alice)
    page = client.get(reverse("dashboard:run_detail", args=[waiting.pk]))
    assert "waiting for a local slot: 2 of 2 local jobs running" in page.content.decode()


def test_a_freed_slot_goes_to_the_oldest_waiting_run(
    backend: FakeBackend, local_runs: list[Run], sent: list[int]
) -> None:
    for run in local_runs:
        submit(run.pk)
    runs_sync()
    assert sent == []  # no slot is free: nothing is sent again
    backend.states["101"] = JobStatus("completed", 0)
    runs_sync()
    assert sent == [local_runs[2].pk]  # one slot, the oldest waiting run
    # The younger one asks first (its message came back sooner): it still waits.
    assert submit(local_runs[3].pk).startswith("waiting:")
    assert submit(local_runs[2].pk) == "submitted 103"
    third = Run.objects.get(pk=local_runs[2].pk)
    assert third.state == "submitted" and third.status_message == ""
    assert states(local_runs) == ["completed", "submitted", "submitted", "queued"]


def test_waiting_runs_are_not_resent_as_lost_messages(
    backend: FakeBackend, local_runs: list[Run], sent: list[int]
) -> None:
    for run in local_runs:
        submit(run.pk)
    assert resend_stale_queued(older_than=timedelta(0)) == 0  # both queued ones wait
    assert sent == []


def test_slurm_runs_are_not_limited(
    backend: FakeBackend, make_experiment: Callable[..., Experiment], settings: Any
) -> None:
    settings.LOCAL_MAX_JOBS = 1
    experiment = make_experiment(seeds=(0, 1, 2))
    experiment.resources = {"backend": "slurm", "partition": "gpu"}
    experiment.save()
    runs = services.runs_create(experiment, state=Run.State.QUEUED)
    assert [submit(run.pk) for run in runs] == ["submitted 101", "submitted 102", "submitted 103"]
