"""The KL-convex weight schedule lambda(t) and the reincarnation rule (SPEC 5), pure."""

from __future__ import annotations

import math


def kl_lambda(
    step: int, *, start: int = 50, decay: float = 0.1, every: int = 10, floor: float = 0.5
) -> float:
    """``lambda(t) = max(1 - decay * ceil(max(t - start, 0) / every), floor)``.

    The weight of ``KL(pi_theta || pi_base)`` in the KL-convex constraint (``1 - lambda``
    goes to ``KL(pi_theta || pi_prev)``). ``t`` is the training step (the run's step
    number, 1 for the first update). With the SPEC's constants: 1 up to step 50, 0.9 for
    steps 51-60, 0.8 for 61-70, ..., and 0.5 from step 91 on.
    """
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    decrements = math.ceil(max(step - start, 0) / every)
    return max(1.0 - decay * decrements, floor)


def reincarnates_after(step: int, reincarnation_step: int | None) -> bool:
    """True when policy reincarnation happens at the end of ``step`` (step ``T``).

    Steps ``1..T`` train with ReMix; at the end of step ``T`` the reference becomes the
    current policy and the replay is dropped; steps after ``T`` are plain on-policy GRPO.
    ``None`` never reincarnates.
    """
    return reincarnation_step is not None and step == reincarnation_step
