"""GET requests to the lab's API with retries, on the standard library alone.

A request that gets no answer (connection refused or reset, a timeout) or an answer
that says "try again" (429, 502, 503, 504) is sent again after a pause that doubles each
time (``backoff``, ``2 * backoff``, ...; a ``Retry-After`` header of a few seconds is
honoured), at most ``retries`` more times. Any other error is raised at once as the
:mod:`mutual_rl_lab_client.errors` exception of its status.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from mutual_rl_lab_client.errors import (
    ERRORS_BY_STATUS,
    LabError,
    LabUnreachable,
    ServerError,
    Unauthorized,
)

RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER = 30.0
ParamValue = str | int | float | bool | None
Params = Sequence[tuple[str, ParamValue]]


def _text(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return "" if value is None else str(value)


class Transport:
    """GETs JSON from ``base_url`` (the lab's root, e.g. ``http://127.0.0.1:8000``) with
    ``token`` as ``Authorization: Bearer``."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        opener: Callable[..., Any] | None = None,
    ) -> None:
        if retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("retries and backoff must be >= 0, and timeout > 0")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._sleep = sleep
        self._open = opener or urllib.request.urlopen

    def url(self, path: str, params: Params = ()) -> str:
        """The absolute URL of ``path`` (``/api/v1/...``) with ``params`` (repeatable)."""
        query = urllib.parse.urlencode([(name, _text(value)) for name, value in params])
        return f"{self.base_url}{path}" + (f"?{query}" if query else "")

    def get(self, path: str, params: Params = ()) -> Any:
        """The JSON reply of ``GET path?params``."""
        return self.get_url(self.url(path, params))

    def get_url(self, url: str) -> Any:
        """The JSON reply of ``GET url`` (an absolute URL the API gave, e.g. a next page)."""
        headers = {"Accept": "application/json", "User-Agent": "mutual_rl_lab_client"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        attempt = 0
        while True:
            request = urllib.request.Request(url, headers=headers, method="GET")
            try:
                with self._open(request, timeout=self.timeout) as response:
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as error:
                status, body = error.code, _read(error)
                retry_after = _retry_after(
                    error.headers.get("Retry-After") if error.headers else None
                )
                failure: LabError = _error_of(status, body, url)
                if status not in RETRY_STATUSES:
                    raise failure from None
            except (TimeoutError, urllib.error.URLError, ConnectionError) as error:
                reason = getattr(error, "reason", error)
                failure = LabUnreachable(f"no answer: {reason}", url=url)
                retry_after = None
            if attempt >= self.retries:
                raise failure
            pause = self.backoff * (2**attempt)
            if retry_after is not None:
                pause = max(pause, retry_after)
            self._sleep(pause)
            attempt += 1


def _read(error: urllib.error.HTTPError) -> bytes:
    try:
        return error.read()
    except OSError:
        return b""


def _retry_after(header: str | None) -> float | None:
    try:
        return min(float(header), MAX_RETRY_AFTER) if header else None
    except ValueError:
        return None


def _error_of(status: int, body: bytes, url: str) -> LabError:
    """The exception of an error reply: the server's ``{"error": message}`` in it."""
    try:
        message = str(json.loads(body.decode("utf-8"))["error"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        message = body[:300].decode("utf-8", "replace").strip() or "(no message)"
    kind = ERRORS_BY_STATUS.get(status)
    if kind is Unauthorized and "tokens page" not in message:  # the server may say it
        message += "; make a personal token on the lab's API tokens page (/settings/tokens/)"
    if kind is not None:
        return kind(message, url=url)
    return ServerError(message, status=status, url=url)
