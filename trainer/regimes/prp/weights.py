"""PRP's truncated importance weights on peer tokens (SPEC 4.1): where they are computed.

A peer rollout's tokens are off-policy for the learner m: their surrogate is m's own ratio
``pi_theta / pi_old_m`` times ``w_t = min(pi_old_m(t) / mu_peer(t), c_bar)``, where
``mu_peer`` is the peer's behaviour log-prob moved onto m's tokens by THL.

- :func:`truncated_importance_weights`: ``w_t`` of tensors of log-probs;
- :func:`truncated_is_weights`: the same of one sample's lists (the weights read before
  the update, with a forward of their own);
- :class:`ImportanceWeights`: the batch hook (:class:`trainer.batch.BatchHook`) with which
  the update weighs the peer tokens from the ``log pi_old`` it has in hand, so the learner
  runs no forward of its own for them: in a single pass over one mini-batch its own
  forward's detached log-probs (at each micro-batch), else the no-grad forward that
  scores every sample's old log-probs (once, before the first optimizer step). It then
  writes the weights into the batch's ``token_weights``, where the step's events and
  metrics read them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from trainer.batch import BatchHook, LearnerBatch, UpdateTensors, scatter_per_token
from trainer.core import ObjectiveInputs


def truncated_importance_weights(
    learner_logp: torch.Tensor, behaviour_logp: torch.Tensor, c_bar: float
) -> torch.Tensor:
    """PRP's truncated importance weights ``w_t = min(pi_old(t) / mu(t), c_bar)`` per token
    (SPEC 4.1), from the log-probs: ``min(exp(min(log pi_old - log mu, 50)), c_bar)`` (the
    log-ratio bounded so that ``exp`` stays finite; ``c_bar`` bounds it far lower)."""
    return torch.clamp(torch.exp(torch.clamp(learner_logp - behaviour_logp, max=50.0)), max=c_bar)


def truncated_is_weights(
    learner_logp: list[float], behaviour_logp: list[float], c_bar: float, correction: bool
) -> list[float]:
    """``w_t = min(pi_old_m(t) / mu_peer(t), c_bar)`` per token, or 1 without correction."""
    if not correction:
        return [1.0] * len(learner_logp)
    return [
        min(math.exp(min(old - mu, 50.0)), c_bar)
        for old, mu in zip(learner_logp, behaviour_logp, strict=True)
    ]


class ImportanceWeights(BatchHook):
    """The update's hook that weighs the peer tokens: ``mu[i]`` is, for peer sample ``i``
    of the batch, the peer's behaviour log-prob of each of its response tokens (None for
    the learner's own samples).

    The samples it weighs are those whose ``token_weights`` the batch does not give yet
    (:meth:`pending`: none once the update, or the regime reading its metrics first, has
    written them). The weights multiply the surrogate like any given ``token_weights``.
    """

    def __init__(self, mu: Sequence[list[float] | None], c_bar: float) -> None:
        self.mu = list(mu)
        self.c_bar = c_bar
        self._rows: list[int] = []
        self._mask: torch.Tensor | None = None
        self._mu: torch.Tensor | None = None
        self._per_micro_batch = False

    def pending(self, batch: LearnerBatch) -> list[int]:
        """The samples of ``batch`` whose weights the update computes: ``mu`` given,
        ``token_weights`` not yet."""
        weights = list(batch.token_weights) or [None] * len(batch)
        return [
            row
            for row, (mu, given) in enumerate(zip(self.mu, weights, strict=False))
            if mu is not None and given is None
        ]

    def prepare(self, update: UpdateTensors) -> None:
        """``mask`` (``[N, L-1]``) true on the pending samples' response tokens and ``mu``
        there; the weights written now against ``update.old_logp`` when the update has
        it, else at each micro-batch from its forward."""
        self._rows = self.pending(update.batch)
        if not self._rows:
            self._mask = self._mu = None
            return
        n = len(update.batch)
        response_mask = update.response_mask
        wanted = set(self._rows)
        given = [mu if row in wanted else None for row, mu in enumerate(self.mu)]
        self._mu = scatter_per_token(
            torch.zeros_like(response_mask, dtype=torch.float32),
            given + [None] * (n - len(given)),
            response_mask,
            "behaviour log-probs",
        )
        rows = torch.zeros(n, dtype=torch.bool, device=response_mask.device)
        rows[self._rows] = True
        self._mask = rows[:, None] & response_mask.bool()
        weights = update.weights()
        self._per_micro_batch = update.old_logp is None
        if update.old_logp is not None:  # in hand before the update: weigh now
            _weigh(weights, update.old_logp, self._mask, self._mu, self.c_bar)

    def micro_batch(
        self, rows: slice, columns: slice, logp: torch.Tensor, inputs: ObjectiveInputs
    ) -> None:
        """In a single pass without old log-probs: the micro-batch's weights against its
        forward's detached log-probs (its ratio's denominator too), written into the
        objective's ``token_weights`` before the objective reads them."""
        if not self._per_micro_batch or self._mask is None or self._mu is None:
            return
        assert inputs.token_weights is not None
        _weigh(
            inputs.token_weights,
            logp,
            self._mask[rows, columns],
            self._mu[rows, columns],
            self.c_bar,
        )

    def finish(self, update: UpdateTensors) -> dict[str, float]:
        """The weights the update used, per pending sample, into the batch's
        ``token_weights``."""
        if self._mask is None:
            return {}
        batch = update.batch
        assert update.token_weights is not None
        if not batch.token_weights:
            batch.token_weights = [None] * len(batch)
        for row in self._rows:
            batch.token_weights[row] = update.token_weights[row][
                update.response_mask[row].bool()
            ].tolist()
        self._mask = self._mu = None
        self._per_micro_batch = False
        return {}


def _weigh(
    token_weights: torch.Tensor,
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    mu: torch.Tensor,
    c_bar: float,
) -> None:
    """Write ``min(pi_old / mu, c_bar)`` against ``old_logp`` (``log pi_old``, the shape
    of ``token_weights``) into ``token_weights`` (in place) where ``mask`` is true."""
    weights = truncated_importance_weights(old_logp, mu, c_bar).to(token_weights.dtype)
    token_weights.copy_(torch.where(mask, weights, token_weights))
