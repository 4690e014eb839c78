"""Checks of a task's data files (``task.train_path`` / ``task.val_path``) before a save.

A file task (``math_file``, ``multiple_choice_file``) reads its problems from two local
files when the run starts; a bad path used to be accepted by the form and fail only on
the cluster. Here, at save (compose page, config import) and at a sweep's launch, each
path must be: one line without shell syntax (the job-script path alphabet of
``scheduler/jobs.py``), absolute, without ``..``, of a suffix the loaders read
(``trainer.tasks.loaders.DATA_SUFFIXES``); then, through :mod:`webapp.core.server_files`,
inside ``settings.TASK_DATA_DIRS`` when that is set (real paths, symlinks resolved), none
of the app's own files, and an existing, non-empty, readable regular file. Outside,
the app's own, missing and unreadable get one message, so a path says nothing about what
exists where the user may not look. The arithmetic task reads no file: its paths must stay
empty.

Checks touch only file metadata and open (never read) the file, so they are cheap enough
for every form submission; a FIFO or device is refused before it is opened.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings

from trainer.config import FILE_TASK_KINDS, GENERATED_TASK_KINDS
from trainer.tasks.loaders import DATA_SUFFIXES
from webapp.core.server_files import (
    RUN_DATA_FILE,
    ServerFileError,
    app_owned_paths,
    locate,
    make_policy,
    open_regular,
)

PATH_FIELDS = ("train_path", "val_path")
PATH_CHARACTERS = re.compile(r"^[A-Za-z0-9_./+-]*$")
"""The characters a job-script path may hold (``scheduler/jobs.py::PATH``)."""
MAX_PATH = 1000
FILE_KINDS = FILE_TASK_KINDS
EXAMPLE = "/data/gsm8k/train.jsonl"


def allowed_dirs() -> list[str]:
    """The directories this deployment reads task data from (empty: anywhere)."""
    return list(getattr(settings, "TASK_DATA_DIRS", []))


def task_path_problem(name: str, path: str, *, dirs: Sequence[str] = ()) -> str | None:
    """Why ``path`` (the value of field ``name``) is not a data file a run can read, or
    None. ``dirs``: the allowed directories (empty: any)."""
    if any(ord(char) < 32 or ord(char) == 127 for char in path):
        return f"{name} cannot contain control characters or line breaks; give one path"
    if not path.startswith("/"):
        return (
            f"{name} must be an absolute path; {_shown(path)} is not one: give the full "
            f"path of the data file, e.g. {EXAMPLE}"
        )
    if len(path) > MAX_PATH:
        return f"{name} is longer than {MAX_PATH} characters; give a shorter path"
    if not PATH_CHARACTERS.match(path):
        return (
            f"{name} may use only letters, digits and _ . / + - (no spaces, quotes or shell "
            f"characters such as $ ; | & ` ( ) *); rename the file or copy it to such a path"
        )
    if ".." in path.split("/"):
        return f"{name} cannot go up a directory ('..'); give the file's path without it"
    if not path.lower().endswith(DATA_SUFFIXES):
        return (
            f"{name} must be a file the task loaders read: one ending in "
            f"{', '.join(DATA_SUFFIXES)}; got {_shown(path)}"
        )
    return _file_problem(name, path, dirs)


def task_data_problems(task: Any, *, dirs: Sequence[str] | None = None) -> dict[str, str]:
    """Problems with a config's ``task`` section's paths, by config path
    (``task.train_path``): what :func:`task_path_problem` says for a file task; for the
    arithmetic task, any path given. A missing path of a file task is left to
    ``RunConfig`` ("a math_file task needs train_path")."""
    if not isinstance(task, Mapping):
        return {}
    dirs = allowed_dirs() if dirs is None else dirs
    kind = task.get("kind", "arithmetic")
    problems: dict[str, str] = {}
    for name in PATH_FIELDS:
        value = task.get(name)
        if value in (None, ""):
            continue
        if not isinstance(value, str):
            continue  # RunConfig reports the type
        if kind in GENERATED_TASK_KINDS:
            problems[f"task.{name}"] = unused_path_message(name, kind)
        elif kind in FILE_KINDS:
            problem = task_path_problem(name, value, dirs=dirs)
            if problem:
                problems[f"task.{name}"] = problem
    return problems


def unused_path_message(name: str, kind: str = "arithmetic") -> str:
    return (
        f"the {kind} task reads no data file: clear {name}, or choose kind "
        f"{' or '.join(FILE_KINDS)} to train on files"
    )


def _file_problem(name: str, path: str, dirs: Sequence[str]) -> str | None:
    """Why the file at ``path`` cannot be a run's data file (:mod:`webapp.core.
    server_files`: inside ``dirs``, none of the app's own, regular; then not empty and
    readable), or None. Opened, never read."""
    policy = make_policy(dirs, app_owned_paths())
    try:
        located = locate(path, RUN_DATA_FILE, policy)
        if located.size == 0:
            return f"{name}: {path} is empty; it needs one problem per line (or Parquet row)"
        os.close(open_regular(located, RUN_DATA_FILE, policy))
    except ServerFileError as exc:
        return f"{name}: {exc.message}"
    return None


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:77] + "...")
