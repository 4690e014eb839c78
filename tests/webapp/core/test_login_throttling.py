"""Login throttling (issue 44, item 3): django-axes, per user name and per client address,
on the site's login and the admin's, with a lock-out page that says when to try again.

Before it, 60 wrong passwords in a row for one user, then the right one, logged in.
Real PostgreSQL, Django's test client with the client address set (``REMOTE_ADDR``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.db.models import F
from django.test import Client
from django.urls import reverse
from playwright.sync_api import Page, expect

from webapp.core.login_throttling import duration_text, lockout_message
from webapp.settings import axes_client_address_settings

pytestmark = pytest.mark.django_db

LIMIT = 10
ADDRESS = "203.0.113.7"
OTHER_ADDRESS = "198.51.100.9"
MESSAGE = "Too many failed logins for this account or address. Try again in 15 minutes."


@pytest.fixture(autouse=True)
def throttling(settings: Any) -> None:
    """The deployed defaults, stated: 10 failures, a 15-minute cool-off."""
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


def log_in(
    username: str, password: str, address: str = ADDRESS, url: str = "", **headers: str
) -> tuple[Any, Client]:
    client = Client(REMOTE_ADDR=address, **headers)
    response = client.post(url or reverse("login"), {"username": username, "password": password})
    return response, client


def assert_logged_in(response: Any, client: Client) -> None:
    assert response.status_code == 302, response.content[:300]
    assert "_auth_user_id" in client.session


def assert_locked_out(response: Any, client: Client) -> None:
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    page = response.content.decode()
    assert MESSAGE in page
    assert 'data-testid="lockout"' in page


def test_the_right_password_is_refused_after_the_limit_of_wrong_ones(alice: User) -> None:
    for attempt in range(LIMIT - 1):
        response, _ = log_in("alice", f"wrong-{attempt}")
        assert response.status_code == 200  # the form again, "wrong password"
    response, client = log_in("alice", "wrong-last")
    assert_locked_out(response, client)  # the limit-th failure already says so
    response, client = log_in("alice", "alice-password")
    assert_locked_out(response, client)
    # The lock-out page is the login page (the site's base template, the form's look).
    page = response.content.decode()
    assert "<title>Log in · Mutual RL Lab</title>" in page
    assert 'name="username"' in page and 'value="alice"' in page
    assert 'name="password"' in page and 'role="alert"' in page


def test_the_user_is_locked_out_from_every_address(alice: User) -> None:
    for attempt in range(LIMIT):
        log_in("alice", f"wrong-{attempt}")
    assert_locked_out(*log_in("alice", "alice-password", address=OTHER_ADDRESS))


def test_the_address_is_locked_out_for_every_user(alice: User, bob: User) -> None:
    """Password spraying: one failure for each of ten names, none of them bob's."""
    for attempt in range(LIMIT):
        log_in(f"someone-{attempt}", "password")
    assert_locked_out(*log_in("bob", "bob-password"))
    assert_logged_in(*log_in("bob", "bob-password", address=OTHER_ADDRESS))


def test_a_forwarded_for_header_sent_by_the_client_changes_nothing(bob: User) -> None:
    """Without a trusted proxy (the default), the address is the TCP peer's: a client
    that makes up a new X-Forwarded-For for each guess is still one address."""
    for attempt in range(LIMIT):
        log_in(f"someone-{attempt}", "password", HTTP_X_FORWARDED_FOR=f"192.0.2.{attempt}")
    assert_locked_out(*log_in("bob", "bob-password", HTTP_X_FORWARDED_FOR="192.0.2.200"))


def test_behind_a_proxy_the_address_it_saw_is_counted(settings: Any, bob: User) -> None:
    """MRL_TRUSTED_PROXY_COUNT=1: every request comes from the proxy (10.0.0.2), which
    appends the address it saw; what the client wrote further left is not read."""
    for name, value in axes_client_address_settings(1).items():
        setattr(settings, name, value)
    proxy = "10.0.0.2"
    for attempt in range(LIMIT):
        forwarded = f"192.0.2.{attempt}, {ADDRESS}"  # a made-up hop, then the real one
        log_in(f"someone-{attempt}", "password", address=proxy, HTTP_X_FORWARDED_FOR=forwarded)
    locked = log_in("bob", "bob-password", address=proxy, HTTP_X_FORWARDED_FOR=ADDRESS)
    assert_locked_out(*locked)
    # Another client behind the same proxy is not locked out.
    other = log_in("bob", "bob-password", address=proxy, HTTP_X_FORWARDED_FOR=OTHER_ADDRESS)
    assert_logged_in(*other)


