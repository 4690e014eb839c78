"""Pure tensor algorithms of the trainer (advantages, loss terms, objectives), behind registries.

The trainer looks algorithms up by the names the run config carries
(``ADVANTAGE_ESTIMATORS.get("grpo")``, ``OBJECTIVES.get("remix")``,
``aggregate(..., mode="token-mean")``) and calls them with keyword arguments; see SPEC
sections 3-5. Where is each loss term: :mod:`trainer.core.losses` (the clipped surrogate
of GRPO and ReMix, the KL terms, SGT's NLL); the objectives that combine them:
:mod:`trainer.core.objectives`.
"""

from trainer.core.advantages import (
    ADVANTAGE_ESTIMATORS,
    grpo_advantages,
    grpo_advantages_from_groups,
)
from trainer.core.losses import (
    AUX_LOSSES,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    AuxLoss,
    Surrogate,
    aggregate,
    clipped_surrogate,
    entropy_from_logits,
    kl_convex,
    kl_k3,
    kl_to_reference,
    mix_policy_surrogate,
    seq_mean_token_mean,
    sft_nll_sum,
    token_log_probs,
    token_log_probs_and_entropy,
    token_mean,
    vtrace_truncation,
)
from trainer.core.objectives import (
    OBJECTIVE_NEEDS,
    OBJECTIVES,
    Objective,
    ObjectiveInputs,
    ObjectiveNeeds,
    ObjectiveOutput,
    ObjectiveSettings,
    TokenStat,
    grpo_loss,
    objective_needs,
    remix_loss,
)
from trainer.registry import Registry, UnknownNameError

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AUX_LOSSES",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "OBJECTIVES",
    "OBJECTIVE_NEEDS",
    "AuxLoss",
    "Objective",
    "ObjectiveInputs",
    "ObjectiveNeeds",
    "ObjectiveOutput",
    "ObjectiveSettings",
    "Registry",
    "Surrogate",
    "TokenStat",
    "UnknownNameError",
    "aggregate",
    "clipped_surrogate",
    "entropy_from_logits",
    "grpo_advantages",
    "grpo_advantages_from_groups",
    "grpo_loss",
    "kl_convex",
    "kl_k3",
    "kl_to_reference",
    "mix_policy_surrogate",
    "objective_needs",
    "remix_loss",
    "seq_mean_token_mean",
    "sft_nll_sum",
    "token_log_probs",
    "token_log_probs_and_entropy",
    "token_mean",
    "vtrace_truncation",
]
