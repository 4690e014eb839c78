"""The ingestion wire contract (SPEC 8.1), written once: what the trainer sends, what the
web app accepts.

Pure Python, torch-free and Django-free: the trainer's spool writer (:mod:`trainer.spool`)
and the web app's batch parser (:mod:`webapp.metrics.batch`) validate through these
definitions, the OpenAPI document (:mod:`webapp.metrics.views_schema`) takes its ingest components
from :func:`json_schemas`, and the transfer-event model takes its choices from
:func:`event_kind_choices`. What it holds:

* the limits (``MAX_*``) and the status states;
* the non-finite encoding: NaN and the infinities travel as the strings ``"NaN"``,
  ``"Infinity"`` and ``"-Infinity"`` (:data:`NON_FINITE`, :func:`encode_value`,
  :func:`decode_value`), because JSON has no literal for them;
* the event kinds: not a fixed list but what the registered sharing regimes declare
  (:mod:`trainer.regimes`), read at each call (:func:`event_kind_names`; :data:`EVENT_KINDS`
  is a live view of it), so a regime registered later counts too;
* each record type (:data:`POINT`, :data:`EVENT`, :data:`SAMPLE`, :data:`STATUS` and the
  envelope :data:`BATCH`) as data: a :class:`Record` of :class:`Field` s, each with its
  JSON type, whether the parser requires it and the writer always writes it, and its
  bounds; and the one rule every string obeys (:meth:`Field.text_problem`: no NUL, no lone
  surrogate, within its length), with the writer's way of meeting it (:func:`clip_text`).

The writer writes a subset of what the parser accepts: every field it always writes, in
the order given here, with the stricter types of the spool (``wall_time`` always a finite
number; a value already encoded). A batch over :data:`MAX_POINTS` points or
:data:`MAX_EVENTS` events is refused with 413, anything else that breaks the contract
with 400.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from trainer import declarations
from trainer.declarations import EventKind

MAX_INT32 = 2**31 - 1
"""The largest ``step`` and ``count`` (PostgreSQL's ``integer``)."""
MAX_POLICY_NAME = 64
"""A policy name's characters (``policy``, ``source``, ``target``)."""
MAX_KEY = 128
"""A metric key's or a prompt id's characters."""
MAX_POINTS = 10_000
"""Points in one batch (413 above)."""
MAX_EVENTS = 10_000
"""Events in one batch (413 above)."""
MAX_STATUS_MESSAGE = 500
MAX_EVENT_SAMPLES = 4
"""Samples one event carries (its ``count`` still says how many crossed)."""
MAX_SAMPLE_TEXT = 2000
"""A sample's text, in characters."""
MAX_SAMPLE_TOKENS = 512
"""A sample's token strings."""
MAX_TOKEN_CHARS = 32
"""One token string's characters."""
MAX_SAMPLE_REASON = 300
"""A sample's ``reason`` (why its response counted), in characters."""
STATUS_STATES = ("running", "completing", "completed", "failed")
"""What a trainer may report of itself (the run's state machine decides what applies)."""
NON_FINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
"""The strings that carry non-finite values, and what they stand for."""
NO_NUL = "^[^\\u0000]*$"
"""The JSON Schema pattern of a string without NUL characters."""


class WireError(TypeError, ValueError):
    """A record the trainer was about to write breaks the contract; the message names the
    field. A ``TypeError`` (a value of the wrong type) and a ``ValueError`` (one out of
    bounds) at once, so callers may catch either."""


# --------------------------------------------------------------------------- event kinds


def event_kinds() -> list[EventKind]:
    """Every registered sharing regime's event kinds (``.name``, ``.label``), in display
    order, as the registry holds them now."""
    return declarations.event_kinds()


def event_kind_names() -> tuple[str, ...]:
    """The names an event's ``kind`` may take now (read from the registry at each call)."""
    return declarations.event_kind_names()


def event_kind_choices() -> list[tuple[str, str]]:
    """``(name, label)`` of every registered event kind: Django ``choices`` as a callable,
    so a regime registered after the model was loaded counts too."""
    return declarations.event_kind_choices()


class _EventKindNames(Sequence[str]):
    """:func:`event_kind_names` as a sequence that reads the registry at each use, for
    code that wants a constant (``kind in EVENT_KINDS``) without freezing it at import."""

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return event_kind_names()[index]

    def __len__(self) -> int:
        return len(event_kind_names())

    def __contains__(self, value: object) -> bool:
        return value in event_kind_names()

    def __iter__(self) -> Iterator[str]:
        return iter(event_kind_names())

    def __repr__(self) -> str:
        return f"EVENT_KINDS{event_kind_names()!r}"


EVENT_KINDS: Sequence[str] = _EventKindNames()
"""The registered event kinds' names, a live view (see :func:`event_kind_names`)."""


# --------------------------------------------------------------------------- values


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def encode_value(value: float | str) -> float | str:
    """A metric value as it travels: a float, or one of the :data:`NON_FINITE` strings.

    Accepts any real number (ints and numpy scalars included) and, so that encoding is
    idempotent, the three strings themselves. Raises :class:`WireError` otherwise.
    """
    if isinstance(value, str):
        if value not in NON_FINITE:
            raise WireError(f"value must be a number or one of {list(NON_FINITE)}, not {value!r}")
        return value
    if not _is_real(value):
        raise WireError(f"value must be a real number, not {type(value).__name__}")
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return number


def decode_value(value: float | int | str) -> float:
    """The inverse of :func:`encode_value`: a float, possibly NaN or infinite."""
    if isinstance(value, str):
        try:
            return NON_FINITE[value]
        except KeyError:
            raise ValueError(f"not a metric value: {value!r}") from None
    if not _is_real(value):
        raise TypeError(f"not a metric value: {value!r}")
    return float(value)


def clip_text(text: str, max_length: int) -> tuple[str, bool]:
    """``text`` as the contract accepts it: NULs replaced by U+FFFD and lone surrogates by
    ``?``, cut to ``max_length`` characters; and whether it was cut. How the writer meets
    :meth:`Field.text_problem` for texts that may be cut (a sample's text and tokens)."""
    if text.isascii() and "\x00" not in text:
        clean = text
    else:
        clean = text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
    return clean[:max_length], len(clean) > max_length


# --------------------------------------------------------------------------- records

JsonType = Literal["string", "integer", "number", "value", "boolean", "array", "object"]
"""A field's JSON type. ``number`` is a finite number; ``value`` a number or one of the
:data:`NON_FINITE` strings; ``integer`` an integer literal (``12``, not ``12.0``, and not
``true``)."""


@dataclass(frozen=True)
class Field:
    """One field of a record: its JSON type, presence and bounds."""

    name: str
    type: JsonType
    description: str = ""
    required: bool = True
    """The parser refuses a record without it; a field that is not takes :attr:`default`."""
    nullable: bool = False
    """``null`` is accepted and means "not known"."""
    written: bool = True
    """The trainer's writer puts it in every record it writes (False: only when known)."""
    default: Any = None
    """What a missing optional field means (None: nothing to say)."""
    min_length: int = 0
    """A string's least characters."""
    max_length: int | None = None
    """A string's most characters, an array's most items."""
    minimum: int = 0
    maximum: int = MAX_INT32
    """An integer's bounds, inclusive (by default those of PostgreSQL's ``integer`` that
    are not negative)."""
    choices: tuple[str, ...] | Callable[[], Sequence[str]] | None = None
    """The strings it may take, or a function that says so at each call (event kinds)."""
    items: Field | Record | None = None
    """An array's items: a field (its name is only a label) or a record."""
    record: Record | None = None
    """An object's record."""

    def __post_init__(self) -> None:
        if (self.type == "array") != (self.items is not None):
            raise ValueError(f"field {self.name!r}: an array, and only an array, has items")
        if (self.type == "object") != (self.record is not None):
            raise ValueError(f"field {self.name!r}: an object, and only an object, has a record")

    def enum(self) -> tuple[str, ...] | None:
        """The strings the field may take now, or None when any string within its bounds
        will do."""
        if self.choices is None:
            return None
        return tuple(self.choices() if callable(self.choices) else self.choices)

    def text_problem(self, value: str) -> str | None:
        """What makes ``value`` unfit for this string field, or None: empty where that is
        not allowed, longer than :attr:`max_length`, a NUL character, a lone surrogate.
        The parser's and the writer's messages say what it returns."""
        if len(value) < self.min_length:
            return "must not be empty" if self.min_length == 1 else "too short"
        if self.max_length is not None and len(value) > self.max_length:
            return f"longer than {self.max_length} characters ({len(value)})"
        if "\x00" in value:
            return "must not contain NUL characters"
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return "is not valid UTF-8 (lone surrogate)"
        return None


@dataclass(frozen=True)
class Record:
    """One record type of the contract: its fields, in the order the writer writes them."""

    name: str
    """Its name in the OpenAPI document (``Point``)."""
    description: str
    fields: tuple[Field, ...]
    names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """Every field's name, in order."""
    allowed: frozenset[str] = field(init=False, repr=False, compare=False)
    """The fields the parser accepts (no other)."""
    required: frozenset[str] = field(init=False, repr=False, compare=False)
    """The fields the parser requires."""
    written: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The fields the writer puts in every record, in order."""
    optional: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The fields the writer adds only when it knows them."""

    def __post_init__(self) -> None:
        names = tuple(f.name for f in self.fields)
        if len(set(names)) != len(names):
            raise ValueError(f"record {self.name!r} names a field twice")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "allowed", frozenset(names))
        object.__setattr__(self, "required", frozenset(f.name for f in self.fields if f.required))
        object.__setattr__(self, "written", tuple(f.name for f in self.fields if f.written))
        object.__setattr__(self, "optional", tuple(f.name for f in self.fields if not f.written))

    def __getitem__(self, name: str) -> Field:
        for candidate in self.fields:
            if candidate.name == name:
                return candidate
        raise KeyError(f"record {self.name!r} has no field {name!r}")


