"""Issue 31, "nothing that fails after Launch": a policy naming an unbuilt zoo model is
refused at Preview with a "Build <recipe> zoo" button beside the error; the button starts
the build as a background job (a Celery task), the page says how far it is while it runs,
and once it is built the same pool previews.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduler import dispatch, tasks
from tests.webapp.runs.test_compose_all_errors import field_messages, logged_in, text
from tests.webapp.runs.test_forms import browser_data
from trainer.zoo import COMPLEMENTARY_IDS, ZOO_IDS
from webapp.core.models import Lab
from webapp.registry import zoo_builds
from webapp.runs.compose import ExperimentComposer
from webapp.runs.models import Experiment

pytestmark = pytest.mark.django_db

BUILD = "/zoo/build/"


@pytest.fixture
def zoo(settings: Any, built_zoo: Path, tmp_path: Path) -> Path:
    """The form's zoo: the default recipe built (links to the test zoo), nothing else; and
    a var directory of the test's own for the builds' status files."""
    root = tmp_path / "zoo"
    root.mkdir()
    for zoo_id in ZOO_IDS:
        (root / zoo_id).symlink_to(built_zoo / zoo_id)
    settings.ZOO_DIR = str(root)
    settings.VAR_DIR = tmp_path / "var"
    return root


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[Any]]]:
    """The tasks sent, caught where dispatch hands them to the broker."""
    caught: list[tuple[str, list[Any]]] = []

    def send_task(name: str, args: list[Any]) -> None:
        caught.append((name, args))

    monkeypatch.setattr(dispatch.celery_app, "send_task", send_task)
    return caught


def complementary_pool(lab: Lab) -> dict[str, str]:
    """A pool whose second policy names a model of the (unbuilt) complementary recipe."""
    data = browser_data(ExperimentComposer(lab=lab))
    data.update({"name": "complementary", "pool-1-model": "zoo:tiny-qwen-bpe-sub"})
    return data


def preview(client: Client, data: dict[str, str]) -> str:
    page = client.post(reverse("dashboard:experiment_create"), {**data, "action": "preview"})
    assert page.status_code == 200
    return page.content.decode()


def build_buttons(page: str) -> list[tuple[str, str, str]]:
    """The build buttons on the page: (the form they submit, the recipe, their text)."""
    pattern = (
        r'<button type="submit" form="([\w-]+)" name="recipe" value="(\w+)"[^>]*'
        r'data-testid="zoo-build-button">(.*?)</button>'
    )
    return re.findall(pattern, page, re.S)


def post_build(client: Client, recipe: str, **extra: Any) -> Any:
    return client.post(BUILD, {"recipe": recipe, "next": "/experiments/new/"}, **extra)


def test_an_unbuilt_zoo_model_comes_with_a_button_that_builds_its_recipe(
    lab: Lab, alice: User, zoo: Path
) -> None:
    page = preview(logged_in(alice), complementary_pool(lab))

    assert list(field_messages(page)) == ["pool-1-model"]  # refused, as before
    assert field_messages(page)["pool-1-model"][0].startswith(
        "zoo model 'tiny-qwen-bpe-sub' is not built"
    )
    # One button, beside that error only, submitting the small form outside the compose
    # form (forms do not nest), which posts to the build view with the CSRF token.
    assert build_buttons(page) == [("zoo-build-form", "complementary", "Build complementary zoo")]
    compose_form = page[
        page.index('id="experiment-form"') : page.index(
            "</form>", page.index('id="experiment-form"')
        )
    ]
    assert 'id="zoo-build-form"' not in compose_form
    build_form = re.search(
        r'<form method="post" action="([^"]+)" id="zoo-build-form".*?</form>', page, re.S
    )
    assert build_form and build_form[1] == BUILD
    assert 'name="csrfmiddlewaretoken"' in build_form[0]
    assert 'name="next" value="/experiments/new/"' in build_form[0]
    assert "js/zoo-build.js" in page
    # A pool of built models has no button.
    built = complementary_pool(lab) | {"pool-1-model": "zoo:tiny-qwen-bpe"}
    assert build_buttons(preview(logged_in(alice), built)) == []


def test_the_button_starts_one_build_job_and_the_page_says_how_far_it_is(
    lab: Lab, alice: User, zoo: Path, sent: list[tuple[str, list[Any]]]
) -> None:
    client = logged_in(alice)

    response = post_build(client, "complementary")

    assert response.status_code == 302 and response.url == "/experiments/new/"
    assert sent == [(dispatch.ZOO_BUILD, ["complementary", str(zoo)])]
    page = client.get(response.url).content.decode()
    assert "Building the complementary zoo (started): 0 of 3 models ready." in text(page)

    # A second click while it is queued starts nothing, and says so.
    again = post_build(client, "complementary", HTTP_ACCEPT="application/json")
    assert again.status_code == 200 and len(sent) == 1
    assert again.json()["message"] == (
        "The complementary zoo is being built already: 0 of 3 models ready."
    )

    # The compose page: still refused (a run cannot use it yet), "being built" instead of
    # the build command, and no second button.
    page = preview(client, complementary_pool(lab))
    (message,) = field_messages(page)["pool-1-model"]
    assert message.startswith(
        "zoo model 'tiny-qwen-bpe-sub' is being built: 0 of 3 models ready (the "
        f"complementary zoo, into {zoo}, started "
    )
    assert message.endswith("a run cannot use it until it is built: Preview again then")
    assert build_buttons(page) == []
    status = re.search(r'data-testid="zoo-build-status">(.*?)</span>', page, re.S)
    assert status and text(status[1]) == "Building the complementary zoo: 0 of 3 models ready."
    assert 'data-testid="preview-panel"' not in page
    assert not Experiment.objects.exists()


def test_the_job_builds_the_recipe_the_page_follows_it_and_then_previews(
    lab: Lab,
    alice: User,
    zoo: Path,
    built_zoo: Path,
    sent: list[tuple[str, list[Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The task run as the worker runs it; its build links each model's family's default
    model in from the test zoo (building them for real takes minutes; the real build_zoo
    is the next test's)."""
    client = logged_in(alice)
    post_build(client, "complementary")
    ((name, args),) = sent
    seen_while_building: list[str] = []

    def build_zoo(
        root: Path,
        *,
        ids: Sequence[str],
        log: Callable[[str], None],
        on_ready: Callable[[str], None],
    ) -> dict[str, Path]:
        for zoo_id in ids:
            family = next(base for base in ZOO_IDS if zoo_id.startswith(base))
            (root / zoo_id).symlink_to(built_zoo / family)  # its family's default model
            on_ready(zoo_id)
            if zoo_id == ids[0]:
                seen_while_building.extend(
                    field_messages(preview(client, complementary_pool(lab)))["pool-1-model"]
                )
        return {zoo_id: root / zoo_id for zoo_id in ids}

    monkeypatch.setattr(zoo_builds, "build_zoo", build_zoo)
    assert name == "scheduler.tasks.zoo_build"
    assert tasks.zoo_build(*args) == "ready"

    (message,) = seen_while_building
    assert message.startswith("zoo model 'tiny-qwen-bpe-sub' is being built: 1 of 3 models ready")
    build = zoo_builds.load("complementary")
    assert build is not None
    assert (build.state, build.ready, build.zoo_dir) == ("ready", list(COMPLEMENTARY_IDS), str(zoo))
    status = client.get(BUILD, {"recipe": "complementary"}).json()
    assert (status["state"], status["progress"]) == ("ready", "3 of 3 models ready")
    page = preview(client, complementary_pool(lab))
    assert field_messages(page) == {} and build_buttons(page) == []
    assert 'data-testid="preview-panel"' in page


