"""``xgrpo``: cross-policy advantage sharing (SPEC 4.2), value level: its settings,
metrics and events. The implementation is :mod:`trainer.regimes.xgrpo.regime`."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.declarations import EventKind, RegimeSpec, register_regime
from trainer.metrics import SHARING, MetricInfo

BASELINE_SHIFT = "xgrpo/baseline_shift_mean"
"""Mean |pooled baseline - own baseline| over the step's prompts (ablation: |noise|)."""
POOLED_STD = "xgrpo/pooled_std_mean"
ADVANTAGE_STATS_EVENT = "advantage_stats"


@dataclass
class XGRPOConfig:
    """Cross-policy advantage sharing (SPEC 4.2): a pooled group baseline."""

    random_perturbation: bool = field(
        default=False,
        metadata={"help": "Ablation: own baseline plus noise of matched scale, no sharing"},
    )


def _ablation_note(settings: XGRPOConfig) -> str | None:
    if settings.random_perturbation:
        return (
            "XGRPO with random perturbation (the ablation): policies share no experience, "
            "so there are no transfers."
        )
    return None


SPEC = register_regime(
    RegimeSpec(
        name="xgrpo",
        label="Cross-policy GRPO",
        summary="Each policy trains on its own rollouts against a group baseline pooled "
        "from every policy's rewards; only reward scalars cross.",
        implementation="trainer.regimes.xgrpo.regime:XGRPO",
        order=2,
        colour="#56B4E9",
        config=XGRPOConfig,
        metrics=(
            MetricInfo(BASELINE_SHIFT, "XGRPO baseline shift (mean)", "", SHARING),
            MetricInfo(POOLED_STD, "XGRPO pooled std (mean)", "", SHARING),
        ),
        event_kinds=(
            EventKind(
                ADVANTAGE_STATS_EVENT,
                "reward statistics (XGRPO)",
                no_text="Only reward statistics crossed (a group baseline), no text: "
                "nothing more to show.",
            ),
        ),
        quiet_when=_ablation_note,
    )
)
