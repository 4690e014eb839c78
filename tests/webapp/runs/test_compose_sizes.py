"""Sizes a person would question (issue 31): Preview shows the size of one run (tokens
generated, memory per policy, wall time from the step rate measured on the backend) and
warns about sizes far from the usual; Save needs "I have checked these sizes" ticked.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.webapp.metrics.test_api_support import make_run
from tests.webapp.runs.test_forms import browser_data
from trainer.config import RunConfig
from trainer.metrics import POOL, STEP_S
from trainer.mwra import PolicyDemand, plan_placement
from webapp.core.models import Lab
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.metrics.step_rates import measured_step_rate
from webapp.runs.compose import ExperimentComposer
from webapp.runs.compose_sizes import (
    NO_HISTORY,
    StepRate,
    comparable_size,
    count_text,
    duration_text,
    estimate_size,
    memory_text,
    pool_parameters,
    size_warnings,
    time_limit_seconds,
    tokens_per_step,
    unusual_values,
)
from webapp.runs.models import Experiment, Run

EXAMPLES = Path(__file__).parents[3] / "examples"

HUGE = {
    "pool-0-lr": "1000",
    "pool-0-group_size": "100000",
    "pool-0-max_new_tokens": "1000000",
    "steps": "100000000",
}
HUGE_WARNINGS = (
    "Policy 1 · Learning rate: lr is 1000.0, far outside the usual 1e-07 to 0.001",
    "Policy 1 · Group size (G): group_size is 100000, far outside the usual 2 to 256",
    "Policy 1 · Max new tokens: max_new_tokens is 1000000, far outside the usual 1 to 32768",
    "Steps: steps is 100000000, far outside the usual 1 to 100000",
)


def text(page: str) -> str:
    """What the page reads as (tags dropped, entities decoded, spaces collapsed)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def by_testid(page: str, testid: str) -> list[str]:
    """The text of every element with ``data-testid=testid``."""
    pattern = rf'<(\w+)[^>]*data-testid="{testid}"[^>]*>(.*?)</\1>'
    return [text(inner) for _, inner in re.findall(pattern, page, re.S)]


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- the estimate, pure -------------------------------------------------------------------
def two_policy_config(**changes: Any) -> dict[str, Any]:
    config = RunConfig.from_dict(
        {
            "pool": [
                {
                    "name": "a",
                    "model": "zoo:tiny-llama-char",
                    "group_size": 8,
                    "max_new_tokens": 16,
                },
                {"name": "b", "model": "zoo:tiny-qwen-bpe", "group_size": 4, "max_new_tokens": 64},
            ],
            "steps": 100,
            "prompts_per_step": 32,
        }
    ).to_dict()
    config.update(changes)
    return config


def test_tokens_and_memory_per_policy_follow_the_config_and_mwra_counts() -> None:
    config = two_policy_config()
    plan = plan_placement([PolicyDemand("a", 1_000), PolicyDemand("b", 2_000)], gpus=0)

    estimate = estimate_size(config, [1_000, 2_000], plan, None)

    assert tokens_per_step(config) == 32 * 8 * 16 + 32 * 4 * 64 == 12_288
    assert [p.tokens for p in estimate.policies] == [100 * 32 * 8 * 16, 100 * 32 * 4 * 64]
    assert estimate.total_tokens == 1_228_800
    assert estimate.total_tokens_text == "1.23 million"
    # float32 weights, gradients, two AdamW moments and the reference: 20 bytes a parameter.
    assert [p.memory_bytes for p in estimate.policies] == [20_000, 40_000]
    assert estimate.wall_seconds is None
    assert estimate.wall_time_text == NO_HISTORY == "no step rate measured on this backend yet"


def test_a_reference_on_the_cpu_leaves_the_gpu_16_bytes_a_parameter() -> None:
    config = two_policy_config()
    config["pool"][1]["reference_on_cpu"] = True
    plan = plan_placement([PolicyDemand("a", 10**9), PolicyDemand("b", 10**9)], gpus=2)

    estimate = estimate_size(config, [10**9, 10**9], plan, None)

    assert [p.memory_bytes for p in estimate.policies] == [20 * 10**9, 16 * 10**9]
    assert [p.memory_text for p in estimate.policies] == ["18.6 GiB", "14.9 GiB"]


