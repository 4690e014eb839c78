"""Every response carries the Content-Security-Policy (webapp/core/csp.py): every route of
the URL conf (enumerated, so a new view is covered without editing this file), for its
owner and for an anonymous visitor (the redirect to the login page), Django's admin and
the error pages. That the pages work under it is tested in Chromium
(tests/browser/test_csp.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse

from tests.webapp.test_security import concrete, logged_in, routes
from tests.webapp.test_security import objects as objects
from webapp.core.csp import HEADER, POLICY, ContentSecurityPolicyMiddleware


def test_the_policy_is_the_strict_one() -> None:
    assert POLICY == (
        "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'self'; "
        "form-action 'self'; frame-ancestors 'none'; img-src 'self' data: blob:; "
        "style-src 'self' 'unsafe-inline'"
    )


def test_every_route_answers_with_the_policy(alice: User, objects: dict[str, Any]) -> None:
    owner, anonymous = logged_in(alice), logged_in(None)
    missing = []
    for name, route in routes():
        url, _ = concrete(route, objects)
        for who, client in (("alice", owner), ("anonymous", anonymous)):
            response = client.get(url)
            if response.get(HEADER) != POLICY:
                missing.append((name, url, who, response.status_code, response.get(HEADER)))
    assert not missing, missing


def test_admin_and_error_pages_answer_with_the_policy(alice: User) -> None:
    admin = User.objects.create_superuser("root", password="root-password")
    for client, url, status in (
        (logged_in(None), "/admin/login/", 200),
        (logged_in(admin), "/admin/", 200),
        (logged_in(admin), "/admin/runs/run/", 200),
        (logged_in(alice), "/no/such/page/", 404),
        (logged_in(None), "/api/v1/runs", 401),
    ):
        response = client.get(url)
        assert response.status_code == status, url
        assert response[HEADER] == POLICY, url


def test_a_response_with_its_own_policy_keeps_it() -> None:
    def view(request: HttpRequest) -> HttpResponse:
        response = HttpResponse("a page of its own")
        response[HEADER] = "default-src 'none'"
        return response

    response = ContentSecurityPolicyMiddleware(view)(HttpRequest())
    assert response[HEADER] == "default-src 'none'"
