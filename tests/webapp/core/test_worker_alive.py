"""The compose worker's healthcheck: `manage.py worker_alive`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduler import liveness
from webapp.core.models import ServiceHeartbeat
from webapp.core.selectors import WORKER_SERVICE

pytestmark = pytest.mark.django_db


def beat(hostname: str, seconds_ago: float, pid: int = 7) -> None:
    ServiceHeartbeat.objects.create(
        service=WORKER_SERVICE,
        hostname=hostname,
        pid=pid,
        seen_at=timezone.now() - timedelta(seconds=seconds_ago),
    )


def test_a_fresh_heartbeat_of_this_host_is_healthy(capsys: pytest.CaptureFixture[str]) -> None:
    beat("box-a", seconds_ago=400, pid=1)
    beat("box-a", seconds_ago=20, pid=2)
    call_command("worker_alive", "--hostname", "box-a", "--max-age", "60")
    assert "worker box-a:2 reported 20 s ago" in capsys.readouterr().out


def test_a_stale_heartbeat_is_unhealthy() -> None:
    beat("box-a", seconds_ago=200)
    with pytest.raises(CommandError, match=r"last reported 200 s ago \(more than 120 s\)"):
        call_command("worker_alive", "--hostname", "box-a", "--max-age", "120")


def test_another_hosts_heartbeat_does_not_count() -> None:
    beat("box-b", seconds_ago=1)
    with pytest.raises(CommandError, match="no worker on box-a has reported in"):
        call_command("worker_alive", "--hostname", "box-a")


# --- a worker that lives but is silent (its liveness file, scheduler/liveness.py) ---------
@pytest.fixture
def stopped_process() -> Iterator[subprocess.Popen[bytes]]:
    """A live process that can do nothing: SIGSTOPped, like the issue's worker."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    os.kill(process.pid, signal.SIGSTOP)
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


def silent_for(path: Path, pid: int, seconds: float) -> Path:
    liveness.beat(path, pid=pid)
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_a_stalled_worker_is_unhealthy_and_killed_with_kill_stalled(
    tmp_path: Path, stopped_process: subprocess.Popen[bytes]
) -> None:
    alive = silent_for(tmp_path / "worker.alive", stopped_process.pid, seconds=100)
    beat("box-a", seconds_ago=1)  # the database still shows a recent heartbeat
    argv = ["--hostname", "box-a", "--liveness-file", str(alive), "--stall-seconds", "60"]
    with pytest.raises(CommandError, match=r"has not beaten for 100 s although its process"):
        call_command("worker_alive", *argv)
    assert stopped_process.poll() is None  # without --kill-stalled: only reported

    with pytest.raises(CommandError, match=r"killed it \(SIGKILL\)"):
        call_command("worker_alive", *argv, "--kill-stalled")
    assert stopped_process.wait(timeout=10) == -signal.SIGKILL


def test_a_beating_worker_or_a_dead_writer_leaves_the_verdict_to_the_heartbeat(
    tmp_path: Path, stopped_process: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    beat("box-a", seconds_ago=20, pid=2)
    fresh = silent_for(tmp_path / "fresh.alive", stopped_process.pid, seconds=5)
    call_command(
        "worker_alive", "--hostname", "box-a", "--liveness-file", str(fresh), "--kill-stalled"
    )
    assert "worker box-a:2 reported 20 s ago" in capsys.readouterr().out
    assert stopped_process.poll() is None
    # An old file of a process that is gone: a worker restarting, nothing to kill.
    stopped_process.kill()
    stopped_process.wait()
    gone = silent_for(tmp_path / "gone.alive", stopped_process.pid, seconds=500)
    call_command(
        "worker_alive", "--hostname", "box-a", "--liveness-file", str(gone), "--kill-stalled"
    )
    assert "worker box-a:2 reported" in capsys.readouterr().out
