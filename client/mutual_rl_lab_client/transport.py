"""GET requests to the lab's API with retries, on the standard library alone.

A request that gets no answer (connection refused or reset, a timeout) or an answer
that says "try again" (429, 502, 503, 504) is sent again after a pause that doubles each
time (``backoff``, ``2 * backoff``, ...; a ``Retry-After`` header of a few seconds is
honoured), at most ``retries`` more times. Any other error is raised at once as the
:mod:`mutual_rl_lab_client.errors` exception of its status.

The token stays with the lab: a URL outside the origin of ``base_url`` (another scheme,
host or port; see :mod:`mutual_rl_lab_client.origin`) is refused before any request, and
so is a redirect to one, as :class:`~mutual_rl_lab_client.errors.OriginRefused`. The
standard ``urlopen`` would follow the redirect and copy every header, ``Authorization``
included, to wherever it points; and it reads ``ftp:``, ``file:`` and ``data:`` URLs,
which the opener here cannot.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from http.client import HTTPMessage
from typing import IO, Any

from mutual_rl_lab_client.errors import (
    ERRORS_BY_STATUS,
    LabError,
    LabUnreachable,
    OriginRefused,
    ServerError,
    Unauthorized,
)
from mutual_rl_lab_client.origin import Origin, describe, origin_of, stays_within

RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER = 30.0
ParamValue = str | int | float | bool | None
Params = Sequence[tuple[str, ParamValue]]


def _text(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return "" if value is None else str(value)


class SameOriginRedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follows a redirect (301, 302, 303, 307, 308) only within the lab's origin
    ``home``; raises :class:`OriginRefused` for any other target, before it is
    requested: the request being redirected carries the token, which urllib's handler
    copies onto the new one."""

    def __init__(self, home: Origin) -> None:
        self.home = home

    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
    ) -> Any:
        # checked here as well, so that a target urllib refuses itself (``file:``...)
        # gets this error, not urllib's "302 Found - Redirection ... is not allowed"
        location = headers.get("location") or headers.get("uri")
        if location is not None:
            self._refuse_elsewhere(req, fp, code, _joined(req.full_url, location))
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        self._refuse_elsewhere(req, fp, code, newurl)  # the URL urllib would request
        return super().redirect_request(req, fp, code, msg, headers, newurl)

    def _refuse_elsewhere(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, target: str
    ) -> None:
        if stays_within(target, self.home):
            return
        fp.close()
        raise OriginRefused(
            f"the lab's {code} redirect to {target}",
            target=describe(target),
            lab_origin=str(self.home),
            url=req.full_url,
        )


def lab_opener(home: Origin) -> urllib.request.OpenerDirector:
    """An opener of http(s) URLs only (no ``ftp``, ``file`` or ``data`` handler, and
    proxies for http and https alone, from the usual environment variables) that follows
    redirects within ``home`` only."""
    proxies = {
        scheme: proxy
        for scheme, proxy in urllib.request.getproxies().items()
        if scheme in ("http", "https")
    }
    opener = urllib.request.OpenerDirector()
    handlers: list[urllib.request.BaseHandler] = [
        urllib.request.ProxyHandler(proxies),
        urllib.request.UnknownHandler(),  # any other scheme: URLError "unknown url type"
        urllib.request.HTTPHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        SameOriginRedirectHandler(home),
        urllib.request.HTTPErrorProcessor(),
    ]
    if hasattr(urllib.request, "HTTPSHandler"):  # Python built with ssl
        handlers.append(urllib.request.HTTPSHandler())
    for handler in handlers:
        opener.add_handler(handler)
    return opener


class Transport:
    """GETs JSON from ``base_url`` (the lab's root, e.g. ``http://127.0.0.1:8000``) with
    ``token`` as ``Authorization: Bearer``, and from nowhere else (``base_url`` must be
    http or https: ValueError otherwise). ``opener`` replaces the HTTP requests (tests)."""

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
        try:
            self.origin = origin_of(self.base_url)
        except ValueError as error:
            raise ValueError(
                f"the lab's URL {base_url!r} is refused: {error}; give its root, "
                "http://host:port or https://host"
            ) from None
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._sleep = sleep
        self._open = opener or lab_opener(self.origin).open

    def url(self, path: str, params: Params = ()) -> str:
        """The absolute URL of ``path`` (``/api/v1/...``) with ``params`` (repeatable)."""
        query = urllib.parse.urlencode([(name, _text(value)) for name, value in params])
        return f"{self.base_url}{path}" + (f"?{query}" if query else "")

    def get(self, path: str, params: Params = ()) -> Any:
        """The JSON reply of ``GET path?params``."""
        return self.get_url(self.url(path, params))

    def get_url(self, url: str, *, what: str = "the URL") -> Any:
        """The JSON reply of ``GET url`` (a URL the API gave, e.g. a next page; relative
        to the lab's URL if not absolute). A URL outside the lab's origin raises
        :class:`OriginRefused` (saying it is ``what``), and no request is made."""
        url = _joined(f"{self.base_url}/", url)
        if not stays_within(url, self.origin):
            raise OriginRefused(f"{what} {url}", target=describe(url), lab_origin=str(self.origin))
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


def _joined(base: str, url: str) -> str:
    """``url`` made absolute against ``base``, as a browser would (``//host/x`` takes
    ``base``'s scheme); a URL too broken to join stays as it is (and is refused)."""
    try:
        return urllib.parse.urljoin(base, url)
    except ValueError:
        return url


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
