"""The one way the web app looks at a file that a user named on the server.

Suite files, evaluation task files and run data files are paths typed into forms; the web
process must never be made to read something it should not (a device, a FIFO, its own
database) or to read without end. Every such path goes through :func:`locate` (and
:func:`read_bytes` / :func:`open_regular` when its content is needed), which:

1. refuses a path that is not one absolute line of at most :data:`MAX_PATH` characters,
   and one in the kernel's trees (:data:`SYSTEM_TREES`: ``/proc``, ``/sys``, ``/dev``),
   judged by the path as given (``..`` folded) before anything is looked at, and again by
   its real path (a symlink to ``/proc/kmsg``): such a file may block a reader or answer
   without end, and none is a data file;
2. resolves it to its real path (symlinks and ``..`` followed; nothing is opened) and
   requires that to lie inside the allowed directories (``MRL_TASK_DATA_DIRS``), when the
   deployment lists some;
3. refuses the app's own files: its SQLite database and the embedded broker's (with their
   ``-wal``/``-shm``/``-journal`` files: opening and closing a second descriptor on a
   SQLite file in the process that holds it drops that process's locks), the secret key,
   the logs and the run directories; judged by real path and by inode, so a hard link is
   refused too;
4. ``stat``\\s it (never opens it) and requires a regular file of at most the kind's
   size cap; devices, FIFOs, sockets and directories are refused before any open;
5. opens it ``O_RDONLY | O_NONBLOCK | O_NOFOLLOW`` and checks, on the open descriptor,
   that it is still that regular file; reads are bounded in bytes and in time.

Steps 2 and 3, the kernel's trees, and a path that does not exist or cannot be read,
give one message (:func:`unavailable`): a user learns nothing about files outside the
data directories, not even whether they exist. Pure over the filesystem apart from
:func:`data_policy`, which reads the settings.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

MAX_PATH = 1000
"""The longest path a form accepts (characters)."""
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")
"""A SQLite database's own files: the database, its WAL, shared memory and journal."""
CHUNK = 1 << 16
SYSTEM_TREES = ("/proc", "/sys", "/dev")
"""The kernel's file trees: never a data file; ``/proc/kmsg`` blocks a reader (and is the
kernel log to root), ``/proc/self/mem`` is the process's memory."""


@dataclass(frozen=True)
class FileKind:
    """What a path field names: what a message calls it and how large it may be."""

    label: str
    """How messages name it: "suite JSON", "task file"."""
    max_bytes: int | None
    """The largest file accepted (None: no cap; the web app then never reads it)."""

    def cap_text(self) -> str:
        return size_text(self.max_bytes) if self.max_bytes is not None else "no cap"


SUITE_FILE = FileKind("suite JSON", 1 << 20)
TASK_FILE = FileKind("task file", 512 << 20)
RUN_DATA_FILE = FileKind("data file", None)
"""A run's train/val file: only checked (the trainer reads it on the compute node)."""


@dataclass(frozen=True)
class ReadPolicy:
    """Where user-named files may be read from, and what is never read."""

    roots: tuple[str, ...]
    """Real paths of the allowed directories; empty: anywhere (but the protected)."""
    protected_files: tuple[str, ...]
    """Real paths of the app's own files."""
    protected_dirs: tuple[str, ...]
    """Real paths of the app's own directories (anything inside is refused)."""
    protected_inodes: frozenset[tuple[int, int]] = frozenset()
    """(device, inode) of the protected files that exist: their hard links too."""


class ServerFileError(ValueError):
    """Why a user-named path cannot be used; the message names the path as given and
    never anything read from the file."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True)
class LocatedFile:
    """A regular file that :func:`locate` accepted, as ``stat`` saw it."""

    path: str
    """The path as the user gave it (what messages show)."""
    real: str
    size: int
    mtime_ns: int
    device: int
    inode: int


def unavailable(path: str, kind: FileKind, policy: ReadPolicy) -> ServerFileError:
    """The one message for a path that is missing, outside the allowed directories, one
    of the app's own files, or unreadable: which of these is not said."""
    hint = f"; give a file inside {', '.join(policy.roots)} (MRL_TASK_DATA_DIRS)"
    return ServerFileError(
        f"{path}: not a {kind.label} this deployment can read (missing, unreadable, or in a "
        f"place the app does not read from){hint if policy.roots else ''}",
        code="unavailable",
    )


