"""What a new user found on the run page in the first minutes (issue 31), server side:
the ETA leaves the start-up step out, the CSVs name the pool as the page does, Cancel
asks first, Resubmit says where the run starts again, and a transfer's detail brings its
prompt's text. The pages are read as HTML, as a user gets them."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.metrics.test_api_support import event, point, post_batch
from trainer.config import RunConfig
from trainer.tasks import make_task
from webapp.runs.models import Run
from webapp.runs.progress import NO_VALUE, Progress, run_progress
from webapp.runs.prompts import prompt_text

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def _running(
    recent: list[tuple[int, float]], *, last_step: int, now_s: float, **facts: Any
) -> Progress:
    return run_progress(
        state="running",
        last_step=last_step,
        total_steps=60,
        started_at=facts.get("started_at", T0),
        finished_at=None,
        now=T0 + timedelta(seconds=now_s),
        recent=recent,
    )


# --- 6. the ETA ---------------------------------------------------------------------------
def test_the_start_up_step_gives_no_eta() -> None:
    """Loading and compiling took 80 s of step 1; once the points of steps 0 and 1 are in,
    the old rate (80 s a step) read "ETA 1h18m". One trained step is no pace: no ETA."""
    t0 = T0.timestamp()
    progress = _running([(0, t0 + 5), (1, t0 + 85)], last_step=1, now_s=86)
    assert progress.eta_s is None and progress.steps_per_s is None
    assert progress.text == f"step 1/60 · 1m26s elapsed · ETA {NO_VALUE}"


def test_the_eta_follows_the_steps_after_the_first() -> None:
    t0 = T0.timestamp()
    recent = [(0, t0 + 5), (1, t0 + 85), (2, t0 + 87), (3, t0 + 89)]  # then 2 s a step
    progress = _running(recent, last_step=3, now_s=89)
    assert progress.steps_per_s == pytest.approx(0.5)
    assert progress.eta_s == pytest.approx(57 * 2.0)  # not 57 * 89/3 s
    assert progress.text.endswith("ETA 2m")


def test_without_two_step_times_there_is_no_eta_on_the_run_page() -> None:
    """No fallback to the average since the start (start-up included) on the run page."""
    assert _running([], last_step=3, now_s=100).eta_s is None
    assert _running([(3, T0.timestamp() + 99)], last_step=3, now_s=100).eta_s is None


def test_a_resumed_job_leaves_the_previous_jobs_steps_and_its_start_up_out() -> None:
    """Resumed at step 20 an hour after the last job's step 20: that gap (the queue and
    the new job's start-up) is no step's time."""
    restart = T0 + timedelta(hours=1)
    r = restart.timestamp()
    old = [(step, T0.timestamp() + 2.0 * step) for step in range(11, 21)]
    new = [(21, r + 60), (22, r + 62), (23, r + 64)]  # 60 s start-up, then 2 s a step
    progress = _running(old + new, last_step=23, now_s=3600 + 64, started_at=restart)
    assert progress.steps_per_s == pytest.approx(0.5)
    assert progress.eta_s == pytest.approx(37 * 2.0)


def test_a_list_without_step_times_leaves_the_start_up_out_too() -> None:
    """The runs list and sweep page read no step times: their rate counts from the job's
    first trained step (the run's pace mark), not from the start (which said 130 s)."""
    progress = run_progress(
        state="running",
        last_step=30,
        total_steps=60,
        started_at=T0,
        finished_at=None,
        now=T0 + timedelta(seconds=130),
        pace=(10, T0 + timedelta(seconds=90)),
    )
    assert progress.eta_s == pytest.approx(60.0)  # 20 steps in 40 s; 30 left


# --- 3. the CSVs name the pool as the page does ---------------------------------------------
def _csv(response: Any) -> list[list[str]]:
    assert response.status_code == 200
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


@pytest.mark.django_db
def test_the_csvs_say_pool_mean_and_pool_max_not_underscore_pool(
    client: Client, alice: User, run: Run, token: str
) -> None:
    points = [point(1, 0.5, policy="_pool"), point(1, 0.25)]
    points += [point(1, 3.5, policy="_pool", key="perf/step_s")]  # the slowest policy's
    assert post_batch(client, run, token, {"points": points}).status_code == 200
    client.force_login(alice)
    metric = reverse("metrics:run_metric_csv", args=[run.pk])
    assert _csv(client.get(metric, {"key": "train/reward_mean"})) == [
        ["step", "policy", "value"],
        ["1", "a", "0.25"],
        ["1", "pool mean", "0.5"],
    ]
    assert _csv(client.get(metric, {"key": "perf/step_s"}))[1] == ["1", "pool max", "3.5"]
    whole = _csv(client.get(reverse("metrics:run_curves_csv", args=[run.pk])))
    assert ["perf/step_s", "pool max", "1", "3.5"] in whole
    assert ["train/reward_mean", "pool mean", "1", "0.5"] in whole
    assert not any("_pool" in cell for row in whole for cell in row)


# --- 4. Cancel asks first --------------------------------------------------------------------
def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


@pytest.mark.django_db
def test_cancel_without_confirmation_asks_on_a_page_and_changes_nothing(
    client: Client, alice: User, run: Run
) -> None:
    client.force_login(alice)
    url = reverse("dashboard:run_cancel", args=[run.pk])
    response = client.post(url)
    assert response.status_code == 200
    page = _text(response.content.decode())
    assert f"Cancel the run {run.name}?" in page
    assert "it has no checkpoint, so it starts over from step 1" in page
    assert 'name="confirm" value="yes"' in response.content.decode()
    assert Run.objects.get(pk=run.pk).state == Run.State.SUBMITTED  # not yet

    response = client.post(url, {"confirm": "yes"}, follow=True)
    assert "Cancelling: the job is being stopped." in _text(response.content.decode())


@pytest.mark.django_db
def test_the_run_pages_cancel_form_carries_its_question(
    client: Client, alice: User, run: Run
) -> None:
    client.force_login(alice)
    html = client.get(run.get_absolute_url()).content.decode()
    form = re.search(r'<form[^>]*run_cancel[^>]*>|<form[^>]*/cancel/"[^>]*>', html)
    assert form and f'data-confirm="Cancel the run {run.name}?' in form.group(0)


# --- 5. Resubmit says where the run starts again --------------------------------------------
def _checkpoint(run_dir: Path, step: int) -> None:
    folder = run_dir / "checkpoints" / f"step_{step:06d}"
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({"step": step, "spool_offsets": {}}))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("checkpoints", "said", "button"),
    [
        ((), "it has no checkpoint, so it starts over from step 1", "start over: no checkpoint"),
        ((2, 4), "it resumes from its checkpoint of step 4", "resume from step 4"),
    ],
    ids=["cancelled-before-a-checkpoint", "with-checkpoints"],
)
def test_resubmit_says_whether_the_run_resumes_or_starts_over(
    client: Client,
    alice: User,
    run: Run,
    tmp_path: Path,
    checkpoints: tuple[int, ...],
    said: str,
    button: str,
) -> None:
    for step in checkpoints:
        _checkpoint(tmp_path, step)
    (tmp_path / "checkpoints" / "step_000006").mkdir(parents=True)  # incomplete: no state.json
    Run.objects.filter(pk=run.pk).update(state=Run.State.CANCELLED, run_dir=str(tmp_path))
    client.force_login(alice)
    page = _text(client.get(run.get_absolute_url()).content.decode())
    assert f"Resubmit ({button})" in page
    response = client.post(reverse("dashboard:run_resubmit", args=[run.pk]), follow=True)
    page = _text(response.content.decode())
    assert f"Resubmitted: {said}." in page
    assert "resumes from its last checkpoint" not in page


