"""Writes for the core app."""

from __future__ import annotations

from django.utils import timezone

from webapp.core.models import ServiceHeartbeat


def heartbeat_record(*, service: str, hostname: str, pid: int) -> ServiceHeartbeat:
    """Record that ``service`` on ``hostname``/``pid`` is alive now (an upsert)."""
    heartbeat, _ = ServiceHeartbeat.objects.update_or_create(
        service=service, hostname=hostname, pid=pid, defaults={"seen_at": timezone.now()}
    )
    return heartbeat
