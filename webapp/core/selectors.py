"""Reads for the core app."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from webapp.core.models import ServiceHeartbeat

# Beat asks every worker to report every 30 s; three missed reports means "offline".
HEARTBEAT_STALE_AFTER = timedelta(seconds=90)


def heartbeat_latest(*, service: str) -> ServiceHeartbeat | None:
    """The most recent heartbeat of ``service``, or None if it never reported."""
    return ServiceHeartbeat.objects.filter(service=service).order_by("-seen_at").first()


def service_is_online(*, service: str) -> bool:
    """True if ``service`` reported within :data:`HEARTBEAT_STALE_AFTER`."""
    latest = heartbeat_latest(service=service)
    return latest is not None and timezone.now() - latest.seen_at <= HEARTBEAT_STALE_AFTER
