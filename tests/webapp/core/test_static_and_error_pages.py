"""Static files under encoded path traversal, and the project's 404 and 500 pages.

``/static/%2e%2e/%2e%2e/etc/passwd`` (and its ``%2f``, ``%5c`` and double-encoded
variants) must be a 404 that shows no file, in every way the app serves static files:
runserver's handler (DEBUG on, or ``--insecure``), WhiteNoise from the finders (DEBUG off,
``WHITENOISE_USE_FINDERS``; and with autorefresh, as under DEBUG), and plain Django with
no static serving. It was a 500: Django's finders raise ``SuspiciousFileOperation`` and
runserver's handler turns only ``Http404`` into a response (webapp/core/staticfinders.py).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.staticfiles.management.commands.runserver import Command as Runserver
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse
from django.template.loader import get_template
from django.test import Client, override_settings
from django.urls import path

import webapp.urls

SECRETS = {
    "/etc/passwd": b"root:",
    "settings.py": b"SECRET_KEY",
    "__init__.py": b"import",
}
TRAVERSALS = [
    "/static/%2e%2e/%2e%2e/etc/passwd",
    "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/static/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
    "/static/..%2f..%2fwebapp%2fsettings.py",
    "/static/..%2F..%2F..%2F..%2F..%2F..%2Fetc%2Fpasswd",
    "/static/%2e%2e/webapp/settings.py",
    "/static/css/%2e%2e/%2e%2e/webapp/settings.py",
    "/static/%2e%2e%5c%2e%2e%5cwebapp%5csettings.py",
    "/static/..%5c..%5c..%5c..%5c..%5c..%5cetc%5cpasswd",
    "/static/%252e%252e/%252e%252e/webapp/settings.py",  # decoded twice by runserver
    "/static/%252e%252e%252f%252e%252e%252fwebapp%252fsettings.py",
    "/static/vendor/plotly/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/static/vendor/plotly/%2e%2e/__init__.py",
    "/static/admin/%2e%2e/%2e%2e/%2e%2e/__init__.py",
    "/static/%2fetc%2fpasswd",
    "/static//etc/passwd",
    "/static/css%00/app.css",
    "/static/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd",  # overlong UTF-8 dots
]

Fetch = Callable[[str], tuple[int, bytes]]


def server_decode(url: str) -> str:
    """PATH_INFO as a WSGI server sets it (PEP 3333: percent-decoded, latin-1)."""
    return unquote_to_bytes(urlsplit(url).path).decode("iso-8859-1")


def wsgi_get(app: Any, url: str) -> tuple[int, bytes]:
    """GET ``url`` from a WSGI application; an exception is what a server sends as 500."""
    environ = {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": server_decode(url),
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "testserver",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    status: list[str] = []
    # Like Django's test client: the request signals must not close the test's connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        chunks = app(environ, lambda line, headers, exc_info=None: status.append(line))
        body = b"".join(chunks)
        getattr(chunks, "close", lambda: None)()
    except Exception as error:  # noqa: BLE001 (the bug: an exception escaped the handler)
        return 500, repr(error).encode()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
    return int(status[0].split()[0]), body


def assert_not_found(fetch: Fetch, mode: str) -> None:
    assert fetch("/static/css/app.css")[0] == 200, mode  # this mode does serve static files
    for url in TRAVERSALS:
        status, body = fetch(url)
        assert status == 404, (mode, url, status, body[:300])
        for name, marker in SECRETS.items():
            assert marker not in body, (mode, url, name)


@pytest.mark.parametrize(
    ("debug", "insecure"), [(True, False), (False, True)], ids=["debug", "insecure"]
)
def test_runserver_answers_404_to_encoded_traversal(debug: bool, insecure: bool) -> None:
    with override_settings(DEBUG=debug):
        handler = Runserver().get_handler(use_static_handler=True, insecure_serving=insecure)
        assert type(handler).__name__ == "StaticFilesHandler"  # what runserver serves with
        assert_not_found(lambda url: wsgi_get(handler, url), "runserver")
        assert wsgi_get(handler, "/static/favicon.svg")[0] == 200


@pytest.fixture
def whitenoise_middleware() -> list[str]:
    middleware = [name for name in settings.MIDDLEWARE if "whitenoise" not in name]
    middleware.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")
    return middleware


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on-autorefresh"])
def test_whitenoise_from_the_finders_answers_404(
    whitenoise_middleware: list[str], debug: bool, tmp_path: Path
) -> None:
    with override_settings(
        STATIC_ROOT=tmp_path,  # not collected here: the finders serve
        DEBUG=debug,
        MIDDLEWARE=whitenoise_middleware,
        WHITENOISE_USE_FINDERS=True,
        WHITENOISE_AUTOREFRESH=debug,
    ):
        client = Client(raise_request_exception=False)

        def fetch(url: str) -> tuple[int, bytes]:
            response = client.get(url)
            content = b"".join(response.streaming_content) if response.streaming else None
            return response.status_code, content if content is not None else response.content

        assert_not_found(fetch, f"whitenoise debug={debug}")
        if not debug:
            assert b"Page not found" in fetch(TRAVERSALS[0])[1]  # the project's page


@pytest.mark.django_db
def test_without_static_serving_traversal_is_the_projects_404() -> None:
    with override_settings(DEBUG=False):
        client = Client(raise_request_exception=False)
        for url in TRAVERSALS:
            response = client.get(url)
            assert response.status_code == 404, url
            assert b"Page not found" in response.content
            assert not any(marker in response.content for marker in SECRETS.values())


# --------------------------------------------------------------------------- error pages


def explode(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("kaboom-secret-detail")


urlpatterns = [path("test-only/explode/", explode), *webapp.urls.urlpatterns]
"""A test-only URL conf: the app's, plus a view that fails."""


