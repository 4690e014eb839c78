"""``xgrpo``: cross-policy advantage sharing (SPEC 4.2), value level.

Each policy trains only on its own rollouts, but the group baseline and scale of prompt
x come from every policy's rewards for x:
``A_i^m = (r_i^m - mean(r^all(x))) / (std(r^all(x)) + eps)`` (unbiased std, as GRPO's).
Only reward scalars cross.

Ablation (``xgrpo.random_perturbation``): nothing crosses; the own baseline is shifted
by Gaussian noise whose scale is the standard error of the own baseline,
``std(r^m(x)) / sqrt(G)`` — how much a baseline from other samples would differ.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from trainer.batch import LearnerBatch
from trainer.exchange import StepRecord
from trainer.policy import Policy, Rollouts
from trainer.regimes.base import Regime, RegimeStep
from trainer.regimes.xgrpo import ADVANTAGE_STATS_EVENT, BASELINE_SHIFT, POOLED_STD, XGRPOConfig
from trainer.spool import make_event

REWARDS_TOPIC = "rewards"


def pooled_advantages(
    own: torch.Tensor, peers: list[torch.Tensor], eps: float
) -> tuple[torch.Tensor, float, float]:
    """Advantages of ``own [G]`` against the pooled rewards of ``own`` and ``peers``.

    Returns ``(advantages [G], pooled mean, pooled std)``; an all-equal pool gives 0.
    """
    pooled = torch.cat([own, *peers])
    mean = pooled.mean()
    if bool((pooled == pooled[0]).all()):
        return torch.zeros_like(own), float(mean), 0.0
    std = pooled.std()
    return (own - mean) / (std + eps), float(mean), float(std)


def perturbed_advantages(
    own: torch.Tensor, eps: float, rng: random.Random
) -> tuple[torch.Tensor, float]:
    """Own-baseline advantages with the baseline shifted by matched-scale noise."""
    if bool((own == own[0]).all()):
        return torch.zeros_like(own), 0.0
    std = float(own.std())
    noise = rng.gauss(0.0, std / math.sqrt(len(own)))
    return (own - (float(own.mean()) + noise)) / (std + eps), abs(noise)


class XGRPO(Regime):
    settings: XGRPOConfig
    topics = {REWARDS_TOPIC: dict}

    def publish(self, policy: Policy, rollouts: Rollouts, step: int) -> dict[str, Any]:
        if self.settings.random_perturbation:
            return {}
        grouped = rollouts.rewards.view(-1, rollouts.group_size).tolist()
        return {REWARDS_TOPIC: {p.id: grouped[i] for i, p in enumerate(rollouts.problems)}}

    def learn(
        self, policy: Policy, rollouts: Rollouts, peers: list[StepRecord], step: int
    ) -> RegimeStep:
        eps = self.config.grpo.adv_eps
        grouped = rollouts.rewards.view(-1, rollouts.group_size)
        advantages, shifts, stds, events = [], [], [], []
        rng = self.rng(step, stream="xgrpo-noise")
        for index, problem in enumerate(rollouts.problems):
            own = grouped[index]
            if self.settings.random_perturbation:
                adv, shift = perturbed_advantages(own, eps, rng)
                std = float(own.std())
            else:
                received = [
                    (peer.policy, torch.tensor(peer.topics[REWARDS_TOPIC][problem.id]))
                    for peer in peers
                ]
                adv, mean, std = pooled_advantages(own, [r for _, r in received], eps)
                shift = abs(mean - float(own.mean()))
                events += [
                    make_event(
                        step, source, self.learner, ADVANTAGE_STATS_EVENT, problem.id, len(rewards)
                    )
                    for source, rewards in received
                ]
            advantages.append(adv)
            shifts.append(shift)
            stds.append(std)
        return RegimeStep(
            LearnerBatch.on_policy(rollouts, torch.cat(advantages)),
            events,
            {
                BASELINE_SHIFT: sum(shifts) / len(shifts),
                POOLED_STD: sum(stds) / len(stds),
            },
        )
