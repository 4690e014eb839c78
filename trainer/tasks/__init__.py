"""Tasks (problems with verifiable answers), their rewards, and :func:`make_task`."""

from __future__ import annotations

from trainer.config import RunConfig, TaskConfig, finished_only_applies
from trainer.tasks.addition_slices import AdditionSlicesTask
from trainer.tasks.arithmetic import ArithmeticTask
from trainer.tasks.base import Problem, Task
from trainer.tasks.loaders import FileTask, load_math_file, load_multiple_choice_file
from trainer.tasks.rewards import REWARDS, RewardFn, Scoring, get_reward

__all__ = [
    "REWARDS",
    "AdditionSlicesTask",
    "ArithmeticTask",
    "FileTask",
    "Problem",
    "RewardFn",
    "Scoring",
    "Task",
    "get_reward",
    "load_math_file",
    "load_multiple_choice_file",
    "make_task",
    "run_scoring",
    "task_reward_name",
]

FILE_TASK_REWARDS = {"math_file": "math", "multiple_choice_file": "multiple_choice"}
"""The reward (and so the loader) of each file-backed task kind."""


def make_task(config: TaskConfig, *, seed: int) -> Task:
    """The task a run config asks for, seeded with the run's seed."""
    if config.kind == "arithmetic":
        return ArithmeticTask(
            seed=seed, levels=tuple(config.levels), val_size=config.val_size, split=config.split
        )
    if config.kind == "addition_slices":
        return AdditionSlicesTask(seed=seed, val_size=config.val_size)
    if config.kind in FILE_TASK_REWARDS:
        if not config.train_path or not config.val_path:
            raise ValueError(f"a {config.kind} task needs both train_path and val_path")
        return FileTask(
            config.train_path,
            config.val_path,
            reward_name=FILE_TASK_REWARDS[config.kind],
            seed=seed,
            val_size=config.val_size,
        )
    known = ", ".join(["arithmetic", "addition_slices", *FILE_TASK_REWARDS])
    raise ValueError(f"unknown task kind {config.kind!r}; use one of {known}")


def task_reward_name(config: TaskConfig) -> str:
    """The name of the reward of the task ``config`` asks for (in :data:`REWARDS`): the
    file tasks' own, ``math`` for the generated ones."""
    return FILE_TASK_REWARDS.get(config.kind, "math")


def run_scoring(config: RunConfig) -> Scoring:
    """What counts as a correct response in this run: its task's reward, with
    ``task.finished_only`` resolved over the pool (:func:`trainer.config.finished_only_applies`:
    the same for every policy) and ``task.strict_format``."""
    return Scoring(
        reward=task_reward_name(config.task),
        finished_only=finished_only_applies(config),
        strict_format=config.task.strict_format,
    )
