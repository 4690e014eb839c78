"""Checking an evaluation suite's files: may each task's file be read, and does it parse?

:func:`check_suite` finds each task's file through :mod:`webapp.core.server_files` (a
regular file inside the data directories, none of the app's own, within the size cap)
and reads it row by row with the trainer's own row readers
(:data:`trainer.evals.suite.ROW_ITEMS`), so a suite that passes here is one the evaluation
job can read. Results are kept in :class:`~webapp.registry.models.TaskFileCheck` by
(real path, type, size, mtime): a page reads a file again only when it changed.

A file of at most :data:`INLINE_BYTES` is read inside the request (within
:data:`INLINE_SECONDS`); a larger one is never: its check is ``pending`` and the worker
reads it (:func:`refresh`, sent by the views, picked up again by beat's sync when a
message was lost). Messages say where a file is wrong (row, field, expected type), never
what it holds.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from trainer.evals.suite import ROW_ITEMS, TASK_TYPES, EvalTask
from trainer.tasks.loaders import (
    JSONL_SUFFIXES,
    DataFileError,
    Row,
    jsonl_rows,
    parquet_rows,
)
from webapp.core.server_files import (
    TASK_FILE,
    LineTooLong,
    LocatedFile,
    ReadPolicy,
    ServerFileError,
    bounded_lines,
    data_policy,
    locate,
    open_regular,
    size_text,
)
from webapp.registry.models import TaskFileCheck

log = logging.getLogger(__name__)

INLINE_BYTES = 1 << 20
"""Files up to this size are checked inside the request; larger ones by the worker."""
INLINE_SECONDS = 2.0
WORKER_SECONDS = 300.0
"""How long the worker may read one file."""
MAX_LINE = 4 << 20
"""The longest JSONL line read (one item); a longer one is an error, never held whole."""
MAX_ROW_GROUP = 256 << 20
"""The largest uncompressed Parquet row group read (one is held at a time)."""
STALE_PENDING = timedelta(seconds=60)
"""A check pending this long has lost its message: beat's sync runs it."""


@dataclass(frozen=True)
class TaskCheck:
    """What checking one task's file found."""

    name: str
    type: str
    path: str
    limit: int | None
    exists: bool
    """Whether the file was found where a user may have it read."""
    items: int | None
    """The file's items (all of them, before ``limit``); None when not (yet) read."""
    error: str | None
    """Why the file cannot be used, or None."""
    size: int | None = None
    pending_id: int | None = None
    """The :class:`TaskFileCheck` the worker has still to run, if any."""
    newly_pending: bool = False
    """Whether this check asked for that run (the caller sends it)."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def pending(self) -> bool:
        return self.pending_id is not None

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
        """One line for a page: "32 items", "32 items, the first 10 scored", "being
        checked (312 MiB)", or the error."""
        if self.error is not None:
            return self.error
        if self.pending:
            return f"being checked ({size_text(self.size or 0)})"
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
    checking: int = 0


def check_task(task: Mapping[str, Any] | EvalTask, policy: ReadPolicy | None = None) -> TaskCheck:
    """Check one task (the stored ``{"name", "type", "path", "limit"}`` or an EvalTask)."""
    if isinstance(task, EvalTask):
        name, kind, path, limit = task.name, task.type, task.path, task.limit
    elif not isinstance(task, Mapping):
        return TaskCheck("?", "?", "", None, False, None, "not a task")
    else:
        name = str(task.get("name", ""))
        kind = str(task.get("type", ""))
        path = str(task.get("path", ""))
        raw_limit = task.get("limit")
        limit = (
            raw_limit if isinstance(raw_limit, int) and not isinstance(raw_limit, bool) else None
        )

    def result(exists: bool, items: int | None, error: str | None, **more: Any) -> TaskCheck:
        return TaskCheck(name, kind, path, limit, exists, items, error, **more)

    if not path.strip():
        return result(False, None, "no path given")
    policy = policy or data_policy()
    try:
        located = locate(path, TASK_FILE, policy)
    except ServerFileError as exc:
        return result(exc.code in ("not_regular", "too_large"), None, exc.message)
    if kind not in ROW_ITEMS:
        return result(True, None, f"unknown task type {kind!r}; use one of {', '.join(TASK_TYPES)}")
    found = _cached(located, kind)
    if found is None and located.size <= INLINE_BYTES:
        items, reason = scan(located, kind, policy, time.monotonic() + INLINE_SECONDS)
        if reason != TIMED_OUT:
            _store(located, kind, TaskFileCheck.State.DONE, items, reason or "")
            return result(True, items, _with_path(path, reason), size=located.size)
    if found is None:
        row = _request(located, kind)
        return result(True, None, None, size=located.size, pending_id=row.pk, newly_pending=True)
    if found.state == TaskFileCheck.State.PENDING:
        return result(True, None, None, size=located.size, pending_id=found.pk)
    return result(True, found.items, _with_path(path, found.error or None), size=located.size)


