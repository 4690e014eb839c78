"""Django form fields built from the trainer's config dataclasses, so the form follows them.

Every scalar field of a dataclass in ``trainer.config`` becomes a form field named like
the dataclass field, labelled with a name people read (:func:`field_label`: "Learning
rate"; the page shows the JSON key ``lr`` beside it), with the field's
``metadata["help"]`` as help text (:func:`readable_doc`: no Python reprs, no RST markup)
and its default as the initial value. :func:`path_title` names a config path
(``pool[1].lr``) as the page does ("Policy 2 · Learning rate") for error messages.
Sub-dataclasses of :class:`trainer.config.RunConfig` (``grpo``, ``task``, ``prp``...)
become sections; a section named like a regime (``REGIMES``) or an off-policy method
(``OFF_POLICY``) is shown only when that regime / method is selected. A new config field
or section therefore appears in the form without touching this module.

Type mapping: ``bool`` -> checkbox, ``int`` / ``float`` -> number, ``str`` -> text (a
select when the help text reads ``One of (...)``), ``list[int]`` / ``list[str]`` ->
comma-separated text, ``X | None`` -> optional (blank means null).
"""

from __future__ import annotations

import ast
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from trainer.config import OFF_POLICY, REGIMES, RunConfig

_ONE_OF = re.compile(r"^One of (\(.*\))$")
_ONE_OF_ANYWHERE = re.compile(r"One of (\([^()]*\))")
_RST_LITERAL = re.compile(r"``(.+?)``")
_POOL_PATH = re.compile(r"\bpool\[(\d+)\]")
MAX_CONFIG_INT = 2**31 - 1
"""Every integer of the config is a count or a step: bounded like a 32-bit integer, so a
20-digit number gets a message next to its field instead of reaching the trainer."""


@dataclass(frozen=True)
class Range:
    """A bound the trainer config does not check itself (or checks later, less clearly)."""

    low: float
    high: float
    high_open: bool = False
    label: str = ""

    def check(self, name: str, value: float | None) -> None:
        if value is None:
            return
        above = value >= self.high if self.high_open else value > self.high
        if value < self.low or above:
            bracket = ")" if self.high_open else "]"
            label = self.label or name
            raise ValidationError(
                f"{label} out of range: {name} must be in [{self.low:g}, {self.high:g}{bracket}; "
                f"got {value:g}",
                code="out_of_range",
            )


RANGES: dict[str, Range] = {
    "sgt.lambda_sgt": Range(0.0, 1.0, label="lambda"),
    "remix.replay_fraction": Range(0.0, 1.0, high_open=True),
    "remix.kl_lambda_decay": Range(0.0, 1.0, label="lambda decay"),
    "remix.kl_lambda_floor": Range(0.0, 1.0, label="lambda floor"),
}
"""Form-level range checks by config path; applied only where the field exists."""


@dataclass(frozen=True)
class ConfigField:
    """One scalar (or list-of-scalars) field of a config dataclass."""

    name: str
    path: str
    kind: str  # bool | int | float | str | int_list | str_list
    optional: bool
    default: Any
    help: str
    choices: tuple[str, ...] | None

    @property
    def required(self) -> bool:
        return self.default is MISSING


def config_fields(cls: type, prefix: str = "", exclude: Iterable[str] = ()) -> list[ConfigField]:
    """The scalar fields of dataclass ``cls``, in declaration order (sections skipped)."""
    hints = typing.get_type_hints(cls)
    result = []
    for spec in fields(cls):
        if spec.name in exclude:
            continue
        hint, optional = _unwrap_optional(hints[spec.name])
        kind = _kind(hint)
        if kind is None:
            continue  # a section (sub-dataclass) or a list of them (the pool)
        if spec.default is not MISSING:
            default = spec.default
        elif spec.default_factory is not MISSING:
            default = spec.default_factory()
        else:
            default = MISSING
        raw_help = str(spec.metadata.get("help", ""))
        result.append(
            ConfigField(
                name=spec.name,
                path=f"{prefix}.{spec.name}" if prefix else spec.name,
                kind=kind,
                optional=optional,
                default=default,
                help=readable_doc(raw_help),
                choices=_choices(raw_help) if kind == "str" else None,
            )
        )
    return result


def section_names(cls: type = RunConfig) -> list[str]:
    """The fields of ``cls`` that are themselves config dataclasses (its sections)."""
    hints = typing.get_type_hints(cls)
    return [spec.name for spec in fields(cls) if is_dataclass(hints[spec.name])]


def section_class(name: str, cls: type = RunConfig) -> type:
    return typing.get_type_hints(cls)[name]


def section_switch(name: str) -> str | None:
    """Which top-level choice shows section ``name``: "regime", "off_policy" or None."""
    if name in REGIMES:
        return "regime"
    if name in OFF_POLICY:
        return "off_policy"
    return None


