"""Django form fields built from the trainer's config dataclasses, so the form follows them.

Every scalar field of a dataclass in ``trainer.config`` (and of each registered regime's
settings, :mod:`trainer.regimes`) becomes a form field named like the dataclass field,
labelled with a name people read (its ``metadata["label"]``, else :func:`field_label`:
"Learning rate"; the page shows the JSON key ``lr`` beside it), with the field's
``metadata["help"]`` as help text (:func:`readable_doc`: no Python reprs, no RST markup),
its default as the initial value and its declared range (``metadata["min"]`` /
``["max"]``, :class:`trainer.config.Bounds`) as the number input's ``min`` / ``max``; the
trainer checks the range (``RunConfig.validate``) and the composer puts its message next
to the field. :func:`path_title` names a config path (``pool[1].lr``) as the page does
("Policy 2 · Learning rate") for error messages. Sub-dataclasses of
:class:`trainer.config.RunConfig` (``grpo``, ``task``, ``remix``) and the registered
regimes' sections (``prp``, ``sgt``...) become sections; a regime's section or an
off-policy method's (``OFF_POLICY``) is shown only when that regime / method is
selected. Everything is read from the dataclasses and the regime registry when a form is
built, so a new config field, section or regime (registered at any time) appears in the
form without touching this module.

Type mapping: ``bool`` -> checkbox, ``int`` / ``float`` -> number, ``str`` -> text (a
select when the field's metadata lists ``choices`` or its help text reads ``One of
(...)``), ``list[int]`` / ``list[str]`` ->
comma-separated text, ``X | None`` -> optional (blank means null).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator

from trainer.config import (
    OFF_POLICY,
    Bounds,
    PolicyConfig,
    RunConfig,
    bound_problem,
    unwrap_optional,
    usual_text,
)
from trainer.regimes import regime_spec, regimes
from trainer.regimes import section_names as regime_section_names
from webapp.core.digits import INT64_DIGITS, ascii_int

_ONE_OF = re.compile(r"^One of (\(.*\))$")
_ONE_OF_ANYWHERE = re.compile(r"One of (\([^()]*\))")
_RST_LITERAL = re.compile(r"``(.+?)``")
_POOL_PATH = re.compile(r"\bpool\[(\d+)\]")
MAX_CONFIG_INT = 2**31 - 1
"""Every integer of the config is a count or a step: bounded like a 32-bit integer, so a
20-digit number gets a message next to its field instead of reaching the trainer."""


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
    label: str
    bounds: Bounds | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def required(self) -> bool:
        return self.default is MISSING


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, once per class: it evaluates every annotation
    again at each call (about 2 ms a section), and a form is built from them often."""
    return typing.get_type_hints(cls)


def config_fields(cls: type, prefix: str = "", exclude: Iterable[str] = ()) -> list[ConfigField]:
    """The scalar fields of dataclass ``cls``, in declaration order (sections skipped)."""
    hints = type_hints(cls)
    result = []
    for spec in fields(cls):
        if spec.name in exclude:
            continue
        hint, optional = unwrap_optional(hints[spec.name])
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
                help=_with_usual(readable_doc(raw_help), spec.metadata),
                choices=(tuple(spec.metadata.get("choices", ())) or _choices(raw_help))
                if kind == "str"
                else None,
                label=str(spec.metadata.get("label") or field_label(spec.name)),
                bounds=Bounds.of(spec.metadata) if kind in {"int", "float"} else None,
                metadata=spec.metadata,
            )
        )
    return result


def _with_usual(help_text: str, metadata: Mapping[str, Any]) -> str:
    """The help text with the field's usual range, if it declares one (``metadata["usual"]``,
    which Preview's size warnings read too): "AdamW learning rate; usual: 1e-07 to 0.001"."""
    usual = usual_text(metadata)
    if not usual:
        return help_text
    return f"{help_text}; {usual}" if help_text else usual[0].upper() + usual[1:]


def section_names() -> list[str]:
    """RunConfig's sections in declaration order: its fields that are config dataclasses,
    and, where its ``sections`` field is, every registered regime's (display order)."""
    hints = type_hints(RunConfig)
    names: list[str] = []
    for spec in fields(RunConfig):
        if spec.metadata.get("regime_sections"):
            names.extend(regime_section_names())
        elif is_dataclass(hints[spec.name]):
            names.append(spec.name)
    return names


def section_class(name: str) -> type:
    """The dataclass of section ``name``: RunConfig's field type, or the regime's config."""
    if name in regime_section_names():
        config = regime_spec(name).config
        assert config is not None
        return config
    hint = type_hints(RunConfig).get(name)
    if not (isinstance(hint, type) and is_dataclass(hint)):
        raise KeyError(f"no config section {name!r}; the sections are {section_names()}")
    return hint


def regime_choices() -> list[tuple[str, str]]:
    """The registered regimes as ``(name, label)`` choices, in display order (read when a
    form is built, so a regime registered after start-up is offered too)."""
    return [(spec.name, spec.label) for spec in regimes()]


def section_switch(name: str) -> str | None:
    """Which top-level choice shows section ``name``: "regime", "off_policy" or None."""
    if name in regime_section_names():
        return "regime"
    if name in OFF_POLICY:
        return "off_policy"
    return None


