"""Evaluation suites: a named list of tasks, each a local JSONL/Parquet file with a type.

A suite is one JSON object (the form a later CLI and the web app share)::

    {"name": "synthetic",
     "tasks": [{"name": "arith-addition", "type": "math", "path": "arith-addition.jsonl"},
               {"name": "larger", "type": "multiple_choice", "path": "larger.jsonl",
                "limit": 100}]}

Task types (:data:`TASK_TYPES`), and how their files are read:

* ``math``: MATH/GSM8K-style rows through :func:`trainer.tasks.loaders.load_math_file`;
  scored by greedy generation and the boxed-answer ``math`` reward.
* ``multiple_choice``: the multiple-choice rows :mod:`trainer.tasks.loaders` reads
  (question, choices, answer in any of its styles), kept apart as a :class:`ChoiceItem`
  whose context is ``"<question>\\nAnswer:"`` and whose continuations are
  ``" <choice>"``; scored by the log-likelihood of each choice (lm-eval's ``acc``).
* ``exact_match``: rows with a prompt (``prompt`` | ``question`` | ``problem``) and an
  ``answer``; scored by greedy generation compared after normalisation.

Relative task paths are read against the suite file's directory
(:meth:`SuiteConfig.from_file` makes them absolute), so a suite directory can move.
Validation collects every problem and raises :class:`trainer.config.ConfigError`, keyed
by field path (``"tasks[1].type"``), with messages that say how to fix it. Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from trainer.config import NAME_PATTERN, ConfigError, bound_problem, build_dataclass, json_data
from trainer.tasks.base import Problem
from trainer.tasks.loaders import (
    DATA_SUFFIXES,
    DataFileError,
    Row,
    exact_match_problem,
    math_problem,
    multiple_choice_parts,
    read_rows,
)

TASK_TYPES = ("math", "multiple_choice", "exact_match")
MC_CONTEXT_SUFFIX = "\nAnswer:"


@dataclass(frozen=True)
class ChoiceItem:
    """One multiple-choice item as log-likelihood scoring sees it.

    ``context`` is ``"<question>\\nAnswer:"``; each choice is scored as the continuation
    ``" <choice text>"`` (:attr:`continuations`); ``answer`` is the 0-based gold index.
    """

    id: str
    context: str
    choices: tuple[str, ...]
    answer: int

    @property
    def continuations(self) -> tuple[str, ...]:
        return tuple(f" {choice}" for choice in self.choices)


@dataclass
class EvalTask:
    """One task of a suite: a local data file of one type."""

    name: str = field(metadata={"help": "Task name, unique in the suite (letters, digits, _ . -)"})
    type: str = field(metadata={"help": f"One of {TASK_TYPES}"})
    path: str = field(
        metadata={"help": "Local JSONL or Parquet file; relative to the suite file's directory"}
    )
    limit: int | None = field(
        default=None,
        metadata={"help": "Score only the first N items; default: all", "min": 1},
    )

    def problems(self, prefix: str) -> dict[str, str]:
        """What is wrong with this task, by field path under ``prefix`` (``tasks[0]``)."""
        errors: dict[str, str] = {}
        if NAME_PATTERN.match(self.name) is None:
            errors[f"{prefix}.name"] = (
                f"{self.name!r} is not a valid task name: use 1-64 letters, digits, '_', '.' "
                "or '-', starting with a letter or digit (it is part of the metric key "
                "eval/<suite>/<task>/accuracy)"
            )
        if self.type not in TASK_TYPES:
            errors[f"{prefix}.type"] = (
                f"unknown task type {self.type!r}; use one of {', '.join(TASK_TYPES)}"
            )
        if not self.path.strip():
            errors[f"{prefix}.path"] = "give the path of a local .jsonl or .parquet file"
        elif Path(self.path).suffix.lower() not in DATA_SUFFIXES:
            errors[f"{prefix}.path"] = (
                f"{self.path!r} has suffix {Path(self.path).suffix!r}; a task file must end "
                f"in one of {', '.join(DATA_SUFFIXES)} (export the data to JSONL or Parquet)"
            )
        limit_field = next(f for f in fields(EvalTask) if f.name == "limit")
        message = bound_problem("limit", limit_field.metadata, self.limit)
        if message:
            errors[f"{prefix}.limit"] = message
        return errors


@dataclass
class SuiteConfig:
    """A named list of :class:`EvalTask`; constructing one validates it."""

    name: str = field(metadata={"help": "Suite name (letters, digits, _ . -)"})
    tasks: list[EvalTask] = field(metadata={"help": "The tasks, each a local file with a type"})

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` listing every problem (no-op when all is well)."""
        errors: dict[str, str] = {}
        if NAME_PATTERN.match(self.name) is None:
            errors["name"] = (
                f"{self.name!r} is not a valid suite name: use 1-64 letters, digits, '_', "
                "'.' or '-', starting with a letter or digit"
            )
        if not self.tasks:
            errors["tasks"] = "a suite needs at least one task"
        seen: dict[str, int] = {}
        for index, task in enumerate(self.tasks):
            errors.update(task.problems(f"tasks[{index}]"))
            if task.name in seen:
                errors.setdefault(
                    f"tasks[{index}].name",
                    f"duplicate task name {task.name!r} (also tasks[{seen[task.name]}]); "
                    "give each task its own name",
                )
            seen.setdefault(task.name, index)
        if errors:
            raise ConfigError(errors)

    def task(self, name: str) -> EvalTask:
        for task in self.tasks:
            if task.name == name:
                return task
        known = ", ".join(task.name for task in self.tasks)
        raise KeyError(f"suite {self.name!r} has no task {name!r}; its tasks: {known}")

    # --- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def save(self, path: str | Path) -> Path:
        """Write the JSON form to ``path`` (paths as they are in the config)."""
        path = Path(path)
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_dict(cls, data: object) -> SuiteConfig:
        """The suite of JSON ``data``; :class:`ConfigError` lists every problem (unknown
        fields and wrong types first, with the run config's messages, then the rules)."""
        errors: dict[str, str] = {}
        suite = build_dataclass(cls, data, "", errors)  # constructing it validates it
        if errors:
            raise ConfigError(errors)
        assert isinstance(suite, SuiteConfig)
        return suite

    @classmethod
    def from_json(cls, text: str) -> SuiteConfig:
        return cls.from_dict(json_data(text))

    @classmethod
    def from_file(cls, path: str | Path) -> SuiteConfig:
        """The suite in ``path``, its relative task paths made absolute against the
        file's directory."""
        path = Path(path)
        suite = cls.from_json(path.read_text(encoding="utf-8"))
        return suite.resolved(path.resolve().parent)

    def resolved(self, base: str | Path) -> SuiteConfig:
        """A copy whose relative task paths are read against ``base``."""
        tasks = [replace(task, path=str(Path(base) / task.path)) for task in self.tasks]
        return SuiteConfig(name=self.name, tasks=tasks)