def check_suite(
    tasks: Iterable[Mapping[str, Any] | EvalTask], policy: ReadPolicy | None = None
) -> list[TaskCheck]:
    """Check every task's file, in order."""
    policy = policy or data_policy()
    return [check_task(task, policy) for task in tasks]


def suite_status(checks: list[TaskCheck]) -> SuiteStatus:
    """ "all 6 files readable", "2 problems", or "1 file being checked"."""
    problems = sum(not check.ok for check in checks)
    checking = sum(check.ok and check.pending for check in checks)
    if not checks:
        return SuiteStatus(False, "no tasks", 0)
    if problems:
        return SuiteStatus(False, f"{problems} problem{'' if problems == 1 else 's'}", problems)
    if checking:
        text = f"{checking} file{'' if checking == 1 else 's'} being checked"
        return SuiteStatus(True, text, 0, checking)
    if len(checks) == 1:
        return SuiteStatus(True, "1 file readable", 0)
    return SuiteStatus(True, f"all {len(checks)} files readable", 0)


def new_requests(checks: Iterable[TaskCheck]) -> list[int]:
    """The pending checks these checks asked for: the worker's to run."""
    return sorted(
        {check.pending_id for check in checks if check.newly_pending and check.pending_id}
    )


# --- the worker's side ----------------------------------------------------------------------
def refresh(check_id: int, policy: ReadPolicy | None = None) -> str:
    """Run a pending check (the worker): read its file, within :data:`WORKER_SECONDS`,
    and store what it found for the version it read. Returns what happened."""
    row = TaskFileCheck.objects.filter(pk=check_id, state=TaskFileCheck.State.PENDING).first()
    if row is None:
        return "not pending"
    policy = policy or data_policy()
    try:
        located = locate(row.path, TASK_FILE, policy)
    except ServerFileError as exc:
        items, reason = None, _without_path(row.path, exc.message)
        version = (row.size, row.mtime_ns)
    else:
        items, reason = scan(located, row.type, policy, time.monotonic() + WORKER_SECONDS)
        version = (located.size, located.mtime_ns)
    TaskFileCheck.objects.filter(pk=row.pk, size=row.size, mtime_ns=row.mtime_ns).update(
        size=version[0],
        mtime_ns=version[1],
        state=TaskFileCheck.State.DONE,
        items=items,
        error=reason or "",
        checked_at=timezone.now(),
    )
    return "checked"


def stale_pending_ids(now: Any = None) -> list[int]:
    """Pending checks older than :data:`STALE_PENDING` (their message was lost)."""
    cutoff = (now or timezone.now()) - STALE_PENDING
    return list(
        TaskFileCheck.objects.filter(
            state=TaskFileCheck.State.PENDING, requested_at__lt=cutoff
        ).values_list("pk", flat=True)[:20]
    )


# --- reading a file -------------------------------------------------------------------------
TIMED_OUT = "could not be read in time"


