"""What the product declares about metrics and sharing regimes, and the regime registry.

The leaf of the trainer's imports: pure Python (no torch), importing nothing of
``trainer`` but :mod:`trainer.registry`. Everything else reads its declarations from here:
the metric catalogue (:mod:`trainer.metrics`), the run config (:mod:`trainer.config`),
the wire contract (:mod:`trainer.wire`) and the web app (the compose form, the run page's
chart groups, the transfer filters, the comparison's order and colours).

- :class:`ChartGroup`, :class:`MetricInfo` and the chart groups: what people read about a
  metric key and where the run page charts it.
- :class:`RegimeSpec`, :class:`EventKind`, :class:`MetricFamily`: what a sharing regime
  declares about itself. Its implementation (a :class:`trainer.regimes.base.Regime`, which
  needs torch) is named by its import path and loaded only by the trainer
  (:func:`make_regime`).
- The registry (:data:`REGIMES`) and its readers (:func:`regimes`, :func:`regime_spec`...).

**How regimes get registered.** A regime is a package whose ``__init__`` builds a
:class:`RegimeSpec` and calls :func:`register_regime`. The readers load the regimes on
first use (:func:`load_regimes`): the built-in package :data:`BUILT_IN_PACKAGE` and every
installed plug-in named in the entry-point group :data:`ENTRY_POINT_GROUP`
(``[project.entry-points."mutual_rl_lab.regimes"] noise = "my_package.noise"`` in a
plug-in's ``pyproject.toml``). This module imports them by name, so no module below the
regimes (config, metrics, wire) imports ``trainer.regimes`` and the import graph has no
cycle. The entry points (the trainer's CLI, the web app's ``AppConfig.ready``, the Celery
worker) call :func:`load_regimes` at start-up, so a broken plug-in fails there, loudly.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from trainer.registry import Registry

if TYPE_CHECKING:
    from pathlib import Path

    from trainer.config import RunConfig
    from trainer.regimes.base import Regime

# --- metrics: what people read, and where it is charted ---------------------------------


@dataclass(frozen=True)
class ChartGroup:
    """A chart group of the run page: ``slug`` (stable, for URLs and tests) and title."""

    slug: str
    title: str


@dataclass(frozen=True)
class MetricInfo:
    """What people read about metric ``key``: its ``label``, its ``unit`` ("" when it has
    none: rewards, losses, fractions) and its chart ``group``."""

    key: str
    label: str
    unit: str
    group: ChartGroup

    @property
    def axis_label(self) -> str:
        """The label with its unit, for an axis: "Step time (s)"."""
        return f"{self.label} ({self.unit})" if self.unit else self.label


REWARDS = ChartGroup("rewards", "Rewards")
ENTROPY_GROUP = ChartGroup("entropy", "Entropy")
KL = ChartGroup("kl", "KL loss and coefficient")
PG = ChartGroup("pg", "Policy-gradient loss and clip fraction")
RESPONSE = ChartGroup("response", "Response length and self-reflection")
REMIX = ChartGroup("remix", "ReMix off-policy reuse")
SHARING = ChartGroup("sharing", "Sharing regime")
THROUGHPUT = ChartGroup("throughput", "Throughput")
OPTIM = ChartGroup("optim", "Optimiser")
OTHER = ChartGroup("other", "Other")
"""The group of keys the catalogue does not know."""


# --- sharing regimes ---------------------------------------------------------------------
REGIME_NAME_MAX_LENGTH = 32
"""The longest regime name: the registry's pattern and the web app's ``regime`` columns
(``Experiment.regime``, ``Run.regime``) share it."""
NAME_PATTERN = re.compile(rf"^[a-z][a-z0-9_]{{0,{REGIME_NAME_MAX_LENGTH - 1}}}$")
"""A regime's name: its value of ``regime`` and, when it has one, its config section."""
BUILT_IN_PACKAGE = "trainer.regimes"
"""The package whose import registers the built-in regimes."""
ENTRY_POINT_GROUP = "mutual_rl_lab.regimes"
"""The entry-point group of installed regime plug-ins: each names a module to import."""


