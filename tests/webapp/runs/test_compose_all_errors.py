"""The compose form reports every problem in one round (issue 31): one Preview lists the
problems of every field, section, the resources and the seeds at once, each next to its
field and counted in the summary; an imported config's unknown keys come with its value
errors; a zoo model that is not built is refused, with the command that builds it,
before anything is saved or launched.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.runs.test_forms import browser_data
from trainer.zoo import ZOO_IDS
from webapp.core.models import Lab
from webapp.runs.compose import ExperimentComposer
from webapp.runs.models import Experiment

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).parents[3] / "examples"


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(fragment: str) -> str:
    """What a fragment of HTML reads as (tags dropped, entities decoded)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def field_messages(page: str) -> dict[str, list[str]]:
    """The messages shown next to the fields, by field name (``pool-1-model``)."""
    found: dict[str, list[str]] = {}
    pattern = r'class="error field-error" data-testid="error-([\w-]+)">(.*?)</p>'
    for name, message in re.findall(pattern, page, re.S):
        found.setdefault(name, []).append(text(message))
    return found


def summary(page: str) -> tuple[str, list[str]]:
    """The error summary at the top of the form: its heading and its lines."""
    heading = re.search(r'<h2 id="error-summary-title">(.*?)</h2>', page, re.S)
    assert heading, "no error summary on the page"
    links = re.findall(r'data-testid="error-link">(.*?)</a>', page, re.S)
    return text(heading[1]), [text(link) for link in links]


@pytest.fixture
def default_zoo_only(settings: Any, built_zoo: Path, tmp_path: Path) -> Path:
    """A zoo where the default recipe is built and nothing else (whatever other tests
    built into the test zoo), as the form's zoo."""
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    for zoo_id in ZOO_IDS:
        (zoo / zoo_id).symlink_to(built_zoo / zoo_id)
    settings.ZOO_DIR = str(zoo)
    return zoo


def test_one_preview_lists_every_problem_of_every_field_at_once(lab: Lab, alice: User) -> None:
    data = browser_data(ExperimentComposer(lab=lab))
    data.update(
        {
            "action": "preview",
            "name": "first ten minutes",  # a space: not a valid name
            "steps": "1e12",  # not a whole number
            "seeds": "0, 0, abc",  # a duplicate and a word
            "prompts_per_step": "0",  # the trainer's range
            "pool-0-temperature": "0",  # the trainer's range, in a policy
            "pool-1-group_size": "1",  # the trainer's rule (G >= 2), another policy
            "grpo-clip_eps": "1.5",  # a section's range
            "resources-gpus": "64",  # more than the partition has
            "resources-mem_gb": "99999999",  # more than the form allows
            "resources-time_limit": "99:99:99",  # not a time
        }
    )
    page = logged_in(alice).post(reverse("dashboard:experiment_create"), data)
    assert page.status_code == 200 and not Experiment.objects.exists()
    html_ = page.content.decode()

    expected = {
        "name": [
            "'first ten minutes' is not a valid name: use 1-64 letters, digits, '_', "
            "'.' or '-', starting with a letter or digit"
        ],
        "seeds": [
            "seeds are non-negative whole numbers separated by commas (e.g. 0, 1, 2); 'abc' "
            "is not one",
            "duplicate seed 0: each seed is one run, give each once",
        ],
        "steps": ["Enter a whole number."],
        "prompts_per_step": ["prompts_per_step must be >= 1; got 0"],
        "pool-0-temperature": ["temperature must be > 0 (validation decodes greedily); got 0.0"],
        "pool-1-group_size": ["G must be at least 2 for a group baseline; got 1"],
        "grpo-clip_eps": ["clip_eps must be in (0, 1); got 1.5"],
        "resources-gpus": [
            "more GPUs than the partition has: 'local' has 0 GPUs (1 node(s) x 0); request "
            "at most 0 or choose another partition"
        ],
        "resources-mem_gb": ["Ensure this value is less than or equal to 100000."],
        "resources-time_limit": [
            "'99:99:99' is not a time limit: use HH:MM:SS or D-HH:MM:SS, e.g. 12:00:00 or "
            "2-00:00:00"
        ],
    }
    assert field_messages(html_) == expected  # each next to its field, nothing else
    heading, lines = summary(html_)
    count = sum(len(messages) for messages in expected.values())
    assert count == 11
    assert heading == f"Please fix these {count} problems; nothing was saved"
    assert len(lines) == count
    for messages in expected.values():
        for message in messages:
            assert any(line.endswith(message) for line in lines), (message, lines)
    assert 'data-testid="preview-panel"' not in html_