def test_the_wall_time_scales_the_measured_rate_by_tokens_per_step_and_steps() -> None:
    config = two_policy_config()  # 12,288 tokens a step, 100 steps
    plan = plan_placement([PolicyDemand("a", 1), PolicyDemand("b", 1)], gpus=0)
    rate = StepRate(seconds_per_token=3 / 4096, runs=2)

    estimate = estimate_size(config, [1, 1], plan, rate)

    assert estimate.wall_seconds == pytest.approx(3 / 4096 * 12_288 * 100) == 900
    assert estimate.wall_time_text.startswith("about 15 min (from the step rate of 2 recent")


def test_values_far_from_the_usual_are_warned_about_by_the_name_the_page_uses() -> None:
    config = two_policy_config(steps=100_000_000)
    config["pool"][0].update(lr=1000.0, group_size=100_000, max_new_tokens=1_000_000)

    assert unusual_values(config) == list(HUGE_WARNINGS)
    assert unusual_values(two_policy_config()) == []


def test_the_example_configs_take_usual_values() -> None:
    paths = sorted(EXAMPLES.rglob("*.json"))
    assert len(paths) >= 8
    for path in paths:
        config = json.loads(path.read_text())
        if "pool" in config:
            assert unusual_values(config) == [], path


def test_a_wall_time_over_the_time_limit_and_cpu_state_over_a_node_are_warned_about() -> None:
    config = two_policy_config()
    plan = plan_placement([PolicyDemand("a", 10**9), PolicyDemand("b", 10**9)], gpus=0)
    estimate = estimate_size(config, [10**9, 10**9], plan, StepRate(1 / 4096, 3))  # 300 s

    warnings = size_warnings(config, estimate, time_limit_s=120, node_mem_gb=16)

    assert warnings == [
        "The estimated wall time, 5 min, exceeds the time limit of 2 min: the job would be "
        "stopped before it ends",
        "The CPU workers on the node need at least 37.3 GiB of memory for their training "
        "state, more than the 16 GB a node has here",
    ]
    assert size_warnings(config, estimate, time_limit_s=3600, node_mem_gb=64) == []


def test_sizes_read_as_people_read_them() -> None:
    assert time_limit_seconds("24:00:00") == 86_400
    assert time_limit_seconds("2-01:00:30") == 2 * 86_400 + 3_630
    assert time_limit_seconds("soon") is None
    assert [duration_text(s) for s in (45, 720, 12_000, 86_400, 90_000, 4e16)] == [
        "45 s",
        "12 min",
        "3 h 20 min",
        "1 day",
        "1 day 1 h",
        "1.27e+09 years",
    ]
    assert [count_text(n) for n in (1_536, 4_100_000, 2.5e12, 6.4e20)] == [
        "1,536",
        "4.1 million",
        "2.5 trillion",
        "6.40e+20",
    ]
    assert memory_text(20_000) == "19.5 KiB"


# --- the step rate measured on the backend ------------------------------------------------
def finished_run(
    owner: User,
    step_seconds: list[float],
    *,
    config: dict[str, Any] | None = None,
    state: str = Run.State.COMPLETED,
    backend: str = "local",
    partition: str = "local",
    minutes_ago: int = 10,
) -> Run:
    """A finished run on ``backend`` / ``partition`` whose pool recorded ``step_seconds``."""
    run = make_run(owner, state=state)
    config = config or two_policy_config(pool=[two_policy_config()["pool"][0]])  # 4,096 a step
    Run.objects.filter(pk=run.pk).update(
        backend=backend,
        config=config,
        finished_at=timezone.now() - dt.timedelta(minutes=minutes_ago),
    )
    Experiment.objects.filter(pk=run.experiment_id).update(resources={"partition": partition})
    series = MetricSeries.objects.create(run=run, policy=POOL, key=STEP_S)
    MetricPoint.objects.bulk_create(
        MetricPoint(series=series, step=step, value=value, wall_time=1.7e9 + step)
        for step, value in enumerate(step_seconds)
    )
    return run


