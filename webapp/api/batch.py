"""Parse and validate one ingestion batch (SPEC 8.1); Django-free, so it is easy to test.

:func:`parse_batch` turns the raw request body into an :class:`IngestBatch` or raises
:class:`BatchError` with a message that names the offending field, e.g.
``points[3].value: must be a number or one of "NaN", "Infinity", "-Infinity"``.
Everything is checked before anything is written: a rejected batch writes nothing.

The rules are the wire contract's (:mod:`trainer.wire`: its records :data:`~trainer.wire.POINT`,
:data:`~trainer.wire.EVENT`, :data:`~trainer.wire.SAMPLE`, :data:`~trainer.wire.STATUS` and
:data:`~trainer.wire.BATCH`), read strictly as JSON: no unknown fields, no missing
required ones; names are non-empty strings within their lengths, and no string holds a NUL
or a lone surrogate; ``step`` and ``count`` are integer literals in [0, 2**31 - 1]
(``true`` is not a number); ``value`` is a number or one of the strings "NaN",
"Infinity", "-Infinity"; ``wall_time``, ``weight`` and a sample's ``reward`` are finite
numbers or null; ``kind`` is an event kind of a registered regime (read once per batch);
``count`` defaults to 1. A batch holds at most 10,000 points and 10,000 events (413 above).

An event may carry ``samples``, what crossed (null or missing for old trainers): at most
:data:`MAX_EVENT_SAMPLES` objects ``{"text", "tokens"?, "reward"?, "truncated"?}``:
the peer's response text (at most :data:`MAX_SAMPLE_TEXT` characters, may be empty),
its retokenization in the target's tokenizer as token strings (at most
:data:`MAX_SAMPLE_TOKENS`, each at most :data:`MAX_TOKEN_CHARS` characters), the
rollout's reward (finite or null) and whether the trainer cut the text or tokens to
these bounds. Anything longer is refused (400), not cut: the trainer does the cutting.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from trainer.wire import (
    BATCH,
    EVENT,
    EVENT_KINDS,
    MAX_EVENT_SAMPLES,
    MAX_EVENTS,
    MAX_INT32,
    MAX_POINTS,
    MAX_SAMPLE_TEXT,
    MAX_SAMPLE_TOKENS,
    MAX_STATUS_MESSAGE,
    MAX_TOKEN_CHARS,
    NON_FINITE,
    POINT,
    SAMPLE,
    STATUS,
    STATUS_STATES,
    Field,
    event_kind_names,
)

__all__ = [
    "EVENT_FIELDS",
    "EVENT_KINDS",
    "EVENT_REQUIRED",
    "MAX_EVENTS",
    "MAX_EVENT_SAMPLES",
    "MAX_INT32",
    "MAX_POINTS",
    "MAX_SAMPLE_TEXT",
    "MAX_SAMPLE_TOKENS",
    "MAX_STATUS_MESSAGE",
    "MAX_TOKEN_CHARS",
    "NON_FINITE",
    "POINT_FIELDS",
    "POINT_REQUIRED",
    "SAMPLE_FIELDS",
    "SAMPLE_REQUIRED",
    "STATUS_FIELDS",
    "STATUS_STATES",
    "BatchError",
    "EventIn",
    "IngestBatch",
    "PointIn",
    "StatusIn",
    "decode_json",
    "first_events",
    "first_of_each",
    "parse_batch",
    "parse_event",
    "parse_point",
    "parse_sample",
    "parse_samples",
    "parse_status",
]

POINT_FIELDS, POINT_REQUIRED = POINT.allowed, POINT.required
EVENT_FIELDS, EVENT_REQUIRED = EVENT.allowed, EVENT.required
SAMPLE_FIELDS, SAMPLE_REQUIRED = SAMPLE.allowed, SAMPLE.required
STATUS_FIELDS, STATUS_REQUIRED = STATUS.allowed, STATUS.required
BATCH_FIELDS = BATCH.allowed
_BATCH_ALLOWED = ", ".join(sorted(BATCH_FIELDS))


class BatchError(ValueError):
    """The batch breaks SPEC 8.1; ``status`` is the HTTP status to answer (400 or 413)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class PointIn(NamedTuple):
    policy: str
    key: str
    step: int
    value: float  # NaN and +-inf allowed
    wall_time: float | None


