"""The compare page's presets: the complementary-skills pool's per-skill validation, the
systematic-gap pool's per-slice validation."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduler.launch import sweep_launch
from trainer import metrics as m
from webapp.compare.views_pages import PRESETS

pytestmark = pytest.mark.django_db

SKILLS = ("addition", "subtraction", "multiplication")


def test_the_complementary_preset_shows_validation_per_skill_by_regime(
    client: Client, alice: User, make_experiment: Callable
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="skills", regimes=["standalone", "sgt"], seeds=[0]
    )
    client.force_login(alice)
    page = client.get(reverse("compare:page"), {"sweep": sweep.pk, "preset": "complementary"})
    assert page.status_code == 200
    keys = [f"{m.VAL_REWARD_AT_1}/{skill}" for skill in SKILLS]
    assert page.context["chosen_metrics"] == keys
    assert page.context["params"]["group_by"] == "regime"
    assert page.context["chosen_policies"] == []  # every policy
    # Each key is a catalogued family member with a readable name.
    assert [m.label(key) for key in keys] == [f"Validation reward@1 · {s}" for s in SKILLS]
    html = page.content.decode()
    title = PRESETS["complementary"]["title"]
    assert title == "Complementary skills: validation reward@1 per skill"
    assert 'data-testid="preset-complementary"' in html and title in html


def test_the_gap_preset_shows_validation_per_slice_by_regime(
    client: Client, alice: User, make_experiment: Callable
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="slices", regimes=["standalone", "sgt"], seeds=[0]
    )
    client.force_login(alice)
    page = client.get(reverse("compare:page"), {"sweep": sweep.pk, "preset": "gap"})
    assert page.status_code == 200
    slices = ("no_carry", "carry", "overflow", "carry_overflow")
    assert page.context["chosen_metrics"] == [f"{m.VAL_REWARD_AT_1}/{s}" for s in slices]
    assert page.context["params"]["group_by"] == "regime"
    html = page.content.decode()
    assert 'data-testid="preset-gap"' in html
    assert "Systematic gap: validation reward@1 per slice" in html


def test_the_gap_significance_preset_asks_for_the_carry_slice_against_standalone(
    client: Client, alice: User, make_experiment: Callable
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="carry", regimes=["standalone", "sgt"], seeds=[0]
    )
    client.force_login(alice)
    page = client.get(reverse("compare:page"), {"sweep": sweep.pk, "preset": "gap-significance"})
    assert page.status_code == 200
    assert page.context["chosen_metrics"] == [f"{m.VAL_REWARD_AT_1}/carry"]
    assert page.context["params"]["view"] == "significance"
    assert page.context["params"]["baseline"] == "standalone"
    assert 'data-testid="preset-gap-significance"' in page.content.decode()
