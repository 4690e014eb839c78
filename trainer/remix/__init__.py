"""ReMix off-policy reuse (SPEC 5): pure pieces here, the per-policy driver in
:mod:`trainer.remix.reuse` (imported by the run loop, not here: it needs the policy).

- :mod:`~trainer.remix.losses`: mix-policy clipped surrogate, V-trace truncation,
  KL-convex constraint;
- :mod:`~trainer.remix.schedule`: lambda(t) and the reincarnation step;
- :mod:`~trainer.remix.replay`: the replay of the last N policy versions;
- :mod:`~trainer.remix.diagnostics`: self-reflection rate, rollout/token consumption.
"""

from trainer.remix.diagnostics import Consumption, has_reflection, self_reflection_rate
from trainer.remix.losses import (
    MixSurrogate,
    RemixLossOutput,
    RemixObjective,
    kl_convex,
    mix_policy_surrogate,
    remix_policy_loss,
    vtrace_truncation,
)
from trainer.remix.replay import ReplayBuffer, ReplaySample
from trainer.remix.schedule import kl_lambda, reincarnates_after

__all__ = [
    "Consumption",
    "MixSurrogate",
    "RemixLossOutput",
    "RemixObjective",
    "ReplayBuffer",
    "ReplaySample",
    "has_reflection",
    "kl_convex",
    "kl_lambda",
    "mix_policy_surrogate",
    "reincarnates_after",
    "remix_policy_loss",
    "self_reflection_rate",
    "vtrace_truncation",
]
