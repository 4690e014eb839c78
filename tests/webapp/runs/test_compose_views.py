"""The experiment pages: create, preview, edit, clone; CSRF and who may do what.

Actors: alice owns, bob is her labmate, charlie is in another lab.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.runs.test_forms import browser_data, query, sgt_data
from webapp.core.models import Lab
from webapp.runs import services
from webapp.runs.compose import ExperimentComposer
from webapp.runs.models import Experiment

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _empty_zoo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRL_ZOO_DIR", str(tmp_path / "zoo"))


@pytest.fixture
def experiment(lab: Lab, alice: User) -> Experiment:
    composer = ExperimentComposer(query(sgt_data(ExperimentComposer(lab=lab))), lab=lab)
    assert composer.is_valid()
    return services.experiment_create(owner=alice, lab=lab, **composer.save_kwargs())


def logged_in(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def csrf_token(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    match = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', response.content)
    assert match
    return match.group(1).decode()


# --- create ----------------------------------------------------------------------------------
def test_it_redirects_anonymous_users_to_login(client: Client, experiment: Experiment) -> None:
    for url in (
        reverse("dashboard:experiment_create"),
        reverse("dashboard:experiment_edit", args=[experiment.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_it_renders_the_form_with_stable_hooks_for_browser_tests(lab: Lab, alice: User) -> None:
    response = logged_in(alice).get(reverse("dashboard:experiment_create"))

    assert response.status_code == 200
    html = response.content.decode()
    for hook in (
        'data-testid="add-policy"',
        'data-testid="remove-policy"',
        'data-testid="move-up"',
        'data-testid="move-down"',
        'data-testid="preview"',
        'data-testid="save"',
        'data-testid="policy-form"',
        'data-testid="section-sgt"',
        'name="pool-TOTAL_FORMS"',
        'id="id_pool-0-model"',
        'data-testid="pool-1-group_size"',
        'data-testid="sgt-lambda_sgt"',
        'data-testid="resources-gpus"',
        '<template id="policy-template">',
        'name="pool-__prefix__-name"',
        "js/experiment-form.js",
        '<option value="zoo:tiny-qwen-bpe">',
    ):
        assert hook in html, hook
    # The default regime is standalone: the SGT section starts hidden.
    assert re.search(r'data-testid="section-sgt"[^>]*hidden', html)
    assert "cdn" not in html.lower()


def test_a_user_in_no_lab_cannot_compose(db: None) -> None:
    loner = User.objects.create_user("loner", password="x")

    response = logged_in(loner).get(reverse("dashboard:experiment_create"))

    assert response.status_code == 403


def test_preview_shows_the_config_and_the_plan_and_saves_nothing(lab: Lab, alice: User) -> None:
    data = sgt_data(ExperimentComposer(lab=lab))
    data["action"] = "preview"

    response = logged_in(alice).post(reverse("dashboard:experiment_create"), data)

    assert response.status_code == 200
    assert Experiment.objects.count() == 0
    html = response.content.decode()
    assert 'data-testid="preview-config"' in html
    assert "&quot;lambda_sgt&quot;: 0.2" in html
    assert 'data-testid="preview-plan"' in html
    assert html.count('data-testid="plan-row"') == 3
    assert "--ntasks=3" in html
    assert "Nothing is saved until you press Save." in html


def test_save_creates_the_experiment_with_csrf_enforced(lab: Lab, alice: User) -> None:
    client = logged_in(alice, csrf=True)
    url = reverse("dashboard:experiment_create")
    data = sgt_data(ExperimentComposer(lab=lab))
    data.update(action="save", csrfmiddlewaretoken=csrf_token(client, url))

    response = client.post(url, data)

    experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == experiment.get_absolute_url()
    assert experiment.owner == alice
    assert experiment.regime == "sgt"
    assert [p["name"] for p in experiment.config["pool"]] == ["llama", "qwen", "gpt2"]
    assert experiment.config["sgt"] == {"lambda_sgt": 0.2, "k_sgt": 2}
    assert experiment.seeds == [0, 1, 2]
    assert experiment.resources["backend"] == "local"
    assert experiment.resources["placement"]["device"] == "cpu"
    # The plan is stored with the scheduler's sbatch arguments; the experiment page shows them.
    sbatch = experiment.resources["placement"]["slurm"]["sbatch_args"]
    assert sbatch[:2] == ["--nodes=1", "--ntasks=3"]
    page = client.get(experiment.get_absolute_url()).content.decode()
    assert f'<code data-testid="plan-slurm">{" ".join(sbatch)}</code>' in page
    assert {tag.name for tag in experiment.tags.all()} == {"sgt", "pilot"}


def test_a_two_node_cpu_experiment_stores_and_shows_its_nodes(
    lab: Lab, alice: User, settings: Any
) -> None:
    settings.EXECUTOR = "slurm"
    settings.PARTITIONS = {
        **settings.PARTITIONS,
        "multinode": {"nodes": 2, "gpus_per_node": 0, "cpus_per_node": 2, "mem_gb_per_node": 8},
    }
    client = logged_in(alice)
    data = sgt_data(ExperimentComposer(lab=lab))
    data.update(
        {
            "action": "save",
            "resources-backend": "slurm",
            "resources-partition": "multinode",
            "resources-nodes": "2",
        }
    )

    response = client.post(reverse("dashboard:experiment_create"), data)

    assert response.status_code == 302, response.content.decode()[-3000:]
    experiment = Experiment.objects.get()
    placement = experiment.resources["placement"]
    # The built test zoo's counts (settings.ZOO_DIR): qwen (149,184 parameters) opens node
    # 0, llama (141,824) node 1, and gpt2 (141,056) joins the lighter node 1.
    assert [(p["name"], p["node"]) for p in placement["policies"]] == [
        ("llama", 1),
        ("qwen", 0),
        ("gpt2", 1),
    ]
    assert placement["slurm"]["nodes"] == 2 and placement["slurm"]["tasks_per_node"] == [1, 2]
    assert placement["slurm"]["sbatch_args"][:3] == [
        "--nodes=2",
        "--ntasks=4",
        "--ntasks-per-node=2",
    ]
    page = client.get(experiment.get_absolute_url()).content.decode()
    rows = re.findall(
        r'<tr data-testid="experiment-plan-row">\s*<th scope="row">(\w+)</th>\s*'
        r"<td>[^<]*</td>\s*<td>([^<]*)</td>",
        page,
    )
    assert rows == [("llama", "node 1"), ("qwen", "node 0"), ("gpt2", "node 1")]


def test_a_post_without_the_csrf_token_is_refused(lab: Lab, alice: User) -> None:
    data = sgt_data(ExperimentComposer(lab=lab))
    data["action"] = "save"

    response = logged_in(alice, csrf=True).post(reverse("dashboard:experiment_create"), data)

    assert response.status_code == 403
    assert Experiment.objects.count() == 0


def test_an_invalid_save_shows_messages_next_to_fields_and_saves_nothing(
    lab: Lab, alice: User
) -> None:
    data = sgt_data(ExperimentComposer(lab=lab))
    data.update(action="save", **{"pool-1-group_size": "1", "sgt-k_sgt": "x"})

    response = logged_in(alice).post(reverse("dashboard:experiment_create"), data)

    assert response.status_code == 200
    assert Experiment.objects.count() == 0
    html = response.content.decode()
    assert 'data-testid="error-summary"' in html
    assert re.search(r'data-testid="error-sgt-k_sgt">Enter a whole number', html)
    # Field errors come first; config checks (G >= 2, every range) follow once the fields
    # are clean, each next to its field.
    data.update({"sgt-k_sgt": "2", "sgt-lambda_sgt": "-1"})
    html = logged_in(alice).post(reverse("dashboard:experiment_create"), data).content.decode()
    assert re.search(r'data-testid="error-pool-1-group_size">G must be at least 2', html)
    assert re.search(r'data-testid="error-sgt-lambda_sgt">lambda_sgt must be &gt;= 0; got', html)


def test_the_task_section_offers_what_counts_as_a_correct_answer(lab: Lab, alice: User) -> None:
    """``task.finished_only`` and ``task.strict_format`` (issue 45): on the page with their
    labels and help, and in the stored config as chosen."""
    client = logged_in(alice, csrf=True)
    url = reverse("dashboard:experiment_create")
    html = client.get(url).content.decode()
    select = re.search(r'<select name="task-finished_only".*?</select>', html, re.S)
    assert select, "no finished_only select"
    assert re.findall(r'<option value="(\w+)"( selected)?>', select.group(0)) == [
        ("auto", " selected"),
        ("on", ""),
        ("off", ""),
    ]
    assert re.search(r'for="id_task-finished_only">Score finished answers only <code', html)
    assert re.search(
        r'id="id_task-finished_only_helptext">Score only finished answers: a response counts '
        r"only if it ended with EOS or holds a closed \\boxed\{...\}",
        html,
    )
    assert re.search(r'name="task-strict_format"[^>]*> Strict answer format \(boxed only\)', html)
    assert re.search(r'id="id_task-strict_format_helptext">The answer must be in a closed', html)

    data = sgt_data(ExperimentComposer(lab=lab))
    data.update(action="save", csrfmiddlewaretoken=csrf_token(client, url))
    data.update({"task-finished_only": "off", "task-strict_format": "on"})
    assert client.post(url, data).status_code == 302
    task = Experiment.objects.get().config["task"]
    assert (task["finished_only"], task["strict_format"]) == ("off", True)


# --- edit ------------------------------------------------------------------------------------
def test_the_owner_edits_with_every_field_prefilled(experiment: Experiment, alice: User) -> None:
    client = logged_in(alice, csrf=True)
    url = reverse("dashboard:experiment_edit", args=[experiment.pk])
    response = client.get(url)

    html = response.content.decode()
    assert 'value="sgt-three"' in html
    assert re.search(r'name="sgt-lambda_sgt" value="0.2"', html)
    assert re.search(r'name="pool-1-group_size" value="4"', html)
    assert 'value="0, 1, 2"' in html

    data = browser_data(ExperimentComposer(lab=experiment.lab, experiment=experiment))
    data.update(
        {
            "action": "save",
            "csrfmiddlewaretoken": csrf_token(client, url),
            "name": "sgt-renamed",
            "sgt-lambda_sgt": "0.3",
            "pool-0-DELETE": "on",
        }
    )
    response = client.post(url, data)

    assert response.status_code == 302
    assert response["Location"] == experiment.get_absolute_url()
    experiment.refresh_from_db()
    assert experiment.name == "sgt-renamed"
    assert experiment.config["sgt"]["lambda_sgt"] == 0.3
    assert [p["name"] for p in experiment.config["pool"]] == ["qwen", "gpt2"]
    assert [p["name"] for p in experiment.resources["placement"]["policies"]] == ["qwen", "gpt2"]


def test_a_labmate_cannot_edit(experiment: Experiment, bob: User) -> None:
    url = reverse("dashboard:experiment_edit", args=[experiment.pk])

    assert logged_in(bob).get(url).status_code == 403
    assert logged_in(bob).post(url, {"action": "save"}).status_code == 403


def test_an_outsider_gets_not_found(experiment: Experiment, charlie: User) -> None:
    url = reverse("dashboard:experiment_edit", args=[experiment.pk])

    assert logged_in(charlie).get(url).status_code == 404
    clone = reverse("dashboard:experiment_create") + f"?from={experiment.pk}"
    assert logged_in(charlie).get(clone).status_code == 404


def test_staff_may_edit(experiment: Experiment, db: None) -> None:
    admin = User.objects.create_user("admin", password="x", is_staff=True)

    response = logged_in(admin).get(reverse("dashboard:experiment_edit", args=[experiment.pk]))

    assert response.status_code == 200


# --- clone -----------------------------------------------------------------------------------
def test_a_labmate_clones_into_a_prefilled_draft(experiment: Experiment, bob: User) -> None:
    client = logged_in(bob, csrf=True)
    url = reverse("dashboard:experiment_create") + f"?from={experiment.pk}"
    response = client.get(url)

    html = response.content.decode()
    assert response.status_code == 200
    assert 'value="sgt-three-copy"' in html
    assert f'name="cloned_from" value="{experiment.pk}"' in html
    assert re.search(r'name="sgt-lambda_sgt" value="0.2"', html)
    assert 'data-testid="clone-note"' in html

    data = browser_data(ExperimentComposer(lab=experiment.lab, clone_of=experiment))
    data.update(action="save", csrfmiddlewaretoken=csrf_token(client, url))
    response = client.post(reverse("dashboard:experiment_create"), data)

    clone = Experiment.objects.exclude(pk=experiment.pk).get()
    assert response.status_code == 302
    assert response["Location"] == clone.get_absolute_url()
    assert clone.owner == bob and clone.cloned_from == experiment
    assert clone.name == "sgt-three-copy"
    assert {k: v for k, v in clone.config.items() if k != "name"} == {
        k: v for k, v in experiment.config.items() if k != "name"
    }


def test_the_clone_button_lands_on_a_prefilled_edit_page(experiment: Experiment, bob: User) -> None:
    client = logged_in(bob)
    response = client.post(reverse("dashboard:experiment_clone", args=[experiment.pk]), follow=True)

    clone = Experiment.objects.exclude(pk=experiment.pk).get()
    assert response.redirect_chain[-1][0] == reverse("dashboard:experiment_edit", args=[clone.pk])
    html = response.content.decode()
    assert f'value="{clone.name}"' in html
    assert re.search(r'name="pool-2-temperature" value="0.7"', html)
