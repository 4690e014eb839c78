"""Building a zoo recipe as a background job, from the compose page (issue 31).

A policy naming an unbuilt ``zoo:<id>`` is refused at Preview and Save; its "Build <recipe>
zoo" button claims the recipe here (:func:`claim`) and the view sends the Celery task,
which runs :func:`run_build` in a worker. Each recipe's progress is one JSON file,
``<var>/zoo-builds/<recipe>.json`` (written atomically), for the zoo directory it builds
into; the compose page reads it (:func:`active_status`) to say "being built: 1 of 3
models ready" instead of the build command.

States: ``queued`` (claimed, the task sent), ``building`` (the worker runs it: which
models are ready, of how many), ``ready``, ``failed`` (the error's first line). A second
click while a build is queued or building starts nothing (the claim is taken under a
lock; :func:`trainer.zoo.build_zoo` holds a lock on the zoo directory besides).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from django.conf import settings

from trainer.zoo import ZOO_RECIPES, build_zoo, default_zoo_dir
from webapp.core.demo_status import process_gone, write_json_atomically

log = logging.getLogger(__name__)

ACTIVE = ("queued", "building")
STALE_SECONDS = 2 * 3600
"""A queued or building status not updated for this long is taken as lost (a worker that
died without a word, a message never delivered): the button may start the build again."""


def zoo_root() -> Path:
    """The zoo directory the runs read: ``settings.ZOO_DIR`` (``MRL_ZOO_DIR``), which
    the job is given, else what the trainer defaults to (:func:`default_zoo_dir`)."""
    configured = str(getattr(settings, "ZOO_DIR", "") or "")
    return Path(configured).expanduser() if configured else default_zoo_dir()


def _directory() -> Path:
    return Path(settings.VAR_DIR) / "zoo-builds"


def status_path(recipe: str) -> Path:
    if recipe not in ZOO_RECIPES:  # never a path from user input
        raise ValueError(f"unknown zoo recipe {recipe!r}")
    return _directory() / f"{recipe}.json"


@dataclass
class ZooBuild:
    """One recipe's build, as the compose page shows it."""

    recipe: str
    zoo_dir: str
    state: str = "queued"
    """queued, building, ready or failed."""
    models: list[str] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)
    """The models ready (built now or found current), in the order they became ready."""
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    error: str = ""
    """A failed build's first line of error."""
    host: str = ""
    pid: int = 0
    """The worker process that builds (none while queued)."""

    @property
    def active(self) -> bool:
        """Queued or building, and not lost (see :data:`STALE_SECONDS`)."""
        if self.state not in ACTIVE:
            return False
        if time.time() - self.updated_at > STALE_SECONDS:
            return False
        return not self._process_gone()

    def _process_gone(self) -> bool:
        """Building in a process of this host that no longer exists (killed mid-build)."""
        if self.state != "building" or not self.pid or self.host != socket.gethostname():
            return False
        return process_gone(self.pid)

    @property
    def progress(self) -> str:
        """ "1 of 3 models ready"."""
        return f"{len(self.ready)} of {len(self.models)} models ready"

    @property
    def started(self) -> str:
        return time.strftime("%H:%M", time.localtime(self.started_at))

    def save(self) -> None:
        """Write the status atomically (a reader never sees half of it)."""
        self.updated_at = time.time()
        write_json_atomically(status_path(self.recipe), asdict(self))

    def as_json(self) -> dict[str, object]:
        return {
            "recipe": self.recipe,
            "state": self.state if self.state not in ACTIVE or self.active else "lost",
            "ready": len(self.ready),
            "models": len(self.models),
            "progress": self.progress,
            "error": self.error,
        }


def load(recipe: str, zoo_dir: Path | None = None) -> ZooBuild | None:
    """The recorded build of ``recipe`` into ``zoo_dir`` (default :func:`zoo_root`), or
    None (never built from here, built into another directory, or unreadable)."""
    root = zoo_root() if zoo_dir is None else zoo_dir
    try:
        build = ZooBuild(**json.loads(status_path(recipe).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return build if build.zoo_dir == str(root) else None


def active_status(recipe: str, zoo_dir: Path | None = None) -> ZooBuild | None:
    """``recipe``'s build into ``zoo_dir`` while it is queued or building, else None."""
    build = load(recipe, zoo_dir)
    return build if build is not None and build.active else None


@contextmanager
def _locked() -> Iterator[None]:
    directory = _directory()
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def claim(recipe: str) -> tuple[ZooBuild, bool]:
    """Mark ``recipe``'s build into :func:`zoo_root` queued, unless one is already queued
    or building; the status, and whether this call claimed it (then send the task)."""
    root = zoo_root()
    with _locked():
        current = active_status(recipe, root)
        if current is not None:
            return current, False
        build = ZooBuild(recipe=recipe, zoo_dir=str(root), models=list(ZOO_RECIPES[recipe]))
        build.save()
        return build, True


def fail(build: ZooBuild, error: str) -> None:
    """Record that ``build`` failed with ``error`` (its first line is kept)."""
    build.state = "failed"
    build.error = (error.strip().splitlines() or ["unknown error"])[0][:500]
    build.save()


def run_build(recipe: str, zoo_dir: str | None = None) -> str:
    """Build ``recipe`` into ``zoo_dir`` (default :func:`zoo_root`), recording its progress;
    "ready" or "failed" (the error recorded, and logged in full)."""
    root = Path(zoo_dir) if zoo_dir else zoo_root()
    previous = load(recipe, root)
    build = ZooBuild(
        recipe=recipe,
        zoo_dir=str(root),
        state="building",
        models=list(ZOO_RECIPES[recipe]),
        started_at=previous.started_at if previous and previous.active else time.time(),
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    build.save()

    def ready(zoo_id: str) -> None:
        if zoo_id not in build.ready:
            build.ready.append(zoo_id)
            build.save()

    try:
        build_zoo(root, ids=build.models, log=log.info, on_ready=ready)
    except Exception as error:  # any failure is the user's to see (the log has it all)
        log.exception("building the %s zoo into %s failed", recipe, root)
        fail(build, f"{type(error).__name__}: {error}")
        return "failed"
    build.state = "ready"
    build.save()
    return "ready"