@dataclass(frozen=True)
class EventKind:
    """A kind of peer-transfer event a regime logs: what crosses when it fires."""

    name: str
    """As it travels and is stored (``"success"``); lower case, digits and ``_``."""
    label: str
    """What the run page's transfer filter calls it ("rescued success (SGT)")."""
    no_text: str = ""
    """For a kind that never carries text: what the transfer detail says instead."""


@dataclass(frozen=True)
class MetricFamily:
    """Metric keys with a variable part (``prp/is_weight_mean/<skill>``)."""

    pattern: re.Pattern[str]
    """Matches the whole key; its named groups fill ``label``."""
    label: str
    unit: str
    group: ChartGroup


@dataclass(frozen=True)
class RegimeSpec:
    """Everything the product needs to know about one sharing regime.

    ``config`` is the dataclass of the regime's section of the run config (top-level key
    ``name``), or None when it has no settings. Its fields carry ``metadata["help"]``
    like every config field and, for numbers, optional ``metadata["min"]`` /
    ``["max"]`` bounds (the metadata vocabulary of :mod:`trainer.config`), which the run
    config checks and the compose form shows. For rules a range cannot say, an optional
    method ``problems(run: RunConfig) -> dict[str, str]`` returns, per field name, a
    message that says how to fix it (the run config prefixes the section's name).
    """

    name: str
    label: str
    """The name people read ("Success-Gated Transfer")."""
    summary: str
    """One line on what crosses and how it is used, for the compose form."""
    implementation: str
    """``"module:Class"`` of the :class:`~trainer.regimes.base.Regime` subclass."""
    order: int
    """Where the regime sorts in the compose form and comparisons (the baseline is 0)."""
    colour: str
    """Its fixed colour in every comparison and export (``#RRGGBB``)."""
    config: type | None = None
    shares: bool = True
    """Experience crosses between policies, so the pool needs at least two."""
    metrics: tuple[MetricInfo, ...] = ()
    """The keys it logs, in chart order (their group is usually :data:`SHARING`)."""
    families: tuple[MetricFamily, ...] = ()
    event_kinds: tuple[EventKind, ...] = ()
    quiet_when: Callable[[Any], str | None] | None = None
    """Given its settings, why nothing crosses in this configuration (an ablation), or
    None when transfers are logged."""

    def __post_init__(self) -> None:
        problems = []
        if not NAME_PATTERN.match(self.name):
            problems.append(f"name {self.name!r} must match {NAME_PATTERN.pattern}")
        if not re.fullmatch(r"#[0-9A-Fa-f]{6}", self.colour):
            problems.append(f"colour {self.colour!r} must be #RRGGBB")
        if ":" not in self.implementation:
            problems.append(f"implementation {self.implementation!r} must be 'module:Class'")
        if self.config is not None and not is_dataclass(self.config):
            problems.append("config must be a dataclass")
        for kind in self.event_kinds:
            if not NAME_PATTERN.match(kind.name):
                problems.append(f"event kind {kind.name!r} must match {NAME_PATTERN.pattern}")
        for info in self.metrics:
            if info.key.split("/", 1)[0] not in {self.name, "thl"}:
                problems.append(f"metric {info.key!r} must start with '{self.name}/'")
        if problems:
            raise ValueError(f"regime {self.name!r}: " + "; ".join(problems))

    def section(self) -> Any:
        """A fresh default section (None when the regime has no settings)."""
        return None if self.config is None else self.config()

    def settings_from(self, data: Any) -> Any:
        """Its section rebuilt from a stored config's ``data`` for display: the known
        fields of ``data`` (a dict), defaults for the rest; None without settings."""
        if self.config is None:
            return None
        known = {spec_field.name for spec_field in fields(self.config)}
        given = {k: v for k, v in data.items() if k in known} if isinstance(data, dict) else {}
        return self.config(**given)

    def no_transfers_note(self, settings: Any) -> str | None:
        """What the run page says instead of a transfer panel, when nothing crosses."""
        if not self.shares:
            return f"{self.label}: policies share no experience, so there are no transfers."
        return self.quiet_when(settings) if self.quiet_when is not None else None

    def load(self) -> type[Regime]:
        """The implementation class (imports it: needs torch)."""
        module, _, attribute = self.implementation.partition(":")
        loaded: type[Regime] = getattr(importlib.import_module(module), attribute)
        return loaded


