"""The Content-Security-Policy header on every response (issue 44).

The pages escape every string from the server (templates autoescape; the scripts build
the DOM through ``textContent``), so a CSP is the second line: should some string ever
slip through as markup, the browser still refuses to run it. The policy is strict because
the pages were written for it: every script is a file under static/js (or Plotly's, served
from our own static files), no template has an inline ``<script>`` with code or an
``on...=`` handler, and the page data travels in ``<script type="application/json">``
blocks (``json_script``), which the browser parses as data and never executes.

``POLICY``, directive by directive (checked in Chromium on every main page, the Django
admin's included, by tests/browser/test_csp.py):

- ``default-src 'self'``: whatever a directive below does not name (fetch/XHR through
  ``connect-src``, fonts, media, workers, manifests) comes from this site only. The pages
  poll our own JSON API and nothing else.
- ``script-src 'self'``: scripts are files from this site only: no inline code, no event
  handler attributes, no ``javascript:`` URLs, no ``eval``/``new Function``. Plotly needs
  no ``'unsafe-eval'`` (every page, its charts drawn, hovered and downloaded, reports no
  violation): the pages draw SVG traces (scatter, bar), not the WebGL ones (``scattergl``,
  ``*3d``) whose shaders are compiled from generated code; a page that adds such a trace
  would see a violation in the browser tests and must say here why it loosens this.
- ``object-src 'none'``: no ``<object>``/``<embed>`` plug-ins.
- ``base-uri 'self'``: an injected ``<base href>`` cannot re-point the pages' relative
  script and form URLs at another host.
- ``form-action 'self'``: forms post to this site only (an injected form cannot send a
  password elsewhere). Redirects after a post stay on-site (``next=`` is checked).
- ``frame-ancestors 'none'``: no site may frame these pages (clickjacking); the CSP form of
  ``X_FRAME_OPTIONS = "DENY"``, which browsers that know CSP prefer.
- ``img-src 'self' data: blob:``: images from this site, and the two kinds of URL through
  which Plotly's "Download plot" (its mode bar) loads the chart's SVG as an image before
  drawing it on a canvas: a ``blob:`` URL in Chromium and Firefox (without ``blob:`` the
  PNG never comes: tried), a ``data:`` URL in Safari and for the SVG format.
- ``style-src 'self' 'unsafe-inline'``: the one loosening. Plotly styles its SVG through
  ``style`` attributes and injects a ``<style>`` element of its own rules at load (its
  mode bar, hover labels): under ``style-src 'self'`` the run page's hover label stays
  empty (tried). A few templates set ``white-space`` or a progress bar's width inline too.
  Styles cannot run code, so this leaves script injection as closed as before; an injected
  style can restyle the page, and its ``url()``s load from this site only (``img-src``,
  ``default-src``), so it cannot send what it matches elsewhere.

``settings.CONTENT_SECURITY_POLICY`` replaces ``POLICY`` where set (tests use it to show
the browser checks fail under a policy that blocks the pages' own scripts). A response
that already carries the header (a view that sets its own) keeps it. Django's DEBUG error
pages get it too: they still show everything, only their "copy-and-paste view" toggle (an
inline script) does nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

HEADER = "Content-Security-Policy"

DIRECTIVES: tuple[tuple[str, str], ...] = (
    ("default-src", "'self'"),
    ("script-src", "'self'"),
    ("object-src", "'none'"),
    ("base-uri", "'self'"),
    ("form-action", "'self'"),
    ("frame-ancestors", "'none'"),
    ("img-src", "'self' data: blob:"),
    ("style-src", "'self' 'unsafe-inline'"),
)

POLICY = "; ".join(f"{name} {sources}" for name, sources in DIRECTIVES)


def policy() -> str:
    """The policy in force: ``settings.CONTENT_SECURITY_POLICY``, else ``POLICY``."""
    configured = getattr(settings, "CONTENT_SECURITY_POLICY", None)
    return configured if isinstance(configured, str) and configured else POLICY


class ContentSecurityPolicyMiddleware:
    """Adds ``Content-Security-Policy`` to every response that has none yet: HTML pages,
    JSON, files and redirects alike (the header costs nothing on a non-HTML response and
    leaves no page uncovered by mistake)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if HEADER not in response:
            response[HEADER] = policy()
        return response