def scan(
    located: LocatedFile, kind: str, policy: ReadPolicy, deadline: float
) -> tuple[int | None, str | None]:
    """(items, None) when every row of the file is an item of ``kind``, else (None, why)
    with ``why`` free of the file's path and contents. Reads the file through its open
    descriptor, row by row, bounded by the size cap, :data:`MAX_LINE` and ``deadline``."""
    item = ROW_ITEMS[kind]
    jsonl = Path(located.path).suffix.lower() in JSONL_SUFFIXES
    try:
        fd = open_regular(located, TASK_FILE, policy)
    except ServerFileError as exc:
        return None, _without_path(located.path, exc.message)
    try:
        count = 0
        for row in _rows(fd, located, jsonl, deadline):
            item(row)
            count += 1
        if count == 0:
            return None, "the file has no rows"
        return count, None
    except DataFileError as exc:
        return None, _without_path(located.path, str(exc))
    except LineTooLong as exc:
        return None, f"row {exc.number}: longer than {MAX_LINE >> 20} MiB (one JSON object a line)"
    except TimeoutError:
        return None, TIMED_OUT
    except ServerFileError as exc:
        return None, _without_path(located.path, exc.message)
    except Exception:  # pyarrow's own errors may quote the file: never shown
        log.info("task file check of %s failed", located.real, exc_info=True)
        return None, f"not a readable {'JSONL' if jsonl else 'Parquet'} file"
    finally:
        os.close(fd)


def _rows(fd: int, located: LocatedFile, jsonl: bool, deadline: float) -> Iterator[Row]:
    path = Path(located.path)
    cap = TASK_FILE.max_bytes or located.size
    if jsonl:
        yield from jsonl_rows(
            bounded_lines(fd, max_line=MAX_LINE, max_bytes=cap, deadline=deadline), path
        )
        return
    import pyarrow.parquet as pq

    with os.fdopen(os.dup(fd), "rb") as source:
        metadata = pq.ParquetFile(source).metadata
        for group in range(metadata.num_row_groups):
            if metadata.row_group(group).total_byte_size > MAX_ROW_GROUP:
                raise DataFileError(
                    f"{path}: row group {group + 1} is over {MAX_ROW_GROUP >> 20} MiB "
                    "uncompressed; write the file with smaller row groups"
                )
        source.seek(0)
        for row in parquet_rows(source, path):
            if row.index % 1024 == 0 and time.monotonic() > deadline:
                raise TimeoutError
            yield row


# --- the cache --------------------------------------------------------------------------------
def _cached(located: LocatedFile, kind: str) -> TaskFileCheck | None:
    """The stored check of this version of the file, if any."""
    return TaskFileCheck.objects.filter(
        path=located.real, type=kind, size=located.size, mtime_ns=located.mtime_ns
    ).first()


def _store(
    located: LocatedFile, kind: str, state: str, items: int | None, error: str
) -> TaskFileCheck:
    """Store the check of this version of ``located`` as ``kind`` (replacing the
    check of an earlier version)."""
    values = {
        "size": located.size,
        "mtime_ns": located.mtime_ns,
        "state": state,
        "items": items,
        "error": error,
        "requested_at": timezone.now(),
        "checked_at": timezone.now() if state == TaskFileCheck.State.DONE else None,
    }
    for _ in range(2):  # two requests may create the same row at once: the second updates
        try:
            with transaction.atomic():
                row, _ = TaskFileCheck.objects.update_or_create(
                    path=located.real, type=kind, defaults=values
                )
                return row
        except IntegrityError:
            continue
    raise RuntimeError(f"could not store the check of {located.real}")


def _request(located: LocatedFile, kind: str) -> TaskFileCheck:
    return _store(located, kind, TaskFileCheck.State.PENDING, None, "")


def _with_path(path: str, reason: str | None) -> str | None:
    """The message of ``reason`` about the file at ``path``: "PATH, row 3: ..."."""
    if not reason:
        return None
    return f"{path}{', ' if reason.startswith('row ') else ': '}{reason}"


def _without_path(path: str, message: str) -> str:
    if message.startswith(path):
        return message[len(path) :].lstrip(",: ") or message
    return message