def path_text_problem(path: str) -> str | None:
    """Why ``path`` is not one absolute path a form may take, or None."""
    if any(ord(char) < 32 or ord(char) == 127 for char in path):
        return "a path cannot contain control characters or line breaks; give one path"
    if len(path) > MAX_PATH:
        return f"the path is longer than {MAX_PATH} characters; give a shorter one"
    if not path.startswith("/"):
        return f"{path} is a relative path; give the absolute path of the file on the server"
    return None


def locate(
    path: str, kind: FileKind, policy: ReadPolicy, *, directory_file: str | None = None
) -> LocatedFile:
    """The regular file ``path`` names, if a user may have it read (module docstring,
    steps 1 to 4); :class:`ServerFileError` otherwise. ``directory_file``: for a path
    that is an allowed directory, the file of that name inside it is meant."""
    problem = path_text_problem(path)
    if problem:
        raise ServerFileError(problem, code="bad_path")
    if in_system_tree(path):
        raise unavailable(path, kind, policy)
    real = os.path.realpath(path)
    info = _allowed_stat(real, policy)
    if info is not None and stat.S_ISDIR(info.st_mode) and directory_file is not None:
        real = os.path.realpath(os.path.join(real, directory_file))
        info = _allowed_stat(real, policy)
        if info is None:
            raise ServerFileError(
                f"{path} is a directory without a {directory_file} this deployment can "
                f"read; give the path of the {kind.label}",
                code="no_directory_file",
            )
    if info is None:
        raise unavailable(path, kind, policy)
    if not stat.S_ISREG(info.st_mode):
        raise ServerFileError(
            f"{path} is {_file_type(info.st_mode)}, not a regular file; give a "
            f"{kind.label} (a regular file)",
            code="not_regular",
        )
    if kind.max_bytes is not None and info.st_size > kind.max_bytes:
        raise ServerFileError(
            f"{path} is {size_text(info.st_size)}; a {kind.label} may be at most {kind.cap_text()}",
            code="too_large",
        )
    return LocatedFile(path, real, info.st_size, info.st_mtime_ns, info.st_dev, info.st_ino)


def open_regular(located: LocatedFile, kind: FileKind, policy: ReadPolicy) -> int:
    """A read-only descriptor of ``located``, after checking on the descriptor that it is
    still that regular file (a path swapped after :func:`locate` is refused). The caller
    closes it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(located.real, flags)
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EPERM):
            raise ServerFileError(
                f"cannot read {located.path}: Permission denied; make it readable by the "
                "user the app and its jobs run as",
                code="unreadable",
            ) from None
        raise unavailable(located.path, kind, policy) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (
        located.device,
        located.inode,
    ):
        os.close(fd)
        raise unavailable(located.path, kind, policy)
    return fd


def read_bytes(
    path: str,
    kind: FileKind,
    policy: ReadPolicy,
    *,
    timeout_s: float,
    directory_file: str | None = None,
) -> tuple[LocatedFile, bytes]:
    """The whole content of a small file: at most ``kind.max_bytes`` bytes (a file that
    grew past the cap since it was looked at is refused) read within ``timeout_s``."""
    if kind.max_bytes is None:
        raise ValueError(f"a {kind.label} has no size cap: the web app does not read it")
    located = locate(path, kind, policy, directory_file=directory_file)
    deadline = time.monotonic() + timeout_s
    fd = open_regular(located, kind, policy)
    try:
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, CHUNK):
            total += len(chunk)
            if total > kind.max_bytes:
                raise ServerFileError(
                    f"{path} is larger than the {kind.cap_text()} a {kind.label} may be",
                    code="too_large",
                )
            if time.monotonic() > deadline:
                raise ServerFileError(
                    f"{path} could not be read within {timeout_s:g} s", code="timeout"
                )
            chunks.append(chunk)
    finally:
        os.close(fd)
    return located, b"".join(chunks)


class LineTooLong(ValueError):
    """A line of a text file is longer than the reader takes."""

    def __init__(self, number: int) -> None:
        super().__init__(f"line {number} is too long")
        self.number = number


def bounded_lines(fd: int, *, max_line: int, max_bytes: int, deadline: float) -> Iterator[bytes]:
    """The lines of the open file ``fd`` (each with its line break), none longer than
    ``max_line`` bytes (:class:`LineTooLong`), ``max_bytes`` in all, until ``deadline``
    (``time.monotonic``); the caller owns ``fd``. A line never sits in memory whole
    beyond ``max_line`` bytes."""
    buffer = b""
    total = 0
    number = 0
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError("the file could not be read in time")
        chunk = os.read(fd, CHUNK)
        total += len(chunk)
        if total > max_bytes:
            raise ServerFileError("the file grew past its size cap while read", "too_large")
        buffer += chunk
        while (end := buffer.find(b"\n")) >= 0:
            number += 1
            if end + 1 > max_line:
                raise LineTooLong(number)
            yield buffer[: end + 1]
            buffer = buffer[end + 1 :]
        if len(buffer) > max_line:
            raise LineTooLong(number + 1)
        if not chunk:
            if buffer:
                yield buffer
            return


# --- the policy -------------------------------------------------------------------------
def data_policy() -> ReadPolicy:
    """The policy of this deployment's settings for data files (suites, task files)."""
    return make_policy(list(getattr(settings, "TASK_DATA_DIRS", [])), app_owned_paths())


