"""The text of a transfer's prompt, for the run page's transfer detail.

A transfer event stores the prompt's id only (the wire's ``prompt_id``; the trainer ships
the responses that crossed, not the prompt). The text is resolved from what the run
stores: its config names the task and the seed, and a task is a seeded, deterministic
source of problems (:mod:`trainer.tasks`), so the app rebuilds the task and finds the
problem. A generated task's train ids say the step and the position of the problem
(``arith-000012-003``: step 12, the 4th), so only that step's first problems are drawn; a
file task's train stream is read whole (one epoch visits every problem); validation
problems are looked up too. None when it cannot be found: a task file gone or changed,
an id of no problem of the task, a config this server cannot read.
"""

from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from typing import Any

from trainer.config import RunConfig
from trainer.tasks import Task, make_task

log = logging.getLogger(__name__)

GENERATED_ID = re.compile(r"^[a-z]+-(?P<step>\d{1,9})-(?P<index>\d{1,6})$", re.ASCII)
"""A generated task's train id: ``<task>-<step>-<position in the step's batch>``."""
MAX_SCAN = 1_000_000
"""A file task's train stream longer than this is not searched (a page read stays quick)."""


@lru_cache(maxsize=8)
def _task(config_json: str) -> Task | None:
    """The run's task, rebuilt from its config (cached: a file task reads its files)."""
    try:
        config = RunConfig.from_dict(json.loads(config_json))
        return make_task(config.task, seed=config.seed)
    except (ValueError, TypeError, KeyError, OSError) as exc:  # unreadable config or file
        log.info("no task for the prompt text: %s", exc)
        return None


@lru_cache(maxsize=8)
def _texts(config_json: str) -> dict[str, str]:
    """Every problem of a file task (train stream and validation), id -> text; the
    validation problems of a generated one (its train problems are drawn by id)."""
    task = _task(config_json)
    if task is None:
        return {}
    problems = list(task.validation())
    size = getattr(task, "train_size", None)
    if isinstance(size, int) and 0 < size <= MAX_SCAN:
        problems += task.train_batch(0, size)
    return {problem.id: problem.prompt for problem in problems}


def prompt_text(config: dict[str, Any], prompt_id: str) -> str | None:
    """The text of the prompt ``prompt_id`` of the run whose stored config is ``config``;
    None when it cannot be resolved."""
    if not prompt_id:
        return None
    key = json.dumps(config, sort_keys=True)
    task = _task(key)
    if task is None:
        return None
    found = GENERATED_ID.match(prompt_id)
    if found and not hasattr(task, "train_size"):
        index = int(found["index"])
        try:
            problems = task.train_batch(int(found["step"]), index + 1)
        except (ValueError, IndexError):
            problems = []
        if len(problems) > index and problems[index].id == prompt_id:
            return problems[index].prompt
    return _texts(key).get(prompt_id)
