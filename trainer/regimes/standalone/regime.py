"""``standalone``: plain GRPO, nothing crosses between policies (the baseline)."""

from __future__ import annotations

from trainer.batch import LearnerBatch
from trainer.exchange import StepRecord
from trainer.policy import Policy, Rollouts
from trainer.regimes.base import Regime, RegimeStep


class Standalone(Regime):
    def learn(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> RegimeStep:
        return RegimeStep(LearnerBatch.on_policy(rollouts, policy.advantages(rollouts)))
