"""``prp``: Peer Rollout Pooling (SPEC 4.1), data level: its settings, metrics and events.

The implementation is :mod:`trainer.regimes.prp.regime`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainer.declarations import EventKind, MetricFamily, RegimeSpec, register_regime
from trainer.metrics import SHARING, MetricInfo

IS_WEIGHT_MEAN = "prp/is_weight_mean"
"""Mean truncated importance weight over the peer tokens the learner trained on."""
IS_WEIGHT_MEAN_ANSWER = "prp/is_weight_mean/answer"
"""Mean truncated importance weight over the peer tokens that hold the answer's digits
(inside the last ``\\boxed{...}``: :func:`trainer.regimes.prp.answer.answer_digit_positions`),
without the format tokens around them."""
IS_WEIGHT_CLIPPED_FRAC = "prp/is_weight_clipped_frac"
"""Share of peer tokens whose weight was truncated at c_bar."""
PEER_SAMPLES = "prp/peer_samples"
ROLLOUT_EVENT = "rollout"


@dataclass
class PRPConfig:
    """Peer Rollout Pooling (SPEC 4.1): peers' rollouts join the learner's group."""

    k_peer: int = field(
        default=4,
        metadata={
            "help": "Peer rollouts added per prompt (>= 1)",
            "label": "Peer rollouts (k)",
            "min": 1,
        },
    )
    is_correction: bool = field(
        default=True,
        metadata={
            "help": "Truncated importance weights on peer tokens; false = naive pooling",
            "label": "Importance-weight correction",
        },
    )
    c_bar: float = field(
        default=1.0,
        metadata={
            "help": "Truncation of the IS weight (> 0)",
            "label": "Truncation (c_bar)",
            "min": 0,
            "min_open": True,
        },
    )


SPEC = register_regime(
    RegimeSpec(
        name="prp",
        label="Peer Rollout Pooling",
        summary="Peers' rollouts join the learner's group, retokenized by THL, with "
        "truncated importance weights on their tokens.",
        implementation="trainer.regimes.prp.regime:PRP",
        order=1,
        colour="#E69F00",
        config=PRPConfig,
        metrics=(
            MetricInfo(IS_WEIGHT_MEAN, "PRP importance weight (mean)", "", SHARING),
            MetricInfo(
                IS_WEIGHT_MEAN_ANSWER, "PRP importance weight (mean) · answer digits", "", SHARING
            ),
            MetricInfo(IS_WEIGHT_CLIPPED_FRAC, "PRP clipped-weight fraction", "", SHARING),
            MetricInfo(PEER_SAMPLES, "PRP peer samples", "samples", SHARING),
        ),
        # The mean weight per skill of the prompt, when the step's prompts span several
        # skills: prp/is_weight_mean/addition, ...; and over the answer's digit tokens
        # alone: prp/is_weight_mean/answer/addition, ... ("answer" is no skill: its key is
        # the catalogue's own entry, which comes before the families).
        families=(
            MetricFamily(
                re.compile(r"prp/is_weight_mean/(?P<skill>[a-z0-9_]+)"),
                "PRP importance weight (mean) · {skill}",
                "",
                SHARING,
            ),
            MetricFamily(
                re.compile(r"prp/is_weight_mean/answer/(?P<skill>[a-z0-9_]+)"),
                "PRP importance weight (mean) · answer digits · {skill}",
                "",
                SHARING,
            ),
        ),
        event_kinds=(EventKind(ROLLOUT_EVENT, "peer rollout (PRP)"),),
    )
)
