"""Real tiny zoo policies for the trainer tests, seeded, with the math reward; model and
tokenizer from the zoo folder: one with the regime tests' settings (group size 2, lr
1e-3), or a pool member of a run config as the config sets it. Both optimise the
objective the run config names, as a run's policies do."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from trainer.config import PolicyConfig, RunConfig
from trainer.policy import Policy
from trainer.tasks import get_reward


def zoo_policy(name: str, zoo_id: str, zoo_dir: Path, config: RunConfig) -> Policy:
    """Policy ``name`` on the zoo model ``zoo_id`` under ``config``'s GRPO settings."""
    model_dir = zoo_dir / zoo_id
    torch.manual_seed(0)
    return Policy(
        PolicyConfig(name=name, model=str(model_dir), group_size=2, lr=1e-3),
        config.grpo,
        model_dir=model_dir,
        tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
        objective=config.objective,
    )


def pool_member_policy(config: RunConfig, name: str, zoo_dir: Path) -> Policy:
    """Pool member ``name`` of ``config`` (a ``zoo:`` model), as its config sets it."""
    member = next(p for p in config.pool if p.name == name)
    model_dir = zoo_dir / member.model.removeprefix("zoo:")
    torch.manual_seed(0)
    return Policy(
        dataclasses.replace(member, model=str(model_dir)),
        config.grpo,
        model_dir=model_dir,
        tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
        objective=config.objective,
    )
