"""Sharing regimes behind one registry; adding a regime is one module and one line here."""

from __future__ import annotations

from pathlib import Path

from trainer.config import RunConfig
from trainer.core import Registry
from trainer.regimes.base import Regime, RegimeStep
from trainer.regimes.prp import PRP
from trainer.regimes.sgt import SGT
from trainer.regimes.standalone import Standalone
from trainer.regimes.xgrpo import XGRPO

REGIMES: Registry[type[Regime]] = Registry("regime")
for regime_class in (Standalone, PRP, XGRPO, SGT):
    REGIMES.register(regime_class.name)(regime_class)


def make_regime(config: RunConfig, learner: str, tokenizer_dirs: dict[str, Path]) -> Regime:
    """The regime of ``config`` for policy ``learner``."""
    return REGIMES.get(config.regime)(config, learner, tokenizer_dirs)


__all__ = ["REGIMES", "Regime", "RegimeStep", "make_regime"]
