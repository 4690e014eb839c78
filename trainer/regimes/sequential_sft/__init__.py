"""``sequential_sft``: sequential peer SFT, the Mutual RL paper's Figure 11 baseline: its
settings, metrics and events. The implementation is
:mod:`trainer.regimes.sequential_sft.regime`.

One run in two stages with continuous steps, as the paper ran it ("fine-tune on peer
successes after standalone RL"): steps 1 .. ``steps`` are the full standalone GRPO
schedule (the same batches, updates and metrics as a ``standalone`` run of the config and
seed) while each policy collects its peers' verified successes (as SGT sees them,
retokenized by THL) into a bounded buffer; then ``sft_steps`` extra steps, ``steps + 1``
.. ``steps + sft_steps``, fine-tune each policy offline on that buffer with an NLL only
(no policy-gradient term), from the RL-trained policy (``sft_from: "rl"``) or from the
base model (``"base"``). The run has :attr:`~trainer.config.RunConfig.total_steps` =
``steps + sft_steps`` steps, so its RL steps equal a standalone run's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainer.declarations import EventKind, RegimeSpec, register_regime
from trainer.metrics import SHARING, MetricInfo

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
SFT_FROM = ("rl", "base")
"""Where stage 2 starts: the RL-trained policy (the paper's) or the base model."""


@dataclass
class SequentialSFTConfig:
    """Sequential peer SFT: the full standalone GRPO schedule, then SFT on the peers'
    collected successes as extra steps."""

    sft_steps: int = field(
        default=20,
        metadata={
            "help": "SFT steps after the steps of standalone RL (stage 2: steps + 1 .. "
            "steps + sft_steps, so the run has steps + sft_steps steps in all; >= 1)",
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
    sft_from: str = field(
        default="rl",
        metadata={
            "help": "Where the SFT stage starts: rl (the paper's: the policy as standalone "
            "RL left it, its optimizer state kept) or base (the peer successes buffered "
            "during RL, fine-tuned into the policy's initial weights, those of its "
            "model before any RL step; its optimizer state fresh)",
            "label": "SFT starts from",
            "choices": SFT_FROM,
        },
    )

    def extra_steps(self) -> int:
        """The steps the run adds after its ``steps`` of RL (read by
        :attr:`trainer.config.RunConfig.total_steps` when this is the run's regime)."""
        return self.sft_steps

    def problems(self, run: RunConfig) -> dict[str, str]:
        """``sft_from`` names a start (checked whatever the run's regime, like the
        ranges: every run stores the section)."""
        if self.sft_from in SFT_FROM:
            return {}
        return {"sft_from": f"sft_from must be one of {', '.join(SFT_FROM)}; got {self.sft_from!r}"}


# Nothing to say instead of a transfer panel (no ``quiet_when``): every configuration
# logs transfers, in stage 2, one ``sft_sample`` event per (peer, prompt) trained on;
# stage 1 only collects, so the panel stays empty until stage 2 begins.
SPEC = register_regime(
    RegimeSpec(
        name=NAME,
        label="Sequential peer SFT",
        summary="Standalone GRPO for the run's steps while each policy collects its peers' "
        "verified successes (retokenized by THL); then sft_steps extra steps fine-tune on "
        "them with an NLL only.",
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
