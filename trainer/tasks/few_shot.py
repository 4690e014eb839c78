"""The prompt context of a run: its task config's system prompt and worked examples.

The ``few_shot`` examples are the first problems of the train stream's step 0, a batch no
RL step draws (steps count from 1): drawn from the training data only, so a validation
problem is never shown (every task keeps its validation set out of its train stream,
:class:`~trainer.tasks.base.Task`), the same for every step and every policy of the run
(one shared prefix), and fixed by the run's seed. Each example's answer is written the
way a correct policy answers, ``\\boxed{answer}``.
"""

from __future__ import annotations

from typing import Any

from trainer.chat import PromptContext, format_prompt
from trainer.config import TaskConfig
from trainer.tasks.arithmetic import boxed
from trainer.tasks.base import Problem, Task

FEW_SHOT_STEP = 0
"""The train-stream step the examples come from (runs train from step 1)."""


def worked_answer(problem: Problem) -> str:
    """The assistant turn of a worked example: ``\\boxed{85}``."""
    return boxed(problem.answer)


def few_shot_examples(task: Task, count: int) -> list[Problem]:
    """The ``count`` worked examples of a run of ``task`` (none when 0)."""
    return task.train_batch(FEW_SHOT_STEP, count) if count > 0 else []


def prompt_context(config: TaskConfig, task: Task) -> PromptContext:
    """The system prompt and worked examples ``config`` asks for, from ``task``."""
    examples = few_shot_examples(task, config.few_shot)
    return PromptContext(
        system_prompt=config.system_prompt,
        examples=tuple((p.prompt, worked_answer(p)) for p in examples),
    )


def longest_prompt_tokens(
    config: TaskConfig,
    task: Task,
    tokenizer: Any,
    *,
    chat_template: str | None = None,
    problems: int = 16,
) -> int:
    """The token length of the longest of the first ``problems`` train prompts (step 1,
    the first a run draws) and of the validation prompts, each after ``config``'s system
    prompt and worked examples in ``tokenizer``'s chat template (``chat_template``
    overrides it), tokenized as the rollout engine does (no special tokens added).

    A check before launch (the compose form), which samples the prompts, not every step's:
    the rollout engine refuses any prompt past the window when it meets it
    (:func:`trainer.rollout.engine.context_overflow`)."""
    context = prompt_context(config, task)
    sample = task.train_batch(FEW_SHOT_STEP + 1, problems) + list(task.validation())[:problems]
    return max(
        len(
            tokenizer.encode(
                format_prompt(tokenizer, p.prompt, chat_template, context), add_special_tokens=False
            )
        )
        for p in sample
    )
