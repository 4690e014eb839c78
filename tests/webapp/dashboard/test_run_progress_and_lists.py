"""Progress and ETA, the runs list's and sweep page's columns, the lists' sort control, run
names on relaunch and the job label that names its backend.

The progress function is pure (its tests need no database); the rest reads the pages
as a user does (their HTML) and counts their queries.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from scheduler.launch import experiment_launch, sweep_launch
from trainer.metrics import POOL, VAL_REWARD_AT_1
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs import services
from webapp.runs.models import Experiment, Run
from webapp.runs.progress import NO_VALUE, format_duration, format_eta, run_progress, step_rate

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def _progress(**overrides: object) -> object:
    facts: dict[str, object] = {
        "state": "running",
        "last_step": 30,
        "total_steps": 60,
        "started_at": T0,
        "finished_at": None,
        "now": T0 + timedelta(seconds=130),
    }
    facts.update(overrides)
    return run_progress(**facts)  # type: ignore[arg-type]


# --- the progress function ----------------------------------------------------------------
def test_a_running_run_has_its_elapsed_time_and_an_eta_from_the_recent_rate() -> None:
    now = T0 + timedelta(seconds=130)
    # The last ten steps took 2 s each (the first twenty were faster): 30 steps left, 60 s.
    recent = [(step, now.timestamp() - 2.0 * (30 - step)) for step in range(21, 31)]
    progress = _progress(recent=recent)
    assert progress.steps_per_s == pytest.approx(0.5)
    assert progress.eta_s == pytest.approx(60.0)
    assert progress.elapsed_s == pytest.approx(130.0)
    assert progress.fraction == 0.5 and progress.percent == 50
    assert progress.text == "step 30/60 · 2m10s elapsed · ETA 1m"
    assert progress.as_json() == {
        "total_steps": 60,
        "elapsed_s": 130.0,
        "eta_s": 60.0,
        "steps_per_s": 0.5,
        "progress": 0.5,
        "progress_text": "step 30/60 · 2m10s elapsed · ETA 1m",
    }


def test_the_eta_runs_down_between_points() -> None:
    now = T0 + timedelta(seconds=130)
    recent = [(step, now.timestamp() - 10.0 - 2.0 * (30 - step)) for step in range(21, 31)]
    assert _progress(recent=recent).eta_s == pytest.approx(50.0)  # 10 s since the last step
    stalled = [(step, now.timestamp() - 500 - 2.0 * (30 - step)) for step in range(21, 31)]
    assert _progress(recent=stalled).eta_s == 0.0  # overdue: never negative


def test_without_recent_points_the_rate_counts_from_the_jobs_first_trained_step() -> None:
    # Start-up (loading, the step-0 evaluation, step 1) took 70 s; steps 1..30 then took
    # 60 s: 29 steps a minute, so the 30 steps left take about 62 s, not the 130 s of the
    # average since the start (which counted the start-up as steps).
    progress = _progress(pace=(1, T0 + timedelta(seconds=70)))
    assert progress.steps_per_s == pytest.approx(29 / 60)
    assert progress.eta_s == pytest.approx(30 / (29 / 60))
    assert progress.text == "step 30/60 · 2m10s elapsed · ETA 1m"
    assert _progress(last_step=None).text == "starting · 2m10s elapsed"  # no step reported yet
    assert _progress(last_step=0).eta_s is None
    # No mark, only the first trained step so far, or a previous job's mark: no ETA yet.
    assert _progress().eta_s is None
    assert _progress(pace=(30, T0 + timedelta(seconds=120))).eta_s is None
    assert _progress(pace=(1, T0 - timedelta(seconds=5))).eta_s is None


def test_finished_queued_and_pending_runs() -> None:
    done = _progress(
        state="completed", last_step=60, finished_at=T0 + timedelta(seconds=250), recent=[(1, 1.0)]
    )
    assert (done.elapsed_s, done.eta_s, done.steps_per_s) == (250.0, None, None)
    assert done.text == "step 60/60 · ran 4m10s" and done.percent == 100
    failed = _progress(state="failed", last_step=12, finished_at=T0 + timedelta(seconds=5))
    assert failed.text == "step 12/60 · ran 5s · failed"
    for state in ("draft", "queued", "submitted"):
        waiting = _progress(state=state, last_step=None)
        assert (waiting.text, waiting.elapsed_s, waiting.eta_s, waiting.percent) == (
            state,
            None,
            None,
            0,
        )
    resubmitted = _progress(state="queued", last_step=40)
    assert (resubmitted.text, resubmitted.percent) == ("queued · step 40/60", 66)
    assert _progress(state="pending", started_at=None, last_step=None).text == "pending"
    assert _progress(state="pending").text.startswith("step 30/60 · 2m10s elapsed")  # requeued
    assert _progress(total_steps=None).text == f"step 30/? · 2m10s elapsed · ETA {NO_VALUE}"


def test_step_rate_needs_two_distinct_steps_in_time() -> None:
    assert step_rate([]) is None
    assert step_rate([(3, 10.0)]) is None
    assert step_rate([(3, 10.0), (3, 12.0)]) is None
    assert step_rate([(3, 10.0), (4, 10.0)]) is None
    assert step_rate([(4, 12.0), (2, 8.0), (3, math.nan)]) == pytest.approx(0.5)


def test_durations_and_etas_read_as_people_write_them() -> None:
    assert [format_duration(s) for s in (0, 45.9, 130, 3725, 93_600 + 60)] == [
        "0s",
        "45s",
        "2m10s",
        "1h02m",
        "1d2h",
    ]
    assert [format_eta(s) for s in (0.2, 40, 59.99, 130, 3725)] == [
        "1s",
        "40s",
        "1m",
        "2m",
        "1h02m",
    ]
    assert format_duration(None) == NO_VALUE


# --- the pages -------------------------------------------------------------------------
def _pool_rewards(run: Run, values: dict[int, float]) -> None:
    series = MetricSeries.objects.create(run=run, policy=POOL, key=VAL_REWARD_AT_1)
    MetricPoint.objects.bulk_create(
        MetricPoint(series=series, step=step, value=value, wall_time=1.7e9 + step)
        for step, value in values.items()
    )
    other = MetricSeries.objects.create(run=run, policy="llama", key=VAL_REWARD_AT_1)
    MetricPoint.objects.create(series=other, step=max(values), value=99.0)  # not the pool's


def _finished(run: Run, *, seconds: int, last_step: int) -> None:
    Run.objects.filter(pk=run.pk).update(
        state="completed",
        started_at=T0,
        finished_at=T0 + timedelta(seconds=seconds),
        last_step=last_step,
    )


def _row(html: str, name: str) -> str:
    rows = re.findall(r"<tr>.*?</tr>", html, flags=re.S)
    return " ".join(next(row for row in rows if f">{name}</a>" in row).split())


def _cell(row: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}">(.*?)</', row)
    assert match, (testid, row)
    return match.group(1).strip()


@pytest.mark.django_db
def test_the_runs_list_shows_progress_duration_and_val_reward(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    done, running, queued = services.runs_create(make_experiment(seeds=(0, 1, 2)), state="queued")
    _finished(done, seconds=250, last_step=4)
    _pool_rewards(done, {0: 0.1, 2: 0.5, 4: 0.4375})  # best at step 2, final at step 4
    Run.objects.filter(pk=running.pk).update(  # step 1 after 110 s; step 2 20 s later
        state="running",
        started_at=timezone.now() - timedelta(seconds=130),
        last_step=2,
        pace_step=1,
        pace_at=timezone.now() - timedelta(seconds=20),
    )
    _pool_rewards(running, {0: 0.2, 2: math.nan})
    client.force_login(alice)
    html = client.get(reverse("dashboard:run_list")).content.decode()

    row = _row(html, done.name)
    assert _cell(row, "progress-text") == "step 4/4 · ran 4m10s"
    assert 'style="width: 100%"' in row
    assert (_cell(row, "duration"), _cell(row, "val-final"), _cell(row, "val-best")) == (
        "4m10s",
        "0.4375",
        "0.5",
    )
    row = _row(html, running.name)
    # 2 steps left at 20 s a step (the start-up left out; the average since the start,
    # 65 s a step, said "ETA 2m")
    assert re.fullmatch(r"step 2/4 · 2m1\ds elapsed · ETA 4\ds", _cell(row, "progress-text"))
    assert 'style="width: 50%"' in row
    assert (_cell(row, "val-final"), _cell(row, "val-best")) == ("NaN", "0.2")  # NaN is no best
    row = _row(html, queued.name)
    assert _cell(row, "progress-text") == "queued"
    assert (_cell(row, "duration"), _cell(row, "val-final"), _cell(row, "val-best")) == (
        NO_VALUE,
        NO_VALUE,
        NO_VALUE,
    )
    assert 'title="val/reward@1 of the pool mean (the mean over the policies) at the last' in html


@pytest.mark.django_db
def test_the_sweep_page_shows_progress_and_val_reward(client: Client, alice: User) -> None:
    source = services.experiment_create(
        owner=alice,
        config={
            "name": "src",
            "regime": "standalone",
            "pool": [
                {"name": "llama", "model": "zoo:tiny-llama-char"},
                {"name": "gpt2", "model": "zoo:tiny-gpt2-unigram"},
            ],
            "steps": 4,
        },
        seeds=[0],
    )
    sweep = sweep_launch(
        owner=alice, source=source, name="sw", regimes=["standalone", "sgt"], seeds=[0, 1]
    )
    runs = list(Run.objects.filter(experiment__sweep=sweep).order_by("id"))
    _finished(runs[0], seconds=75, last_step=4)
    _pool_rewards(runs[0], {0: 0.25, 4: 0.125})
    client.force_login(alice)
    html = client.get(sweep.get_absolute_url()).content.decode()
    row = _row(html, runs[0].name)
    assert _cell(row, "progress-text") == "step 4/4 · ran 1m15s"
    assert (_cell(row, "duration"), _cell(row, "val-final"), _cell(row, "val-best")) == (
        "1m15s",
        "0.125",
        "0.25",
    )
    assert _cell(_row(html, runs[1].name), "progress-text") == "queued"
    assert ">Best<small>val/reward@1</small></th>" in html


def _query_count(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.django_db
def test_the_lists_query_count_does_not_grow_with_the_runs(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(owner=alice, source=source, name="sw", regimes=["sgt"], seeds=[0, 1])
    client.force_login(alice)
    few = _query_count(client, reverse("dashboard:run_list"))
    few_sweep = _query_count(client, sweep.get_absolute_url())
    for run in Run.objects.all():
        _pool_rewards(run, {0: 0.1, 2: 0.3})
    bigger = sweep_launch(
        owner=alice, source=source, name="sw2", regimes=["sgt", "xgrpo"], seeds=[0, 1, 2, 3]
    )
    for run in Run.objects.filter(experiment__sweep=bigger):
        _pool_rewards(run, {0: 0.1})
    assert _query_count(client, reverse("dashboard:run_list")) == few
    assert _query_count(client, bigger.get_absolute_url()) == few_sweep


def _selected_sort(html: str) -> str:
    select = re.search(r'<select name="sort".*?</select>', html, flags=re.S)
    assert select, html
    chosen = re.findall(r'<option value="([^"]*)"[^>]*selected>', select.group(0))
    assert len(chosen) == 1, select.group(0)
    return chosen[0]


@pytest.mark.django_db
@pytest.mark.parametrize("list_name", ["dashboard:run_list", "dashboard:experiment_list"])
def test_the_sort_control_shows_the_order_used_and_an_empty_filter_keeps_it(
    client: Client, alice: User, make_experiment: Callable[..., Experiment], list_name: str
) -> None:
    for name in ("first", "second", "third"):
        experiment_launch(make_experiment(name=name, seeds=(0,)))
    client.force_login(alice)
    url = reverse(list_name)

    def names(response: object) -> list[str]:
        return [row.name for row in response.context["page"].object_list]  # type: ignore[attr-defined]

    opened = client.get(url)
    assert names(opened)[0].startswith("third")  # newest first...
    assert _selected_sort(opened.content.decode()) == "-created"  # ...and it says so
    # The Filter button with every filter empty submits what the form shows.
    submitted = client.get(url, {"q": "", "owner": "", "regime": "", "state": "", "tag": ""})
    assert _selected_sort(submitted.content.decode()) == "-created"
    again = client.get(url, {"q": "", "sort": _selected_sort(opened.content.decode())})
    assert names(again) == names(opened)
    by_name = client.get(url, {"sort": "name"})
    assert _selected_sort(by_name.content.decode()) == "name"
    assert names(by_name)[0].startswith("first")
    bad = client.get(url, {"sort": "bogus"})
    assert names(bad) == names(opened)  # an unknown sort falls back to the default...
    assert _selected_sort(bad.content.decode()) == "-created"  # ...and shows it
    assert "“bogus” is not one of the available choices" in bad.content.decode()


@pytest.mark.django_db
def test_a_relaunch_gives_every_run_a_name_of_its_own(
    alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(name="trio", seeds=(0, 1))
    first = experiment_launch(experiment)
    second = experiment_launch(experiment)
    third = experiment_launch(experiment)
    assert [run.name for run in first] == ["trio-s0", "trio-s1"]
    assert [run.name for run in second] == ["trio-s0-launch2", "trio-s1-launch2"]
    assert [run.name for run in third] == ["trio-s0-launch3", "trio-s1-launch3"]
    assert [run.config["name"] for run in second] == [run.name for run in second]
    long = make_experiment(name="x" * 64, seeds=(7,))
    experiment_launch(long)
    (relaunched,) = experiment_launch(long)
    assert relaunched.name == "x" * (64 - len("-s7-launch2")) + "-s7-launch2"


@pytest.mark.django_db
def test_a_name_taken_already_moves_on_to_the_next_number(
    alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(name="trio", seeds=(0,))
    (run,) = experiment_launch(experiment)
    Run.objects.filter(pk=run.pk).update(name="trio-s0-launch2")  # renamed by hand
    (again,) = experiment_launch(experiment)
    assert again.name == "trio-s0-launch3"  # its second launch, but that name is taken
    (third,) = experiment_launch(experiment)
    assert third.name == "trio-s0-launch4"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("backend", "label", "cell"),
    [
        ("slurm", "Slurm job", "slurm 4242"),
        ("local", "Local process (pid)", "local pid 4242"),
        ("", "Job", "4242"),
    ],
)
def test_the_job_label_names_the_backend(
    client: Client,
    alice: User,
    make_experiment: Callable[..., Experiment],
    backend: str,
    label: str,
    cell: str,
) -> None:
    (run,) = services.runs_create(make_experiment(seeds=(0,)), state="queued")
    Run.objects.filter(pk=run.pk).update(backend=backend, slurm_job_id="4242", state="running")
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    assert re.search(rf'<dt data-testid="job-label"[^>]*>{re.escape(label)}</dt>', page)
    assert ">Slurm job<" not in page or backend == "slurm"
    listing = client.get(reverse("dashboard:run_list")).content.decode()
    assert _cell(_row(listing, run.name), "job") == cell
    assert ">Slurm job<" not in listing
    experiment_page = client.get(run.experiment.get_absolute_url()).content.decode()
    assert _cell(_row(experiment_page, run.name), "job") == cell
    assert ">Slurm job<" not in experiment_page


@pytest.mark.django_db
def test_the_status_api_reports_progress_and_the_timeline(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    (run,) = services.runs_create(make_experiment(seeds=(0,), steps=60), state="queued")
    client.force_login(alice)
    url = reverse("api:status", args=[run.pk])
    queued = client.get(url).json()
    assert (queued["progress_text"], queued["elapsed_s"], queued["eta_s"]) == ("queued", None, None)
    assert (queued["total_steps"], queued["has_token"]) == (60, False)
    assert [change["state"] for change in queued["timeline"]] == ["queued"]

    services.run_transition(run, Run.State.RUNNING, status_message="step 30/60")
    started = timezone.now() - timedelta(seconds=130)
    Run.objects.filter(pk=run.pk).update(started_at=started, last_step=30)
    series = MetricSeries.objects.create(run=run, policy="llama", key="train/reward_mean")
    last = timezone.now().timestamp()
    MetricPoint.objects.bulk_create(  # one step every 2 s lately
        MetricPoint(series=series, step=step, value=0.0, wall_time=last - 2.0 * (30 - step))
        for step in range(31)
    )
    reply = client.get(url).json()
    assert reply["steps_per_s"] == pytest.approx(0.5)
    assert reply["eta_s"] == pytest.approx(60.0, abs=2.0)
    assert reply["elapsed_s"] == pytest.approx(130.0, abs=2.0)
    assert reply["progress"] == 0.5
    assert re.fullmatch(r"step 30/60 · 2m1\ds elapsed · ETA 1m", reply["progress_text"])
    assert [(c["state"], c["note"]) for c in reply["timeline"]] == [
        ("queued", ""),
        ("running", "step 30/60"),
    ]


@pytest.mark.django_db
def test_the_run_page_and_the_status_api_say_where_each_policy_ran(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    (run,) = services.runs_create(make_experiment(seeds=(0,)), state="queued")
    client.force_login(alice)
    url = reverse("api:status", args=[run.pk])
    assert client.get(url).json()["worker_nodes"] == ""
    page = client.get(run.get_absolute_url()).content.decode()
    assert '<dd data-field="worker_nodes" data-testid="worker-nodes">\u2013</dd>' in page

    # Recorded out of pool order, with a name the pool does not have: the text follows
    # the pool (llama, qwen, gpt2) and leaves out what it does not know.
    Run.objects.filter(pk=run.pk).update(
        state="running", worker_nodes={"gpt2": "node2", "stray": "x", "qwen": "vm"}
    )

    assert client.get(url).json()["worker_nodes"] == "qwen on vm, gpt2 on node2"
    page = client.get(run.get_absolute_url()).content.decode()
    assert "<dt>Policies ran on</dt>" in page
    assert (
        '<dd data-field="worker_nodes" data-testid="worker-nodes">qwen on vm, gpt2 on node2</dd>'
        in page
    )


def test_a_sequential_sft_runs_last_step_counts_its_sft_steps() -> None:
    """The SFT stage runs after the RL steps (issue 30): step N of steps + sft_steps."""
    from webapp.runs.progress import total_steps_of

    sequential = {"steps": 60, "regime": "sequential_sft", "sequential_sft": {"sft_steps": 15}}
    assert total_steps_of(sequential) == 75
    assert total_steps_of({"steps": 60, "regime": "sequential_sft"}) == 80  # default 20
    assert total_steps_of({"steps": 60, "regime": "sgt"}) == 60
    assert total_steps_of({"steps": 0}) is None and total_steps_of("x") is None