def build_field(spec: ConfigField, **overrides: Any) -> forms.Field:
    """The Django form field of ``spec`` (its initial value is the dataclass default)."""
    initial = None if spec.default is MISSING else to_display(spec, spec.default)
    common: dict[str, Any] = {
        "label": spec.label,
        "help_text": spec.help,
        # A text field whose default is "" (task.system_prompt) may be left blank too.
        "required": spec.required
        or not (spec.optional or spec.kind == "bool" or spec.default == ""),
        "initial": initial,
    }
    common.update(overrides)
    field = _build_field(spec, common)
    field.config_key = spec.name  # type: ignore[attr-defined]
    if spec.bounds is not None:
        # The trainer checks the range (its message lands next to the field); the input
        # shows it. The page is novalidate, so the browser never blocks a submit on it.
        if spec.bounds.min is not None:
            field.widget.attrs["min"] = spec.bounds.min
        if spec.bounds.max is not None:
            field.widget.attrs["max"] = spec.bounds.max
    return field


def _build_field(spec: ConfigField, common: dict[str, Any]) -> forms.Field:
    if spec.kind == "bool":
        common["required"] = False
        return forms.BooleanField(**common)
    if spec.kind == "int":
        common["validators"] = [*common.get("validators", []), _int_limits(spec)]
        widget = forms.NumberInput(
            attrs={"step": "1", "min": -MAX_CONFIG_INT - 1, "max": MAX_CONFIG_INT}
        )
        return forms.IntegerField(widget=widget, **common)
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


def _int_limits(spec: ConfigField) -> Callable[[int | None], None]:
    """A config integer's 32-bit bound (:data:`MAX_CONFIG_INT`); a value beyond it that is
    also outside the field's declared range gets the trainer's message for that range
    (the trainer never sees such a value, so would never say it)."""

    def check(value: int | None) -> None:
        if value is None or -MAX_CONFIG_INT - 1 <= value <= MAX_CONFIG_INT:
            return
        problem = bound_problem(spec.name, spec.metadata, value)
        if problem:
            raise ValidationError(problem, code="out_of_range")
        MinValueValidator(-MAX_CONFIG_INT - 1)(value)
        MaxValueValidator(MAX_CONFIG_INT)(value)

    return check


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
            numbers = [ascii_int(part, max_digits=INT64_DIGITS) for part in parts]
            if any(number is None for number in numbers):
                raise ValidationError(
                    "use whole numbers separated by commas, e.g. 1, 2, 3", code="not_int"
                )
            return numbers
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
"""Section headings that are not the section's name in capitals (an acronym: GRPO)."""


def section_heading(name: str) -> str:
    """A section's heading: a regime's label ("Success-Gated Transfer"), else "GRPO",
    "ReMix", "Task"."""
    if name in regime_section_names():
        return regime_spec(name).label
    return SECTION_TITLES.get(name) or (name.upper() if len(name) <= 5 else name.title())


def section_title(name: str) -> tuple[str, str]:
    """A section's heading and its description as people read it: its dataclass
    docstring's first line, or for a regime whose dataclass has none, its summary."""
    cls = section_class(name)
    doc = (cls.__doc__ or "").strip()
    if doc.startswith(f"{cls.__name__}("):  # the signature dataclasses write for no docstring
        doc = ""
    if not doc and name in regime_section_names():
        doc = regime_spec(name).summary
    lines = doc.splitlines()
    return section_heading(name), readable_doc(lines[0]) if lines else ""


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
    # task, ReMix (a regime's fields carry their own metadata["label"])
    "kind": "Task kind",
    "val_size": "Validation prompts",
    "train_path": "Train file",
    "val_path": "Validation file",
    "c_bar": "Truncation (c_bar)",
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
``"group_size"`` -> ``"Group size"``. A config field's ``metadata["label"]`` wins
(:func:`config_label`)."""


def field_label(name: str) -> str:
    """The label people read for config / form field ``name``: "Learning rate"."""
    return LABELS.get(name) or name.replace("_", " ").strip().capitalize()


def config_label(cls: type, name: str) -> str:
    """The label of field ``name`` of config dataclass ``cls``: its ``metadata["label"]``,
    else :func:`field_label`."""
    spec = getattr(cls, "__dataclass_fields__", {}).get(name)
    label = spec.metadata.get("label") if spec is not None else None
    return str(label) if label else field_label(name)


def path_title(path: str) -> str:
    """A config path as the page names it: ``pool[1].lr`` -> "Policy 2 · Learning rate",
    ``remix.replay_fraction`` -> "ReMix · Replay fraction (p)", ``steps`` -> "Steps"."""
    match = re.match(r"^pool\[(\d+)\](?:\.(\w+))?", path)
    if match:
        policy = f"Policy {int(match[1]) + 1}"
        return f"{policy} · {config_label(PolicyConfig, match[2])}" if match[2] else policy
    if path == "pool":
        return "Policy pool"
    head, _, rest = path.partition(".")
    if rest and head in section_names():
        name = re.sub(r"\[\d+\]$", "", rest)  # task.levels[2] -> levels
        return f"{section_heading(head)} · {config_label(section_class(head), name)}"
    return config_label(RunConfig, path) if path else ""


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
