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


def test_the_gap_significance_preset_asks_for_net_effect_and_discrimination(
    client: Client, alice: User, make_experiment: Callable
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="carry", regimes=["standalone", "sgt"], seeds=[0]
    )
    client.force_login(alice)
    page = client.get(reverse("compare:page"), {"sweep": sweep.pk, "preset": "gap-significance"})
    assert page.status_code == 200
    assert page.context["chosen_metrics"] == [
        "val/discrimination/carry",
        "val/discrimination/overflow",
        f"{m.VAL_REWARD_AT_1}/carry",
        f"{m.VAL_REWARD_AT_1}/no_carry",
        m.VAL_REWARD_AT_1,
    ]
    params = page.context["params"]
    assert params["view"] == "significance" and params["baseline"] == "standalone"
    assert params["primary"] == "qwen-nocarry|val/discrimination/carry|sgt"
    assert page.context["chosen_policies"] == []  # every policy, and the pool mean
    html = page.content.decode()
    assert 'data-testid="preset-gap-significance"' in html
    # The primary endpoint is a field of the form, so the page's requests carry it.
    assert 'name="primary" value="qwen-nocarry|val/discrimination/carry|sgt"' in html
    # The title names no test: the view's own title names the ones it used.
    title = PRESETS["gap-significance"]["title"]
    assert "paired" not in title and "Holm" not in title and title in html


def test_the_gap_errors_preset_draws_the_error_kinds_by_regime(
    client: Client, alice: User, make_experiment: Callable
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="errors", regimes=["standalone", "sgt"], seeds=[0]
    )
    client.force_login(alice)
    page = client.get(reverse("compare:page"), {"sweep": sweep.pk, "preset": "gap-errors"})
    assert page.status_code == 200
    assert page.context["chosen_metrics"] == [
        "val/error/correct/carry",
        "val/error/spurious_carry/no_carry",
        "val/error/dropped_carry/carry",
        "val/error/wrong_digit_count/overflow",
    ]
    assert page.context["params"]["group_by"] == "regime"
    assert page.context["chosen_policies"] == ["qwen-nocarry", "gpt2-nohundreds"]
    assert "view" not in page.context["params"]  # the curves
    assert 'data-testid="preset-gap-errors"' in page.content.decode()