def _name(name: str, max_length: int, description: str) -> Field:
    return Field(name, "string", description, min_length=1, max_length=max_length)


POINT = Record(
    "Point",
    "One metric value; keyed by (run, policy, key, step).",
    (
        _name("policy", MAX_POLICY_NAME, "Policy name, or _pool"),
        _name("key", MAX_KEY, "Metric name, e.g. train/reward_mean"),
        Field("step", "integer", "Training step"),
        Field(
            "value",
            "value",
            'A number; non-finite values as the strings "NaN", "Infinity", "-Infinity" '
            "(stored and shown as such)",
        ),
        Field(
            "wall_time",
            "number",
            "Seconds since the epoch: a finite number, or null",
            required=False,
            nullable=True,
        ),
    ),
)

SAMPLE = Record(
    "Sample",
    "One response that crossed: its text, and its retokenization in the target's "
    "tokenizer (THL paths)",
    (
        Field(
            "text",
            "string",
            "The peer's response text (may be empty)",
            max_length=MAX_SAMPLE_TEXT,
        ),
        Field(
            "tokens",
            "array",
            "The text retokenized: token strings of the target's tokenizer",
            required=False,
            nullable=True,
            written=False,
            max_length=MAX_SAMPLE_TOKENS,
            items=Field("token", "string", max_length=MAX_TOKEN_CHARS),
        ),
        Field(
            "reward",
            "number",
            "The rollout's reward: a finite number, or null",
            required=False,
            nullable=True,
            written=False,
        ),
        Field(
            "finished",
            "boolean",
            "The response ended with EOS (false: cut off at max_new_tokens); null or "
            "missing: not recorded (trainers before 2026-12)",
            required=False,
            nullable=True,
            written=False,
        ),
        Field(
            "reason",
            "string",
            "Why the response counted or not: what the reward read against the reference, "
            'and how it ended ("\\boxed{85} = 85; ended with EOS", "last number 1 = 1 (no '
            'box); cut off at max_new_tokens"); null or missing: not recorded',
            required=False,
            nullable=True,
            written=False,
            max_length=MAX_SAMPLE_REASON,
        ),
        Field(
            "truncated",
            "boolean",
            "The text or the tokens were cut to the limits",
            required=False,
            default=False,
        ),
    ),
)

