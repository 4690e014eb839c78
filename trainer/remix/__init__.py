"""ReMix off-policy reuse (SPEC 5): pure pieces here, the per-policy driver in
:mod:`trainer.remix.reuse` (imported by the run loop, not here: it needs the policy).

- :mod:`~trainer.remix.losses`: the step's objective settings; the mix-policy clipped
  surrogate, V-trace truncation and KL-convex constraint are pure functions of
  :mod:`trainer.core`, like the objective ``remix`` of :data:`trainer.core.OBJECTIVES`;
- :mod:`~trainer.remix.schedule`: lambda(t) and the reincarnation step;
- :mod:`~trainer.remix.replay`: the replay of the last N policy versions;
- :mod:`~trainer.remix.diagnostics`: self-reflection rate, rollout/token consumption.
"""

from trainer.remix.diagnostics import Consumption, has_reflection, self_reflection_rate
from trainer.remix.losses import RemixObjective
from trainer.remix.replay import ReplayBuffer, ReplaySample
from trainer.remix.schedule import kl_lambda, reincarnates_after

__all__ = [
    "Consumption",
    "RemixObjective",
    "ReplayBuffer",
    "ReplaySample",
    "has_reflection",
    "kl_lambda",
    "reincarnates_after",
    "self_reflection_rate",
]
