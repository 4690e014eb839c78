"""Exit 0 if a Celery worker on this host reported in within ``--max-age`` seconds, else 1.

docker/compose.yml's worker healthcheck: the worker records its heartbeat (beat's
``worker_heartbeat`` task, through the broker, into the database) under this machine's
host name, so a fresh one proves the whole path works: broker, consumer, database.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from webapp.core.models import ServiceHeartbeat
from webapp.core.selectors import WORKER_SERVICE


class Command(BaseCommand):
    help = "Exit 0 if a worker on this host reported in within --max-age seconds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--max-age", type=float, default=120.0, help="seconds")
        parser.add_argument("--hostname", default=socket.gethostname())

    def handle(self, *args: Any, max_age: float, hostname: str, **options: Any) -> None:
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
