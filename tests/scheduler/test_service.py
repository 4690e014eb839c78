"""The scheduling services against a fake backend (the real ones: tests/integration)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import DatabaseError
from django.test import Client
from django.utils import timezone

from scheduler.backends import BackendError, JobStatus
from scheduler.cancel import cancel
from scheduler.celery import app as celery_app
from scheduler.dispatch import SERIES_PACK
from scheduler.run_job import job_spec, last_words
from scheduler.submit import submit
from scheduler.sync import resend_stale_queued, sync
from scheduler.tasks import runs_sync, series_pack
from tests.scheduler.conftest import FakeBackend
from webapp.metrics import series_packs
from webapp.metrics.batch import parse_batch
from webapp.metrics.ingest import metrics_ingest
from webapp.metrics.models import MetricSeries, SeriesPack, SeriesRollup
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def test_submit_claims_writes_the_job_and_records_its_id(
    backend: FakeBackend, queued_run: Run
) -> None:
    assert submit(queued_run.pk) == "submitted 101"
    run = Run.objects.get(pk=queued_run.pk)
    assert (run.state, run.slurm_job_id, run.backend) == ("submitted", "101", "slurm")
    spec = backend.submitted[0]
    assert spec.partition == "gpu" and spec.mem_gb == 8 and spec.n_policies == 3
    assert spec.config_path.read_text().count('"seed": 0') == 1
    token = spec.token_path.read_text()
    assert services.run_for_token(token) == run  # the job's token is the run's
    assert "#SBATCH --partition=gpu" in spec.script_path.read_text()


def test_a_replayed_submit_does_nothing(backend: FakeBackend, queued_run: Run) -> None:
    submit(queued_run.pk)
    assert submit(queued_run.pk) == "skipped: the run is submitted"
    assert len(backend.submitted) == 1


def test_a_retry_after_a_crash_adopts_the_job_it_started(
    backend: FakeBackend, queued_run: Run
) -> None:
    # The first attempt claimed the run and started the job, then died before saving the id.
    services.run_transition(queued_run, Run.State.SUBMITTED, backend="slurm")
    backend.running[job_spec(queued_run).name] = "555"
    assert submit(queued_run.pk) == "submitted 555"
    assert backend.submitted == []
    assert Run.objects.get(pk=queued_run.pk).slurm_job_id == "555"


def test_a_transient_error_is_raised_for_a_retry(backend: FakeBackend, queued_run: Run) -> None:
    backend.fail_with = BackendError("Unable to contact slurm controller", transient=True)
    with pytest.raises(BackendError):
        submit(queued_run.pk)
    assert Run.objects.get(pk=queued_run.pk).state == "submitted"  # claimed, no job yet
    backend.fail_with = None
    assert submit(queued_run.pk) == "submitted 101"


def test_a_permanent_error_fails_the_run_with_the_reason(
    backend: FakeBackend, queued_run: Run
) -> None:
    backend.fail_with = BackendError("sbatch: error: invalid partition specified: gpu")
    assert submit(queued_run.pk) == "failed"
    run = Run.objects.get(pk=queued_run.pk)
    assert run.state == "failed" and "invalid partition" in run.failure_reason


def test_sync_follows_the_job_through_its_states(backend: FakeBackend, queued_run: Run) -> None:
    submit(queued_run.pk)
    for job_state, expected in [("pending", "pending"), ("running", "running")]:
        backend.states["101"] = JobStatus(job_state, node="gpu-7")
        sync()
        assert Run.objects.get(pk=queued_run.pk).state == expected
    backend.states["101"] = JobStatus("failed", 1, "gpu-7", "the job failed (exit code 1)")
    assert sync() == {"failed": 1}
    run = Run.objects.get(pk=queued_run.pk)
    assert (run.state, run.exit_code, run.node) == ("failed", 1, "gpu-7")
    assert run.failure_reason.startswith("the job failed (exit code 1)")
    assert sync() == {}  # terminal runs are left alone


def _ingest(run: Run, steps: range) -> None:
    points = ",".join(
        f'{{"policy": "{policy}", "key": "train/reward_mean", "step": {step}, "value": {step}}}'
        for policy in ("llama", "qwen")
        for step in steps
    )
    metrics_ingest(run=run, batch=parse_batch(f'{{"points": [{points}]}}'.encode()))


def _packed(run: Run) -> list[tuple[str, int]]:
    """(policy, points) of the run's packs."""
    packs = SeriesPack.objects.filter(series__run=run).order_by("series__policy")
    return [(pack.series.policy, len(pack.steps) // 4) for pack in packs]


def test_the_pack_task_packs_finished_runs_and_again_after_late_points(
    backend: FakeBackend, queued_run: Run
) -> None:
    submit(queued_run.pk)
    backend.states["101"] = JobStatus("running", node="gpu-7")
    sync()
    run = Run.objects.get(pk=queued_run.pk)
    _ingest(run, range(5))
    assert series_pack() == 0  # running: its series still change
    assert not SeriesPack.objects.exists()
    backend.states["101"] = JobStatus("completed", 0, "gpu-7")
    assert sync() == {"completed": 1}
    assert series_pack() == 1
    assert _packed(run) == [("llama", 5), ("qwen", 5)]
    assert Run.objects.get(pk=run.pk).series_packed
    assert series_pack() == 0  # nothing left to pack
    # Late points (a spool shipped after the end) drop the packs and the mark; the next
    # tick packs the run again, with them.
    _ingest(run, range(5, 8))
    assert _packed(run) == [] and not Run.objects.get(pk=run.pk).series_packed
    assert series_pack() == 1
    assert _packed(run) == [("llama", 8), ("qwen", 8)]


def _watermarks(run: Run) -> list[tuple[str, int]]:
    """(policy, rolled_through) of the run's series."""
    return list(
        MetricSeries.objects.filter(run=run)
        .order_by("policy")
        .values_list("policy", "rolled_through")
    )


def test_the_pack_task_rolls_up_running_runs_then_the_finished_ones_before_packing(
    backend: FakeBackend, queued_run: Run
) -> None:
    submit(queued_run.pk)
    backend.states["101"] = JobStatus("running", node="gpu-7")
    sync()
    run = Run.objects.get(pk=queued_run.pk)
    _ingest(run, range(100))
    assert series_pack() == 0  # running: rolled up, not packed
    assert _watermarks(run) == [("llama", 99), ("qwen", 99)]
    # a complete 64-step block and a partial one, each series
    assert SeriesRollup.objects.filter(series__run=run, level=0).count() == 4
    _ingest(run, range(100, 300))
    backend.states["101"] = JobStatus("completed", 0, "gpu-7")
    assert sync() == {"completed": 1}
    assert series_pack() == 1
    assert _watermarks(run) == [("llama", 299), ("qwen", 299)]
    assert _packed(run) == [("llama", 300), ("qwen", 300)]
    _ingest(run, range(300, 320))  # late points: unpacked, rolled up again on the next tick
    assert series_pack() == 1
    assert _watermarks(run) == [("llama", 319), ("qwen", 319)]


def test_the_status_sync_no_longer_packs(
    backend: FakeBackend, queued_run: Run, sent: list[int]
) -> None:
    """Packing has its own beat task: ``runs_sync`` ends a run and leaves its series to it."""
    submit(queued_run.pk)
    run = Run.objects.get(pk=queued_run.pk)
    _ingest(run, range(5))
    backend.states["101"] = JobStatus("completed", 0, "gpu-7")
    assert runs_sync() == {"completed": 1}
    assert runs_sync() == {}
    assert not SeriesPack.objects.exists() and not Run.objects.get(pk=run.pk).series_packed
    assert series_pack() == 1
    assert _packed(run) == [("llama", 5), ("qwen", 5)]
    assert sent == []  # nothing was stale


def test_a_failed_pack_is_logged_and_left_for_the_next_tick(
    backend: FakeBackend, queued_run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    submit(queued_run.pk)
    _ingest(Run.objects.get(pk=queued_run.pk), range(5))
    backend.states["101"] = JobStatus("completed", 0, "gpu-7")
    sync()

    def broken(max_runs: int) -> tuple[int, int]:
        raise DatabaseError("canceling statement due to statement timeout")

    with monkeypatch.context() as patched:
        patched.setattr(series_packs, "packs_sweep", broken)
        assert series_pack() == 0
    assert not SeriesPack.objects.exists()
    assert series_pack() == 1


def test_beat_runs_the_pack_task_on_its_own_tick() -> None:
    schedule = {entry["task"]: entry for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert {"scheduler.tasks.runs_sync", SERIES_PACK} <= schedule.keys()
    assert float(schedule[SERIES_PACK]["schedule"]) > 0
    assert series_pack.name == SERIES_PACK and SERIES_PACK in celery_app.tasks
    assert runs_sync.name in celery_app.tasks


def test_a_forgotten_job_ends_by_its_exit_code_file(backend: FakeBackend, queued_run: Run) -> None:
    submit(queued_run.pk)
    Run.objects.filter(pk=queued_run.pk).update(submitted_at=timezone.now() - timedelta(minutes=5))
    spec = job_spec(Run.objects.get(pk=queued_run.pk))
    spec.exit_code_path.write_text("0\n")
    sync()
    run = Run.objects.get(pk=queued_run.pk)
    assert (run.state, run.exit_code) == ("completed", 0)


def test_a_job_forgotten_without_a_trace_fails(backend: FakeBackend, queued_run: Run) -> None:
    submit(queued_run.pk)
    sync()  # just submitted: given time to show up
    assert Run.objects.get(pk=queued_run.pk).state == "submitted"
    Run.objects.filter(pk=queued_run.pk).update(submitted_at=timezone.now() - timedelta(minutes=5))
    sync()
    run = Run.objects.get(pk=queued_run.pk)
    assert run.state == "failed" and "disappeared" in run.failure_reason


def test_cancel_stops_the_job_and_marks_the_run(backend: FakeBackend, queued_run: Run) -> None:
    submit(queued_run.pk)
    assert cancel(queued_run.pk) == "cancelled"
    assert backend.cancelled == ["101"]
    assert Run.objects.get(pk=queued_run.pk).state == "cancelled"
    assert cancel(queued_run.pk) == "skipped: the run is cancelled"


def test_stale_queued_runs_are_sent_again(queued_run: Run, sent: list[int]) -> None:
    assert resend_stale_queued() == 0
    Run.objects.filter(pk=queued_run.pk).update(queued_at=timezone.now() - timedelta(minutes=5))
    assert resend_stale_queued() == 1
    assert sent == [queued_run.pk]


def test_the_trainers_last_word_waits_for_the_jobs_end(
    backend: FakeBackend, queued_run: Run, client: Client
) -> None:
    """A job's trainer saying "failed" makes the run completing; the sync ends it with
    the job's exit code and keeps the trainer's message first in the reason."""
    submit(queued_run.pk)
    token = backend.submitted[0].token_path.read_text()
    response = client.post(
        f"/api/v1/runs/{queued_run.pk}/ingest",
        data=json.dumps({"status": {"state": "failed", "message": "RuntimeError: NaN loss"}}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 200, response.content
    assert Run.objects.get(pk=queued_run.pk).state == "completing"
    backend.states["101"] = JobStatus("failed", 1, "gpu-7", "the job failed (exit code 1)")
    sync()
    run = Run.objects.get(pk=queued_run.pk)
    assert (run.state, run.exit_code) == ("failed", 1)
    assert run.failure_reason.startswith("RuntimeError: NaN loss\nthe job failed (exit code 1)")


def test_the_failure_reason_quotes_the_trainer_not_the_launcher() -> None:
    log = "\n".join(
        [
            "[job] run 3 starting on vm",
            "error: cannot load the pool's models:",
            "  pool[1] (gpt2): no model at /nonexistent/model-dir",
            "srun: error: vm: task 0: Exited with exit code 2",
            "slurmstepd-vm: error: *** STEP 59.0 ON vm CANCELLED ***",
            "[job] trainer exited with 2",
        ]
    )
    assert last_words(log) == [
        "error: cannot load the pool's models:",
        "  pool[1] (gpt2): no model at /nonexistent/model-dir",
    ]
