"""``sequential_sft``: sequential peer SFT, the Mutual RL paper's Figure 11 baseline: its
settings, metrics and events. The implementation is
:mod:`trainer.regimes.sequential_sft.regime`.

One run in two stages with continuous steps: the first ``steps - sft_steps`` steps are
standalone GRPO while each policy collects its peers' verified successes (as SGT sees
them, retokenized by THL) into a bounded buffer; the last ``sft_steps`` steps fine-tune
each policy offline on that buffer with an NLL only (no policy-gradient term).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainer.metrics import SHARING, MetricInfo
from trainer.regimes.spec import EventKind, RegimeSpec, register_regime

if TYPE_CHECKING:
    from trainer.config import RunConfig

NAME = "sequential_sft"
STAGE = "sequential_sft/stage"
"""1 while the policy trains with GRPO and collects, 2 while it fine-tunes on the buffer."""
BUFFER_SIZE = "sequential_sft/buffer_size"
"""Peer successes held in the learner's buffer after the step."""
BUFFERED = "sequential_sft/buffered"
"""Peer successes that entered the buffer this step (stage 1; 0 in stage 2)."""
SAMPLES = "sequential_sft/samples"
"""Buffered peer successes the learner trained on this step (0 in stage 1)."""
NLL = "sequential_sft/nll"
"""Token-mean NLL of the buffered peer successes trained on this step (stage 2; 0 when
the buffer was empty)."""
SAMPLE_EVENT = "sft_sample"


@dataclass
class SequentialSFTConfig:
    """Sequential peer SFT: standalone GRPO, then SFT on the peers' collected successes."""

    sft_steps: int = field(
        default=20,
        metadata={
            "help": "How many of the run's last steps fine-tune on the peers' successes "
            "(stage 2; >= 1 and < steps)",
            "label": "SFT steps",
            "min": 1,
        },
    )
    sft_epochs: int = field(
        default=2,
        metadata={
            "help": "Passes over the buffer, spread evenly over the SFT steps (>= 1)",
            "label": "SFT epochs",
            "min": 1,
        },
    )
    lambda_sft: float = field(
        default=1.0,
        metadata={
            "help": "Weight of the NLL on the peers' successes (> 0)",
            "label": "NLL weight (lambda)",
            "min": 0,
            "min_open": True,
        },
    )
    max_buffer: int = field(
        default=4096,
        metadata={
            "help": "Peer successes kept per policy (>= 1; the oldest go first)",
            "label": "Buffer size",
            "min": 1,
        },
    )

    def problems(self, run: RunConfig) -> dict[str, str]:
        """Stage 1 needs at least one step: ``sft_steps < steps``. Checked only when this
        is the run's regime (every run stores the section); the range is the field's."""
        if run.regime != NAME or self.sft_steps < 1 or self.sft_steps < run.steps:
            return {}
        fix = f"raise steps to at least {self.sft_steps + 1}"
        if run.steps > 1:
            fix = f"use sft_steps <= {run.steps - 1}, or {fix}"
        return {
            "sft_steps": f"sft_steps ({self.sft_steps}) must be less than steps "
            f"({run.steps}): stage 1 (GRPO while collecting the peers' successes) needs at "
            f"least one step; {fix}"
        }


# Nothing to say instead of a transfer panel (no ``quiet_when``): every configuration
# logs transfers, in stage 2, one ``sft_sample`` event per (peer, prompt) trained on;
# stage 1 only collects, so the panel stays empty until stage 2 begins.
SPEC = register_regime(
    RegimeSpec(
        name=NAME,
        label="Sequential peer SFT",
        summary="Standalone GRPO while each policy collects its peers' verified successes "
        "(retokenized by THL); the last sft_steps steps fine-tune on them with an NLL only.",
        implementation="trainer.regimes.sequential_sft.regime:SequentialSFT",
        order=4,
        colour="#D55E00",
        config=SequentialSFTConfig,
        metrics=(
            MetricInfo(STAGE, "Sequential SFT stage", "", SHARING),
            MetricInfo(BUFFER_SIZE, "Sequential SFT buffer size", "samples", SHARING),
            MetricInfo(BUFFERED, "Sequential SFT samples buffered", "samples", SHARING),
            MetricInfo(SAMPLES, "Sequential SFT samples trained", "samples", SHARING),
            MetricInfo(NLL, "Sequential SFT NLL", "nats", SHARING),
        ),
        event_kinds=(EventKind(SAMPLE_EVENT, "buffered peer success trained on (sequential SFT)"),),
    )
)