# --- reading a task's file -----------------------------------------------------------------
def choice_item(row: Row) -> ChoiceItem:
    """A :class:`ChoiceItem` from one multiple-choice row (the loaders' field rules)."""
    parts = multiple_choice_parts(row)
    return ChoiceItem(
        id=parts.id,
        context=parts.question + MC_CONTEXT_SUFFIX,
        choices=tuple(parts.choices),
        answer=parts.answer,
    )


def load_choice_file(path: str | Path) -> list[ChoiceItem]:
    """The multiple-choice items of a JSONL/Parquet file, for log-likelihood scoring."""
    return [choice_item(row) for row in read_rows(path)]


ROW_ITEMS: dict[str, Callable[[Row], Problem | ChoiceItem]] = {
    "math": math_problem,
    "multiple_choice": choice_item,
    "exact_match": exact_match_problem,
}
"""How one row of a task file becomes an item, by task type (what a check of a file runs
row by row without keeping the items)."""


def load_task_items(task: EvalTask) -> list[Problem] | list[ChoiceItem]:
    """The items of ``task`` (the first ``limit`` when set): :class:`Problem` for math
    and exact match, :class:`ChoiceItem` for multiple choice."""
    if task.type not in ROW_ITEMS:
        raise ValueError(f"unknown task type {task.type!r}; use one of {', '.join(TASK_TYPES)}")
    item = ROW_ITEMS[task.type]
    items = [item(row) for row in read_rows(task.path)]
    return items[: task.limit] if task.limit is not None else items  # type: ignore[return-value]


__all__ = [
    "ROW_ITEMS",
    "TASK_TYPES",
    "ChoiceItem",
    "DataFileError",
    "EvalTask",
    "SuiteConfig",
    "load_choice_file",
    "load_task_items",
]
