"""ReMix's objective (SPEC 5): the step's settings here, the loss itself in
:mod:`trainer.core` with every other loss term.

- :func:`trainer.core.mix_policy_surrogate`: the mix-policy clipped surrogate (the one
  clipped-surrogate body of :func:`trainer.core.clipped_surrogate`, with the clip range
  centred on ``q_t = pi_k / pi_{k-i}`` and V-trace-truncated advantages,
  :func:`trainer.core.vtrace_truncation`);
- :func:`trainer.core.kl_convex`: the KL-convex constraint;
- :func:`trainer.core.remix_loss`: the objective ``remix`` of
  :data:`trainer.core.OBJECTIVES` that combines them.

Three log-prob tensors describe each token:

- ``logp``: ``log pi_theta``, the policy being optimised (with gradient);
- ``behaviour_logp``: ``log pi_{k-i}``, the version that sampled the token (``i = 0`` for
  a fresh sample, whose behaviour policy is ``pi_k``);
- ``current_logp`` (the objective's ``old_logp``): ``log pi_k``, the policy at the start
  of this step, before any of the batch's updates (no gradient). For a fresh sample it
  *is* its behaviour log-prob.

``pi_prev`` of the KL-convex constraint is ``pi_k`` too: "the previous policy" is the one
the batch's updates started from, i.e. the behaviour policy of the fresh samples. So the
``(1 - lambda)`` term keeps the UTD's ``m`` updates close to where the step began, while
``lambda`` keeps the whole run close to the base (reference) policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.batch import Update


@dataclass(frozen=True)
class RemixObjective:
    """What a ReMix step asks of the policy update besides the GRPO settings."""

    kl_lambda: float
    """lambda(t) of this step."""
    c_bar: float
    updates_per_batch: int
    """m: passes of updates over the batch (each split into ``grpo.mini_batches``)."""

    def update(self, objective: str = "remix") -> Update:
        """The step's :class:`~trainer.batch.Update`: ``objective`` (the run config's)
        with ``c_bar`` and ``kl_lambda`` set, ``updates_per_batch`` passes."""
        return Update(
            objective=objective,
            settings={"c_bar": self.c_bar, "kl_lambda": self.kl_lambda},
            passes=self.updates_per_batch,
        )
