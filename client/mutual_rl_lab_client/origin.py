"""The lab's origin (scheme, host, port), and whether a URL stays within it.

Every request carries the personal token (``Authorization: Bearer``), so the client
requests nothing outside the origin of the lab's URL: not a redirect's target, not a
next page a reply names. Two URLs have one origin when their scheme, host and port are
equal once normalised (``HTTP://Lab.Example:80/`` is ``http://lab.example``); only
``http`` and ``https`` are spoken, so ``ftp:``, ``file:`` or ``data:`` are never read.
"""

from __future__ import annotations

import urllib.parse
from typing import NamedTuple

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


class Origin(NamedTuple):
    """Where a URL's requests go: ``scheme`` and ``host`` in lower case, ``port`` always
    a number (the scheme's default when the URL names none)."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        default = DEFAULT_PORTS[self.scheme] == self.port
        return f"{self.scheme}://{host}" + ("" if default else f":{self.port}")


def origin_of(url: str) -> Origin:
    """The origin of the absolute http(s) ``url``; ValueError saying why for any other
    (another scheme, no host, a user name or odd characters before the path): the
    host part must read exactly as the host and port that a connection goes to, so that
    no two parsers of it can disagree."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as error:  # a bad port or IPv6 address
        raise ValueError(f"not a valid URL ({error})") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"not an http:// or https:// URL (scheme {scheme or 'none'!r})")
    host = parts.hostname or ""
    if not host:
        raise ValueError("no host in the URL")
    origin = Origin(scheme, host, DEFAULT_PORTS[scheme] if port is None else port)
    bracketed = f"[{host}]" if ":" in host else host
    if parts.netloc.lower() not in (bracketed, f"{bracketed}:{port}"):
        raise ValueError(f"the URL's host part {parts.netloc!r} is not a plain host[:port]")
    return origin


def describe(url: str) -> str:
    """Where ``url`` points, for a message: its origin, or the start of it and why it
    has none (``ftp://127.0.0.1:2121 (not an http:// or https:// URL ...)``)."""
    try:
        return str(origin_of(url))
    except ValueError as error:
        try:
            parts = urllib.parse.urlsplit(url)
            start = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        except ValueError:
            start = ""
        return f"{start or url[:60]} ({error})"


def stays_within(url: str, home: Origin) -> bool:
    """Whether the absolute ``url`` is an http(s) URL of the origin ``home``."""
    try:
        return origin_of(url) == home
    except ValueError:
        return False
