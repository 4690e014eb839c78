"""The ingestion API under arbitrary input, and its OpenAPI description (``/api/v1/schema``).

Hypothesis drives the real view through Django's test client on PostgreSQL with JSON
bodies near the contract (each field sometimes replaced by anything JSON can hold:
nested lists and objects, lone surrogates, NUL, huge and negative numbers, NaN strings
and bare NaN literals, booleans, nulls, over-long names, extra fields), arbitrary JSON
documents, arbitrary bytes, and header and content-type variants. The oracle is the
published schema: a body is accepted exactly when it is strict UTF-8 JSON that the
schema's ``Batch`` validates. Whatever is sent, the reply is never a 5xx; a rejected
batch writes nothing; an accepted one stores exactly its points and events (the first
of any repeated key) and a replay of it changes nothing.

``validate`` below is a small JSON Schema checker for the keywords the description uses
(the project has no jsonschema dependency). Strings must be valid Unicode (no lone
surrogate) and ``integer`` means an integer literal, as the server reads them.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Count
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import event as tally
from hypothesis import strategies as st

from tests.webapp.metrics.test_api_support import event, make_run, point, post_batch
from webapp.metrics import batch as batch_rules
from webapp.metrics.models import MetricPoint, MetricSeries, TransferEvent
from webapp.metrics.views_schema import OPENAPI
from webapp.runs import services
from webapp.runs.models import Run, RunStateChange

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=120,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the checkout
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)


# --------------------------------------------------------------------------- JSON Schema


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        schema = OPENAPI["components"]["schemas"][name]
    return schema


def _valid_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_type(value: Any, name: str) -> bool:
    return {
        "null": value is None,
        "boolean": type(value) is bool,
        "integer": type(value) is int,
        "number": type(value) is int or (type(value) is float and math.isfinite(value)),
        "string": type(value) is str and _valid_text(value),
        "array": type(value) is list,
        "object": type(value) is dict,
    }[name]


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Why ``value`` fails ``schema`` (an empty list when it passes)."""
    schema = _resolve(schema)
    for keyword in ("oneOf", "anyOf"):
        if keyword in schema:
            passing = [s for s in schema[keyword] if not validate(value, s, where)]
            if not passing or (keyword == "oneOf" and len(passing) > 1):
                return [f"{where}: {len(passing)} of {keyword} match"]
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_has_type(value, name) for name in types):
            return [f"{where}: not {types}"]
    if "enum" in schema and not any(
        type(value) is type(option) and value == option for option in schema["enum"]
    ):
        return [f"{where}: not one of {schema['enum']}"]
    if "const" in schema and value != schema["const"]:
        return [f"{where}: not {schema['const']!r}"]
    errors: list[str] = []
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: too short")
        if len(value) > schema.get("maxLength", math.inf):
            errors.append(f"{where}: too long")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{where}: does not match {schema['pattern']}")
    if type(value) in (int, float):
        if value < schema.get("minimum", -math.inf) or value > schema.get("maximum", math.inf):
            errors.append(f"{where}: out of range")
        if value >= schema.get("exclusiveMaximum", math.inf):
            errors.append(f"{where}: out of range")
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", math.inf):
            errors.append(f"{where}: wrong length")
        prefix = schema.get("prefixItems", [])
        for index, item in enumerate(value):
            item_schema = prefix[index] if index < len(prefix) else schema.get("items")
            if item_schema is not None:
                errors += validate(item, item_schema, f"{where}[{index}]")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        errors += [
            f"{where}.{name}: missing" for name in schema.get("required", ()) if name not in value
        ]
        for name, item in value.items():
            if name in properties:
                errors += validate(item, properties[name], f"{where}.{name}")
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{where}: unknown field")
    return errors


def schema_of(path: str, method: str, status: int) -> dict[str, Any]:
    response = OPENAPI["paths"][path][method]["responses"][str(status)]
    return response["content"]["application/json"]["schema"]


def assert_reply_matches(response: Any, path: str, method: str = "get") -> None:
    """``response`` is documented for ``path`` and its body passes the documented schema."""
    assert response["Content-Type"] == "application/json"
    problems = validate(response.json(), schema_of(path, method, response.status_code))
    assert not problems, (path, response.status_code, problems, response.content[:300])


# --------------------------------------------------------------------------- the schema


