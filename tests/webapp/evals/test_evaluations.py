"""Evaluations of a run, without a worker: what can be evaluated, the "Evaluate" form and
its errors, the evaluation job's files and script, the run token it ships with, the
automatic evaluation of completed runs, cancelling, and the per-task results table."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduler import evaluations as jobs
from scheduler.jobs import EvalCommand, JobSpecError
from tests.webapp.metrics.test_api_support import make_run
from webapp.evals.evaluations import checkpoint_steps, results_table, steps_label, steps_problem
from webapp.evals.models import Evaluation
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.registry.models import EvalSuite
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run_dir(tmp_path: Path, settings: Any) -> Path:
    settings.RUN_ROOT = tmp_path / "runs"
    return tmp_path / "runs"


def with_checkpoints(run: Run, root: Path, *steps: int, incomplete: tuple[int, ...] = ()) -> Run:
    """Give ``run`` a run directory holding complete checkpoints at ``steps`` (and
    directories without ``state.json`` at ``incomplete``)."""
    directory = root / f"run-{run.pk}"
    for step in (*steps, *incomplete):
        folder = directory / "checkpoints" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        if step in steps:
            (folder / "state.json").write_text(json.dumps({"step": step, "spool_offsets": {}}))
    Run.objects.filter(pk=run.pk).update(run_dir=str(directory))
    run.refresh_from_db()
    return run


def suite_of(run: Run, name: str = "synthetic") -> EvalSuite:
    tasks = [{"name": "arith-addition", "type": "math", "path": "/data/add.jsonl", "limit": None}]
    return EvalSuite.objects.create(
        lab=run.experiment.lab, owner=run.experiment.owner, name=name, tasks=tasks
    )


def store(run: Run, policy: str, key: str, step: int, value: float) -> None:
    series, _ = MetricSeries.objects.get_or_create(run=run, policy=policy, key=key)
    MetricPoint.objects.create(series=series, step=step, value=value)


# --- what can be evaluated ----------------------------------------------------------------
def test_only_complete_checkpoints_are_offered(alice: User, run_dir: Path) -> None:
    run = with_checkpoints(make_run(alice), run_dir, 20, 40, incomplete=(60,))

    assert checkpoint_steps(run) == [20, 40]


def test_a_run_without_a_directory_has_no_checkpoints(alice: User) -> None:
    assert checkpoint_steps(make_run(alice)) == []


@pytest.mark.parametrize(
    ("steps", "available", "base", "problem"),
    [
        ("40", [20, 40], True, None),
        ("none", [], True, None),
        ("none", [20], False, "choose a checkpoint or the base models"),
        ("20", [], False, "the run has no checkpoint yet (it writes one every"),
        ("30", [20, 40], True, "no checkpoint at step 30; the run has checkpoints at 20, 40"),
    ],
)
def test_which_steps_can_be_evaluated(
    steps: str, available: list[int], base: bool, problem: str | None
) -> None:
    found = steps_problem(steps, available, base)
    assert (found is None) if problem is None else found.startswith(problem)


# --- the form -----------------------------------------------------------------------------
def evaluate(client: Client, run: Run, **data: Any) -> Any:
    return client.post(reverse("evals:run_evaluate", args=[run.pk]), data, follow=True)


def test_evaluate_queues_the_chosen_checkpoints_and_the_base_models(
    client: Client, alice: User, run_dir: Path, django_capture_on_commit_callbacks: Any
) -> None:
    run = with_checkpoints(make_run(alice), run_dir, 20, 40)
    suite = suite_of(run)
    client.force_login(alice)

    with django_capture_on_commit_callbacks() as sent:
        page = evaluate(client, run, suite=suite.pk, checkpoints=["40", "20"], include_base="on")

    evaluation = Evaluation.objects.get()
    assert (evaluation.steps, evaluation.include_base, evaluation.state) == (
        "20,40",
        True,
        "queued",
    )
    assert evaluation.suite_config == suite.config and evaluation.owner == alice
    assert len(sent) == 1  # evaluation_submit, once the queueing committed
    assert "Evaluating on synthetic (base + steps 20, 40)." in page.content.decode()
    evaluation.steps, evaluation.include_base = "20", False
    assert steps_label(evaluation) == "step 20"


def test_the_page_offers_the_final_checkpoint_by_default(
    client: Client, alice: User, run_dir: Path
) -> None:
    run = with_checkpoints(make_run(alice), run_dir, 20, 40)
    suite_of(run)
    client.force_login(alice)

    html = client.get(run.get_absolute_url()).content.decode()

    boxes = re.findall(r'<input type="checkbox" name="checkpoints"[^>]*>', html)
    assert [re.search(r'value="(\d+)"', box)[1] for box in boxes] == ["20", "40"]
    assert ["checked" in box for box in boxes] == [False, True]
    assert "step 40 (final)" in html


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"checkpoints": ["30"]}, "The run has no checkpoint at step 30."),
        ({}, "Choose a checkpoint or the base models."),
        ({"suite": "999999", "checkpoints": ["20"]}, "No such suite in your lab."),
    ],
)
def test_a_bad_evaluation_request_says_why_and_queues_nothing(
    client: Client, alice: User, run_dir: Path, data: dict[str, Any], message: str
) -> None:
    run = with_checkpoints(make_run(alice), run_dir, 20)
    suite = suite_of(run)
    client.force_login(alice)

    page = evaluate(client, run, **{"suite": suite.pk, **data})

    assert page.status_code == 200
    assert message in page.content.decode()
    assert not Evaluation.objects.exists()


def test_another_labs_suite_cannot_be_chosen(
    client: Client, alice: User, charlie: User, run_dir: Path
) -> None:
    run = with_checkpoints(make_run(alice), run_dir, 20)
    foreign = suite_of(make_run(charlie, name="theirs"), name="theirs")
    client.force_login(alice)

    page = evaluate(client, run, suite=foreign.pk, checkpoints=["20"])

    assert "No such suite in your lab." in page.content.decode()
    assert not Evaluation.objects.exists()


def test_only_the_runs_owner_evaluates_it_and_outsiders_do_not_see_it(
    client: Client, alice: User, bob: User, charlie: User, run_dir: Path
) -> None:
    run = with_checkpoints(make_run(alice), run_dir, 20)
    suite = suite_of(run)
    client.force_login(bob)
    assert evaluate(client, run, suite=suite.pk, checkpoints=["20"]).status_code == 403
    client.force_login(charlie)
    assert evaluate(client, run, suite=suite.pk, checkpoints=["20"]).status_code == 404
    url = reverse("evals:run_evaluations", args=[run.pk])
    assert client.get(url).status_code == 404
    assert not Evaluation.objects.exists()


# --- the job ------------------------------------------------------------------------------
def queued(run: Run, suite: EvalSuite, **fields: Any) -> Evaluation:
    return Evaluation.objects.create(
        run=run, suite=suite, suite_config=suite.config, owner=run.experiment.owner, **fields
    )


def test_the_job_runs_eval_run_over_the_run_directory_with_quoted_arguments(
    alice: User, run_dir: Path
) -> None:
    run = with_checkpoints(make_run(alice), run_dir, 20)
    evaluation = queued(run, suite_of(run), steps="20")
    spec = jobs.eval_job_spec(evaluation)
    script = jobs.render_eval_script(spec, jobs.eval_command(evaluation, spec), slurm=True)

    job_dir = Path(run.run_dir) / "evals" / f"job-{evaluation.pk}"
    assert spec.own_dir == job_dir and spec.log_path == job_dir / "output.log"
    assert f"#SBATCH --job-name=mrl-eval{evaluation.pk}-" in script
    assert "--ntasks=1" in script and "--requeue" not in script
    command = next(line for line in script.splitlines() if " eval-run " in line)
    argv = shlex.split(command.removesuffix(" &"))
    assert argv[1:4] == ["-m", "trainer", "eval-run"]
    assert argv[argv.index("--run-dir") + 1] == run.run_dir
    assert argv[argv.index("--suite") + 1] == str(job_dir / "suite.json")
    assert argv[argv.index("--steps") + 1] == "20" and "--base" in argv
    assert argv[argv.index("--out-dir") + 1] == str(job_dir / "results")
    assert argv[argv.index("--ingest-url") + 1].endswith(f"/api/v1/runs/{run.pk}/ingest")
    assert f"{job_dir}/exit-code" in script


@pytest.mark.parametrize("steps", ["final; rm -rf /", "1,,2", "$(id)", ""])
def test_steps_that_are_not_steps_never_reach_the_script(steps: str, tmp_path: Path) -> None:
    with pytest.raises(JobSpecError, match="steps"):
        EvalCommand(suite_path=tmp_path / "suite.json", steps=steps)


def test_a_finished_run_whose_token_was_revoked_gets_a_new_one_for_the_job(
    alice: User, run_dir: Path
) -> None:
    run = with_checkpoints(make_run(alice, state=Run.State.COMPLETED), run_dir, 20)
    path = jobs.job_spec(run).token_path
    path.parent.mkdir(parents=True)
    path.write_text(services.run_token_issue(run))
    services.run_token_revoke(run)

    jobs._ensure_run_token(run, path)

    token = path.read_text()
    assert services.run_for_token(token) == run
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_a_running_runs_token_is_left_to_its_job(alice: User, run_dir: Path) -> None:
    run = with_checkpoints(make_run(alice, state=Run.State.RUNNING), run_dir, 20)
    path = jobs.job_spec(run).token_path
    path.parent.mkdir(parents=True)
    token = services.run_token_issue(run)
    path.write_text(token)

    jobs._ensure_run_token(run, path)

    assert path.read_text() == token and services.run_for_token(token) == run


def test_a_completed_run_of_an_auto_evaluating_experiment_is_queued_once(
    alice: User, django_capture_on_commit_callbacks: Any
) -> None:
    run = make_run(alice, state=Run.State.COMPLETED)
    suite = suite_of(run)
    services.experiment_auto_eval_set(run.experiment, suite)
    make_run(alice, state=Run.State.RUNNING, name="still-running")

    with django_capture_on_commit_callbacks(execute=False):
        assert jobs.queue_automatic() == 1
        assert jobs.queue_automatic() == 0

    evaluation = Evaluation.objects.get()
    assert (evaluation.run, evaluation.automatic, evaluation.steps) == (run, True, "final")
    assert evaluation.include_base and evaluation.owner == alice


def test_a_queued_evaluation_is_cancelled_at_once(alice: User) -> None:
    run = make_run(alice)
    evaluation = queued(run, suite_of(run))

    assert jobs.request_cancel(evaluation) == "Evaluation cancelled."
    assert evaluation.state == "cancelled" and evaluation.finished_at is not None
    assert jobs.submit(evaluation.pk) == "skipped: the evaluation is cancelled"


def test_a_replayed_submission_is_skipped(alice: User, run_dir: Path) -> None:
    run = with_checkpoints(make_run(alice), run_dir, 20)
    evaluation = queued(run, suite_of(run), state=Evaluation.State.RUNNING, job_id="123")

    assert jobs.submit(evaluation.pk) == "skipped: the evaluation is running"


# --- the results table --------------------------------------------------------------------
def test_the_table_sets_each_checkpoint_against_its_base_model(alice: User) -> None:
    run = make_run(alice)  # pool a, b
    for policy, base, final in (("b", 0.25, 0.75), ("a", 0.5, 0.25)):
        store(run, policy, "eval/synthetic/larger/accuracy", 0, base)
        store(run, policy, "eval/synthetic/larger/accuracy", 20, 0.0)
        store(run, policy, "eval/synthetic/larger/accuracy", 40, final)
        store(run, policy, "eval/synthetic/larger/n", 40, 32)
    store(run, "a", "eval/synthetic/add/accuracy", 0, 0.125)
    store(run, "a", "train/reward_mean", 40, 0.9)

    (table,) = results_table(run)

    assert (table.suite, table.step, table.policies) == ("synthetic", 40, ["a", "b"])
    assert table.earlier_steps == [20]
    assert [row.task for row in table.rows] == ["add", "larger"]
    add, larger = table.rows
    assert [(c.base, c.value, c.delta) for c in add.cells] == [
        (0.125, None, None),
        (None, None, None),
    ]
    assert [(c.policy, c.base, c.value, c.delta, c.n) for c in larger.cells] == [
        ("a", 0.5, 0.25, -0.25, 32),
        ("b", 0.25, 0.75, 0.5, 32),
    ]


def test_the_panel_json_lists_jobs_and_results(client: Client, alice: User, bob: User) -> None:
    run = make_run(alice)
    evaluation = queued(run, suite_of(run), failure_reason="")
    store(run, "a", "eval/synthetic/larger/accuracy", 0, 0.5)
    client.force_login(bob)  # a lab member sees it, without the cancel action

    answer = client.get(reverse("evals:run_evaluations", args=[run.pk])).json()

    (job,) = answer["evaluations"]
    assert (job["id"], job["suite"], job["what"], job["state"]) == (
        evaluation.pk,
        "synthetic",
        "base + final checkpoint",
        "queued",
    )
    assert job["cancel_url"] is None
    assert answer["results"][0]["rows"][0]["cells"][0]["base"] == 0.5
