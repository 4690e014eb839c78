"""Do the run's prompts fit each policy's model? Checked on Preview and Save (issue 33).

Worked examples and a system prompt (``task.few_shot``, ``task.system_prompt``) make every
prompt longer; a model has a fixed number of positions (the tiny zoo: 128). A prompt
plus ``max_new_tokens`` past them made a GPT-2 policy fail at its first rollout with an
``IndexError`` and let the rotary models run on untrained positions; the rollout engine
now refuses it (:func:`trainer.chat.context_overflow`), and this check says so
before launch, with each policy's numbers, on the task field to change.

Only when the task has a context (few-shot examples or a system prompt): the built-in
tasks' one-turn prompts fit the zoo, and checking needs each policy's tokenizer (loaded
once per process and file, which needs ``transformers``: the web image, without it,
leaves the check to the engine). Models that cannot be read here (not built, a path on
a cluster node) are left to the engine's check too.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from trainer.chat import context_overflow
from trainer.config import RunConfig
from trainer.models import load_tokenizer, max_positions
from trainer.tasks import make_task
from trainer.tasks.few_shot import longest_prompt_tokens

__all__ = ["prompt_fit_problems"]


def prompt_fit_problems(config: RunConfig, zoo_dir: Path) -> dict[str, str]:
    """``task.few_shot`` (or ``task.system_prompt`` without examples) -> why the prompts
    do not fit, one sentence per policy whose model's window they overflow; empty when
    they fit, the task has no context, or no policy's model can be read here."""
    task_config = config.task
    if task_config.few_shot == 0 and not task_config.system_prompt:
        return {}
    if importlib.util.find_spec("transformers") is None:  # the web image: the engine checks
        return {}
    try:
        task = make_task(task_config, seed=config.seed)
    except (OSError, ValueError):  # a file task's own check says what is wrong
        return {}
    reasons: list[str] = []
    for policy in config.pool:
        model_dir = _directory(policy.model, zoo_dir)
        window = _window(model_dir)
        tokenizer_dir = _directory(policy.tokenizer, zoo_dir) if policy.tokenizer else model_dir
        if window is None or not (tokenizer_dir / "tokenizer_config.json").is_file():
            continue
        tokenizer = _tokenizer(tokenizer_dir, _mtime(tokenizer_dir))
        longest = longest_prompt_tokens(
            task_config, task, tokenizer, chat_template=policy.chat_template
        )
        overflow = context_overflow(longest, policy.max_new_tokens, window)
        if overflow is not None:
            reasons.append(f"{policy.name} ({policy.model}): {overflow}")
    if not reasons:
        return {}
    field = "task.few_shot" if task_config.few_shot else "task.system_prompt"
    return {field: "; ".join(reasons)}


def _directory(source: str, zoo_dir: Path) -> Path:
    return zoo_dir / source.removeprefix("zoo:") if source.startswith("zoo:") else Path(source)


def _window(model_dir: Path) -> int | None:
    """The window of the model in ``model_dir`` (its ``config.json``), None if unreadable."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return max_positions(SimpleNamespace(**config)) if isinstance(config, dict) else None


def _mtime(directory: Path) -> float:
    try:
        return (directory / "tokenizer_config.json").stat().st_mtime
    except OSError:
        return 0.0


@functools.lru_cache(maxsize=16)
def _tokenizer(directory: Path, mtime: float) -> Any:
    """The tokenizer of ``directory``, loaded once per file version (``mtime``)."""
    del mtime  # part of the cache key only: a rebuilt zoo model loads again
    return load_tokenizer(directory)