@pytest.mark.django_db
def test_the_step_rate_is_the_median_of_recent_completed_runs_on_the_backend(
    alice: User,
) -> None:
    assert measured_step_rate("local", "local") is None
    finished_run(alice, [1.0, 2.0, 3.0], minutes_ago=5)  # median 2 s for 4,096 tokens a step
    finished_run(alice, [4.0, 4.0, float("nan")], minutes_ago=20)  # 4 s
    finished_run(alice, [100.0], state=Run.State.FAILED)  # not completed
    finished_run(alice, [100.0], backend="slurm", partition="gpu")  # elsewhere
    finished_run(alice, [100.0], partition="other")  # another partition

    rate = measured_step_rate("local", "local")

    assert rate == StepRate(seconds_per_token=pytest.approx(3 / 4096), runs=2)
    assert measured_step_rate("slurm", "gpu") == StepRate(pytest.approx(100 / 4096), 1)
    # Only the most recent runs count.
    assert measured_step_rate("local", "local", limit=1) == StepRate(pytest.approx(2 / 4096), 1)


@pytest.mark.django_db
def test_preview_estimates_the_wall_time_from_history_and_warns_over_the_time_limit(
    lab: Lab, alice: User
) -> None:
    finished_run(alice, [1.0, 2.0, 3.0])
    finished_run(alice, [4.0, 4.0])  # 3/4096 s a token
    data = browser_data(ExperimentComposer(lab=lab))  # 2 policies x 32 x 8 x 16 a step
    data.update(name="timed", steps="100", **{"resources-time_limit": "00:05:00"})
    data["action"] = "preview"

    page = logged_in(alice).post(reverse("dashboard:experiment_create"), data).content.decode()

    assert by_testid(page, "size-wall-time") == [
        "about 10 min (from the step rate of 2 recent completed runs on this backend, "
        "scaled by tokens per step)"
    ]
    assert by_testid(page, "size-warning") == [
        "The estimated wall time, 10 min, exceeds the time limit of 5 min: the job would be "
        "stopped before it ends"
    ]


# --- the page -----------------------------------------------------------------------------
@pytest.mark.django_db
def test_huge_sizes_are_warned_about_and_save_needs_them_acknowledged(
    lab: Lab, alice: User
) -> None:
    client = logged_in(alice)
    url = reverse("dashboard:experiment_create")
    data = browser_data(ExperimentComposer(lab=lab))
    data.update(name="huge", **HUGE)

    page = client.post(url, {**data, "action": "preview"}).content.decode()

    assert Experiment.objects.count() == 0
    assert by_testid(page, "preview-status") == [
        "The config is valid: 2 policies, cpu placement. 4 sizes to check before saving. "
        "Nothing is saved until you press Save."
    ]
    assert by_testid(page, "size-warning") == list(HUGE_WARNINGS)
    # 1e8 steps x 32 prompts x 100,000 x 1,000,000 tokens; the other policy 32 x 8 x 16.
    assert by_testid(page, "size-tokens") == ["3.20e+20", "410 billion"]
    assert re.fullmatch(
        r"[\d.]+ [KM]iB \(\d+ parameters, CPU memory\)", by_testid(page, "size-memory")[0]
    )
    assert by_testid(page, "size-wall-time") == ["no step rate measured on this backend yet"]
    assert "I have checked these sizes" in text(page)
    assert "size-refusal" not in page

    # Save without the tick: nothing saved, and the page says why.
    page = client.post(url, {**data, "action": "save"}).content.decode()
    assert Experiment.objects.count() == 0
    assert by_testid(page, "size-refusal") == [
        "Nothing was saved: these sizes need a second look. Tick \u201cI have checked these "
        "sizes\u201d under the warnings below, then press Save."
    ]
    assert by_testid(page, "size-warning") == list(HUGE_WARNINGS)

    # A tick given to other sizes does not count for these.
    digest = re.search(r'name="sizes_checked" value="(\w+)"', page)
    assert digest
    changed = {**data, "pool-0-lr": "2000", "action": "save", "sizes_checked": digest[1]}
    page = client.post(url, changed).content.decode()
    assert Experiment.objects.count() == 0
    assert by_testid(page, "size-refusal")[0].startswith(
        "Nothing was saved: the sizes changed since you ticked"
    )

    # With the tick: saved.
    response = client.post(url, {**data, "action": "save", "sizes_checked": digest[1]})
    experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == experiment.get_absolute_url()
    assert experiment.config["steps"] == 100_000_000
    assert experiment.config["pool"][0]["lr"] == 1000.0


