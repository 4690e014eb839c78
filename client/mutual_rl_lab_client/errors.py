"""What can go wrong talking to a lab, one exception each, all :class:`LabError`s.

Each names the HTTP status, the request and the server's own message (the API answers
every error as JSON ``{"error": message}``), and says what to do about it.
"""

from __future__ import annotations


class LabError(Exception):
    """Anything the lab answered with an error, or could not be reached for."""

    status: int | None = None

    def __init__(self, message: str, *, method: str = "GET", url: str = "") -> None:
        self.message = message
        self.method = method
        self.url = url
        where = f" ({method} {url})" if url else ""
        prefix = f"{self.status} {self.reason}: " if self.status else ""
        super().__init__(f"{prefix}{message}{where}")

    reason = ""


class BadRequest(LabError):
    """400: a parameter the API refuses (the message names it)."""

    status = 400
    reason = "Bad Request"


class Unauthorized(LabError):
    """401: no token, or a wrong or revoked one (make one on the lab's API tokens page,
    ``/settings/tokens/``)."""

    status = 401
    reason = "Unauthorized"


class Forbidden(LabError):
    """403: the token may not do this (a personal token only reads)."""

    status = 403
    reason = "Forbidden"


class NotFound(LabError):
    """404: no such run or saved comparison, or one of a lab you are not in (the two read
    the same, so that ids do not leak)."""

    status = 404
    reason = "Not Found"


class ServerError(LabError):
    """5xx, still after the retries."""

    reason = "Server Error"

    def __init__(self, message: str, *, status: int, method: str = "GET", url: str = "") -> None:
        self.status = status
        super().__init__(message, method=method, url=url)


class LabUnreachable(LabError):
    """No answer at all (connection refused, timed out), still after the retries."""

    reason = "Unreachable"


class OriginRefused(LabError):
    """A URL outside the lab's origin (the scheme, host and port of the URL the ``Lab``
    was made with), not requested: a redirect's target, a next page a reply names, or
    not http(s) at all. Each request carries your token, so the client goes nowhere
    else; if the lab has moved (to https, another name or port), make the ``Lab`` with
    its new URL.

    ``target``: where the URL would have gone (its origin, or why it has none);
    ``lab_origin``: the lab's."""

    reason = "Refused"

    def __init__(
        self, what: str, *, target: str, lab_origin: str, method: str = "GET", url: str = ""
    ) -> None:
        self.target = target
        self.lab_origin = lab_origin
        super().__init__(
            f"{what} points to {target}, not to the lab's origin {lab_origin}: refused, so "
            "that your token is not sent there (if the lab has moved, make the Lab with its "
            "new URL)",
            method=method,
            url=url,
        )


ERRORS_BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound}