# --- 1. a failed run's page -------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("failed", "No metrics: the run failed before it sent any"),
        ("cancelled", "No metrics: the run was cancelled before it sent any."),
    ],
)
def test_an_ended_run_without_metrics_does_not_promise_points(
    client: Client, alice: User, run: Run, state: str, said: str
) -> None:
    Run.objects.filter(pk=run.pk).update(
        state=state, failure_reason="RuntimeError: CUDA out of memory\n[job] line 1\n[job] line 2"
    )
    client.force_login(alice)
    html = client.get(run.get_absolute_url()).content.decode()
    empty = re.search(r'<p class="empty" id="charts-empty".*?>(.*?)</p>', html, re.S)
    assert empty and empty.group(1).startswith(said)
    assert "points appear here within seconds" not in _text(empty.group(1))
    reason = re.search(r'data-testid="failure-reason"[^>]*>(.*?)</dd>', html, re.S)
    assert reason
    assert '<strong class="bad">RuntimeError: CUDA out of memory</strong>' in reason.group(1)
    assert re.search(
        r"<details[^>]*><summary>Details: 2 more lines</summary>"
        r'<pre class="config log">\[job\] line 1\n\[job\] line 2</pre></details>',
        reason.group(1),
    )


# --- 2. a transfer's prompt, by its text ----------------------------------------------------
def _arithmetic_prompt(config: dict[str, Any], step: int, index: int) -> tuple[str, str]:
    parsed = RunConfig.from_dict(config)
    problem = make_task(parsed.task, seed=parsed.seed).train_batch(step, index + 1)[index]
    return problem.id, problem.prompt


@pytest.mark.django_db
def test_a_transfer_detail_brings_the_text_of_its_prompt(
    client: Client, alice: User, run: Run, token: str
) -> None:
    prompt_id, text = _arithmetic_prompt(run.config, 3, 2)
    assert prompt_id == "arith-000003-002" and text
    events = [
        event(3, "a", "b", prompt_id=prompt_id),
        event(4, "a", "b", prompt_id="no-such-prompt"),
    ]
    assert post_batch(client, run, token, {"events": events}).status_code == 200
    client.force_login(alice)
    listed = client.get(reverse("api:events", args=[run.pk])).json()["events"]
    ids = {row["prompt_id"]: row["id"] for row in listed}
    detail = client.get(reverse("api:event_detail", args=[run.pk, ids[prompt_id]])).json()
    assert detail["prompt_text"] == text
    unknown = client.get(reverse("api:event_detail", args=[run.pk, ids["no-such-prompt"]]))
    assert unknown.json()["prompt_text"] is None


def test_prompt_text_finds_validation_and_file_task_prompts(tmp_path: Path) -> None:
    config = RunConfig.from_dict({"name": "x", "pool": [{"name": "a", "model": "m"}]}).to_dict()
    parsed = RunConfig.from_dict(config)
    validation = make_task(parsed.task, seed=parsed.seed).validation()[5]
    assert prompt_text(config, validation.id) == validation.prompt

    train, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    train.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "problem": f"{i}+1?", "answer": str(i + 1)}) + "\n"
            for i in range(5)
        )
    )
    val.write_text(json.dumps({"id": "v0", "problem": "9+9?", "answer": "18"}) + "\n")
    files = {
        **config,
        "task": {"kind": "math_file", "train_path": str(train), "val_path": str(val)},
    }
    assert prompt_text(files, "t3") == "3+1?"
    assert prompt_text(files, "v0") == "9+9?"
    assert prompt_text(files, "t9") is None
