"""The backend tasks' retries (scheduler/tasks.py::_with_retries): a transient backend
error is retried with backoff up to MAX_RETRIES times; a permanent one, or a transient one
with the retries spent, fails the run's submission (run_submit) or the task (the others).

The tasks run eagerly (``Task.apply``: a retry runs again at once, its countdown ignored),
with the services they call replaced: no database, broker or backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from celery import Task
from celery.exceptions import Retry

from scheduler import tasks
from scheduler.backends import BackendError

# The four tasks that retry: (task, the service it calls as "module.function").
RETRYING: list[tuple[Task, str]] = [
    (tasks.run_submit, "submit.submit"),
    (tasks.run_cancel, "cancel.cancel"),
    (tasks.evaluation_submit, "evaluations.submit"),
    (tasks.evaluation_cancel, "evaluations.cancel"),
]
IDS = [task.name for task, _ in RETRYING]


class FailingService:
    """A service that raises ``error`` on its first ``times`` calls, then returns ``then``;
    its ``calls`` counts them."""

    def __init__(self, times: int, error: BackendError, then: str) -> None:
        self.times, self.error, self.then = times, error, then
        self.calls = 0

    def __call__(self, _: int) -> str:
        self.calls += 1
        if self.calls <= self.times:
            raise self.error
        return self.then


def failing(times: int, error: BackendError, then: str = "done") -> FailingService:
    return FailingService(times, error, then)


def replace(monkeypatch: pytest.MonkeyPatch, dotted: str, service: Callable[[int], str]) -> None:
    module, name = dotted.split(".")
    monkeypatch.setattr(getattr(tasks, module), name, service)


@pytest.fixture
def failed_submissions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    failed: list[tuple[int, str]] = []
    monkeypatch.setattr(
        tasks.submit, "fail_submission", lambda run_id, reason: failed.append((run_id, reason))
    )
    return failed


@pytest.mark.parametrize(("task", "service_name"), RETRYING, ids=IDS)
def test_a_transient_error_is_retried_until_it_passes(
    monkeypatch: pytest.MonkeyPatch,
    failed_submissions: list[tuple[int, str]],
    task: Task,
    service_name: str,
) -> None:
    service = failing(3, BackendError("Unable to contact slurm controller", transient=True))
    replace(monkeypatch, service_name, service)
    assert task.apply(args=[7]).get() == "done"
    assert service.calls == 4
    assert failed_submissions == []


@pytest.mark.parametrize(("task", "service_name"), RETRYING, ids=IDS)
def test_a_permanent_error_is_not_retried(
    monkeypatch: pytest.MonkeyPatch,
    failed_submissions: list[tuple[int, str]],
    task: Task,
    service_name: str,
) -> None:
    service = failing(1, BackendError("sbatch: error: invalid partition specified: gpu"))
    replace(monkeypatch, service_name, service)
    result = task.apply(args=[7])
    if task is tasks.run_submit:  # the run fails with the reason; the task does not
        assert result.get() == "failed"
        assert failed_submissions == [
            (7, "submission failed: sbatch: error: invalid partition specified: gpu")
        ]
    else:
        with pytest.raises(BackendError, match="invalid partition"):
            result.get()
    assert service.calls == 1


@pytest.mark.parametrize(("task", "service_name"), RETRYING, ids=IDS)
def test_a_transient_error_past_the_last_retry_fails(
    monkeypatch: pytest.MonkeyPatch,
    failed_submissions: list[tuple[int, str]],
    task: Task,
    service_name: str,
) -> None:
    service = failing(tasks.MAX_RETRIES + 1, BackendError("slurmctld timed out", transient=True))
    replace(monkeypatch, service_name, service)
    result = task.apply(args=[7])
    if task is tasks.run_submit:
        assert result.get() == "failed"
        assert failed_submissions == [(7, "submission failed: slurmctld timed out")]
    else:
        with pytest.raises(BackendError, match="timed out"):
            result.get()
    assert service.calls == tasks.MAX_RETRIES + 1


@dataclass
class Request:
    retries: int


class RecordingTask:
    """What _with_retries uses of a bound task: its retry count and retry()."""

    def __init__(self, retries: int) -> None:
        self.request = Request(retries)
        self.countdowns: list[float] = []

    def retry(self, *, exc: BaseException, countdown: float) -> Retry:
        self.countdowns.append(countdown)
        return Retry(exc=exc, when=countdown)


def raise_(error: BaseException) -> Callable[[], str]:
    def call() -> str:
        raise error

    return call


@pytest.mark.parametrize(
    ("retries", "countdown"),
    [(0, 2.0), (1, 4.0), (2, 8.0), (5, 64.0), (6, 120.0), (tasks.MAX_RETRIES - 1, 120.0)],
)
def test_the_retry_waits_longer_each_time_up_to_two_minutes(retries: int, countdown: float) -> None:
    task = RecordingTask(retries)
    error = BackendError("Unable to contact slurm controller", transient=True)
    with pytest.raises(Retry) as caught:
        tasks._with_retries(task, raise_(error))
    assert task.countdowns == [countdown]
    assert caught.value.exc is error and caught.value.__cause__ is error


def test_the_error_handler_gets_the_error_and_gives_the_result() -> None:
    error = BackendError("slurmctld timed out", transient=True)
    seen: list[BackendError] = []
    task = RecordingTask(tasks.MAX_RETRIES)

    def handle(exc: BackendError) -> str:
        seen.append(exc)
        return "handled"

    result = tasks._with_retries(task, raise_(error), handle)
    assert result == "handled" and seen == [error] and task.countdowns == []
    assert tasks._with_retries(task, lambda: "ok") == "ok"


def test_an_error_other_than_the_backends_is_not_retried() -> None:
    task = RecordingTask(0)
    with pytest.raises(ValueError):
        tasks._with_retries(task, raise_(ValueError("bad id")), lambda exc: "handled")
    assert task.countdowns == []