def build_field(spec: ConfigField, **overrides: Any) -> forms.Field:
    """The Django form field of ``spec`` (its initial value is the dataclass default)."""
    initial = None if spec.default is MISSING else to_display(spec, spec.default)
    common: dict[str, Any] = {
        "label": field_label(spec.name),
        "help_text": spec.help,
        "required": spec.required or not (spec.optional or spec.kind == "bool"),
        "initial": initial,
    }
    validators = []
    if spec.path in RANGES:
        bound = RANGES[spec.path]
        validators.append(lambda value, bound=bound, name=spec.name: bound.check(name, value))
    common["validators"] = validators
    common.update(overrides)
    field = _build_field(spec, common)
    field.config_key = spec.name  # type: ignore[attr-defined]
    return field


def _build_field(spec: ConfigField, common: dict[str, Any]) -> forms.Field:
    if spec.kind == "bool":
        common["required"] = False
        return forms.BooleanField(**common)
    if spec.kind == "int":
        return forms.IntegerField(
            widget=forms.NumberInput(attrs={"step": "1"}),
            min_value=-MAX_CONFIG_INT - 1,
            max_value=MAX_CONFIG_INT,
            **common,
        )
    if spec.kind == "float":
        return forms.FloatField(widget=forms.NumberInput(attrs={"step": "any"}), **common)
    if spec.kind in {"int_list", "str_list"}:
        item = int if spec.kind == "int_list" else str
        return CommaListField(item=item, **common)
    if spec.choices:
        choices = [(choice, choice) for choice in spec.choices]
        if spec.optional:
            choices.insert(0, ("", "(default)"))
        return forms.ChoiceField(choices=choices, **common)
    return forms.CharField(max_length=100_000, strip=True, **common)


def to_display(spec: ConfigField, value: Any) -> Any:
    """A config value as the form shows it (lists comma-separated, null blank)."""
    if value is None:
        return ""
    if spec.kind in {"int_list", "str_list"} and isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return value


def to_config(spec: ConfigField, value: Any) -> Any:
    """A cleaned form value as the config JSON holds it."""
    if value in (None, "") and spec.kind not in {"bool"}:
        if spec.optional:
            return None
        return value
    if spec.kind == "bool":
        return bool(value)
    return value


class CommaListField(forms.CharField):
    """A comma-separated list of ints or of non-blank strings."""

    def __init__(self, *, item: type, **kwargs: Any) -> None:
        self.item = item
        kwargs.setdefault("max_length", 10_000)
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> list[Any] | None:  # type: ignore[override]
        text = super().to_python(value)
        if not text:
            return None
        parts = [part.strip() for part in text.split(",")]
        if any(not part for part in parts):
            raise ValidationError("remove the empty item between two commas", code="blank_item")
        if self.item is int:
            try:
                return [int(part) for part in parts]
            except ValueError:
                raise ValidationError(
                    "use whole numbers separated by commas, e.g. 1, 2, 3", code="not_int"
                ) from None
        return parts

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return ", ".join(str(item) for item in value)
        return value

    def validate(self, value: Any) -> None:
        if value is None and self.required:
            raise ValidationError(self.error_messages["required"], code="required")


class ConfigForm(forms.Form):
    """A form whose fields are a config dataclass's scalar fields (see module docstring)."""

    use_required_attribute = False
    config_class: type
    config_prefix: str = ""
    config_exclude: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config_specs = {
            spec.name: spec
            for spec in config_fields(self.config_class, self.config_prefix, self.config_exclude)
        }
        for name, spec in self.config_specs.items():
            if name not in self.fields:
                self.fields[name] = build_field(spec)
        self.order_fields(list(self.field_order or []) + list(self.config_specs))
        tag_fields(self)

    def config_values(self) -> dict[str, Any]:
        """The cleaned values of the config fields, as config JSON."""
        return {
            name: to_config(spec, self.cleaned_data.get(name))
            for name, spec in self.config_specs.items()
            if name in self.cleaned_data
        }

    @classmethod
    def initial_from_config(cls, data: Mapping[str, Any] | None) -> dict[str, Any]:
        """Initial form values from a stored config section (missing keys: defaults)."""
        if not isinstance(data, Mapping):
            return {}
        specs = config_fields(cls.config_class, cls.config_prefix, cls.config_exclude)
        return {spec.name: to_display(spec, data[spec.name]) for spec in specs if spec.name in data}


def section_form_class(name: str) -> type[ConfigForm]:
    """A :class:`ConfigForm` for section ``name`` of :class:`RunConfig` (e.g. "sgt")."""
    return type(
        f"{name.title()}SectionForm",
        (ConfigForm,),
        {"config_class": section_class(name), "config_prefix": name},
    )


SECTION_TITLES = {"remix": "ReMix", "task": "Task"}
"""Section headings that are not the section's name in capitals (an acronym: PRP, SGT)."""


def section_heading(name: str) -> str:
    """A section's heading: "GRPO", "SGT", "ReMix", "Task"."""
    return SECTION_TITLES.get(name) or (name.upper() if len(name) <= 5 else name.title())


def section_title(name: str) -> tuple[str, str]:
    """A section's heading and its dataclass docstring's first line, as people read it."""
    doc = (section_class(name).__doc__ or "").strip().splitlines()
    return section_heading(name), readable_doc(doc[0]) if doc else ""