@pytest.mark.django_db
def test_a_config_of_usual_sizes_previews_without_warnings_and_saves_at_once(
    lab: Lab, alice: User
) -> None:
    client = logged_in(alice)
    data = browser_data(ExperimentComposer(lab=lab))
    data["name"] = "usual"

    page = client.post(reverse("dashboard:experiment_create"), {**data, "action": "preview"})
    html_ = page.content.decode()
    assert 'data-testid="size-warnings"' not in html_
    assert 'name="sizes_checked"' not in html_
    assert by_testid(html_, "size-wall-time") == ["no step rate measured on this backend yet"]

    response = client.post(reverse("dashboard:experiment_create"), {**data, "action": "save"})
    assert response.status_code == 302
    assert Experiment.objects.filter(name="usual").exists()


def test_the_form_help_names_the_usual_range(lab: Lab) -> None:
    composer = ExperimentComposer(lab=lab)
    policy = composer.pool.forms[0]
    assert policy.fields["lr"].help_text == "AdamW learning rate; usual: 1e-07 to 0.001"
    assert composer.form.fields["steps"].help_text.endswith("; usual: 1 to 100000")


def test_runs_of_another_model_size_do_not_set_the_step_rate() -> None:
    assert comparable_size(134_515_008, 149_184) is False  # SmolLM2 against the tiny zoo
    assert comparable_size(149_184, 141_056) is True
    assert comparable_size(100, 200) is True and comparable_size(100, 201) is False
    assert comparable_size(None, 5) is True and comparable_size(5, None) is False


@pytest.mark.django_db
def test_the_step_rate_of_a_real_model_pool_comes_from_runs_of_its_size(
    alice: User, settings: Any, tmp_path: Path
) -> None:
    """A SmolLM2-size pool's wall time is not scaled from the tiny zoo's runs (which made
    a 135M-parameter run look a hundred times shorter, issue 33), nor the reverse."""
    zoo = tmp_path / "zoo"
    for zoo_id, n_params in (("tiny-qwen-bpe", 149_184), ("smollm2-135m-instruct", 134_515_008)):
        (zoo / zoo_id).mkdir(parents=True)
        (zoo / zoo_id / "zoo.json").write_text(json.dumps({"n_params": n_params}))
    settings.ZOO_DIR = str(zoo)
    tiny = two_policy_config()["pool"][1]  # tiny-qwen-bpe, 4 x 64 new tokens
    tokens = 32 * 4 * 64
    real = {**tiny, "name": "smol", "model": "zoo:smollm2-135m-instruct"}
    finished_run(alice, [1.0], config=two_policy_config(pool=[tiny]), minutes_ago=5)
    finished_run(alice, [90.0], config=two_policy_config(pool=[real, tiny]), minutes_ago=9)

    assert pool_parameters(two_policy_config(pool=[real, tiny])) == 134_515_008
    assert measured_step_rate("local", "local", parameters=134_515_008) == StepRate(
        pytest.approx(90 / (2 * tokens)), 1
    )
    assert measured_step_rate("local", "local", parameters=149_184) == StepRate(
        pytest.approx(1 / tokens), 1
    )
    assert measured_step_rate("local", "local", parameters=1_000_000_000) is None
    both = measured_step_rate("local", "local")
    assert both is not None and both.runs == 2