def test_the_job_runs_the_real_build_and_records_ready(
    settings: Any, built_zoo: Path, tmp_path: Path
) -> None:
    """The real :func:`trainer.zoo.build_zoo` on the default recipe, already built in the
    zoo (linked from the test zoo): it finds each model current, and the status says so."""
    root = tmp_path / "zoo"
    root.mkdir()
    for zoo_id in ZOO_IDS:
        (root / zoo_id).symlink_to(built_zoo / zoo_id)
    settings.VAR_DIR = tmp_path / "var"
    settings.ZOO_DIR = str(root)

    assert tasks.zoo_build("default", str(root)) == "ready"

    saved = json.loads((tmp_path / "var" / "zoo-builds" / "default.json").read_text())
    assert (saved["state"], saved["ready"], saved["models"]) == (
        "ready",
        list(ZOO_IDS),
        list(ZOO_IDS),
    )


def test_a_failed_build_is_shown_with_the_button_again(
    lab: Lab,
    alice: User,
    zoo: Path,
    sent: list[tuple[str, list[Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = logged_in(alice)
    post_build(client, "complementary")

    def build_zoo(root: Path, **_: Any) -> dict[str, Path]:
        raise OSError("No space left on device\nmore detail")

    monkeypatch.setattr(zoo_builds, "build_zoo", build_zoo)
    assert tasks.zoo_build("complementary", str(zoo)) == "failed"

    page = preview(client, complementary_pool(lab))
    (message,) = field_messages(page)["pool-1-model"]
    assert message.endswith(
        "(the last build of the complementary zoo failed: OSError: No space left on device)"
    )
    assert build_buttons(page) == [("zoo-build-form", "complementary", "Build complementary zoo")]
    post_build(client, "complementary")
    assert len(sent) == 2  # after a failure, the button builds again


def test_the_script_posts_without_leaving_the_page(
    alice: User, zoo: Path, sent: list[tuple[str, list[Any]]]
) -> None:
    """What the page's fetch() gets: JSON, 202 for a build it started."""
    response = post_build(logged_in(alice), "gap", HTTP_ACCEPT="application/json")
    assert response.status_code == 202
    assert response.json() == {
        "recipe": "gap",
        "state": "queued",
        "ready": 0,
        "models": 3,
        "progress": "0 of 3 models ready",
        "error": "",
        "message": "Building the gap zoo (started): 0 of 3 models ready.",
    }
    assert sent == [(dispatch.ZOO_BUILD, ["gap", str(zoo)])]


def test_a_broker_that_refuses_is_said(
    alice: User, zoo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def send_task(name: str, args: list[Any]) -> None:
        raise ConnectionError("redis is down")

    monkeypatch.setattr(dispatch.celery_app, "send_task", send_task)
    client = logged_in(alice)
    response = post_build(client, "gap")
    assert response.status_code == 302
    page = client.get(response.url).content.decode()
    assert (
        "Could not start building the gap zoo: the job queue could not be reached; try "
        "again later." in text(page)
    )
    assert zoo_builds.active_status("gap") is None  # the next click tries again


@pytest.mark.parametrize("recipe", ["", "nope", "../default", "default/../x"])
def test_an_unknown_recipe_is_a_bad_request(
    alice: User, zoo: Path, sent: list[tuple[str, list[Any]]], recipe: str
) -> None:
    response = post_build(logged_in(alice), recipe)
    assert response.status_code == 400
    assert response.content.decode() == (
        "unknown zoo recipe; the recipes are default, complementary, gap, shapes"
    )
    assert sent == [] and not (zoo.parent / "var" / "zoo-builds").exists()


def test_only_a_lab_member_may_build(
    alice: User, zoo: Path, sent: list[tuple[str, list[Any]]]
) -> None:
    anonymous = post_build(Client(), "complementary")
    assert anonymous.status_code == 302 and anonymous.url.startswith("/accounts/login/")
    in_no_lab = User.objects.create_user("dora", password="dora-password")
    outsider = post_build(logged_in(in_no_lab), "complementary")
    assert outsider.status_code == 403
    assert sent == [] and zoo_builds.load("complementary") is None
    # A member's post without the CSRF token is refused too (the test client skips the
    # check unless asked).
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(alice)
    assert post_build(strict, "complementary").status_code == 403
    assert sent == [] and zoo_builds.load("complementary") is None


def test_next_never_leaves_the_site(
    alice: User, zoo: Path, sent: list[tuple[str, list[Any]]]
) -> None:
    response = logged_in(alice).post(BUILD, {"recipe": "gap", "next": "https://evil.example/phish"})
    assert response.status_code == 302 and response.url == "/experiments/new/"
