"""Recovery from lost submissions, a dead controller and time limits, against a fake
backend (the real faults: tests/integration/test_faults_scheduler.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from scheduler import slurm
from scheduler.backends import JobStatus, slurm_job_status
from scheduler.cancel import cancel
from scheduler.jobs import JobSpec, render_script, signal_lead_seconds, time_limit_seconds
from scheduler.run_job import job_spec
from scheduler.submit import SUBMIT_LOCK_CLASS, submit
from scheduler.sync import TIME_LIMIT_RESUMED, resend_stale_queued, resend_stale_submissions, sync
from tests.scheduler.conftest import FakeBackend
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

TIMED_OUT = JobStatus("failed", 0, "vm", "the job hit its time limit", timed_out=True)


class WorkerDied(BaseException):
    """A SIGKILL, as far as the code after it is concerned."""


def die_in_sbatch(backend: FakeBackend, run: Run, *, job_started: bool) -> Run:
    """``submit`` by a worker killed inside sbatch (before or after Slurm took the job)."""
    real_submit = backend.submit

    def dying(spec: JobSpec) -> str:
        if job_started:
            real_submit(spec)
        raise WorkerDied

    backend.submit = dying  # type: ignore[method-assign]
    with pytest.raises(WorkerDied):
        submit(run.pk)
    backend.submit = real_submit  # type: ignore[method-assign]
    return Run.objects.get(pk=run.pk)


def aged(run: Run) -> Run:
    """``run``, its claim and last attempt ten minutes ago."""
    long_ago = timezone.now() - timedelta(minutes=10)
    Run.objects.filter(pk=run.pk).update(updated_at=long_ago, submitted_at=long_ago)
    return Run.objects.get(pk=run.pk)


def time_out(backend: FakeBackend, job_id: str) -> None:
    """Slurm killed job ``job_id`` at its time limit: it reports TIMEOUT, runs no more."""
    backend.states[job_id] = TIMED_OUT
    backend.running = {name: job for name, job in backend.running.items() if job != job_id}


def notes(run: Run) -> list[tuple[str, str]]:
    return list(run.state_changes.order_by("at", "id").values_list("state", "note"))


# --------------------------------------------------------------------------- time limits
@pytest.mark.parametrize(
    ("time_limit", "lead"),
    [
        ("1-00:00:00", 120),
        ("24:00:00", 120),
        ("00:04:00", 120),
        ("00:03:00", 90),  # half the limit
        ("00:02:01", 60),
        ("00:02:00", None),  # may come a minute early: at the start
        ("00:01:00", None),
    ],
)
def test_the_time_limit_signal_leaves_the_job_time_to_run(
    time_limit: str, lead: int | None
) -> None:
    assert signal_lead_seconds(time_limit) == lead


def test_time_limits_are_read_in_seconds() -> None:
    assert time_limit_seconds("00:01:00") == 60
    assert time_limit_seconds("1-02:03:04") == 93784


def test_a_short_job_gets_no_signal_and_a_long_one_does(tmp_path: Path) -> None:
    def script(time_limit: str) -> str:
        spec = JobSpec(
            run_id=1,
            name="r",
            run_dir=tmp_path,
            python="/usr/bin/python3",
            workdir=tmp_path,
            time_limit=time_limit,
        )
        return render_script(spec, slurm=True)

    assert "--signal" not in script("00:01:00")
    assert "#SBATCH --signal=B:USR1@90\n" in script("00:03:00")
    assert "#SBATCH --signal=B:USR1@120\n" in script("02:00:00")


def test_a_timeout_is_told_apart_from_other_failures() -> None:
    def status(state: str) -> JobStatus:
        return slurm_job_status(slurm.SlurmJob("7", "mrl-x", state, "", "vm", 0, 15))

    assert status("TIMEOUT").timed_out and status("TIMEOUT").state == "failed"
    assert not status("FAILED").timed_out and not status("OUT_OF_MEMORY").timed_out


def test_a_timed_out_run_is_resumed_with_the_reason_recorded(
    backend: FakeBackend,
    queued_run: Run,
    sent: list[int],
    django_capture_on_commit_callbacks: Callable[..., object],
) -> None:
    submit(queued_run.pk)
    Run.objects.filter(pk=queued_run.pk).update(last_step=40)
    time_out(backend, "101")
    with django_capture_on_commit_callbacks(execute=True):
        assert sync() == {"queued": 1}
    run = Run.objects.get(pk=queued_run.pk)
    assert (run.state, run.slurm_job_id, run.failure_reason) == ("queued", "", "")
    assert sent == [run.pk]
    (failed, why), (queued, how) = notes(run)[-2:]
    assert failed == "failed" and why.startswith("the job hit its time limit")
    assert queued == "queued" and how.startswith(TIME_LIMIT_RESUMED)
    assert "job 101 stopped at step 40" in how and "(1 of 3)" in how
    assert run.status_message == how
    assert submit(run.pk) == "submitted 102"  # the next job (its script resumes)


def test_time_limit_resumes_are_bounded(
    backend: FakeBackend,
    queued_run: Run,
    sent: list[int],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., object],
) -> None:
    monkeypatch.setattr(settings, "SCHEDULER_TIME_LIMIT_RESUMES", 1)
    for job_id in ("101", "102"):
        submit(queued_run.pk)
        time_out(backend, job_id)
        with django_capture_on_commit_callbacks(execute=True):
            sync()
    run = Run.objects.get(pk=queued_run.pk)
    assert run.state == "failed"
    assert run.failure_reason.startswith("the job hit its time limit (resumed 1 times)")
    assert sent == [run.pk]


# --------------------------------------------------------------------------- slurmctld down
def test_squeue_reporting_errors_is_a_transient_failure_not_an_empty_queue() -> None:
    """What ``squeue --json`` (Slurm 22.05) prints, with exit code 0, when slurmctld is down."""
    down = {
        "meta": {"plugin": {"type": "openapi/v0.0.38"}},
        "errors": [
            {
                "description": "Failed while looking for jobs",
                "error_number": -1,
                "error": "Unspecified error",
                "source": "slurm_load_jobs",
            }
        ],
        "jobs": [],
    }
    with pytest.raises(slurm.SlurmError, match="slurm_load_jobs") as caught:
        slurm.parse_squeue_json(json.dumps(down))
    assert caught.value.transient
    assert slurm.parse_squeue_json(json.dumps({**down, "errors": []})) == {}


# --------------------------------------------------------------------------- lost submissions
def test_a_claim_without_a_job_id_is_sent_again_once_stale(
    backend: FakeBackend, queued_run: Run, sent: list[int]
) -> None:
    run = die_in_sbatch(backend, queued_run, job_started=False)
    assert (run.state, run.slurm_job_id) == ("submitted", "")
    assert resend_stale_submissions() == 0  # as fresh as an attempt under way
    aged(run)
    assert resend_stale_submissions() == 1
    assert sent == [queued_run.pk]
    Run.objects.filter(pk=queued_run.pk).update(slurm_job_id="101")
    assert resend_stale_submissions() == 0


def test_a_run_its_trainer_moved_on_without_a_job_id_is_sent_again(
    backend: FakeBackend, queued_run: Run, sent: list[int]
) -> None:
    run = aged(die_in_sbatch(backend, queued_run, job_started=True))
    services.run_transition(run, Run.State.RUNNING, status_message="step 1/4")  # fresh
    assert resend_stale_submissions() == 1  # by its claim, not its last report


def test_the_thresholds_come_from_settings(
    queued_run: Run, sent: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "SCHEDULER_STALE_QUEUED_SECONDS", 0.0)
    assert resend_stale_queued() == 1
    monkeypatch.setattr(settings, "SCHEDULER_STALE_QUEUED_SECONDS", 3600.0)
    assert resend_stale_queued() == 0


def test_a_retry_adopts_the_job_a_dead_worker_started(
    backend: FakeBackend, queued_run: Run
) -> None:
    run = aged(die_in_sbatch(backend, queued_run, job_started=True))
    services.run_transition(run, Run.State.RUNNING)  # its trainer reported meanwhile
    assert submit(run.pk) == "submitted 101"
    run.refresh_from_db()
    assert (run.state, run.slurm_job_id, len(backend.submitted)) == ("running", "101", 1)


def test_a_run_whose_trainer_reported_is_never_given_a_second_job(
    backend: FakeBackend, queued_run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = aged(die_in_sbatch(backend, queued_run, job_started=True))
    services.run_transition(run, Run.State.RUNNING)
    backend.running.clear()  # its job is gone: the backend lists it no more
    monkeypatch.setattr(settings, "SCHEDULER_FORGOTTEN_GRACE_SECONDS", 3600.0)
    assert submit(run.pk).startswith("skipped")
    assert Run.objects.get(pk=run.pk).state == "running"
    monkeypatch.setattr(settings, "SCHEDULER_FORGOTTEN_GRACE_SECONDS", 60.0)
    assert submit(run.pk).startswith("ended")
    run.refresh_from_db()
    assert run.state == "failed" and "disappeared" in run.failure_reason
    assert len(backend.submitted) == 1


def test_a_job_that_ended_before_its_id_was_saved_is_not_started_again(
    backend: FakeBackend, queued_run: Run
) -> None:
    spec = job_spec(queued_run)
    spec.exit_code_path.parent.mkdir(parents=True)
    spec.exit_code_path.write_text("3\n")  # the last submission's: cleared by the claim
    run = aged(die_in_sbatch(backend, queued_run, job_started=True))
    assert not spec.exit_code_path.exists()
    spec.exit_code_path.write_text("0\n")  # this one's job ran while nobody watched
    backend.running.clear()  # and ended
    assert submit(run.pk).startswith("ended")
    run.refresh_from_db()
    assert (run.state, run.exit_code, len(backend.submitted)) == ("completed", 0, 1)


def test_a_stale_exit_code_is_cleared_before_the_claim(
    backend: FakeBackend, queued_run: Run
) -> None:
    spec = job_spec(queued_run)
    spec.exit_code_path.parent.mkdir(parents=True)
    spec.exit_code_path.write_text("3\n")
    assert submit(queued_run.pk) == "submitted 101"


def test_an_attempt_stays_out_while_another_holds_the_runs_lock(
    backend: FakeBackend, queued_run: Run
) -> None:
    """The lock lives in PostgreSQL: another session (a worker) holds it here."""
    db = connection.settings_dict
    url = f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    with psycopg.connect(url, autocommit=True) as other_worker:
        other_worker.execute("SELECT pg_advisory_lock(%s, %s)", (SUBMIT_LOCK_CLASS, queued_run.pk))
        assert submit(queued_run.pk) == "skipped: another attempt is submitting this run"
        assert Run.objects.get(pk=queued_run.pk).state == "queued"
        other_worker.execute(
            "SELECT pg_advisory_unlock(%s, %s)", (SUBMIT_LOCK_CLASS, queued_run.pk)
        )
    assert submit(queued_run.pk) == "submitted 101"
    assert len(backend.submitted) == 1


def test_a_run_cancelled_before_its_job_id_was_saved_gets_its_job_cancelled(
    backend: FakeBackend, queued_run: Run
) -> None:
    real_submit = backend.submit

    def submit_while_the_user_cancels(spec: JobSpec) -> str:
        job_id = real_submit(spec)
        cancel(spec.run_id)  # no job id yet: nothing to stop
        return job_id

    backend.submit = submit_while_the_user_cancels  # type: ignore[method-assign]
    submit(queued_run.pk)
    run = Run.objects.get(pk=queued_run.pk)
    assert (run.state, run.slurm_job_id, backend.cancelled) == ("cancelled", "", ["101"])
