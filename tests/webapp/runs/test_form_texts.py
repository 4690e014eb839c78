"""What the compose form and the experiment page say, as people read it: help texts
without Python reprs, errors that name fields as the page does, an error summary that
links to each field, and the MWRA plan as a table."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.runs.test_forms import browser_data, query, sgt_data
from trainer.mwra import PolicyDemand, plan_placement
from webapp.core.configform import path_title, readable_doc, readable_message
from webapp.core.models import Lab
from webapp.runs import services
from webapp.runs.compose import ExperimentComposer
from webapp.runs.models import Experiment
from webapp.runs.plan_display import DASH, plan_table, resource_facts
from webapp.runs.sweep_forms import SweepForm

pytestmark = pytest.mark.django_db

REPRS = re.compile(r"``|\('|',\)|\bNone\b|\{'")
"""What a Python repr or RST markup leaves in a text: ``x``, ('a', 'b'), None, {'k': 1}."""


@pytest.fixture(autouse=True)
def _empty_zoo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRL_ZOO_DIR", str(tmp_path / "zoo"))


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def text(fragment: str) -> str:
    """The text a fragment of HTML shows (tags dropped, entities decoded, spaces joined)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def summary_links(page: str) -> list[tuple[str, str]]:
    """The error summary's (href, text) pairs."""
    summary = re.search(r'data-testid="error-summary".*?</ul>', page, re.S)
    assert summary, "no error summary on the page"
    return [
        (href, text(label))
        for href, label in re.findall(r'<a href="([^"]+)"[^>]*>(.*?)</a>', summary[0], re.S)
    ]


# --- help texts ------------------------------------------------------------------------------
def test_every_help_text_and_section_description_reads_as_text(lab: Lab) -> None:
    composer = ExperimentComposer(lab=lab)
    forms_ = [
        composer.form,
        composer.resources,
        composer.pool.empty_form,
        *(s.form for s in composer.sections),
    ]
    texts = {
        f"{form.prefix or ''}-{name}": str(field.help_text)
        for form in forms_
        for name, field in form.fields.items()
    }
    texts.update({f"section {s.name}": s.description for s in composer.sections})

    assert len(texts) > 50
    assert {name: value for name, value in texts.items() if REPRS.search(value)} == {}
    grpo = next(s.form for s in composer.sections if s.name == "grpo")
    assert grpo.fields["kl_estimator"].help_text == "One of: k3"
    assert grpo.fields["loss_agg"].help_text == "One of: token-mean, seq-mean-token-mean"
    remix = next(s for s in composer.sections if s.name == "remix")
    assert remix.title == "ReMix"
    assert (
        remix.description
        == 'ReMix off-policy reuse (SPEC 5), per policy when off_policy is "remix".'
    )


def test_readable_doc_and_paths() -> None:
    assert readable_doc("One of ('a', 'b'); default ``x``") == "One of: a, b; default x"
    assert path_title("pool[1].lr") == "Policy 2 · Learning rate"
    assert path_title("pool[0]") == "Policy 1"
    assert path_title("remix.replay_fraction") == "ReMix · Replay fraction (p)"
    assert path_title("task.levels[2]") == "Task · Levels"
    assert path_title("steps") == "Steps"
    assert (
        readable_message("duplicate name 'a' (also pool[0])")
        == "duplicate name 'a' (also Policy 1)"
    )


def test_the_sweep_form_names_parameters_as_the_compose_form_does() -> None:
    choices = dict(SweepForm().fields["param_path"].choices)  # type: ignore[attr-defined]

    assert choices["grpo.kl_coef"] == "GRPO · KL coefficient (beta) \u2014 grpo.kl_coef"
    assert choices["remix.replay_fraction"].startswith("ReMix · Replay fraction (p)")


def test_the_page_labels_fields_in_words_with_their_json_key(lab: Lab, alice: User) -> None:
    page = logged_in(alice).get(reverse("dashboard:experiment_create")).content.decode()

    assert '<label for="id_pool-0-lr">Learning rate <code class="key">lr</code></label>' in page
    assert (
        '<label for="id_grpo-kl_coef">KL coefficient (beta) <code class="key">kl_coef</code>'
        in page
    )
    assert '<label for="id_resources-gpus">GPUs</label>' in page  # the key is the label
    assert "One of (" not in page and "``" not in page


