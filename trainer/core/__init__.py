"""Pure tensor algorithms of the trainer (GRPO advantages and losses), behind registries.

The trainer looks algorithms up by the names the run config carries
(``ADVANTAGE_ESTIMATORS.get("grpo")``, ``aggregate(..., mode="token-mean")``) and calls
them with keyword arguments; see SPEC section 3.
"""

from trainer.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    grpo_advantages,
    grpo_advantages_from_groups,
)
from trainer.core.losses import (
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    PolicyLossOutput,
    aggregate,
    clipped_surrogate,
    entropy_from_logits,
    kl_k3,
    policy_loss,
    seq_mean_token_mean,
    sft_nll_sum,
    token_log_probs,
    token_mean,
)
from trainer.core.registry import Registry, UnknownNameError

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "PolicyLossOutput",
    "Registry",
    "UnknownNameError",
    "aggregate",
    "clipped_surrogate",
    "entropy_from_logits",
    "grpo_advantages",
    "grpo_advantages_from_groups",
    "kl_k3",
    "policy_loss",
    "seq_mean_token_mean",
    "sft_nll_sum",
    "token_log_probs",
    "token_mean",
]