def _api_routes() -> list[str]:
    """Every route under /api/v1/ in the URL conf, as OpenAPI paths."""
    found = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern) and route.startswith("api/v1/"):
                found.append("/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route))

    walk(get_resolver().url_patterns, "")
    return found


def test_the_schema_is_served_and_describes_every_api_route(client: Client) -> None:
    response = client.get(reverse("api:schema"))
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json() == json.loads(json.dumps(OPENAPI))
    assert response.json()["openapi"].startswith("3.1")
    routes = _api_routes()
    assert "/api/v1/runs/{run_id}/ingest" in routes and "/api/v1/schema" in routes
    assert sorted(routes) == sorted(OPENAPI["paths"])
    for path in OPENAPI["paths"]:
        assert resolve(path.replace("{run_id}", "7").replace("{event_id}", "3")).route, path
    assert client.post(reverse("api:schema")).status_code == 405


def test_the_schema_uses_the_limits_the_code_enforces() -> None:
    schemas = OPENAPI["components"]["schemas"]
    assert schemas["Batch"]["properties"]["points"]["maxItems"] == batch_rules.MAX_POINTS
    assert schemas["Point"]["properties"]["policy"]["maxLength"] == 64
    assert schemas["Point"]["properties"]["key"]["maxLength"] == 128
    assert schemas["Event"]["properties"]["prompt_id"]["maxLength"] == 128
    assert set(schemas["Point"]["properties"]) == batch_rules.POINT_FIELDS
    assert set(schemas["Event"]["properties"]) == batch_rules.EVENT_ALLOWED_FIELDS
    assert set(schemas["Status"]["properties"]) == batch_rules.STATUS_FIELDS
    value = schemas["Point"]["properties"]["value"]
    assert not validate("NaN", value) and not validate("-Infinity", value)
    assert validate("nan", value) and validate(True, value)


def test_ingest_replies_match_the_schema(client: Client, run: Run, token: str, alice: User) -> None:
    path = "/api/v1/runs/{run_id}/ingest"
    good = {
        "points": [point(1, "NaN"), point(2, 0.5), point(2, 0.5)],
        "events": [event(2)],
        "status": {"state": "running", "message": "step 2"},
    }
    assert not validate(good, OPENAPI["components"]["schemas"]["Batch"])
    ok = post_batch(client, run, token, good)
    assert ok.status_code == 200
    assert_reply_matches(ok, path, "post")
    assert ok.json()["points"] == {"accepted": 2, "duplicates": 1}
    bad = post_batch(client, run, token, {"points": [point(1, True)]})
    assert bad.status_code == 400 and "points[0].value" in bad.json()["error"]
    assert_reply_matches(bad, path, "post")
    anonymous = post_batch(client, run, "", good)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == 'Bearer realm="ingest"'
    assert_reply_matches(anonymous, path, "post")
    other = make_run(alice, name="other")
    foreign = post_batch(client, other, token, good)
    assert foreign.status_code == 403
    assert_reply_matches(foreign, path, "post")
    too_many = post_batch(client, run, token, {"points": [point(s) for s in range(10_001)]})
    assert too_many.status_code == 413
    assert_reply_matches(too_many, path, "post")
    declared = post_batch(client, run, token, good, CONTENT_LENGTH=str(1 << 30))
    assert declared.status_code == 413
    wrong_method = client.get(reverse("api:ingest", args=[run.pk]))
    assert wrong_method.status_code == 405 and wrong_method["Allow"] == "POST"
    assert_reply_matches(wrong_method, path, "post")


def test_read_replies_match_the_schema(
    client: Client, run: Run, token: str, alice: User, charlie: User
) -> None:
    post_batch(
        client,
        run,
        token,
        {
            "points": [point(s, v) for s, v in enumerate([0.1, "NaN", "Infinity", "-Infinity"])],
            "events": [event(1), event(2, kind="rollout", weight=0.5, count=3)],
            "status": {"state": "failed", "message": "loss went NaN"},
        },
    )
    client.force_login(alice)
    for name, query in [
        ("series", "?max_points=4&key=train/reward_mean"),
        ("keys", ""),
        ("events", "?kind=rollout&limit=5"),
        ("events_summary", "?buckets=3"),
        ("status", ""),
    ]:
        response = client.get(reverse(f"api:{name}", args=[run.pk]) + query)
        assert response.status_code == 200, name
        path = "/api/v1/runs/{run_id}/" + name.replace("events_summary", "events/summary")
        assert_reply_matches(response, path)
        assert_reply_matches(client.get(reverse(f"api:{name}", args=[run.pk + 999])), path)
        assert_reply_matches(client.post(reverse(f"api:{name}", args=[run.pk])), path)
    series = client.get(reverse("api:series", args=[run.pk])).json()["series"][0]["points"]
    assert [value for _, value in series][1:] == ["NaN", "Infinity", "-Infinity"]
    bad_param = client.get(reverse("api:series", args=[run.pk]) + "?max_points=x")
    assert bad_param.status_code == 400
    assert_reply_matches(bad_param, "/api/v1/runs/{run_id}/series")
    nul = client.get(reverse("api:events", args=[run.pk]) + "?source=%00")
    assert nul.status_code == 400 and "source" in nul.json()["error"]
    client.force_login(charlie)
    assert client.get(reverse("api:status", args=[run.pk])).status_code == 404
    client.logout()
    anonymous = client.get(reverse("api:status", args=[run.pk]))
    assert anonymous.status_code == 401
    assert_reply_matches(anonymous, "/api/v1/runs/{run_id}/status")


# --------------------------------------------------------------------------- strategies

CONTRACT = OPENAPI["components"]["schemas"]["Batch"]
MAX_INT32 = batch_rules.MAX_INT32
HOSTILE = [
    "",
    "\x00",
    "a\x00b",
    "NaN",
    "Infinity",
    "-Infinity",
    "nan",
    "inf",
    "<script>alert(1)</script>",
    "$(rm -rf ~)",
    "'; DROP TABLE x; --",
    "../../etc/passwd",
    "\u202eevil\u202c",
    "🧪🔥",
]
lone_surrogates = st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=2)
weird_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=12),
    lone_surrogates,
    lone_surrogates.map(lambda s: "a" + s),
    st.sampled_from([63, 64, 65, 127, 128, 129, 500, 501, 5000]).map(lambda n: "k" * n),
)
numbers = st.one_of(
    st.integers(-3, 3),
    st.integers(MAX_INT32 - 2, MAX_INT32 + 2),
    st.integers(-(2**70), 2**70),
    st.floats(),  # NaN and +-inf too: json.dumps writes them as bare literals
    st.sampled_from([1.0, -0.0, 1e308, 2.5]),
)
json_leaf = st.one_of(st.none(), st.booleans(), numbers, weird_text)
json_any = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(weird_text, inner, max_size=3),
    max_leaves=8,
)


