"""The compose worker's healthcheck: `manage.py worker_alive`."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

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
