"""Exit 0 if a Celery worker on this host reported in within ``--max-age`` seconds, else 1.

docker/compose.yml's worker healthcheck: the worker records its heartbeat (beat's
``worker_heartbeat`` task, through the broker, into the database) under this machine's
host name, so a fresh one proves the whole path works: broker, consumer, database.

First, a worker that lives but is silent: when the worker's liveness file
(scheduler/liveness.py, ``--liveness-file``, by default ``$MRL_WORKER_LIVENESS_FILE``)
has not changed for ``--stall-seconds`` although the process that wrote it lives (it is
SIGSTOPped or frozen), the command fails, and with ``--kill-stalled`` it first kills
that process with SIGKILL: in compose the worker then exits, and ``restart:
unless-stopped`` starts its container again (docker alone never restarts an "unhealthy"
container). That beat is the worker's own, so a dead beat, broker or database makes the
worker unhealthy but never gets it killed.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from scheduler import liveness
from webapp.core.models import ServiceHeartbeat
from webapp.core.selectors import WORKER_SERVICE


def _lives(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Command(BaseCommand):
    help = (
        "Exit 0 if a worker on this host reported in within --max-age seconds; fail (and "
        "with --kill-stalled, SIGKILL it) if its liveness file is stale."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--max-age", type=float, default=120.0, help="seconds")
        parser.add_argument("--hostname", default=socket.gethostname())
        parser.add_argument(
            "--liveness-file",
            type=Path,
            default=os.environ.get(liveness.ENV_VAR) or None,
            help=f"the worker's liveness file (default: ${liveness.ENV_VAR}; none: no check)",
        )
        parser.add_argument(
            "--stall-seconds",
            type=float,
            default=liveness.StallPolicy.stall_seconds,
            help="a liveness file older than this, its process alive, means stalled "
            "(default %(default).0f)",
        )
        parser.add_argument(
            "--kill-stalled",
            action="store_true",
            help="SIGKILL a stalled worker (its container's restart policy replaces it)",
        )

    def handle(
        self,
        *args: Any,
        max_age: float,
        hostname: str,
        liveness_file: Path | None,
        stall_seconds: float,
        kill_stalled: bool,
        **options: Any,
    ) -> None:
        if liveness_file is not None:
            self._check_liveness(Path(liveness_file), stall_seconds, kill_stalled)
        latest = (
            ServiceHeartbeat.objects.filter(service=WORKER_SERVICE, hostname=hostname)
            .order_by("-seen_at")
            .first()
        )
        if latest is None:
            raise CommandError(f"no worker on {hostname} has reported in")
        age = timezone.now() - latest.seen_at
        if age > timedelta(seconds=max_age):
            raise CommandError(
                f"the worker on {hostname} last reported {age.total_seconds():.0f} s ago "
                f"(more than {max_age:.0f} s)"
            )
        self.stdout.write(
            f"worker {hostname}:{latest.pid} reported {age.total_seconds():.0f} s ago"
        )

    def _check_liveness(self, path: Path, stall_seconds: float, kill_stalled: bool) -> None:
        """Fail for a live worker whose beats stopped; no file or a dead writer: no verdict
        here (a worker starting up, or one that exited and is being restarted)."""
        last = liveness.read(path)
        if last is None or not _lives(last.pid):
            return
        silent_for = time.time() - last.at
        policy = liveness.StallPolicy(stall_seconds=stall_seconds)
        reason = policy.stall_reason(alive_for=float("inf"), silent_for=silent_for)
        if reason is None:
            return
        message = f"the worker (pid {last.pid}) {reason} although its process lives"
        if not kill_stalled:
            raise CommandError(f"{message} (stopped? frozen?)")
        if last.pid == 1:
            raise CommandError(
                f"{message}, and as PID 1 it cannot be killed from inside its container "
                "(run it under an init: compose's `init: true`)"
            )
        liveness.kill_hard(last.pid)
        raise CommandError(f"{message}: killed it (SIGKILL) so that a fresh one replaces it")
