from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from webapp.core.models import ServiceHeartbeat

pytestmark = pytest.mark.django_db


def test_the_suite_runs_on_postgres() -> None:
    assert connection.vendor == "postgresql"


def test_it_redirects_anonymous_users_to_login(client: Client) -> None:
    response = client.get(reverse("dashboard:index"))
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next=/"


def test_it_serves_the_login_page(client: Client) -> None:
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b"csrfmiddlewaretoken" in response.content


def test_it_logs_in_and_shows_an_empty_dashboard(client: Client, alice: User) -> None:
    response = client.post(
        reverse("login"), {"username": "alice", "password": "alice-password"}, follow=True
    )
    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == reverse("dashboard:index")
    assert b"No experiments yet." in response.content
    assert b"postgresql" in response.content


def test_it_rejects_a_wrong_password_with_a_message(client: Client, alice: User) -> None:
    response = client.post(reverse("login"), {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content


def test_it_shows_the_worker_offline_without_a_recent_heartbeat(
    client: Client, alice: User
) -> None:
    ServiceHeartbeat.objects.create(
        service="celery-worker",
        hostname="h",
        pid=1,
        seen_at=timezone.now() - timedelta(minutes=10),
    )
    client.force_login(alice)
    response = client.get(reverse("dashboard:index"))
    assert b'<span class="bad">offline</span>' in response.content


def test_it_shows_the_worker_online_after_a_heartbeat(client: Client, alice: User) -> None:
    ServiceHeartbeat.objects.create(
        service="celery-worker", hostname="h", pid=1, seen_at=timezone.now()
    )
    client.force_login(alice)
    response = client.get(reverse("dashboard:index"))
    assert b'<span class="ok">online</span>' in response.content


def test_healthz_reports_the_database(client: Client) -> None:
    response = client.get(reverse("healthz"))
    assert response.status_code == 200
    assert response.json() == {"ok": True, "database": "postgresql"}