def test_a_form_check_and_a_trainer_check_come_in_the_same_round(lab: Lab, alice: User) -> None:
    """A field the form refuses (steps) does not hold back the trainer's check of another
    (a section's range), nor the seeds' every problem; and Save says the same."""
    client = logged_in(alice)
    data = browser_data(ExperimentComposer(lab=lab))
    data.update({"name": "rounds", "steps": "many", "seeds": "x, y", "sgt-lambda_sgt": "-1"})
    data["regime"] = "sgt"
    for action in ("preview", "save"):
        page = client.post(reverse("dashboard:experiment_create"), {**data, "action": action})
        found = field_messages(page.content.decode())
        assert found == {
            "steps": ["Enter a whole number."],
            "seeds": [
                "seeds are non-negative whole numbers separated by commas (e.g. 0, 1, 2); "
                "'x', 'y' are not"
            ],
            "sgt-lambda_sgt": ["lambda_sgt must be >= 0; got -1.0"],
        }
        assert summary(page.content.decode())[0] == (
            "Please fix these 3 problems; nothing was saved"
        )
    assert not Experiment.objects.exists()


def test_an_imported_config_shows_its_unknown_keys_with_its_value_errors(
    lab: Lab, alice: User
) -> None:
    config = json.loads((EXAMPLES / "standalone.json").read_text())
    config["stpes"] = 40  # a typo: an unknown key
    config["steps"] = -3
    config["pool"][1]["lr"] = "fast"  # a wrong type, in a policy
    config["pool"][0]["temperatur"] = 0.5  # an unknown key in a policy
    response = logged_in(alice).post(
        reverse("dashboard:experiment_create"),
        {"action": "import", "config_json": json.dumps(config)},
    )
    page = response.content.decode()
    heading, lines = summary(page)
    assert lines == [
        "Stpes: unknown field 'stpes' in config; known fields: pool, name, regime, "
        "off_policy, remix, prp, xgrpo, sgt, sequential_sft, success_threshold, grpo, task, "
        "steps, prompts_per_step, val_every, checkpoint_every, checkpoint_keep_last, "
        "checkpoint_optimizer_state, seed",
        "Policy 1: unknown field 'temperatur' in Policy 1; known "
        "fields: name, model, tokenizer, chat_template, lr, group_size, max_new_tokens, "
        "temperature, dtype, micro_batch_size, micro_batch_tokens, gradient_checkpointing, "
        "reference_on_cpu, rollout_cache, rollout_compile, rollout_prefix_reuse, "
        "update_prefix_reuse, device_share",
        "Policy 2 · Learning rate: Enter a number.",
        "Policy 2 · Learning rate: must be a number, got a string",
        "Steps: steps must be >= 1; got -3",
    ]
    assert heading == "Please fix these 5 problems; nothing was saved"
    assert field_messages(page)["steps"] == ["steps must be >= 1; got -3"]
    assert not Experiment.objects.exists()


