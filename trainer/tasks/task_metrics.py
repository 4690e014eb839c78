"""Validation metrics a task adds from its answers, looked up by the problems' task kind.

A policy's validation (:meth:`trainer.policy.Policy.validation_metrics`) knows rewards
and skills only. A task that reads more from the answers (which error each wrong answer
makes) tags its problems with its kind (:attr:`Problem.task`) and registers a function
here; the policy hands it the problems of that kind with their greedy completions and
rewards, and logs what it returns beside ``val/reward@1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from trainer.tasks import addition_errors
from trainer.tasks.addition_slices import TASK_KIND as ADDITION_SLICES
from trainer.tasks.base import Problem

TaskMetricsFn = Callable[[Sequence[Problem], Sequence[str], Sequence[float]], dict[str, float]]
"""``(problems, completions, rewards) -> metrics``: one greedy completion and its reward
per problem, in order."""

TASK_VALIDATION_METRICS: Mapping[str, TaskMetricsFn] = MappingProxyType(
    {ADDITION_SLICES: addition_errors.validation_metrics}
)
"""Per task kind, the function of its own validation metrics."""


def task_validation_metrics(
    problems: Sequence[Problem], completions: Sequence[str], rewards: Sequence[float]
) -> dict[str, float]:
    """What the tasks of ``problems`` add to their validation metrics: each registered
    kind's function on its own problems (in their order); nothing for untagged problems
    or kinds with no function."""
    if not len(problems) == len(completions) == len(rewards):
        raise ValueError(
            f"{len(problems)} problems, {len(completions)} completions, {len(rewards)} rewards"
        )
    by_kind: dict[str, list[int]] = {}
    for index, problem in enumerate(problems):
        if problem.task in TASK_VALIDATION_METRICS:
            by_kind.setdefault(problem.task, []).append(index)
    metrics: dict[str, float] = {}
    for kind, indices in by_kind.items():
        metrics |= TASK_VALIDATION_METRICS[kind](
            [problems[i] for i in indices],
            [completions[i] for i in indices],
            [rewards[i] for i in indices],
        )
    return metrics