def sometimes_bad(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a valid value; now and then anything JSON can hold."""
    return st.one_of(valid, valid, valid, json_any)


no_nul = st.characters(exclude_characters="\x00")
clean_text = st.text(alphabet=no_nul, min_size=1, max_size=20)
policies = st.one_of(st.sampled_from(["a", "b", "_pool", "<b>x</b>"]), clean_text)
keys = st.one_of(st.sampled_from(["train/reward_mean", "actor/kl", "k" * 128]), clean_text)
steps = st.one_of(st.integers(0, 6), st.integers(0, MAX_INT32))
finite = st.floats(allow_nan=False, allow_infinity=False)
values = st.one_of(
    finite, st.integers(-(2**53), 2**53), st.sampled_from(sorted(batch_rules.NON_FINITE))
)


def batches_of(field: Any, extra: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Batches whose every value comes through ``field`` (and optional ``extra`` fields)."""
    points = st.fixed_dictionaries(
        {
            "policy": field(policies),
            "key": field(keys),
            "step": field(steps),
            "value": field(values),
        },
        optional={"wall_time": field(st.none() | finite), **extra},
    )
    events = st.fixed_dictionaries(
        {
            "step": field(steps),
            "source": field(policies),
            "target": field(policies),
            "kind": field(st.sampled_from(batch_rules.EVENT_KINDS)),
            "prompt_id": field(keys),
        },
        optional={
            "count": field(st.integers(0, MAX_INT32)),
            "weight": field(st.none() | finite),
            **extra,
        },
    )
    statuses = st.fixed_dictionaries(
        {"state": field(st.sampled_from(batch_rules.STATUS_STATES))},
        optional={"message": field(st.text(alphabet=no_nul, max_size=500))},
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "points": field(st.lists(points, max_size=6)),
            "events": field(st.lists(events, max_size=4)),
            "status": field(st.none() | statuses),
            **extra,
        },
    )


batches = st.one_of(
    batches_of(lambda valid: valid, {}),  # within the contract
    batches_of(sometimes_bad, {"extra": json_any}),  # near it
)


def encode(document: Any, how: str) -> bytes:
    """JSON text: ASCII-escaped (lone surrogates as \\udXXX escapes), raw UTF-8, or with
    lone surrogates encoded as (invalid) UTF-8 bytes."""
    if how == "ascii":
        return json.dumps(document).encode()
    return json.dumps(document, ensure_ascii=False).encode("utf-8", errors="surrogatepass")


