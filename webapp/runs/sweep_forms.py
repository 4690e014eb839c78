"""The sweep form: regimes x seeds (x one hyperparameter's values) over an experiment."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from django import forms

from trainer.config import ConfigError, RunConfig
from trainer.regimes import regime_names
from webapp.core.configform import (
    MAX_CONFIG_INT,
    path_title,
    regime_choices,
    section_class,
    section_names,
    section_switch,
    type_hints,
)
from webapp.core.models import NAME_VALIDATOR
from webapp.runs.compose_sizes import (
    StepRateSource,
    SweepSize,
    pool_parameters,
    sweep_size,
    time_limit_seconds,
)
from webapp.runs.services import config_set

SKIPPED_TOP_LEVEL = {"seed", "name", "regime", "off_policy", "pool"}
MAX_SEED = MAX_CONFIG_INT  # a run's seed is a 32-bit integer column


def sweepable_paths() -> list[tuple[str, type]]:
    """Dotted config paths of scalar numbers a sweep can vary, with their types, in the
    config's order: ``steps``..., each section's (``grpo.kl_coef``...) and, where RunConfig
    keeps them, the registered regimes' (``sgt.lambda_sgt``...: read now)."""
    paths: list[tuple[str, type]] = []
    hints = type_hints(RunConfig)
    for field in dataclasses.fields(RunConfig):
        if field.name in SKIPPED_TOP_LEVEL:
            continue
        if field.metadata.get("regime_sections"):
            sections = [name for name in section_names() if section_switch(name) == "regime"]
        elif dataclasses.is_dataclass(hints[field.name]):
            sections = [field.name]
        else:
            if hints[field.name] in (int, float):
                paths.append((field.name, hints[field.name]))
            continue
        for section in sections:
            cls = section_class(section)
            section_hints = type_hints(cls)
            for sub in dataclasses.fields(cls):
                if section_hints[sub.name] in (int, float):
                    paths.append((f"{section}.{sub.name}", section_hints[sub.name]))
    return paths


def _parse_list(text: str, kind: type, what: str) -> list[Any]:
    items = [item.strip() for item in text.replace(";", ",").split(",") if item.strip()]
    values = []
    for item in items:
        try:
            value = kind(item)
        except ValueError:
            raise forms.ValidationError(f"{item[:40]!r} is not a valid {what}") from None
        if kind is float and not math.isfinite(value):
            raise forms.ValidationError(f"{item[:40]!r} is not a finite number")
        if kind is int and abs(value) > MAX_CONFIG_INT:
            raise forms.ValidationError(f"{what} {item[:40]} is out of range")
        values.append(value)
    if len(set(values)) != len(values):
        raise forms.ValidationError(f"each {what} once, please")
    return values


def fitting_regimes(config: dict[str, Any] | None) -> list[str]:
    """The registered regimes ``config`` is valid under (all of them without a config):
    the sweep form checks those at first, so a regime the source does not fit (a sharing
    regime for a one-policy pool) is offered but not pre-selected."""
    if config is None:
        return list(regime_names())
    fitting = []
    for name in regime_names():
        try:
            RunConfig.from_dict({**config, "regime": name})
        except ConfigError:
            continue
        fitting.append(name)
    return fitting


class SweepForm(forms.Form):
    name = forms.CharField(max_length=48, validators=[NAME_VALIDATOR])
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    regimes = forms.MultipleChoiceField(
        choices=(),  # the registered regimes, read when the form is built
        widget=forms.CheckboxSelectMultiple,
        help_text="One experiment per regime (x parameter value)",
    )
    seeds = forms.CharField(initial="0, 1, 2", help_text="Comma-separated; one run per seed")
    param_path = forms.ChoiceField(
        required=False, label="Also sweep", help_text="Optional: one hyperparameter"
    )
    param_values = forms.CharField(
        required=False, label="Values", help_text="Comma-separated values of that parameter"
    )

    def __init__(
        self, *args: Any, source_config: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["regimes"].choices = regime_choices()  # type: ignore[attr-defined]
        self.fields["regimes"].initial = fitting_regimes(source_config)
        self.paths = dict(sweepable_paths())
        # "GRPO · KL coefficient (beta) - grpo.kl_coef" (an em dash): the name on the
        # compose form, and the config path the sweep's experiments are named after.
        choices = [("", "nothing else")] + [
            (path, f"{path_title(path)} \u2014 {path}") for path in self.paths
        ]
        self.fields["param_path"].choices = choices  # type: ignore[attr-defined]
        for name, field in self.fields.items():
            field.widget.attrs.setdefault("data-testid", f"sweep-{name}")

    def run_count(self) -> tuple[int, int, int, int]:
        """(runs, regimes, seeds, values) the form as filled in would launch, read
        leniently (an unparsable entry is not counted): the count shown above Launch."""
        data = self.data if self.is_bound else {}

        def entered(name: str) -> Any:
            if not self.is_bound:
                return self.get_initial_for_field(self.fields[name], name)
            if name == "regimes":
                return data.getlist(name) if hasattr(data, "getlist") else data.get(name, [])
            return data.get(name, "")

        def items(text: Any) -> list[str]:
            parts = str(text or "").replace(";", ",").split(",")
            return list(dict.fromkeys(part.strip() for part in parts if part.strip()))

        regimes = len(entered("regimes") or [])
        seeds = len(items(entered("seeds")))
        values = len(items(entered("param_values"))) if entered("param_path") else 1
        return regimes * seeds * values, regimes, seeds, values

    def size(
        self,
        source_config: dict[str, Any],
        resources: dict[str, Any],
        at_once: int | None,
        step_rate: StepRateSource,
    ) -> SweepSize:
        """The size of the sweep as cleaned (after :meth:`is_valid`): the source's config
        with each swept value, run once per regime and seed, at the step rate measured on
        the source's backend and partition as ``step_rate`` says (:func:`compose_sizes.sweep_size
        <webapp.runs.compose_sizes.sweep_size>`)."""
        data = self.cleaned_data
        path, values = data.get("param_path") or "", data.get("param_values") or []
        cells = [config_set(source_config, path, value) for value in values] if path else []
        rate = step_rate(
            str(resources.get("backend", "")),
            str(resources.get("partition", "")),
            parameters=pool_parameters(source_config),  # a sweep keeps its source's pool
        )
        return sweep_size(
            cells or [source_config],
            len(data["regimes"]) * len(data["seeds"]),
            rate,
            time_limit_s=time_limit_seconds(str(resources.get("time_limit") or "")),
            at_once=at_once,
        )

    def clean_seeds(self) -> list[int]:
        seeds = _parse_list(self.cleaned_data["seeds"], int, "seed")
        if not seeds:
            raise forms.ValidationError("give at least one seed")
        if any(not 0 <= seed <= MAX_SEED for seed in seeds):
            raise forms.ValidationError(f"seeds are integers from 0 to {MAX_SEED}")
        return seeds

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        path = data.get("param_path") or ""
        text = data.get("param_values") or ""
        if path:
            try:
                data["param_values"] = _parse_list(text, self.paths[path], "value")
            except forms.ValidationError as error:
                self.add_error("param_values", error)
            else:
                if not data["param_values"]:
                    self.add_error("param_values", "give the values to sweep")
        elif text.strip():
            self.add_error("param_path", "choose the parameter these values are for")
        else:
            data["param_values"] = []
        return data
