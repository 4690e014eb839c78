"""The interface every sharing regime implements (SPEC section 4).

A regime is a strategy with two hooks around the Shared Experience Exchange:

1. :meth:`Regime.publish` — after its rollouts, a policy publishes typed topics (only
   what the regime needs crosses processes; the exchange rejects undeclared topics);
2. :meth:`Regime.learn` — with the peers' publications in hand, it assembles the
   :class:`~trainer.batch.LearnerBatch` its policy trains on, the transfer events of
   every crossing, and the regime's metrics.

A regime's declaration (name, settings, metrics, event kinds, label, colour) is its
:class:`~trainer.declarations.RegimeSpec`; the spec names this class's subclass.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from trainer.batch import LearnerBatch
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Policy, Rollouts
from trainer.spool import Event


@dataclass
class RegimeStep:
    """What a regime hands back for one policy at one step."""

    batch: LearnerBatch
    events: list[Event] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


class Regime(ABC):
    """A sharing regime, instantiated once per policy worker.

    Its name is declared once, in its :class:`~trainer.declarations.RegimeSpec`: an
    instance is built for a run config of that regime (:func:`make_regime`) and reads
    its name there (:attr:`name`)."""

    settings: Any
    """Its section of the run config (``config.section(name)``; None without settings)."""
    topics: ClassVar[dict[str, type]] = {}
    """Topic name -> payload type that this regime publishes through the exchange."""

    def __init__(
        self, config: RunConfig, learner: str, tokenizer_dirs: dict[str, Path] | None = None
    ) -> None:
        self.config = config
        self.learner = learner
        self.settings = config.sections.get(config.regime)
        self.tokenizer_dirs = dict(tokenizer_dirs or {})
        """Every pool policy's tokenizer directory, for regimes that decode peers' ids."""

    @property
    def name(self) -> str:
        """The regime's name: the run config's ``regime`` (its spec's ``name``)."""
        return self.config.regime

    def rng(self, step: int, *parts: object, stream: str = "") -> random.Random:
        """A random generator seeded from the run seed, this step, the learner and
        ``parts`` (e.g. a prompt id), under ``stream`` (default: the regime's name).

        The same on every run of the same seed and on a resumed run (its seed is a
        string, hashed by SHA-512 inside ``random``: never Python's salted ``hash()``), and
        independent between learners, steps and streams. Use it for every random choice a
        regime makes, so that exact resume holds.
        """
        key = "-".join(
            str(part)
            for part in (stream or self.name, self.config.seed, step, self.learner, *parts)
        )
        return random.Random(key)

    def publish(self, policy: Policy, rollouts: Rollouts, step: int) -> dict[str, Any]:
        """The topics this policy publishes at ``step`` (default: nothing)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What the regime must keep across a resume, saved with each checkpoint
        (default: nothing; ``sequential_sft`` keeps its buffer of peer successes)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (default: there is nothing to restore)."""
        if state:
            raise ValueError(f"regime {self.name!r} keeps no state; got {sorted(state)}")

    @abstractmethod
    def learn(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> RegimeStep:
        """The batch to train on, given the other policies' records of this step."""
