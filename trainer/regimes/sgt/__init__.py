"""``sgt``: Success-Gated Transfer (SPEC 4.3), outcome level: its settings, metrics and
events. The implementation is :mod:`trainer.regimes.sgt.regime`."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.declarations import EventKind, RegimeSpec, register_regime
from trainer.metrics import SHARING, MetricInfo

RESCUE_SET_SIZE = "sgt/rescue_set_size"
RESCUE_RATE = "sgt/rescue_rate"
"""Rescued prompts / prompts on which the learner failed all G rollouts (0 if none)."""
NLL = "sgt/nll"
"""Token-mean NLL of the rescued successes the learner trained on."""
SUCCESS_EVENT = "success"


@dataclass
class SGTConfig:
    """Success-Gated Transfer (SPEC 4.3): NLL on peers' successes where all own failed."""

    lambda_sgt: float = field(
        default=0.1,
        metadata={
            "help": "Weight of the auxiliary NLL (>= 0)",
            "label": "NLL weight (lambda)",
            "min": 0,
        },
    )
    k_sgt: int = field(
        default=1,
        metadata={
            "help": "Peer successes per rescue prompt (>= 1)",
            "label": "Peer successes (k)",
            "min": 1,
        },
    )


SPEC = register_regime(
    RegimeSpec(
        name="sgt",
        label="Success-Gated Transfer",
        summary="Where all of a policy's rollouts failed and a peer succeeded, the peer's "
        "success text is trained with an auxiliary NLL.",
        implementation="trainer.regimes.sgt.regime:SGT",
        order=3,
        colour="#009E73",
        config=SGTConfig,
        metrics=(
            MetricInfo(RESCUE_SET_SIZE, "SGT rescue-set size", "prompts", SHARING),
            MetricInfo(RESCUE_RATE, "SGT rescue rate", "", SHARING),
            MetricInfo(NLL, "SGT transfer NLL", "nats", SHARING),
        ),
        event_kinds=(EventKind(SUCCESS_EVENT, "rescued success (SGT)"),),
    )
)