@pytest.fixture
def production_like() -> Iterator[None]:
    with override_settings(DEBUG=False, ROOT_URLCONF=__name__):
        yield


@pytest.mark.django_db
@pytest.mark.usefixtures("production_like")
def test_an_unknown_url_gets_the_projects_404_page(alice: User) -> None:
    anonymous, member = Client(), Client()
    member.force_login(alice)
    for client in (anonymous, member):
        for url in ("/no-such-page/", "/experiments/999999/", "/static/nope.css"):
            response = client.get(url)
            if client is anonymous and url.startswith("/experiments/"):
                assert response.status_code == 302  # to the login page, as for any page
                continue
            assert response.status_code == 404, url
            page = response.content.decode()
            assert "Page not found" in page and "Mutual RL Lab" in page
            assert "css/app.css" in page  # the project's look (base template)
            assert "URLconf" not in page and "urlpatterns" not in page  # no debug page
            assert "Django" not in page
    page = member.get("/no-such-page/").content.decode()
    assert "Log out" in page  # the base template's navigation for a member


@pytest.mark.django_db
@pytest.mark.usefixtures("production_like")
def test_a_failing_view_gets_the_projects_500_page() -> None:
    response = Client(raise_request_exception=False).get("/test-only/explode/")
    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong" in page and "Mutual RL Lab" in page
    assert "kaboom-secret-detail" not in page and "Traceback" not in page
    assert "RuntimeError" not in page


@pytest.mark.django_db
def test_the_500_page_needs_no_database_and_no_context(
    django_assert_num_queries: Callable[..., Any],
) -> None:
    with django_assert_num_queries(0):
        page = get_template("500.html").render()
    assert "Something went wrong" in page and "{%" not in page and "{{" not in page


@pytest.mark.django_db
def test_pages_link_the_favicon(alice: User) -> None:
    client = Client()
    client.force_login(alice)
    assert 'rel="icon" href="/static/favicon.svg"' in client.get("/").content.decode()