EVENT = Record(
    "Event",
    "A peer transfer (SPEC 4.5); keyed by (run, step, source, target, kind, prompt_id).",
    (
        Field("step", "integer", "Training step"),
        _name("source", MAX_POLICY_NAME, "Policy the experience comes from"),
        _name("target", MAX_POLICY_NAME, "Policy it goes to"),
        Field(
            "kind",
            "string",
            "What crossed: an event kind a registered sharing regime declares",
            choices=event_kind_names,
        ),
        _name("prompt_id", MAX_KEY, "The prompt's id"),
        Field("count", "integer", "How many (default 1)", required=False, default=1),
        Field(
            "weight",
            "number",
            "Mean importance weight of what crossed: a finite number, or null",
            required=False,
            nullable=True,
        ),
        Field(
            "samples",
            "array",
            "What crossed (null or missing: not recorded); the trainer cuts texts and token "
            "lists to the limits and says so in truncated",
            required=False,
            nullable=True,
            written=False,
            max_length=MAX_EVENT_SAMPLES,
            items=SAMPLE,
        ),
    ),
)

STATUS = Record(
    "Status",
    "The trainer's report; moves the run where its state machine allows.",
    (
        Field("state", "string", choices=STATUS_STATES),
        Field("message", "string", required=False, default="", max_length=MAX_STATUS_MESSAGE),
    ),
)

