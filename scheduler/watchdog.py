"""A Celery worker that can no longer consume exits non-zero instead of idling.

Celery's worker can end up alive but deaf: after "Unrecoverable error" (kombu failing to
restore an unacknowledged message on a dead Redis connection, say) it starts a warm
shutdown that can wedge on the broker for good, and a consumer that lost its connection
and never got it back consumes nothing either. Whatever supervises the worker (`make
demo`'s supervisor, docker's restart policy) only acts when the process exits, so a
thread in the worker watches for both and ends the process:

- the worker has been *stopping because of a failure* (a non-zero exit code) for
  ``stop_grace_seconds``: exit with that code;
- the worker runs but its consumer has not been connected for ``stall_seconds``: exit
  with :data:`EXIT_STALLED`.

A normal warm shutdown (SIGTERM, exit code 0) is left alone: it ends when the running
task does. :class:`Watchdog` decides; :func:`start` feeds it from the live worker once a
second.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery.bootsteps import RUN

from scheduler import liveness

logger = logging.getLogger(__name__)

EXIT_STALLED = 75  # EX_TEMPFAIL: try again (a fresh worker)


@dataclass(frozen=True)
class WatchdogConfig:
    """When the watchdog ends a worker (settings ``MRL_WORKER_STALL_SECONDS`` and
    ``MRL_WORKER_STOP_GRACE_SECONDS``)."""

    stall_seconds: float = 60.0
    """How long the consumer may stay disconnected (the broker down, a reconnect that
    never comes back) before the worker exits; a broker outage shorter than this is
    ridden out by Celery's own reconnecting."""
    stop_grace_seconds: float = 15.0
    """How long a worker stopping because of a failure may take to exit by itself."""

    def __post_init__(self) -> None:
        if self.stall_seconds <= 0 or self.stop_grace_seconds <= 0:
            raise ValueError(
                f"stall_seconds={self.stall_seconds} and stop_grace_seconds="
                f"{self.stop_grace_seconds} must be positive (seconds)"
            )


@dataclass(frozen=True)
class WorkerState:
    """What the watchdog reads of the worker at one moment."""

    running: bool
    """The worker's blueprint is running (not stopping, not stopped)."""
    exitcode: int
    """The exit code the worker will end with (non-zero once a failure stops it)."""
    consumer_connected: bool
    """The consumer is running with a live broker connection."""


@dataclass(frozen=True)
class Verdict:
    """End the worker with ``exitcode``; ``reason`` goes to the log."""

    exitcode: int
    reason: str


class Watchdog:
    """Turns a sequence of :class:`WorkerState` readings into at most one :class:`Verdict`."""

    def __init__(self, config: WatchdogConfig, now: float) -> None:
        self.config = config
        self._connected_at = now  # a worker starting up has stall_seconds to connect
        self._failing_since: float | None = None

    def observe(self, state: WorkerState, now: float) -> Verdict | None:
        if not state.running:
            if state.exitcode == 0:
                return None  # a normal shutdown: it ends when the running task does
            if self._failing_since is None:
                self._failing_since = now
            stuck_for = now - self._failing_since
            if stuck_for >= self.config.stop_grace_seconds:
                return Verdict(
                    state.exitcode,
                    f"the worker has been stopping after a failure for {stuck_for:.0f} s",
                )
            return None
        if state.consumer_connected:
            self._connected_at = now
            return None
        deaf_for = now - self._connected_at
        if deaf_for >= self.config.stall_seconds:
            return Verdict(
                EXIT_STALLED, f"the worker has had no broker connection for {deaf_for:.0f} s"
            )
        return None


def read_state(worker: Any) -> WorkerState:
    """A :class:`WorkerState` of a live ``celery.worker.WorkController``."""
    blueprint = getattr(worker, "blueprint", None)
    consumer = getattr(worker, "consumer", None)
    connection = getattr(consumer, "connection", None)
    consumer_blueprint = getattr(consumer, "blueprint", None)
    return WorkerState(
        running=blueprint is not None and blueprint.state == RUN,
        exitcode=int(getattr(worker, "exitcode", 0) or 0),
        consumer_connected=(
            consumer_blueprint is not None
            and consumer_blueprint.state == RUN
            and connection is not None
            and bool(connection.connected)
        ),
    )


def start(
    worker: Any,
    config: WatchdogConfig,
    interval: float = 1.0,
    liveness_path: Path | None = None,
) -> threading.Thread:
    """Watch ``worker`` from a daemon thread; on a verdict, log it and end the process.

    The thread also beats in the worker's liveness file (``liveness_path``, by default
    the file named by ``$MRL_WORKER_LIVENESS_FILE``, if any) every
    :data:`scheduler.liveness.BEAT_SECONDS`, so that whoever supervises the worker can
    tell a live process from a stopped or frozen one (scheduler/liveness.py).
    """
    if liveness_path is None and os.environ.get(liveness.ENV_VAR):
        liveness_path = Path(os.environ[liveness.ENV_VAR])

    def beat() -> None:
        if liveness_path is None:
            return
        try:
            liveness.beat(liveness_path)
        except OSError as exc:  # the next beat tries again; a supervisor may act first
            logger.warning("watchdog: cannot write the liveness file %s: %s", liveness_path, exc)

    def watch() -> None:
        watchdog = Watchdog(config, now=time.monotonic())
        beat()
        last_beat = time.monotonic()
        while True:
            time.sleep(interval)
            now = time.monotonic()
            if now - last_beat >= liveness.BEAT_SECONDS:
                beat()
                last_beat = now
            verdict = watchdog.observe(read_state(worker), now=now)
            if verdict is not None:
                logger.critical(
                    "watchdog: %s; exiting with code %d so that a fresh worker replaces it",
                    verdict.reason,
                    verdict.exitcode,
                )
                logging.shutdown()
                sys.stderr.flush()
                os._exit(verdict.exitcode)

    thread = threading.Thread(target=watch, name="mrl-worker-watchdog", daemon=True)
    thread.start()
    return thread