def test_an_unbuilt_zoo_model_is_refused_with_its_build_command(
    lab: Lab, alice: User, default_zoo_only: Path
) -> None:
    client = logged_in(alice)
    data = browser_data(ExperimentComposer(lab=lab))
    data.update({"name": "complementary", "pool-1-model": "zoo:tiny-qwen-bpe-sub"})
    command = f"python -m trainer zoo build --recipe complementary --zoo-dir {default_zoo_only}"
    for action in ("preview", "save"):
        page = client.post(reverse("dashboard:experiment_create"), {**data, "action": action})
        html_ = page.content.decode()
        assert page.status_code == 200
        assert field_messages(html_) == {
            "pool-1-model": [
                f"zoo model 'tiny-qwen-bpe-sub' is not built in {default_zoo_only}, so a run "
                f"would fail when it starts: build it with `{command}` (from the project "
                "directory), then Preview again; or choose a built model"
            ]
        }
        assert summary(html_)[0] == "Please fix this problem; nothing was saved"
        assert 'data-testid="preview-panel"' not in html_
    assert not Experiment.objects.exists()

    # Built (here: the default zoo's model of that family), the same pool previews.
    data["pool-1-model"] = "zoo:tiny-qwen-bpe"
    page = client.post(reverse("dashboard:experiment_create"), {**data, "action": "preview"})
    assert field_messages(page.content.decode()) == {}
    assert 'data-testid="preview-panel"' in page.content.decode()


def test_an_imported_example_of_an_unbuilt_recipe_names_every_model_to_build(
    lab: Lab, alice: User, default_zoo_only: Path
) -> None:
    config = (EXAMPLES / "sequential_sft.json").read_text()
    response = logged_in(alice).post(
        reverse("dashboard:experiment_create"), {"action": "import", "config_json": config}
    )
    found = field_messages(response.content.decode())
    models = [policy["model"] for policy in json.loads(config)["pool"]]
    assert sorted(found) == ["pool-0-model", "pool-1-model", "pool-2-model"]
    for index, model in enumerate(models):
        (message,) = found[f"pool-{index}-model"]
        assert message.startswith(f"zoo model {model.removeprefix('zoo:')!r} is not built")
        assert "`python -m trainer zoo build --recipe complementary --zoo-dir " in message
    assert 'data-testid="preview-panel"' not in response.content.decode()


def test_few_shot_prompts_past_a_models_positions_are_refused_at_preview(
    lab: Lab, alice: User, default_zoo_only: Path
) -> None:
    """Three worked examples and a system prompt make the tiny zoo's prompts longer than
    its 128 positions (a GPT-2 policy failed at its first rollout, issue 33): Preview says
    so on the few-shot field, for each policy whose window the prompts overflow, with the
    numbers; without examples the same pool previews."""
    client = logged_in(alice)
    data = browser_data(ExperimentComposer(lab=lab))
    data.update(
        {
            "action": "preview",
            "name": "few-shot-fit",
            "task-few_shot": "3",
            "task-system_prompt": "Solve the problem. Answer with \\boxed{} and nothing else.",
        }
    )
    page = client.post(reverse("dashboard:experiment_create"), data).content.decode()

    messages = field_messages(page)["task-few_shot"]
    assert len(messages) == 1
    reasons = messages[0].split("; ")
    assert [reason.split(" (")[0] for reason in reasons] == ["llama-char", "qwen-bpe"]
    for reason in reasons:
        found = re.search(
            r"the longest prompt is (\d+) tokens and max_new_tokens (\d+) more make (\d+), "
            r"past the model's 128 positions: use fewer task.few_shot examples",
            reason,
        )
        assert found, reason
        prompt, new, total = (int(n) for n in found.groups())
        assert prompt + new == total > 128
    assert 'data-testid="preview-panel"' not in page and not Experiment.objects.exists()

    data["task-few_shot"] = "0"
    data["task-system_prompt"] = ""
    page = client.post(reverse("dashboard:experiment_create"), data).content.decode()
    assert "task-few_shot" not in field_messages(page)
    assert 'data-testid="preview-panel"' in page