encodings = st.sampled_from(["ascii", "ascii", "surrogatepass"])


# --------------------------------------------------------------------------- the oracle


def _bare_constant(name: str) -> None:
    raise ValueError(name)


def expected_document(raw: bytes) -> Any:
    """The batch the server should accept from ``raw``, or None for a 400."""
    try:
        document = json.loads(raw.decode("utf-8"), parse_constant=_bare_constant)
    except (ValueError, RecursionError):
        return None
    return None if validate(document, CONTRACT) else document


def _number(value: Any) -> float:
    return batch_rules.NON_FINITE[value] if isinstance(value, str) else float(value)


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or a == b


def snapshot(run: Run) -> tuple[Any, ...]:
    """Everything a batch may write, for the whole database."""
    facts = Run.objects.filter(pk=run.pk).values_list(
        "state", "status_message", "failure_reason", "last_step", "token_hash", "updated_at"
    )
    return (
        MetricPoint.objects.count(),
        MetricSeries.objects.count(),
        TransferEvent.objects.count(),
        RunStateChange.objects.count(),
        list(facts),
    )


def reset(run: Run) -> None:
    MetricSeries.objects.filter(run=run).delete()
    TransferEvent.objects.filter(run=run).delete()
    Run.objects.filter(pk=run.pk).update(
        state=Run.State.SUBMITTED, status_message="", failure_reason="", last_step=None
    )


def check_stored(run: Run, document: dict[str, Any], reply: dict[str, Any]) -> None:
    """The database holds exactly the batch's points and events (first of each key)."""
    wanted_points: dict[tuple[str, str, int], tuple[float, float | None]] = {}
    for p in document.get("points", []):
        identity = (p["policy"], p["key"], p["step"])
        wall = p.get("wall_time")
        wanted_points.setdefault(
            identity, (_number(p["value"]), None if wall is None else float(wall))
        )
    stored = {
        (policy, key, step): (value, wall)
        for policy, key, step, value, wall in MetricPoint.objects.filter(
            series__run=run
        ).values_list("series__policy", "series__key", "step", "value", "wall_time")
    }
    assert stored.keys() == wanted_points.keys()
    for identity, (value, wall) in wanted_points.items():
        assert _same(stored[identity][0], value) and _same(stored[identity][1], wall), identity
    wanted_events: dict[tuple[Any, ...], tuple[int, float | None]] = {}
    for e in document.get("events", []):
        identity = (e["step"], e["source"], e["target"], e["kind"], e["prompt_id"])
        weight = e.get("weight")
        wanted_events.setdefault(identity, (e.get("count", 1), None if weight is None else weight))
    rows = TransferEvent.objects.filter(run=run).values_list(
        "step", "source", "target", "kind", "prompt_id", "count", "weight"
    )
    assert {row[:5]: row[5:] for row in rows} == wanted_events
    n_points, n_events = len(document.get("points", [])), len(document.get("events", []))
    assert reply["points"] == {
        "accepted": len(wanted_points),
        "duplicates": n_points - len(wanted_points),
    }
    assert reply["events"] == {
        "accepted": len(wanted_events),
        "duplicates": n_events - len(wanted_events),
    }
    assert ("status" in reply) == (document.get("status") is not None)
    steps_sent = [p["step"] for p in document.get("points", [])]
    steps_sent += [e["step"] for e in document.get("events", [])]
    run.refresh_from_db(fields=["last_step"])
    assert run.last_step == (max(steps_sent) if steps_sent else None)


def post_raw(client: Client, run: Run, raw: bytes, token: str, **extra: Any) -> Any:
    response = post_batch(client, run, token, raw, **extra)
    assert response.status_code < 500, response.content[:300]
    assert response["Content-Type"] == "application/json"
    return response


def exercise(client: Client, run: Run, token: str, raw: bytes) -> None:
    """POST ``raw``; check the reply, the stored data and a replay against the oracle."""
    reset(run)
    document = expected_document(raw)
    before = snapshot(run)
    response = post_raw(client, run, raw, token)
    tally(f"HTTP {response.status_code}")
    if document is None:
        assert response.status_code in (400, 413), response.content[:300]
        assert_reply_matches(response, "/api/v1/runs/{run_id}/ingest", "post")
        assert snapshot(run) == before
        return
    assert response.status_code == 200, (response.content[:300], document)
    reply = response.json()
    assert not validate(reply, schema_of("/api/v1/runs/{run_id}/ingest", "post", 200))
    check_stored(run, document, reply)
    after = snapshot(run)
    replay = post_raw(client, run, raw, token).json()
    assert replay["accepted"] == 0
    assert replay["duplicates"] == len(document.get("points", [])) + len(document.get("events", []))
    assert snapshot(run)[:3] == after[:3]


