"""Personal API tokens (issue 34): the settings page, storage, and what a token may do.

A token reads what its owner may read (the lab's permissions, as on the pages), writes
nothing, stops at revocation; run ingestion tokens stay separate. Actors: alice owns the
run, bob is her labmate, charlie is in another lab.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.webapp.metrics.test_api_support import make_run, point, post_batch
from webapp.core.models import PersonalToken
from webapp.core.services import (
    personal_token_authenticate,
    personal_token_create,
    personal_token_revoke,
)
from webapp.runs import services
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

PAGE = "/settings/tokens/"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_token_is_shown_once_and_stored_only_as_its_hash(alice: User) -> None:
    client = Client()
    client.force_login(alice)
    created = client.post(PAGE, {"name": "laptop notebook"})
    assert created.status_code == 200
    secret = re.search(r'data-testid="token-secret">(mrlp_[\w-]+)<', created.content.decode())
    assert secret is not None
    token = secret[1]
    record = PersonalToken.objects.get(user=alice)
    assert (
        record.name == "laptop notebook"
        and record.token_hash == hashlib.sha256(token.encode()).hexdigest()
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT t::text FROM core_personaltoken t")
        assert not any(token in row[0] or token[12:] in row[0] for row in cursor.fetchall())
    listing = client.get(PAGE).content.decode()
    assert token not in listing  # never shown again
    assert "laptop notebook" in listing and record.prefix in listing and "never" in listing


def test_the_page_names_lists_and_revokes_only_ones_own_tokens(alice: User, bob: User) -> None:
    alices = personal_token_create(user=alice, name="alice's").record
    bobs = personal_token_create(user=bob, name="bob's").record
    client = Client()
    client.force_login(bob)
    page = client.get(PAGE).content.decode()
    assert "bob&#x27;s" in page and "alice&#x27;s" not in page
    refused = client.post(PAGE, {"revoke": str(alices.pk)}, follow=True)
    assert "No such active token of yours." in refused.content.decode()
    alices.refresh_from_db()
    assert alices.revoked_at is None
    client.post(PAGE, {"revoke": str(bobs.pk)})
    bobs.refresh_from_db()
    assert bobs.revoked_at is not None
    assert "revoked" in client.get(PAGE).content.decode()
    empty = client.post(PAGE, {"name": "   "})
    assert 'data-testid="error-name"' in empty.content.decode()
    assert PersonalToken.objects.filter(user=bob).count() == 1
    assert Client().get(PAGE).status_code == 302  # anonymous: to the login page


def test_a_token_reads_as_its_owner(client: Client, alice: User, bob: User, charlie: User) -> None:
    run = make_run(alice)
    url = reverse("api:status", args=[run.pk])
    for user, status in ((alice, 200), (bob, 200), (charlie, 404)):
        token = personal_token_create(user=user, name="n").secret
        assert client.get(url, headers=bearer(token)).status_code == status, user
        listed = client.get("/api/v1/runs", headers=bearer(token)).json()["runs"]
        assert [row["id"] for row in listed] == ([run.pk] if status == 200 else [])
    # the compare data too: every read endpoint takes it
    token = personal_token_create(user=bob, name="m").secret
    assert client.get(f"/api/v1/compare?runs={run.pk}", headers=bearer(token)).status_code == 200


def test_a_token_writes_nothing(client: Client, alice: User) -> None:
    run = make_run(alice)
    token = personal_token_create(user=alice, name="n").secret
    # not a run token: ingestion refuses it
    batch = {"points": [point(1)], "status": {"state": "running"}}
    assert post_batch(client, run, token, batch).status_code == 401
    assert not run.series.exists()
    # no page accepts it (the pages are session-only): no cancel, no token page changes
    cancel = client.post(reverse("dashboard:run_cancel", args=[run.pk]), headers=bearer(token))
    assert cancel.status_code == 302 and cancel["Location"].startswith("/accounts/login/")
    assert Run.objects.get(pk=run.pk).state == run.state
    made = client.post(PAGE, {"name": "more"}, headers=bearer(token))
    assert made.status_code == 302 and PersonalToken.objects.count() == 1
    # a read endpoint asked to write: not GET
    response = client.post(reverse("api:runs"), headers=bearer(token))
    assert response.status_code in (403, 405)


def test_revoked_wrong_and_run_tokens_read_nothing(client: Client, alice: User) -> None:
    run = make_run(alice)
    issued = personal_token_create(user=alice, name="n")
    url = reverse("api:runs")
    assert client.get(url, headers=bearer(issued.secret)).status_code == 200
    assert personal_token_revoke(user=alice, token_id=issued.record.pk)
    revoked = client.get(url, headers=bearer(issued.secret))
    assert revoked.status_code == 401 and "personal token" in revoked.json()["error"]
    assert revoked["WWW-Authenticate"] == 'Bearer realm="read"'
    assert not personal_token_revoke(user=alice, token_id=issued.record.pk)  # already
    assert client.get(url, headers=bearer("mrlp_" + "x" * 43)).status_code == 401
    run_token = services.run_token_issue(run)
    assert client.get(url, headers=bearer(run_token)).status_code == 401
    # a bad header decides alone, even beside a logged-in session
    client.force_login(alice)
    assert client.get(url, headers=bearer(issued.secret)).status_code == 401
    assert client.get(url).status_code == 200


def test_last_used_is_noted_at_most_once_a_minute(alice: User) -> None:
    issued = personal_token_create(user=alice, name="n")
    assert issued.record.last_used_at is None
    first = personal_token_authenticate(issued.secret)
    assert first is not None and first.user == alice
    used = PersonalToken.objects.get(pk=issued.record.pk).last_used_at
    assert used is not None
    personal_token_authenticate(issued.secret)
    assert PersonalToken.objects.get(pk=issued.record.pk).last_used_at == used
    five_minutes_ago = timezone.now() - timedelta(minutes=5)
    PersonalToken.objects.filter(pk=issued.record.pk).update(last_used_at=five_minutes_ago)
    personal_token_authenticate(issued.secret)
    noted = PersonalToken.objects.get(pk=issued.record.pk).last_used_at
    assert noted is not None and noted - five_minutes_ago > timedelta(minutes=4)
    User.objects.filter(pk=alice.pk).update(is_active=False)
    assert personal_token_authenticate(issued.secret) is None
