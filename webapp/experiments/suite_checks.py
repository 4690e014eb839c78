"""Checking an evaluation suite's files: does each task's file exist, and does it parse?

:func:`check_suite` reads every task's file with the trainer's own reader
(:func:`trainer.evals.suite.load_task_items`), so a suite that passes here is one the
evaluation job can read. Pure over the filesystem (no Django): the suite form, the list
and the detail page use it. Results are cached by (path, type, mtime, size), so the list
page re-reads a file only when it changed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from trainer.evals.suite import EvalTask, load_task_items

ABSOLUTE_HINT = "give the absolute path of the file on the server"


@dataclass(frozen=True)
class TaskCheck:
    """What checking one task's file found."""

    name: str
    type: str
    path: str
    limit: int | None
    exists: bool
    items: int | None
    """The file's items (all of them, before ``limit``); None when it could not be read."""
    error: str | None
    """Why the file cannot be used, or None."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def scored(self) -> int | None:
        """How many items an evaluation scores (the first ``limit``)."""
        if self.items is None:
            return None
        return min(self.items, self.limit) if self.limit is not None else self.items

    @property
    def reason(self) -> str | None:
        """The error without the file's path in front (for a page that shows the path)."""
        if self.error is None:
            return None
        if self.error.startswith(self.path):
            rest = self.error[len(self.path) :].lstrip(",: ")
            return rest or self.error
        return self.error

    @property
    def status(self) -> str:
        """One line for a page: "32 items", "32 items, the first 10 scored", or the error."""
        if self.error is not None:
            return self.error
        text = f"{self.items} item{'' if self.items == 1 else 's'}"
        if self.scored != self.items:
            text += f", the first {self.scored} scored"
        return text


@dataclass(frozen=True)
class SuiteStatus:
    """The summary of a suite's checks, for the list page."""

    ok: bool
    text: str
    problems: int


def check_task(task: Mapping[str, Any] | EvalTask) -> TaskCheck:
    """Check one task (the stored ``{"name", "type", "path", "limit"}`` or an EvalTask)."""
    if isinstance(task, EvalTask):
        name, kind, path, limit = task.name, task.type, task.path, task.limit
    elif not isinstance(task, Mapping):
        return TaskCheck("?", "?", "", None, False, None, f"not a task: {task!r:.80}")
    else:
        name = str(task.get("name", ""))
        kind = str(task.get("type", ""))
        path = str(task.get("path", ""))
        raw_limit = task.get("limit")
        limit = (
            raw_limit if isinstance(raw_limit, int) and not isinstance(raw_limit, bool) else None
        )

    def result(exists: bool, items: int | None, error: str | None) -> TaskCheck:
        return TaskCheck(name, kind, path, limit, exists, items, error)

    if not path.strip():
        return result(False, None, "no path given")
    if not os.path.isabs(path):
        return result(False, None, f"{path} is a relative path; {ABSOLUTE_HINT}")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return result(False, None, f"{path} does not exist")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = getattr(exc, "strerror", None) or str(exc)
        return result(False, None, f"{path} cannot be read: {reason}")
    if stat.S_ISDIR(info.st_mode):
        return result(True, None, f"{path} is a directory, not a .jsonl or .parquet file")
    items, error = _read(path, kind, info.st_mtime_ns, info.st_size)
    return result(True, items, error)


def check_suite(tasks: Iterable[Mapping[str, Any] | EvalTask]) -> list[TaskCheck]:
    """Check every task's file, in order."""
    return [check_task(task) for task in tasks]


def suite_status(checks: list[TaskCheck]) -> SuiteStatus:
    """ "all 6 files readable", or "2 problems"."""
    problems = sum(not check.ok for check in checks)
    if not checks:
        return SuiteStatus(False, "no tasks", 0)
    if problems:
        return SuiteStatus(False, f"{problems} problem{'' if problems == 1 else 's'}", problems)
    if len(checks) == 1:
        return SuiteStatus(True, "1 file readable", 0)
    return SuiteStatus(True, f"all {len(checks)} files readable", 0)


@lru_cache(maxsize=512)
def _read(path: str, kind: str, mtime_ns: int, size: int) -> tuple[int | None, str | None]:
    """The number of items of the file, or why it does not parse (cached per version)."""
    del mtime_ns, size  # only part of the cache key: a changed file is read again
    try:
        items = load_task_items(EvalTask(name="check", type=kind, path=path))
    except Exception as exc:  # noqa: BLE001 - any reader failure is the file's problem, shown
        return None, _message(path, exc)
    return len(items), None


def _message(path: str, exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, UnicodeDecodeError):
        return f"{path} is not UTF-8 text: {text}"
    if path not in text:
        text = f"{path}: {text}"
    return text


def clear_cache() -> None:
    """Forget every cached result (tests)."""
    _read.cache_clear()