BATCH = Record(
    "Batch",
    "Every part is optional; resending a batch changes nothing.",
    (
        Field("points", "array", required=False, max_length=MAX_POINTS, items=POINT),
        Field("events", "array", required=False, max_length=MAX_EVENTS, items=EVENT),
        Field("status", "object", required=False, nullable=True, record=STATUS),
    ),
)

RECORDS = (POINT, EVENT, SAMPLE, STATUS, BATCH)
"""Every record type, each a component of the OpenAPI document."""


# --------------------------------------------------------------------------- JSON Schema


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def value_schema(description: str = "") -> dict[str, Any]:
    """A metric value: a number, or one of the :data:`NON_FINITE` strings."""
    schema: dict[str, Any] = {
        "oneOf": [{"type": "number"}, {"type": "string", "enum": sorted(NON_FINITE)}]
    }
    if description:
        schema = {"description": description, **schema}
    return schema


def field_schema(spec: Field) -> dict[str, Any]:
    """``spec`` as JSON Schema (kinds as the registry holds them now)."""
    if spec.record is not None:  # an object
        ref = _ref(spec.record.name)
        return {"oneOf": [ref, {"type": "null"}]} if spec.nullable else ref
    if spec.type == "value":
        return value_schema(spec.description)
    schema: dict[str, Any] = {"type": [spec.type, "null"] if spec.nullable else spec.type}
    if spec.type == "string":
        enum = spec.enum()
        if enum is not None:
            schema["enum"] = list(enum)
        else:
            if spec.min_length:
                schema["minLength"] = spec.min_length
            if spec.max_length is not None:
                schema["maxLength"] = spec.max_length
            schema["pattern"] = NO_NUL
    elif spec.type == "integer":
        schema["minimum"], schema["maximum"] = spec.minimum, spec.maximum
    elif spec.items is not None:  # an array
        if spec.max_length is not None:
            schema["maxItems"] = spec.max_length
        items = spec.items
        schema["items"] = _ref(items.name) if isinstance(items, Record) else field_schema(items)
    if spec.description:
        schema["description"] = spec.description
    if not spec.required and spec.default is not None:
        schema["default"] = spec.default
    return schema


def record_schema(record: Record) -> dict[str, Any]:
    """``record`` as a JSON Schema object: exactly its fields, its required ones present."""
    schema: dict[str, Any] = {
        "type": "object",
        "description": record.description,
        "additionalProperties": False,
    }
    if record.required:
        schema["required"] = sorted(record.required)
    schema["properties"] = {spec.name: field_schema(spec) for spec in record.fields}
    return schema


def json_schemas() -> dict[str, dict[str, Any]]:
    """Every record of the contract as JSON Schema, by name (OpenAPI 3.1 components that
    refer to each other as ``#/components/schemas/<name>``). Built at each call: the event
    kinds are the registry's now."""
    return {record.name: record_schema(record) for record in RECORDS}
