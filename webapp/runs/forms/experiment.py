"""The compose page's general part: name, description, tags, notes, regime, seeds, and
RunConfig's other scalar fields (the schedule)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from trainer.config import NAME_PATTERN, OFF_POLICY, RunConfig
from webapp.core.configform import ConfigForm, regime_choices
from webapp.core.digits import ascii_digits
from webapp.registry.forms.common import NAME_HELP, check_name

MAX_SEEDS = 32
MAX_SEED = 2**31 - 1
MAX_TAGS = 16


def parse_seeds(text: str) -> list[int]:
    """``"0, 1, 2"`` -> ``[0, 1, 2]``: 1..32 distinct non-negative integers.

    Every problem of the list is reported at once (one message per kind, each naming
    every item it is about), never only the first one found."""
    parts = [part for part in re.split(r"[\s,]+", text.strip()) if part]
    if not parts:
        raise ValidationError("give at least one seed, e.g. 0 or 0, 1, 2", code="required")
    seeds: list[int] = []
    bad: list[str] = []
    big: list[int] = []
    duplicates: list[int] = []
    for part in parts:
        seed = ascii_digits(part, max_digits=1000)  # 1,000: the field's max_length
        if seed is None:
            bad.append(part)
            continue
        if seed > MAX_SEED:
            big.append(seed)
        elif seed in seeds:
            if seed not in duplicates:
                duplicates.append(seed)
        else:
            seeds.append(seed)
    problems: list[ValidationError] = []
    if bad:
        named = ", ".join(repr(part) for part in bad)
        problems.append(
            ValidationError(
                f"seeds are non-negative whole numbers separated by commas (e.g. 0, 1, 2); "
                f"{named} {'is not one' if len(bad) == 1 else 'are not'}",
                code="bad_seed",
            )
        )
    if big:
        named = ", ".join(str(seed) for seed in big)
        problems.append(
            ValidationError(
                f"seed {named} is too large (at most {MAX_SEED})"
                if len(big) == 1
                else f"seeds {named} are too large (at most {MAX_SEED})",
                code="big",
            )
        )
    if duplicates:
        named = ", ".join(str(seed) for seed in duplicates)
        problems.append(
            ValidationError(
                f"duplicate seed{'s' if len(duplicates) > 1 else ''} {named}: each seed is one "
                "run, give each once",
                code="duplicate",
            )
        )
    if len(parts) > MAX_SEEDS:
        problems.append(
            ValidationError(
                f"give 1 to {MAX_SEEDS} seeds (one run each); got {len(parts)}", code="too_many"
            )
        )
    if problems:
        raise ValidationError(problems)
    return seeds


def parse_tags(text: str) -> list[str]:
    """``"baseline, sgt"`` -> ``["baseline", "sgt"]`` (names, deduplicated)."""
    tags: list[str] = []
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        if len(part) > 48 or not NAME_PATTERN.match(part):
            raise ValidationError(
                f"{part!r} is not a valid tag: use 1-48 letters, digits, '_', '.' or '-'",
                code="invalid_tag",
            )
        if part not in tags:
            tags.append(part)
    if len(tags) > MAX_TAGS:
        raise ValidationError(f"at most {MAX_TAGS} tags; got {len(tags)}", code="too_many")
    return tags


class ExperimentForm(ConfigForm):
    """Name, description, tags, notes, regime, seeds, and RunConfig's other scalar fields."""

    config_class = RunConfig
    config_exclude = ("seed",)
    field_order = ("name", "description", "tags", "notes", "regime", "off_policy", "seeds")
    GENERAL = ("name", "description", "tags", "notes")
    CHOICE = ("regime", "off_policy")

    name = forms.CharField(
        max_length=64,
        validators=[check_name],
        help_text=f"Experiment and run name: {NAME_HELP}",
    )
    description = forms.CharField(
        required=False, max_length=5000, widget=forms.Textarea(attrs={"rows": 2})
    )
    tags = forms.CharField(
        required=False, max_length=1000, help_text="Comma-separated, e.g. baseline, sgt-sweep"
    )
    notes = forms.CharField(
        required=False, max_length=20000, widget=forms.Textarea(attrs={"rows": 3})
    )
    regime = forms.ChoiceField(
        choices=(),  # the registered regimes, read when the form is built
        initial=RunConfig.__dataclass_fields__["regime"].default,
        help_text="How experience crosses between policies (SPEC 4)",
    )
    off_policy = forms.ChoiceField(
        choices=[(method, method) for method in OFF_POLICY],
        initial=OFF_POLICY[0],
        help_text="Off-policy reuse applied per policy on top of the regime (SPEC 5)",
    )
    seeds = forms.CharField(
        max_length=1000,
        initial="0",
        help_text=f"One run per seed: 1 to {MAX_SEEDS} distinct integers >= 0, e.g. 0, 1, 2",
    )
    cloned_from = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["regime"].choices = regime_choices()  # type: ignore[attr-defined]

    def clean_seeds(self) -> list[int]:
        return parse_seeds(self.cleaned_data["seeds"])

    def clean_tags(self) -> list[str]:
        return parse_tags(self.cleaned_data.get("tags", ""))

    def general_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.GENERAL]

    def schedule_fields(self) -> list[forms.BoundField]:
        """RunConfig's scalar fields besides name and regime: steps, prompts_per_step..."""
        skip = {*self.GENERAL, *self.CHOICE}
        return [self[name] for name in self.config_specs if name not in skip]
