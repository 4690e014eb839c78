"""A worker's liveness file: proof, every few seconds, that the worker process still runs.

A Celery worker that is alive but silent (SIGSTOPped, frozen, a hang that holds the
whole interpreter) never exits, so a supervisor that only restarts programs that exit
leaves it in place while runs wait in the queue. The worker's watchdog thread
(scheduler/watchdog.py) therefore rewrites the file named by :data:`ENV_VAR` every
:data:`BEAT_SECONDS` with its pid; whoever watches the worker (`make demo`'s supervisor,
compose's healthcheck ``manage.py worker_alive``) kills it hard when the file has not
changed for a while although the process lives, and a fresh worker replaces it.

The beat comes from the worker itself, not from beat's ``worker_heartbeat`` task: with
beat (or the broker, or the database) down every worker would look silent and be killed
over and over to no avail. What a stopped or frozen process cannot do is run its own
thread, and that is what this detects; a worker that runs but cannot consume is the
watchdog's to end (it exits by itself).

No Django here: the supervisor imports this module.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from webapp.core.digits import INT64_DIGITS, ascii_digits

ENV_VAR = "MRL_WORKER_LIVENESS_FILE"
"""The file a worker beats in; unset: the worker beats nowhere."""
BEAT_SECONDS = 5.0
"""How often the worker rewrites its liveness file."""


@dataclass(frozen=True)
class Beat:
    """The last beat in a liveness file: who wrote it and when (wall clock, its mtime)."""

    pid: int
    at: float


def beat(path: Path, pid: int | None = None) -> None:
    """Record that process ``pid`` (this one by default) is alive now, atomically: a
    reader sees the previous beat or this one, never a half-written file."""
    pid = os.getpid() if pid is None else pid
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{pid}.tmp")
    tmp.write_text(f"{pid}\n")
    tmp.replace(path)


def read(path: Path) -> Beat | None:
    """The last beat in ``path``; None if there is none (no file, or not a beat)."""
    try:
        text = path.read_text()
        at = path.stat().st_mtime
    except OSError:
        return None
    pid = ascii_digits(text.strip(), max_digits=INT64_DIGITS)
    return None if pid is None else Beat(pid=pid, at=at)


@dataclass(frozen=True)
class StallPolicy:
    """When a live worker process counts as stalled."""

    stall_seconds: float = 60.0
    """No beat for this long (12 beats) means stalled."""
    start_grace_seconds: float = 120.0
    """A fresh worker has this long to beat for the first time (imports, Django set-up)."""

    def __post_init__(self) -> None:
        if self.stall_seconds <= 0 or self.start_grace_seconds <= 0:
            raise ValueError(
                f"stall_seconds={self.stall_seconds} and start_grace_seconds="
                f"{self.start_grace_seconds} must be positive (seconds)"
            )

    def stall_reason(self, *, alive_for: float, silent_for: float | None) -> str | None:
        """Why a worker process that has lived ``alive_for`` seconds and last beat
        ``silent_for`` seconds ago (None: not yet since its start) counts as stalled, or
        None when it does not."""
        if silent_for is None:
            if alive_for >= self.start_grace_seconds:
                return f"has not beaten in the {alive_for:.0f} s since its start"
            return None
        if silent_for >= self.stall_seconds:
            return f"has not beaten for {silent_for:.0f} s"
        return None


def kill_hard(pid: int) -> None:
    """SIGKILL ``pid``, with its process group when it leads one (a stopped process
    ignores SIGTERM until continued; SIGKILL ends it where it stands)."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
