"""The minor items of issue 44: inputs that were a 500 are a 400 naming the parameter,
Unicode digits are no numbers (``revoke=`` an Arabic-Indic one revoked token 1), and
every read route that allows GET answers HEAD.

Real views through Django's test client against PostgreSQL. The config filters' overflow
is refused before any query is built, so SQLite (the demo's database, where
``-1`` followed by 198 zeros was an OverflowError in the driver and ``pool.-1`` a JSON path
error) gets the same 400: :func:`test_the_refusals_come_before_any_query` checks the
parsing alone.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import QueryDict
from django.test import Client, RequestFactory
from django.urls import resolve, reverse

from tests.webapp.test_security import concrete, routes
from tests.webapp.test_security import objects as objects
from webapp.core.models import PersonalToken
from webapp.core.services import personal_token_create
from webapp.runs.api_query import run_query_from_params
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x0660 + d) for d in range(10)))
SUPERSCRIPT_TWO = "\u00b2"
"""``"²".isdigit()`` is true, ``int("²")`` a ValueError."""


def as_user(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def forged_cursor(data: object) -> str:
    text = json.dumps(data) if not isinstance(data, str) else data
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# --------------------------------------------------------------------------- the runs API
HOSTILE_RUN_FILTERS = [
    # (query parameters, the parameter the 400 names)
    ({"cursor": forged_cursor('{"order": "-id", "after": 1e400}')}, "cursor"),
    ({"cursor": forged_cursor({"order": "-id", "after": 2**70})}, "cursor"),
    ({"cursor": forged_cursor({"order": "-id", "after": True})}, "cursor"),
    ({"cursor": forged_cursor("[" * 5000)}, "cursor"),
    ({"created_before": "9999-12-31"}, "created_before"),
    ({"created_after": "0001-01-01T00:00:00+01:00"}, "created_after"),
    ({"created_after": "9999-12-31T23:00:00-05:00"}, "created_after"),
    ({"created_after": "2026-01-01".translate(ARABIC_INDIC)}, "created_after"),
    ({"config.steps__lt": "-1" + "0" * 198}, "config.steps__lt"),
    ({"config.steps": "1" + "0" * 30}, "config.steps"),
    ({"config.steps__gt": "1e400"}, "config.steps__gt"),
    ({"config.pool": "[1e400]"}, "config.pool"),
    ({"config.pool.-1.name": "x"}, "config.pool.-1.name"),
    ({"config.pool.1_0.name": "x"}, "config.pool.1_0.name"),
    ({"config.pool.9999999.name": "x"}, "config.pool.9999999.name"),
    ({"id": SUPERSCRIPT_TWO}, "id"),
    ({"id": "1".translate(ARABIC_INDIC)}, "id"),
    ({"seed": " 1_0"}, "seed"),
    ({"limit": "10".translate(ARABIC_INDIC)}, "limit"),
]


@pytest.mark.parametrize(("params", "name"), HOSTILE_RUN_FILTERS)
def test_hostile_run_filters_are_a_400_naming_the_parameter(
    alice: User, run: Run, params: dict[str, str], name: str
) -> None:
    response = as_user(alice).get("/api/v1/runs", params)

    assert response.status_code == 400, response.content
    assert response.json()["error"].startswith(f"{name}:"), response.json()


@pytest.mark.parametrize(("params", "name"), HOSTILE_RUN_FILTERS)
def test_the_refusals_come_before_any_query(params: dict[str, str], name: str) -> None:
    """Whatever the database (the 400 is the parser's, not PostgreSQL's tolerance)."""
    query = QueryDict(mutable=True)
    query.update(params)
    if name in ("cursor", "limit"):
        return  # read by the page, not the filters (the API test above covers them)
    with pytest.raises(ValueError, match=f"^{name}:"):
        run_query_from_params(query)


def test_a_lab_named_by_unicode_digits_is_a_name_not_a_500(alice: User, run: Run) -> None:
    client = as_user(alice)
    for lab in (SUPERSCRIPT_TWO, str(run.experiment.lab_id).translate(ARABIC_INDIC)):
        response = client.get("/api/v1/runs", {"lab": lab})
        assert response.status_code == 200, (lab, response.content)
        assert response.json()["runs"] == []


def test_the_filters_that_stay_valid_still_select(alice: User, run: Run) -> None:
    client = as_user(alice)
    for params in (
        {"created_after": "0001-01-02", "created_before": "9999-12-30"},
        {"config.pool.0.name": run.config["pool"][0]["name"]},
        {"config.steps__lt": str(2**63 - 1)},
        {"seed": "+0"},
    ):
        response = client.get("/api/v1/runs", params)
        assert response.status_code == 200, (params, response.content)
        assert [listed["id"] for listed in response.json()["runs"]] == [run.pk], params


def test_an_integer_parameter_takes_ascii_digits_only(alice: User, run: Run) -> None:
    url = f"/api/v1/runs/{run.pk}/series"
    client = as_user(alice)
    for raw in (SUPERSCRIPT_TWO, "5".translate(ARABIC_INDIC), "1_0"):
        response = client.get(url, {"key": "val/reward@1", "max_points": raw})
        assert response.status_code == 400, (raw, response.content)
        assert response.json()["error"].startswith("max_points: must be an integer"), raw


# --------------------------------------------------------------------------- compare
def test_a_saved_comparison_named_by_a_superscript_is_not_found(alice: User) -> None:
    response = as_user(alice).get(f"/api/v1/compare/saved/{SUPERSCRIPT_TWO}")

    assert response.status_code == 404, response.content


def test_a_significance_step_of_unicode_digits_is_a_400(alice: User, run: Run) -> None:
    client = as_user(alice)
    for raw in (SUPERSCRIPT_TWO, "3".translate(ARABIC_INDIC)):
        response = client.get(
            reverse("compare:bars"), {"runs": run.pk, "view": "significance", "sig_step": raw}
        )
        assert response.status_code == 400, (raw, response.content)
        assert "sig_step" in response.json()["error"], raw


def test_run_ids_of_unicode_digits_are_a_400(alice: User, run: Run) -> None:
    response = as_user(alice).get(
        reverse("compare:bars"), {"runs": str(run.pk).translate(ARABIC_INDIC)}
    )

    assert response.status_code == 400, response.content
    assert response.json()["error"].startswith("runs:"), response.json()


# --------------------------------------------------------------------------- tokens
def test_unicode_digits_revoke_no_token(alice: User) -> None:
    record = personal_token_create(user=alice, name="laptop").record
    client = as_user(alice)
    for raw in (str(record.pk).translate(ARABIC_INDIC), SUPERSCRIPT_TWO, f" {record.pk}"):
        response = client.post(reverse("core:api_tokens"), {"revoke": raw}, follow=True)
        assert response.status_code == 200, raw
        assert "No such active token of yours." in response.content.decode(), raw
        assert PersonalToken.objects.get(pk=record.pk).revoked_at is None, raw

    client.post(reverse("core:api_tokens"), {"revoke": str(record.pk)})
    assert PersonalToken.objects.get(pk=record.pk).revoked_at is not None


# --------------------------------------------------------------------------- HEAD
def test_every_read_route_answers_head_like_get_without_a_body(
    alice: User,
    objects: dict[str, Any],
) -> None:
    client = as_user(alice)
    checked = []
    for name, route in routes():
        url, _ = concrete(route, objects)
        got = client.get(url)
        if got.status_code == 405:
            continue
        head = client.head(url)
        assert head.status_code == got.status_code, (name, url, got.status_code)
        body = b"".join(head.streaming_content) if head.streaming else head.content
        assert body == b"", name
        checked.append(name)
    assert {"api:runs", "api:history", "dashboard:index", "compare:page"} <= set(checked)


def test_the_api_sends_a_head_no_body_and_the_gets_length(alice: User, run: Run) -> None:
    """Whatever serves the app: the view itself drops the body (the test client and
    gunicorn would drop it too, so the view is called directly here)."""
    factory = RequestFactory()
    view = resolve("/api/v1/runs").func
    get, head = factory.get("/api/v1/runs"), factory.head("/api/v1/runs")
    get.user = head.user = alice

    full, bare = view(get), view(head)

    assert (bare.status_code, bare.content) == (200, b"")
    assert bare["Content-Length"] == str(len(full.content))
    assert bare["Content-Type"] == full["Content-Type"]