def app_owned_paths() -> tuple[list[str], list[str]]:
    """The app's own files and directories, from the settings: (files, directories)."""
    files: list[str] = []
    for database in settings.DATABASES.values():
        if str(database.get("ENGINE", "")).endswith("sqlite3"):
            files += [f"{database['NAME']}{suffix}" for suffix in SQLITE_COMPANIONS]
    broker = str(getattr(settings, "EMBEDDED_BROKER_PATH", ""))
    if broker:
        files += [f"{broker}{suffix}" for suffix in (*SQLITE_COMPANIONS, ".lock")]
    var_dir = Path(settings.VAR_DIR)
    files.append(str(var_dir / "secret_key"))
    directories = [str(settings.RUN_ROOT), str(var_dir / "log")]
    return files, directories


def make_policy(roots: Sequence[str], owned: tuple[Sequence[str], Sequence[str]]) -> ReadPolicy:
    """A :class:`ReadPolicy` of allowed ``roots`` and the app's ``owned`` (files,
    directories), all as real paths; the inodes of the owned files that exist."""
    files, directories = owned
    real_files = tuple(os.path.realpath(path) for path in files)
    inodes = set()
    for path in real_files:
        try:
            info = os.stat(path)
        except OSError:
            continue
        inodes.add((info.st_dev, info.st_ino))
    return ReadPolicy(
        roots=tuple(os.path.realpath(root) for root in roots),
        protected_files=real_files,
        protected_dirs=tuple(os.path.realpath(path) for path in directories),
        protected_inodes=frozenset(inodes),
    )


# --- helpers ------------------------------------------------------------------------------
def _inside(real: str, directory: str) -> bool:
    return real == directory or real.startswith(directory.rstrip("/") + "/")


def in_system_tree(path: str) -> bool:
    """Whether the absolute ``path`` (``..`` and ``//`` folded, nothing looked at) lies in
    one of :data:`SYSTEM_TREES`."""
    folded = "/" + os.path.normpath(path).lstrip("/")
    return any(_inside(folded, tree) for tree in SYSTEM_TREES)


def _allowed_stat(real: str, policy: ReadPolicy) -> os.stat_result | None:
    """``stat`` of ``real`` if it is inside the roots, outside the kernel's trees and none
    of the app's own; None otherwise (or when it does not exist). The place is judged
    before the file is looked at, so nothing is learnt about a path outside."""
    if in_system_tree(real):
        return None
    if policy.roots and not any(_inside(real, root) for root in policy.roots):
        return None
    if real in policy.protected_files or any(
        _inside(real, directory) for directory in policy.protected_dirs
    ):
        return None
    try:
        info = os.stat(real)
    except OSError:
        return None
    if (info.st_dev, info.st_ino) in policy.protected_inodes:
        return None
    return info


def _file_type(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "something other than a file"


def size_text(size: int) -> str:
    """A size for people: \"312 MiB\"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"