class EventIn(NamedTuple):
    step: int
    source: str
    target: str
    kind: str
    prompt_id: str
    count: int
    weight: float | None
    samples: list[dict[str, Any]] | None = None
    """What crossed (see the module docstring); None: not recorded."""


@dataclass(frozen=True)
class StatusIn:
    state: str
    message: str


@dataclass(frozen=True)
class IngestBatch:
    points: tuple[PointIn, ...] = ()
    events: tuple[EventIn, ...] = ()
    status: StatusIn | None = None

    @property
    def max_step(self) -> int | None:
        """The largest step of any point or event (None for an empty batch)."""
        steps = [p.step for p in self.points] + [e.step for e in self.events]
        return max(steps) if steps else None


# --------------------------------------------------------------------------- scalars
# Each field's check is made once from its definition in the contract (its name and
# bounds bound in a closure), so the hot path reads no attributes and builds no strings.


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)  # bool is an int subclass: excluded on purpose


def _string(spec: Field) -> Callable[..., str]:
    """The check of string field ``spec``: ``check(where, value, label=spec.name)``."""
    if spec.type != "string" or spec.max_length is None:
        raise ValueError(f"{spec.name!r} is not a string field with a maximum length")
    least, most = spec.min_length, spec.max_length

    def check(where: str, value: Any, label: str = spec.name) -> str:
        if (
            type(value) is str
            and least <= len(value) <= most
            and value.isascii()
            and "\x00" not in value
        ):
            return value  # the common case, checked cheaply
        where = f"{where}.{label}"
        if not isinstance(value, str):
            raise BatchError(f"{where}: must be a string, not {_kind(value)}")
        problem = spec.text_problem(value)
        if problem is not None:
            raise BatchError(f"{where}: {problem}")
        return value

    return check


def _integer(spec: Field) -> Callable[[str, Any], int]:
    """The check of integer field ``spec``: an integer literal within its bounds."""
    low, high, name = spec.minimum, spec.maximum, spec.name

    def check(where: str, value: Any) -> int:
        if type(value) is int and low <= value <= high:
            return value
        raise BatchError(
            f"{where}.{name}: must be an integer in [{low}, {high}], not {_show(value)}"
        )

    return check


def _metric_value(spec: Field) -> Callable[[str, Any], float]:
    """The check of a metric value: a number or a :data:`NON_FINITE` string, as a float."""
    name, strings = spec.name, ", ".join(json.dumps(text) for text in NON_FINITE)

    def check(where: str, value: Any) -> float:
        if type(value) is float:
            return value
        if isinstance(value, str) and value in NON_FINITE:
            return NON_FINITE[value]
        if not _is_number(value):
            raise BatchError(
                f"{where}.{name}: must be a number or one of {strings}, not {_show(value)}"
            )
        try:
            return float(value)
        except OverflowError:
            raise BatchError(f"{where}.{name}: number out of range") from None

    return check


