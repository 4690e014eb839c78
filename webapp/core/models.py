"""Service heartbeats: the dashboard shows whether a Celery worker is alive."""

from django.db import models


class ServiceHeartbeat(models.Model):
    """The last time a background service (e.g. a Celery worker) reported in.

    One row per (service, hostname, pid); each report updates ``seen_at``.
    """

    service = models.CharField(max_length=64, help_text="e.g. 'celery-worker'")
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    seen_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["service", "hostname", "pid"], name="heartbeat_unique_process"
            )
        ]

    def __str__(self) -> str:
        return f"{self.service}@{self.hostname}:{self.pid}"