# --- errors ----------------------------------------------------------------------------------
def test_a_bad_submit_names_each_field_as_the_page_does_and_links_to_it(
    lab: Lab, alice: User
) -> None:
    client, url = logged_in(alice), reverse("dashboard:experiment_create")
    data = sgt_data(ExperimentComposer(lab=lab))
    data.update(
        {
            "action": "preview",
            "pool-1-lr": "-1",  # the trainer's check: "lr must be > 0"
            "pool-2-name": "llama",  # a duplicate of Policy 1's name
        }
    )
    response = client.post(url, data)

    assert response.status_code == 200
    page = response.content.decode()
    assert summary_links(page) == [
        ("#id_pool-1-lr", "Policy 2 · Learning rate: lr must be > 0; got -1.0"),
        (
            "#id_pool-2-name",
            "Policy 3 · Name: duplicate policy name 'llama' (also Policy 1); give each policy "
            "its own name",
        ),
    ]
    assert 'data-testid="error-pool-1-lr">lr must be &gt; 0' in page
    assert "pool[" not in page

    # The form's own checks (before the trainer's) are listed the same way, in page order.
    data = sgt_data(ExperimentComposer(lab=lab))
    data.update({"action": "save", "sgt-k_sgt": "x", "resources-time_limit": "soon"})
    page = client.post(url, data).content.decode()
    links = summary_links(page)
    assert links[0] == (
        "#id_sgt-k_sgt",
        "Success-Gated Transfer · Peer successes (k): Enter a whole number.",
    )
    assert links[1][0] == "#id_resources-time_limit"
    assert links[1][1].startswith("Resources · Time limit: 'soon' is not a time limit")
    for href, _ in links:  # each link's target is on the page
        assert f'id="{href[1:]}"' in page
    assert not Experiment.objects.exists()


def test_the_summary_links_pool_and_whole_form_messages(lab: Lab, alice: User) -> None:
    """A message about the pool links to the pool; one about a hidden section (here from
    an imported config) to the form's messages, named as the page names the field."""
    client = logged_in(alice)
    data = browser_data(ExperimentComposer(lab=lab))
    data.update({"action": "preview", "name": "solo", "regime": "sgt", "pool-1-DELETE": "on"})
    links = summary_links(
        client.post(reverse("dashboard:experiment_create"), data).content.decode()
    )
    assert [href for href, _ in links] == ["#pool"]
    assert links[0][1].startswith("Policy pool: regime 'sgt' shares experience")

    config = (
        '{"name": "x", "off_policy": "none", "remix": {"replay_fraction": 2},'
        ' "pool": [{"name": "a", "model": "zoo:tiny-llama-char"}]}'
    )
    response = client.post(
        reverse("dashboard:experiment_create"), {"action": "import", "config_json": config}
    )
    page = response.content.decode()
    links = summary_links(page)
    assert links == [
        (
            "#form-errors",
            "ReMix · Replay fraction (p): replay_fraction (p) must be in [0, 1); got 2.0",
        )
    ]
    assert 'id="form-errors"' in page


# --- the experiment page ---------------------------------------------------------------------
def _plan_rows(page: str) -> list[list[str]]:
    rows = re.findall(r'<tr data-testid="experiment-plan-row">(.*?)</tr>', page, re.S)
    return [
        [text(cell) for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)] for row in rows
    ]


def test_the_experiment_page_shows_the_mwra_plan_as_a_table(lab: Lab, alice: User) -> None:
    valid = ExperimentComposer(query(sgt_data(ExperimentComposer(lab=lab))), lab=lab)
    assert valid.is_valid()
    experiment = services.experiment_create(owner=alice, lab=lab, **valid.save_kwargs())
    plan = plan_placement(
        [
            PolicyDemand("llama", 1_000_000),
            PolicyDemand("qwen", 3_000_000),
            PolicyDemand("gpt2", 10),
        ],
        gpus=2,
        gpus_per_node=2,
    )
    Experiment.objects.filter(pk=experiment.pk).update(
        resources={**experiment.resources, "gpus": 2, "account": "", "placement": plan.to_dict()}
    )

    page = logged_in(alice).get(experiment.get_absolute_url()).content.decode()

    rows = _plan_rows(page)
    assert [row[0] for row in rows] == ["llama", "qwen", "gpt2"]
    assert rows[1][1] == "3,000,000"
    assert all(row[2] == "node 0" for row in rows)
    assert all(row[3].startswith("GPU ") for row in rows)
    assert all(row[4].endswith("of each GPU") for row in rows), rows
    assert "{'" not in page and "None" not in page
    assert "<dt>GPUs</dt><dd>2</dd>" in page and f"<dt>Account</dt><dd>{DASH}</dd>" in page


def test_a_cpu_plan_reads_cpu_and_an_odd_stored_plan_does_not_break_the_page(
    lab: Lab, alice: User
) -> None:
    cpu = plan_placement([PolicyDemand("a", 10)], gpus=0).to_dict()
    (row,) = plan_table(cpu).rows  # type: ignore[union-attr]
    assert (row.node, row.devices, row.memory) == ("CPU", "none (CPU)", DASH)
    assert plan_table(None) is None and plan_table("junk") is None
    odd = plan_table({"policies": [{"name": "a"}, 3], "slurm": None, "mode": "exclusive"})
    assert odd is not None and [r.policy for r in odd.rows] == ["a"] and odd.slurm == DASH
    assert resource_facts({"tasks": [1, 2], "mem_gb": None, "gpus": 1, "placement": {}}) == [
        ("GPUs", "1"),
        ("Memory (GB)", DASH),
        ("Tasks", "1, 2"),
    ]
