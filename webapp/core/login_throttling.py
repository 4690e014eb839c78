"""Login throttling: what django-axes is told to do beyond its settings (webapp/settings.py,
"login throttling").

axes counts the failed logins and refuses a locked-out client in its authentication
backend; this module gives the refusal its page (the login form, with a message that
says when to try again), bounds the user name it stores, and scopes the reset that a
successful login makes.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from webapp.core.forms import LoginForm

USERNAME_COLUMN_LENGTH = 255
"""axes' ``AccessAttempt.username`` column: a longer name (the admin's login form does not
check the length) is cut to it, instead of failing the insert with a 500."""


def duration_text(delta: timedelta) -> str:
    """``delta`` as a person says it, rounded up: "15 minutes", "2 hours", "1 minute",
    "30 seconds" (rounded up, so the client never tries again too early)."""
    seconds = max(1, math.ceil(delta.total_seconds()))
    if seconds < 60:
        value, unit = seconds, "second"
    elif seconds % 3600 == 0:
        value, unit = seconds // 3600, "hour"
    else:
        value, unit = math.ceil(seconds / 60), "minute"
    return f"{value} {unit}{'' if value == 1 else 's'}"


def lockout_message(cool_off: timedelta) -> str:
    """What the lock-out page says: why, and when to try again. Every attempt during a
    lock-out counts as a failure (axes' ``AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT``),
    so the lock lifts one cool-off after this attempt."""
    return (
        "Too many failed logins for this account or address. "
        f"Try again in {duration_text(cool_off)}."
    )


def attempted_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """The user name axes counts failures under (``AXES_USERNAME_CALLABLE``): the one
    given to ``authenticate()``, else the form's, cut to the column's length."""
    field = get_user_model().USERNAME_FIELD
    username = credentials.get(field) if credentials else request.POST.get(field)
    if username is None:
        return None
    return str(username)[:USERNAME_COLUMN_LENGTH]


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """The refused login's page (``AXES_LOCKOUT_CALLABLE``), HTTP 429: the login form it
    came from (the site's or the admin's), empty but for the user name, under the
    lock-out message."""
    cool_off = get_cool_off(request) or timedelta(0)
    context: dict[str, Any] = {"lockout_message": lockout_message(cool_off)}
    username = attempted_username(request, credentials) or ""
    initial = {get_user_model().USERNAME_FIELD: username}
    if request.path == reverse("admin:login"):
        context |= admin.site.each_context(request)
        context |= {
            "title": "Log in",
            "app_path": request.get_full_path(),
            "form": AdminAuthenticationForm(request, initial=initial),
            "username": username,
        }
        return render(request, "admin/login.html", context, status=429)
    context |= {"form": LoginForm(request, initial=initial), "next": ""}
    return render(request, "registration/login.html", context, status=429)


def reset_on_success(sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
    """A successful login clears its user name's failures (``user_logged_in``).

    Not axes' own ``AXES_RESET_ON_SUCCESS``: that deletes every attempt matching any
    lock-out parameter, the client address's included, so a client could guess another
    user's password up to the limit, log in to an account of its own, and guess again,
    without end. Here the address's count is left to expire."""
    if getattr(settings, "AXES_ENABLED", True):
        AxesProxyHandler.reset_attempts(username=user.get_username())