# --------------------------------------------------------------------------- properties


@FUZZ
@given(document=batches, how=encodings)
@example(document={"points": [point(2**31)]}, how="ascii")  # step beyond int32
@example(document={"points": [point(-1)]}, how="ascii")
@example(document={"points": [{**point(1), "step": 1.0}]}, how="ascii")
@example(document={"points": [{**point(1), "step": True}]}, how="ascii")
@example(document={"points": [point(1, math.nan)]}, how="ascii")  # a bare NaN literal
@example(document={"points": [point(1, "NaN"), point(1, 2.0)]}, how="ascii")
@example(document={"points": [point(1, policy="p" * 65)]}, how="ascii")
@example(document={"points": [point(1, key="\ud800")]}, how="ascii")
@example(document={"points": [point(1, key="\ud800")]}, how="surrogatepass")
@example(document={"points": [{**point(1), "\udfff": 1}]}, how="ascii")
@example(document={"\ud800" * 3: [], "points": []}, how="ascii")
@example(document={"points": [point(1)], "events": [event(1)], "status": None}, how="ascii")
@example(document={"status": {"state": "failed", "message": "<script>x</script>"}}, how="ascii")
def test_batches_near_the_contract(
    client: Client, run: Run, token: str, document: Any, how: str
) -> None:
    exercise(client, run, token, encode(document, how))


@FUZZ
@given(document=json_any, how=encodings)
def test_any_json_document(client: Client, run: Run, token: str, document: Any, how: str) -> None:
    exercise(client, run, token, encode(document, how))


@settings(FUZZ, max_examples=80)
@given(raw=st.binary(max_size=64))
@example(raw=b"")
@example(raw=b"{}")
@example(raw=b"\xff\xfe{}")
@example(raw=b'{"points": [}')
@example(raw=b'{"points": NaN}')
@example(raw=b'"\xed\xa0\x80"')
@example(raw=b"[" * 50_000)
@example(raw=b'{"points": [], "points": 7}')
def test_any_bytes(client: Client, run: Run, token: str, raw: bytes) -> None:
    exercise(client, run, token, raw)


GOOD = json.dumps({"points": [point(1), point(2)], "events": [event(2)]}).encode()
CONTENT_TYPES = [
    "application/json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
    "application/json; charset=latin-1",
    "",
]


@settings(FUZZ, max_examples=60)
@given(
    header=st.one_of(
        st.sampled_from(["right", "lowercase", "spaces", "other", "revoked", "none"]),
        st.text(max_size=80).map(lambda text: "Bearer " + text),
        st.text(max_size=80),
        st.just("Bearer mrl_" + "x" * 43),
        st.just("Basic YWxpY2U6YWxpY2U="),
        st.just("Bearer " + "mrl_" * 300),
    ),
    content_type=st.sampled_from(CONTENT_TYPES),
)
def test_headers_and_content_types(
    client: Client, run: Run, token: str, alice: User, header: str, content_type: str
) -> None:
    other = Run.objects.exclude(pk=run.pk).first() or make_run(alice, name="other")
    other_token = services.run_token_issue(other)
    revoked = Run.objects.exclude(pk__in=[run.pk, other.pk]).first() or make_run(alice, name="r")
    old_token = services.run_token_issue(revoked)
    services.run_token_revoke(revoked)
    authorization = {
        "right": f"Bearer {token}",
        "lowercase": f"bearer {token}",
        "spaces": f"Bearer   {token}  ",
        "other": f"Bearer {other_token}",
        "revoked": f"Bearer {old_token}",
        "none": None,
    }.get(header, header)
    reset(run)
    before = snapshot(run)
    extra = {"HTTP_AUTHORIZATION": authorization} if authorization is not None else {}
    response = client.post(
        reverse("api:ingest", args=[run.pk]), data=GOOD, content_type=content_type, **extra
    )
    assert response.status_code < 500
    assert_reply_matches(response, "/api/v1/runs/{run_id}/ingest", "post")
    if header in ("right", "lowercase", "spaces"):
        assert response.status_code == 200 and response.json()["accepted"] == 3
        return
    assert response.status_code == (403 if header == "other" else 401)
    assert snapshot(run) == before
    assert not MetricSeries.objects.values("run").annotate(n=Count("id")).exists()