def _finite_or_null(spec: Field) -> Callable[[str, Any], float | None]:
    """The check of a nullable number field: a finite number or None."""
    name = spec.name

    def check(where: str, value: Any) -> float | None:
        if value is None:
            return None
        if not _is_number(value):
            raise BatchError(f"{where}.{name}: must be a number or null, not {_show(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise BatchError(f"{where}.{name}: must be finite")
        return number

    return check


_policy, _key = _string(POINT["policy"]), _string(POINT["key"])
_point_step, _value = _integer(POINT["step"]), _metric_value(POINT["value"])
_wall_time = _finite_or_null(POINT["wall_time"])
_event_step, _count = _integer(EVENT["step"]), _integer(EVENT["count"])
_source, _target = _string(EVENT["source"]), _string(EVENT["target"])
_prompt_id, _weight = _string(EVENT["prompt_id"]), _finite_or_null(EVENT["weight"])
_text, _token = _string(SAMPLE["text"]), _string(cast(Field, SAMPLE["tokens"].items))
_reward = _finite_or_null(SAMPLE["reward"])
_message = _string(STATUS["message"])
_KIND, _STATE = EVENT["kind"], STATUS["state"]
_COUNT_DEFAULT, _MESSAGE_DEFAULT = EVENT["count"].default, STATUS["message"].default


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, str | int | float | bool) else _kind(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _field_name(name: str) -> str:
    """A field name from the request, safe to echo in an error: printable ASCII as sent,
    anything else (a lone surrogate, control characters, a megabyte of text) JSON-escaped
    and cut short."""
    if name.isascii() and name.isprintable() and len(name) <= 40:
        return name
    return _show(name)


def _fields(where: str, record: Any, allowed: Set[str], required: Set[str]) -> None:
    if type(record) is dict and record.keys() <= allowed and required <= record.keys():
        return
    if not isinstance(record, dict):
        raise BatchError(f"{where}: must be an object, not {_kind(record)}")
    unknown = sorted(set(record) - allowed)
    if unknown:
        raise BatchError(
            f"{where}.{_field_name(unknown[0])}: unknown field (allowed: {sorted(allowed)})"
        )
    missing = sorted(required - set(record))
    if missing:
        raise BatchError(f"{where}.{missing[0]}: missing")


def _choice(where: str, spec: Field, value: Any, allowed: Set[str]) -> str:
    """``value`` if it is one of ``allowed`` (the strings ``spec`` may take now)."""
    if type(value) is str and value in allowed:
        return value
    raise BatchError(
        f"{where}.{spec.name}: must be one of {list(spec.enum() or ())}, not {_show(value)}"
    )


def _kinds() -> frozenset[str]:
    """The event kinds a batch may use: the registered regimes' (read once per batch)."""
    return frozenset(event_kind_names())


_STATES = frozenset(STATUS_STATES)


# --------------------------------------------------------------------------- records


def parse_point(where: str, record: Any) -> PointIn:
    """One point; ``where`` (e.g. ``points[3]``) prefixes the field in error messages."""
    _fields(where, record, POINT_FIELDS, POINT_REQUIRED)
    return PointIn(
        _policy(where, record["policy"]),
        _key(where, record["key"]),
        _point_step(where, record["step"]),
        _value(where, record["value"]),
        _wall_time(where, record.get("wall_time")),
    )


def parse_sample(where: str, record: Any) -> dict[str, Any]:
    """One sample of an event's ``samples``, as it is stored (missing fields left out)."""
    _fields(where, record, SAMPLE_FIELDS, SAMPLE_REQUIRED)
    sample: dict[str, Any] = {"text": _text(where, record["text"])}
    tokens = record.get("tokens")
    if tokens is not None:
        tokens = _list(f"{where}.tokens", tokens)
        if len(tokens) > MAX_SAMPLE_TOKENS:
            raise BatchError(
                f"{where}.tokens: {len(tokens)} tokens; at most {MAX_SAMPLE_TOKENS} "
                '(cut them and set "truncated": true)'
            )
        sample["tokens"] = [_token(where, token, f"tokens[{i}]") for i, token in enumerate(tokens)]
    if "reward" in record:
        sample["reward"] = _reward(where, record["reward"])
    truncated = record.get("truncated", False)
    if type(truncated) is not bool:
        raise BatchError(f"{where}.truncated: must be true or false, not {_show(truncated)}")
    sample["truncated"] = truncated
    return sample


def parse_samples(where: str, value: Any) -> list[dict[str, Any]] | None:
    """An event's ``samples``: None when null or missing."""
    if value is None:
        return None
    samples = _list(where, value)
    if len(samples) > MAX_EVENT_SAMPLES:
        raise BatchError(f"{where}: {len(samples)} samples; at most {MAX_EVENT_SAMPLES}")
    return [parse_sample(f"{where}[{i}]", sample) for i, sample in enumerate(samples)]


def parse_event(where: str, record: Any, kinds: Set[str] | None = None) -> EventIn:
    """One event; ``kinds`` are the event kinds allowed (default: the registry's now;
    :func:`parse_batch` reads them once for the whole batch)."""
    _fields(where, record, EVENT_FIELDS, EVENT_REQUIRED)
    kind = _choice(where, _KIND, record["kind"], _kinds() if kinds is None else kinds)
    return EventIn(
        _event_step(where, record["step"]),
        _source(where, record["source"]),
        _target(where, record["target"]),
        kind,
        _prompt_id(where, record["prompt_id"]),
        _count(where, record.get("count", _COUNT_DEFAULT)),
        _weight(where, record.get("weight")),
        parse_samples(f"{where}.samples", record.get("samples")),
    )


def parse_status(record: Any) -> StatusIn:
    _fields("status", record, STATUS_FIELDS, STATUS_REQUIRED)
    state = _choice("status", _STATE, record["state"], _STATES)
    message = _message("status", record.get("message", _MESSAGE_DEFAULT))
    return StatusIn(state=state, message=message)


def _list(name: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise BatchError(f"{name}: must be a list, not {_kind(value)}")
    return value


def _no_constants(name: str) -> None:
    raise ValueError(f'bare {name} is not JSON; send the string "{name}"')


def decode_json(raw: bytes) -> Any:
    """The JSON document in ``raw`` (UTF-8, strict: no bare NaN/Infinity literals)."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise BatchError("body: not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise BatchError(f"body: malformed JSON ({exc})") from None


def parse_batch(raw: bytes) -> IngestBatch:
    """Validate a whole request body; :class:`BatchError` names the first bad field."""
    body = decode_json(raw)
    if not isinstance(body, dict):
        raise BatchError(f"body: must be a JSON object, not {_kind(body)}")
    unknown = sorted(set(body) - BATCH_FIELDS)
    if unknown:
        raise BatchError(f"{_field_name(unknown[0])}: unknown field (allowed: {_BATCH_ALLOWED})")
    points = _list("points", body.get("points", []))
    if len(points) > MAX_POINTS:
        raise BatchError(f"points: {len(points)} points; a batch holds at most {MAX_POINTS}", 413)
    events = _list("events", body.get("events", []))
    if len(events) > MAX_EVENTS:
        raise BatchError(f"events: {len(events)} events; a batch holds at most {MAX_EVENTS}", 413)
    status = body.get("status")
    kinds = _kinds() if events else frozenset()
    return IngestBatch(
        points=tuple(parse_point(f"points[{i}]", p) for i, p in enumerate(points)),
        events=tuple(parse_event(f"events[{i}]", e, kinds) for i, e in enumerate(events)),
        status=None if status is None else parse_status(status),
    )


def first_of_each(points: tuple[PointIn, ...]) -> list[PointIn]:
    """``points`` without repeats of a (policy, key, step): the first one wins."""
    seen: set[tuple[str, str, int]] = set()
    unique = []
    for point in points:
        identity = (point.policy, point.key, point.step)
        if identity not in seen:
            seen.add(identity)
            unique.append(point)
    return unique


def first_events(events: tuple[EventIn, ...]) -> list[EventIn]:
    """``events`` without repeats of a (step, source, target, kind, prompt_id)."""
    seen: set[tuple[int, str, str, str, str]] = set()
    unique = []
    for event in events:
        identity = (event.step, event.source, event.target, event.kind, event.prompt_id)
        if identity not in seen:
            seen.add(identity)
            unique.append(event)
    return unique
