"""What the embedded demo's setup is doing, for the home page: ``make demo`` serves the app
at once and builds the tiny zoo and launches the demo runs in the background
(``manage.py demo_setup --build-zoo --sweep``), which records its progress here, in
``<var>/demo-setup.json`` (written atomically; one writer).

States: ``building`` (the zoo: which models are ready, of how many), ``launched`` (the
demo runs, with their pages), ``failed`` (the first line of the error; the log has the
rest).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

LOG_NAME = "log/demo-setup.log"
"""Where scripts/demo sends the background setup's output, under the var directory."""


def process_gone(pid: int) -> bool:
    """Whether no process ``pid`` exists on this machine (one we may not signal exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def write_json_atomically(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` so a reader sees the old file or the new one,
    never half of one (a per-process partial file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)


def status_path() -> Path:
    return Path(settings.VAR_DIR) / "demo-setup.json"


@dataclass
class DemoStatus:
    """The demo setup's progress, as the home page shows it."""

    state: str = "building"
    """building, launched or failed."""
    ready: list[str] = field(default_factory=list)
    """Zoo models ready (built now or found current), in the order they became ready."""
    models: list[str] = field(default_factory=list)
    """Every zoo model the demo needs."""
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    runs: list[dict[str, Any]] = field(default_factory=list)
    """The demo runs once launched: {"regime", "id", "url"}."""
    error: str = ""
    pid: int = field(default_factory=os.getpid)
    """The setup's process: a ``building`` status whose process is gone was interrupted."""

    @property
    def interrupted(self) -> bool:
        """Building, but its process is gone (Ctrl-C during the build, a crash)."""
        return self.state == "building" and process_gone(self.pid)

    @property
    def waiting(self) -> list[str]:
        return [model for model in self.models if model not in self.ready]

    @property
    def elapsed_s(self) -> int:
        return int(max(0.0, self.updated_at - self.started_at))

    @property
    def log_path(self) -> str:
        return str(Path(settings.VAR_DIR) / LOG_NAME)

    def save(self) -> None:
        """Write the status atomically (a reader never sees half of it)."""
        self.updated_at = time.time()
        write_json_atomically(status_path(), asdict(self))


def demo_status() -> DemoStatus | None:
    """The recorded status, or None when no demo setup ran (or its file is unreadable)."""
    try:
        data = json.loads(status_path().read_text())
        return DemoStatus(**data)
    except (OSError, ValueError, TypeError):
        return None
