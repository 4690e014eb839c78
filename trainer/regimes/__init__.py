"""Sharing regimes, each one package that declares itself (:mod:`trainer.regimes.spec`).

Importing this package registers the built-in regimes and needs no torch: the web app
reads their declarations. The implementations load on first use (:func:`make_regime`).
Adding a regime: a package ``trainer/regimes/<name>/`` whose ``__init__`` registers a
:class:`RegimeSpec`, an implementation module with its :class:`~trainer.regimes.base.Regime`,
and one import line below.
"""

from __future__ import annotations

from trainer.regimes import prp, sequential_sft, sgt, standalone, xgrpo
from trainer.regimes.spec import (
    REGIMES,
    EventKind,
    MetricFamily,
    RegimeSpec,
    event_kind_choices,
    event_kind_names,
    event_kinds,
    make_regime,
    regime_families,
    regime_metrics,
    regime_names,
    regime_spec,
    regimes,
    register_regime,
    registered,
    section_names,
)

BUILT_IN = (standalone.SPEC, prp.SPEC, xgrpo.SPEC, sgt.SPEC, sequential_sft.SPEC)

__all__ = [
    "BUILT_IN",
    "REGIMES",
    "EventKind",
    "MetricFamily",
    "RegimeSpec",
    "event_kind_choices",
    "event_kind_names",
    "event_kinds",
    "make_regime",
    "regime_families",
    "regime_metrics",
    "regime_names",
    "regime_spec",
    "regimes",
    "register_regime",
    "registered",
    "section_names",
]
