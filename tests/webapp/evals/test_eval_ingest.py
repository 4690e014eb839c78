"""End to end: ``python -m trainer eval`` ships a checkpoint's evaluation into this
Django API over HTTP, at the checkpoint's step, and a second evaluation adds nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.urls import reverse

from tests.trainer.evals.checkpoints import POLICIES, STEPS, trained_run, trainer_eval
from tests.webapp.metrics.test_api_support import make_run
from trainer.evals.synthetic import write_synthetic_suite
from webapp.metrics.models import MetricPoint
from webapp.runs import services
from webapp.runs.models import Run


def test_eval_points_are_stored_once_at_the_checkpoints_step(
    transactional_db: None, live_server: Any, alice: User, zoo_dir: Path, tmp_path: Path
) -> None:
    run = make_run(alice, state=Run.State.COMPLETED)
    token = services.run_token_issue(run)
    url = live_server.url + reverse("api:ingest", args=[run.pk])
    checkpoint = trained_run(zoo_dir, tmp_path / "run")
    suite = write_synthetic_suite(tmp_path / "suite", size=4)
    args = ("--suite", suite, "--checkpoint", checkpoint, "--policy", POLICIES[0],
            "--ingest-url", url)  # fmt: skip

    first = trainer_eval(zoo_dir, *args, "--out", tmp_path / "one.json",
                         env={"MRL_INGEST_TOKEN": token})  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    assert token not in first.stdout + first.stderr

    stored = MetricPoint.objects.filter(series__run=run, series__key__startswith="eval/")
    rows = {
        (p.series.policy, p.series.key, p.step): p.value for p in stored.select_related("series")
    }
    n_tasks = 6
    assert len(rows) == 2 * n_tasks + 1  # accuracy and n per task, acc_norm for "larger"
    assert {step for _, _, step in rows} == {STEPS}
    assert {policy for policy, _, _ in rows} == {POLICIES[0]}
    assert rows[(POLICIES[0], "eval/synthetic/larger/n", STEPS)] == 4.0
    assert 0.0 <= rows[(POLICIES[0], "eval/synthetic/larger/acc_norm", STEPS)] <= 1.0
    assert "accepted=13, duplicates=0" in first.stdout

    # Again, the token from the run directory as a job leaves it: the same points, no more.
    (tmp_path / "run" / "job").mkdir()
    (tmp_path / "run" / "job" / "ingest-token").write_text(token + "\n")
    second = trainer_eval(zoo_dir, *args, "--out", tmp_path / "two.json",
                          env={"MRL_INGEST_TOKEN": ""})  # fmt: skip
    assert second.returncode == 0, second.stderr[-3000:]
    assert "accepted=0, duplicates=13" in second.stdout
    assert stored.count() == len(rows)
    assert (tmp_path / "one.json").read_text() == (tmp_path / "two.json").read_text()
    run.refresh_from_db()
    assert run.state == Run.State.COMPLETED  # an evaluation sends no status