LABELS: dict[str, str] = {
    # the policy
    "lr": "Learning rate",
    "group_size": "Group size (G)",
    "dtype": "Data type",
    "micro_batch_size": "Micro-batch size",
    # GRPO
    "adv_eps": "Advantage epsilon",
    "clip_eps": "Clip epsilon",
    "kl_coef": "KL coefficient (beta)",
    "kl_estimator": "KL estimator",
    "kl_clamp": "KL clamp",
    "loss_agg": "Loss aggregation",
    "max_grad_norm": "Max gradient norm",
    "mini_batches": "Mini-batches",
    # task, regimes, ReMix
    "kind": "Task kind",
    "val_size": "Validation prompts",
    "train_path": "Train file",
    "val_path": "Validation file",
    "k_peer": "Peer rollouts (k)",
    "is_correction": "Importance-weight correction",
    "c_bar": "Truncation (c_bar)",
    "lambda_sgt": "NLL weight (lambda)",
    "k_sgt": "Peer successes (k)",
    "replay_versions": "Replay versions (N)",
    "replay_fraction": "Replay fraction (p)",
    "updates_per_batch": "Updates per batch (m)",
    "kl_lambda_start": "KL lambda start",
    "kl_lambda_decay": "KL lambda decay",
    "kl_lambda_every": "KL lambda every",
    "kl_lambda_floor": "KL lambda floor",
    "reincarnation_step": "Reincarnation step (T)",
    # the run and its schedule
    "off_policy": "Off-policy",
    "val_every": "Validate every",
    "seed": "Seeds",
    # resources
    "gpus": "GPUs",
    "cpus_per_gpu": "CPUs per GPU",
    "cpus": "CPUs",
    "mem_gb": "Memory (GB)",
    "qos": "QOS",
}
"""Labels a name's plain spelling would get wrong ("Lr", "Kl coef"); the rest are
``"group_size"`` -> ``"Group size"``."""


def field_label(name: str) -> str:
    """The label people read for config / form field ``name``: "Learning rate"."""
    return LABELS.get(name) or name.replace("_", " ").strip().capitalize()


def path_title(path: str) -> str:
    """A config path as the page names it: ``pool[1].lr`` -> "Policy 2 · Learning rate",
    ``remix.replay_fraction`` -> "ReMix · Replay fraction (p)", ``steps`` -> "Steps"."""
    match = re.match(r"^pool\[(\d+)\](?:\.(\w+))?", path)
    if match:
        policy = f"Policy {int(match[1]) + 1}"
        return f"{policy} · {field_label(match[2])}" if match[2] else policy
    if path == "pool":
        return "Policy pool"
    head, _, rest = path.partition(".")
    if rest and head in section_names():
        name = re.sub(r"\[\d+\]$", "", rest)  # task.levels[2] -> levels
        return f"{section_heading(head)} · {field_label(name)}"
    return field_label(path) if path else ""


def readable_message(message: str) -> str:
    """A validation message with config paths as the page names them: "(also pool[0])"
    -> "(also Policy 1)"."""
    return _POOL_PATH.sub(lambda match: f"Policy {int(match[1]) + 1}", message)


def readable_doc(text: str) -> str:
    """A field doc or docstring line as people read it.

    The config's habits become plain text: a tuple repr ``One of ('a', 'b')`` reads
    "One of: a, b", and RST literals lose their double backticks (the docstring's
    ``off_policy`` is ``"remix"`` reads: off_policy is "remix").
    """

    def options(match: re.Match[str]) -> str:
        try:
            values = ast.literal_eval(match[1])
        except (ValueError, SyntaxError):
            return match[0]
        if not isinstance(values, tuple):
            return match[0]
        return "One of: " + ", ".join(str(value) for value in values)

    return _RST_LITERAL.sub(r"\1", _ONE_OF_ANYWHERE.sub(options, text))


def config_key(field: forms.Field) -> str:
    """The JSON key a form field writes ("" for the page's own fields: tags, notes)."""
    return str(getattr(field, "config_key", ""))


def tag_fields(form: forms.BaseForm, *, raw_labels: bool = True) -> None:
    """Give every widget a ``data-testid`` equal to its HTML name (stable for browser tests).

    With ``raw_labels``, fields without an explicit label are labelled like the generated
    ones (:func:`field_label`), and the page shows their name (the key in the stored JSON)
    beside the label.
    """
    for name, field in form.fields.items():
        field.widget.attrs.setdefault("data-testid", form.add_prefix(name))
        if raw_labels and field.label is None:
            field.label = field_label(name)
            field.config_key = name  # type: ignore[attr-defined]


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _kind(hint: Any) -> str | None:
    if hint is bool:
        return "bool"
    if hint is int:
        return "int"
    if hint is float:
        return "float"
    if hint is str:
        return "str"
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        if item is int:
            return "int_list"
        if item is str:
            return "str_list"
    return None


def _choices(help_text: str) -> tuple[str, ...] | None:
    """The options of a field whose help text is ``One of ('a', 'b')`` (the config's habit)."""
    match = _ONE_OF.match(help_text.strip())
    if not match:
        return None
    try:
        options = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return None
    if isinstance(options, tuple) and all(isinstance(option, str) for option in options):
        return options
    return None