REGIMES: Registry[RegimeSpec] = Registry("regime")
"""Every registered regime by name; :func:`regimes` gives them in display order."""


_loaded = False


def load_regimes(*, rescan: bool = False) -> None:
    """Register the built-in regimes and every installed plug-in, once (idempotent;
    ``rescan``: look for plug-ins installed since, e.g. in a notebook after ``pip
    install``).

    The readers below call it, so a notebook or a script that only parses a config sees
    every regime; the entry points call it at start-up so that a plug-in that fails to
    import fails there.
    """
    global _loaded
    if _loaded and not rescan:
        return
    _loaded = True  # first: a regime's own import registers through the readers below
    importlib.import_module(BUILT_IN_PACKAGE)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        importlib.import_module(entry.value.partition(":")[0])


def register_regime(spec: RegimeSpec) -> RegimeSpec:
    """Add ``spec``; its name and event kinds must be new."""
    taken = {kind.name for other in _registered() for kind in other.event_kinds}
    clash = [kind.name for kind in spec.event_kinds if kind.name in taken]
    if clash:
        raise ValueError(f"regime {spec.name!r}: event kinds {clash} are already registered")
    REGIMES.register(spec.name)(spec)
    return spec


@contextmanager
def registered(spec: RegimeSpec) -> Iterator[RegimeSpec]:
    """``spec`` registered for the ``with`` block only (tests, notebooks)."""
    register_regime(spec)
    try:
        yield spec
    finally:
        REGIMES.unregister(spec.name)


def regimes() -> list[RegimeSpec]:
    """The registered regimes in display order (``order``, then name)."""
    load_regimes()
    return _registered()


def _registered() -> list[RegimeSpec]:
    return sorted((REGIMES.get(name) for name in REGIMES.names()), key=_display_key)


def regime_names() -> tuple[str, ...]:
    """The registered regimes' names in display order."""
    return tuple(spec.name for spec in regimes())


def regime_spec(name: str) -> RegimeSpec:
    """The spec of regime ``name``; an unknown name raises a ``KeyError`` listing the known."""
    load_regimes()
    return REGIMES.get(name)


def event_kinds() -> list[EventKind]:
    """Every registered regime's event kinds, in display order."""
    return [kind for spec in regimes() for kind in spec.event_kinds]


def event_kind_names() -> tuple[str, ...]:
    return tuple(kind.name for kind in event_kinds())


def event_kind_choices() -> list[tuple[str, str]]:
    """``(name, label)`` of every event kind, for Django ``choices`` (a callable, so a
    regime registered later counts too)."""
    return [(kind.name, kind.label) for kind in event_kinds()]


def regime_metrics() -> list[MetricInfo]:
    """Every registered regime's metrics, regime by regime in display order."""
    return [info for spec in regimes() for info in spec.metrics]


def regime_families() -> list[MetricFamily]:
    return [family for spec in regimes() for family in spec.families]


def section_names() -> tuple[str, ...]:
    """The regimes with a config section: their names are top-level run-config keys."""
    return tuple(spec.name for spec in regimes() if spec.config is not None)


def make_regime(config: RunConfig, learner: str, tokenizer_dirs: dict[str, Path]) -> Regime:
    """The regime of ``config`` for policy ``learner`` (imports its implementation)."""
    return regime_spec(config.regime).load()(config, learner, tokenizer_dirs)


def _display_key(spec: RegimeSpec) -> tuple[int, str]:
    return (spec.order, spec.name)
