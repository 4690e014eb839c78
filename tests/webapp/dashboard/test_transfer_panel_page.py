"""The run page's transfer panel as served: a regime where nothing crosses says so and
ships no filters, matrix or chart; a sharing regime gets the panel."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.runs import services
from webapp.runs.models import Experiment

pytestmark = pytest.mark.django_db

NO_SHARING = {
    "standalone": "Standalone GRPO: policies share no experience, so there are no transfers.",
    "xgrpo": "XGRPO with random perturbation (the ablation): policies share no experience",
}


@pytest.mark.parametrize(
    ("regime", "extra", "says"),
    [
        ("standalone", {}, NO_SHARING["standalone"]),
        ("xgrpo", {"xgrpo": {"random_perturbation": True}}, NO_SHARING["xgrpo"]),
        ("xgrpo", {}, None),
        ("prp", {}, None),
        ("sgt", {}, None),
    ],
)
def test_the_panel_says_when_a_regime_shares_nothing(
    client: Client,
    alice: User,
    make_experiment: Callable[..., Experiment],
    regime: str,
    extra: dict,
    says: str | None,
) -> None:
    run = services.runs_create(make_experiment(regime=regime, seeds=(0,), **extra))[0]
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    panel = page[page.index('<section class="card" id="transfers"') :]
    panel = panel[: panel.index("</section>")]
    if says:
        assert says in panel and 'data-shares="false"' in panel
        assert "transfer-matrix" not in panel and "transfer-filter" not in panel
    else:
        assert 'data-shares="true"' in panel and 'id="transfer-matrix"' in panel
        assert "share no experience" not in panel
    assert "run-transfers.css" in page


@pytest.mark.parametrize(
    ("task", "says"),
    [
        ({}, "finished_only auto, so off: the pool holds tiny zoo models only"),
        ({"finished_only": "on", "strict_format": True}, "finished_only on (only responses"),
    ],
)
def test_the_run_page_says_which_scoring_rule_applied(
    client: Client,
    alice: User,
    make_experiment: Callable[..., Experiment],
    task: dict,
    says: str,
) -> None:
    """``task.finished_only`` "auto" is resolved over the pool: the page says how, beside
    the config that only says "auto"."""
    run = services.runs_create(make_experiment(seeds=(0,), task=task))[0]
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    start = page.index('data-testid="run-scoring"')
    shown = page[start : page.index("</p>", start)]
    assert "What counts as a correct answer: " in shown and says in shown
    assert ("strict_format on (boxed answers only)" in shown) == bool(task)
