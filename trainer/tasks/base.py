"""What every task gives the trainer: problems with verifiable answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Problem:
    """One prompt with its reference answer.

    ``prompt`` is the user message (the chat template is applied later, per policy);
    ``answer`` is what the reward compares against (e.g. ``"46"`` or ``"B"``);
    ``skill`` names what it exercises (``"addition"``; empty when the task has no skills):
    validation reports ``val/reward@1/<skill>`` per skill when there are several;
    ``task`` is the task kind that made it where that kind reports validation metrics of
    its own from the answers (:data:`trainer.tasks.task_metrics.TASK_VALIDATION_METRICS`),
    empty otherwise; ``operands`` are the numbers of its expression where such a task
    grades the answers by them (``(47, 38)`` for ``47+38`` on ``addition_slices``).
    """

    id: str
    prompt: str
    answer: str
    difficulty: int = 0
    skill: str = ""
    task: str = ""
    operands: tuple[int, ...] = ()


class Task(Protocol):
    """A seeded source of problems: a train stream and a fixed held-out validation set."""

    reward_name: str
    """Name of the reward in :data:`trainer.tasks.rewards.REWARDS`."""

    def train_batch(self, step: int, size: int) -> list[Problem]:
        """The ``size`` problems of training step ``step``; the same for every call."""
        ...

    def validation(self) -> list[Problem]:
        """The held-out problems; none of them ever appears in the train stream."""
        ...
