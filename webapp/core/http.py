"""JSON plumbing of the API: replies, errors, query parameters, the kinds of auth.

Every error is JSON ``{"error": message}``; an anonymous reader gets 401 (not a redirect
to the login page), someone outside the run's lab 404, a wrong method 405.

The reads (:func:`login_required_json`) take a logged-in session or a person's read
token (``Authorization: Bearer mrlp_...``, :mod:`webapp.core.services`): the request
then reads as the token's owner, with the owner's permissions, and only with GET or
HEAD. Ingestion takes a run's token instead (:mod:`webapp.metrics.views`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import wraps
from typing import Any

import orjson
from django.http import Http404, HttpRequest, HttpResponse, QueryDict

from webapp.core.digits import PARAM_DIGITS, ascii_int
from webapp.core.flags import flag_value
from webapp.core.services import personal_token_authenticate

View = Callable[..., HttpResponse]


class ParamError(ValueError):
    """A query parameter with a bad value; the message names it."""


def encode_value(value: float | None) -> float | str | None:
    """A metric value for JSON: non-finite values as "NaN", "Infinity", "-Infinity"."""
    if value is None:
        return None
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def encode_points(points: list[tuple[int, float]]) -> list[Any]:
    """``[(step, value), ...]`` for JSON, values as :func:`encode_value` writes them.

    In the common case, every value finite, the points go out as they are (json writes
    tuples as arrays) after one C-level ``sum`` over the values; NaN or an infinity makes
    the sum non-finite and sends the points the slow way. (A finite sum that overflows to
    infinity takes the slow way too, with the same result.)"""
    if points and math.isfinite(sum(list(zip(*points, strict=True))[1])):
        return points
    return [[step, encode_value(value)] for step, value in points]


def encode_values(values: list[float]) -> list[Any]:
    """A column of metric values for JSON, as :func:`encode_points` writes them: the list
    itself when every value is finite, else with the non-finite ones as strings."""
    if math.isfinite(sum(values)):
        return values
    return [encode_value(value) for value in values]


_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def json_reply(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> HttpResponse:
    """``data`` as compact UTF-8 JSON, written by orjson: a 50-run comparison's 5 MB
    goes out in about 15 ms instead of ``json.dumps``'s 105 (``bench/scale.py``).

    Non-finite metric values reach here as the strings :func:`encode_value` makes; JSON
    has no NaN, and orjson would write a stray one as ``null``. Keys that are not strings
    become strings, as with ``json.dumps``; numpy scalars and arrays become numbers and
    lists."""
    body = orjson.dumps(data, option=_JSON_OPTIONS)
    return HttpResponse(body, status=status, content_type="application/json", headers=headers)


def json_error(message: str, status: int, headers: dict[str, str] | None = None) -> HttpResponse:
    return json_reply({"error": message}, status=status, headers=headers)


def allow_methods(*methods: str) -> Callable[[View], View]:
    """405 JSON (with ``Allow``) for any other method; JSON 404 for ``Http404``. A view that
    allows GET allows HEAD too (RFC 9110: the GET's status and headers, no body)."""
    allowed = (*methods, "HEAD") if "GET" in methods and "HEAD" not in methods else methods

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in allowed:
                return json_error(
                    f"method {request.method} not allowed; use {', '.join(allowed)}",
                    405,
                    headers={"Allow": ", ".join(allowed)},
                )
            try:
                response = view(request, *args, **kwargs)
            except Http404:
                response = json_error("no such run", 404)
            except ParamError as exc:
                response = json_error(str(exc), 400)
            return without_body(response) if request.method == "HEAD" else response

        return wrapper

    return decorator


def without_body(response: HttpResponse) -> HttpResponse:
    """``response`` for a HEAD: its status and headers (``Content-Length`` the GET's),
    no body. The WSGI servers drop a HEAD's body too; this keeps it off the wire
    whatever serves the app."""
    if response.streaming:  # its iterator is closed with the response, never run
        response.streaming_content = []
        return response
    length = len(response.content)
    response.content = b""
    response["Content-Length"] = str(length)
    return response


READ_METHODS = frozenset({"GET", "HEAD"})


def login_required_json(view: View) -> View:
    """Auth for the read API: a logged-in session, or a personal read token in an
    ``Authorization: Bearer`` header (which, when present, decides alone: a wrong,
    revoked or run token is 401 even beside a session). The token's requests read as its
    owner; a token never writes (any other method than GET or HEAD: 403). Anonymous
    users get 401 JSON, not a redirect."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if "Authorization" in request.headers:
            token = bearer_token(request)
            record = personal_token_authenticate(token) if token else None
            if record is None:
                return json_error(
                    "missing, wrong or revoked personal token (Authorization: Bearer "
                    "mrlp_...; create one on the API tokens page)",
                    401,
                    headers={"WWW-Authenticate": 'Bearer realm="read"'},
                )
            if request.method not in READ_METHODS:
                return json_error("a personal token only reads (GET)", 403)
            request.user = record.user
            request.personal_token = record
        elif not request.user.is_authenticated:
            return json_error("log in first", 401)
        return view(request, *args, **kwargs)

    return wrapper


def bearer_token(request: HttpRequest) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


# --------------------------------------------------------------------------- parameters


def int_param(
    query: QueryDict, name: str, default: int | None, *, low: int, high: int | None = None
) -> int | None:
    """``query[name]`` as an integer in [low, high]; ``default`` when absent or empty."""
    raw = query.get(name, "")
    if raw == "":
        return default
    value = ascii_int(raw.strip(), max_digits=PARAM_DIGITS)
    if value is None:
        raise ParamError(f"{name}: must be an integer, not {raw[:40]!r}")
    if value < low or (high is not None and value > high):
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ParamError(f"{name}: must be {bounds}, not {value}")
    return value


def text_params(query: QueryDict, name: str, max_length: int) -> list[str]:
    """Every non-empty value of a repeatable parameter (``?key=a&key=b``)."""
    values = [value for value in query.getlist(name) if value]
    for value in values:
        if len(value) > max_length:
            raise ParamError(f"{name}: longer than {max_length} characters")
        if "\x00" in value:  # no stored name holds one, and PostgreSQL refuses it
            raise ParamError(f"{name}: must not contain NUL characters")
    return values


def flag_param(query: QueryDict, name: str) -> bool:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (absent: False;
    :func:`webapp.core.flags.flag_value`); a :class:`ParamError`."""
    try:
        return flag_value(name, query.get(name, ""))
    except ValueError as error:
        raise ParamError(str(error)) from None


def choice_param(query: QueryDict, name: str, choices: tuple[str, ...]) -> str:
    value = query.get(name, "")
    if value and value not in choices:
        raise ParamError(f"{name}: must be one of {list(choices)}, not {value[:40]!r}")
    return value