def test_the_right_password_works_again_after_the_cool_off(alice: User) -> None:
    for attempt in range(LIMIT):
        log_in("alice", f"wrong-{attempt}")
    assert_locked_out(*log_in("alice", "alice-password"))
    # Fifteen minutes pass (every attempt, the refused one too, is that much older).
    AccessAttempt.objects.update(attempt_time=F("attempt_time") - timedelta(minutes=15))
    assert_logged_in(*log_in("alice", "alice-password"))


def test_a_successful_login_resets_the_users_failures(alice: User) -> None:
    for round_ in range(3):  # 3 x 9 failures: locked out at 10 without the resets
        for attempt in range(LIMIT - 1):
            log_in("alice", f"wrong-{round_}-{attempt}", address=f"192.0.2.{attempt}")
        assert_logged_in(*log_in("alice", "alice-password", address=OTHER_ADDRESS))


def test_a_login_of_ones_own_does_not_reset_the_address(alice: User, charlie: User) -> None:
    """The reset is the user's: a client cannot guess alice's password up to the limit,
    log in as charlie (its own account) from the same address and guess on."""
    for attempt in range(LIMIT - 1):
        log_in("alice", f"wrong-{attempt}")
    assert_logged_in(*log_in("charlie", "charlie-password"))
    assert_locked_out(*log_in("alice", "wrong-again"))
    assert_locked_out(*log_in("alice", "alice-password", address=OTHER_ADDRESS))


def test_the_admin_login_is_throttled_too(alice: User) -> None:
    alice.is_staff = alice.is_superuser = True
    alice.save()
    url = reverse("admin:login")
    for attempt in range(LIMIT - 1):
        response, _ = log_in("alice", f"wrong-{attempt}", url=url)
        assert response.status_code == 200
    response, client = log_in("alice", "alice-password", address=OTHER_ADDRESS, url=url)
    assert_logged_in(response, client)  # below the limit, and the failures are reset
    for attempt in range(LIMIT):
        log_in("alice", f"wrong-{attempt}", url=url)
    response, client = log_in("alice", "alice-password", url=url)
    assert_locked_out(response, client)
    page = response.content.decode()
    assert 'id="login-form"' in page and "Django administration" in page  # the admin's
    assert 'class="errornote"' in page
    # The site's login counts the same failures.
    assert_locked_out(*log_in("alice", "alice-password"))


def test_an_oversized_admin_user_name_is_a_failure_not_a_500(alice: User) -> None:
    """The admin's form does not check the name's length; axes' column holds 255."""
    response, _ = log_in("a" * 10_240, "x", url=reverse("admin:login"))
    assert response.status_code == 200
    assert AccessAttempt.objects.get().username == "a" * 255


@pytest.mark.parametrize(
    ("cool_off", "text"),
    [
        (timedelta(minutes=15), "15 minutes"),
        (timedelta(minutes=1), "1 minute"),
        (timedelta(seconds=90), "2 minutes"),
        (timedelta(hours=2), "2 hours"),
        (timedelta(seconds=30), "30 seconds"),
        (timedelta(seconds=0.2), "1 second"),
    ],
)
def test_the_wait_is_said_as_a_person_says_it(cool_off: timedelta, text: str) -> None:
    assert duration_text(cool_off) == text
    assert lockout_message(cool_off).endswith(f"Try again in {text}.")


def test_the_message_follows_the_configured_cool_off(settings: Any, alice: User) -> None:
    settings.AXES_COOLOFF_TIME = timedelta(hours=1)
    for attempt in range(LIMIT):
        log_in("alice", f"wrong-{attempt}")
    response, _ = log_in("alice", "alice-password")
    assert response.status_code == 429
    assert "Try again in 1 hour." in response.content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)  # the live server is another thread
def test_the_browser_shows_the_lock_out_on_the_login_form(
    page: Page, live_server: Any, alice: User
) -> None:
    url = f"{live_server.url}/accounts/login/"
    for attempt in range(LIMIT):
        page.goto(url)
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", f"wrong-{attempt}")
        page.click("button[type=submit]")
    page.fill("input[name=password]", "alice-password")  # the lock-out page's own form
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_have_text(MESSAGE)
    expect(page.locator("input[name=username]")).to_have_value("alice")
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    assert page.url == url  # not logged in: still the login page
