"""Reads for the core app."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from webapp.core.models import ServiceHeartbeat

# The service name the Celery worker reports under (scheduler.tasks.worker_heartbeat).
WORKER_SERVICE = "celery-worker"


def offline_after() -> timedelta:
    """How long without a heartbeat means "offline" (``MRL_WORKER_OFFLINE_AFTER_SECONDS``;
    beat asks for one every ``MRL_WORKER_HEARTBEAT_SECONDS``)."""
    return timedelta(seconds=settings.WORKER_OFFLINE_AFTER_SECONDS)


def heartbeat_latest(*, service: str) -> ServiceHeartbeat | None:
    """The most recent heartbeat of ``service``, or None if it never reported."""
    return ServiceHeartbeat.objects.filter(service=service).order_by("-seen_at").first()


def service_is_online(*, service: str) -> bool:
    """True if ``service`` reported within :func:`offline_after`."""
    latest = heartbeat_latest(service=service)
    return latest is not None and timezone.now() - latest.seen_at <= offline_after()


@dataclass(frozen=True)
class WorkerStatus:
    """Whether any Celery worker reported in recently, and what to tell the user if not.

    ``message`` is empty when online, else e.g. "No worker has been seen for 3 min" or
    "No worker has reported yet"; each page adds what that means for it (:meth:`notice`).
    """

    online: bool
    last_seen: datetime | None
    seconds_since: float | None
    offline_after_seconds: float
    message: str

    def notice(self, consequence: str) -> str:
        """``"<message>: <consequence>"`` when offline, ``""`` when online."""
        return "" if self.online else f"{self.message}: {consequence}"

    def as_json(self) -> dict[str, Any]:
        return {
            "online": self.online,
            "last_seen": None if self.last_seen is None else self.last_seen.isoformat(),
            "seconds_since": self.seconds_since,
            "offline_after_seconds": self.offline_after_seconds,
            "message": self.message,
        }


def duration_text(seconds: float) -> str:
    """A rough, plain duration: "45 s", "3 min", "5 h", "2 days" (rounded down)."""
    whole = int(max(0.0, seconds))
    if whole < 120:
        return f"{whole} s"
    if whole < 2 * 3600:
        return f"{whole // 60} min"
    if whole < 2 * 86400:
        return f"{whole // 3600} h"
    return f"{whole // 86400} days"


def worker_status(*, now: datetime | None = None) -> WorkerStatus:
    """The Celery workers' liveness, from their most recent heartbeat."""
    latest = heartbeat_latest(service=WORKER_SERVICE)
    limit = settings.WORKER_OFFLINE_AFTER_SECONDS
    if latest is None:
        return WorkerStatus(
            online=False,
            last_seen=None,
            seconds_since=None,
            offline_after_seconds=limit,
            message="No worker has reported yet",
        )
    # A clock a little ahead on the worker's host must not read as "seen in the future".
    since = max(0.0, ((now or timezone.now()) - latest.seen_at).total_seconds())
    online = since <= limit
    return WorkerStatus(
        online=online,
        last_seen=latest.seen_at,
        seconds_since=round(since, 1),
        offline_after_seconds=limit,
        message="" if online else f"No worker has been seen for {duration_text(since)}",
    )
