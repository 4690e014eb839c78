"""A real tiny zoo policy for the regime tests: seeded, group size 2, lr 1e-3, the math
reward; model and tokenizer from the zoo folder."""

from __future__ import annotations

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
    )
