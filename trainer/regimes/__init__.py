"""The built-in sharing regimes, each one package that declares itself.

Importing this package registers them (:func:`trainer.declarations.load_regimes` does, on
the registry's first use) and needs no torch: the web app reads their declarations. The
implementations load on first use (:func:`make_regime`). The declarations and the
registry live in :mod:`trainer.declarations`, re-exported here for convenience. Adding a
built-in regime: a package ``trainer/regimes/<name>/`` whose ``__init__`` registers a
:class:`RegimeSpec`, an implementation module with its :class:`~trainer.regimes.base.Regime`,
and one import line below; a regime of another package registers through the entry-point
group :data:`trainer.declarations.ENTRY_POINT_GROUP`.
"""

from __future__ import annotations

from trainer.declarations import (
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
from trainer.regimes import prp, sequential_sft, sgt, standalone, xgrpo

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
