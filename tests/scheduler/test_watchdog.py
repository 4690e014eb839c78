"""The worker watchdog's decisions (pure), and a real worker it ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler import liveness
from scheduler.watchdog import EXIT_STALLED, Watchdog, WatchdogConfig, WorkerState

CONFIG = WatchdogConfig(stall_seconds=60, stop_grace_seconds=15)
HEALTHY = WorkerState(running=True, exitcode=0, consumer_connected=True)
DEAF = WorkerState(running=True, exitcode=0, consumer_connected=False)


def test_a_connected_worker_is_left_alone_however_long_it_runs() -> None:
    watchdog = Watchdog(CONFIG, now=0)
    assert all(watchdog.observe(HEALTHY, now=t) is None for t in range(0, 10_000, 7))


def test_a_short_outage_is_ridden_out() -> None:
    watchdog = Watchdog(CONFIG, now=0)
    assert watchdog.observe(HEALTHY, now=100) is None
    assert watchdog.observe(DEAF, now=120) is None
    assert watchdog.observe(DEAF, now=159) is None
    assert watchdog.observe(HEALTHY, now=161) is None  # reconnected: the clock starts over
    assert watchdog.observe(DEAF, now=220) is None


def test_a_worker_without_a_connection_for_stall_seconds_exits_stalled() -> None:
    watchdog = Watchdog(CONFIG, now=0)
    assert watchdog.observe(HEALTHY, now=100) is None
    assert watchdog.observe(DEAF, now=159) is None
    verdict = watchdog.observe(DEAF, now=160)
    assert verdict is not None and verdict.exitcode == EXIT_STALLED
    assert "no broker connection for 60 s" in verdict.reason


def test_a_worker_that_never_connects_exits_stalled_too() -> None:
    watchdog = Watchdog(CONFIG, now=5)
    assert watchdog.observe(DEAF, now=64) is None
    assert watchdog.observe(DEAF, now=65) is not None


def test_a_shutdown_after_a_failure_that_wedges_ends_with_its_exit_code() -> None:
    watchdog = Watchdog(CONFIG, now=0)
    failing = WorkerState(running=False, exitcode=1, consumer_connected=False)
    assert watchdog.observe(failing, now=10) is None
    assert watchdog.observe(failing, now=24) is None
    verdict = watchdog.observe(failing, now=25)
    assert verdict is not None and verdict.exitcode == 1
    assert "stopping after a failure for 15 s" in verdict.reason


def test_a_normal_shutdown_is_never_cut_short() -> None:
    watchdog = Watchdog(CONFIG, now=0)
    stopping = WorkerState(running=False, exitcode=0, consumer_connected=False)
    assert all(watchdog.observe(stopping, now=t) is None for t in range(0, 3600, 10))


def test_the_config_refuses_non_positive_times() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        WatchdogConfig(stall_seconds=0)


def test_a_real_worker_whose_broker_never_answers_exits_non_zero(tmp_path: Path) -> None:
    """A worker pointed at a port where no broker listens retries forever by itself;
    the watchdog ends it after MRL_WORKER_STALL_SECONDS with EXIT_STALLED."""
    env = {
        **os.environ,
        "CELERY_BROKER_URL": "redis://127.0.0.1:9/0",  # discard: nothing listens
        "MRL_WORKER_STALL_SECONDS": "3",
    }
    argv = [sys.executable, "-m", "celery", "-A", "scheduler", "worker", "--pool=solo"]
    argv += ["-Q", "mrl-watchdog-test", "--without-mingle", "--without-gossip"]
    start = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=90, check=False)
    log = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    assert done.returncode == EXIT_STALLED, log[-3000:]
    assert "watchdog: the worker has had no broker connection for 3 s" in log
    assert time.monotonic() - start < 60


def test_a_real_worker_beats_in_its_liveness_file_by_itself(tmp_path: Path) -> None:
    """The worker's own thread beats (every liveness.BEAT_SECONDS) with no broker, beat or
    database behind it: a supervisor reading this file never mistakes a beat, broker or
    database outage for a stalled worker (scheduler/liveness.py)."""
    alive = tmp_path / "worker.alive"
    env = {
        **os.environ,
        "CELERY_BROKER_URL": "redis://127.0.0.1:9/0",  # discard: nothing listens
        "MRL_WORKER_STALL_SECONDS": "120",
        liveness.ENV_VAR: str(alive),
    }
    argv = [sys.executable, "-m", "celery", "-A", "scheduler", "worker", "--pool=solo"]
    argv += ["-Q", "mrl-watchdog-test", "--without-mingle", "--without-gossip"]
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        beats: list[float] = []
        deadline = time.monotonic() + 90
        while len(beats) < 2:
            assert worker.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, (
                f"two beats of the worker not within 90 s: {beats}\n"
                + log.read_text(errors="replace")[-3000:]
            )
            last = liveness.read(alive)
            if last is not None and (not beats or last.at != beats[-1]):
                assert last.pid == worker.pid
                beats.append(last.at)
            time.sleep(0.2)
        assert beats[1] - beats[0] < 3 * liveness.BEAT_SECONDS
    finally:
        worker.kill()
        worker.wait()
