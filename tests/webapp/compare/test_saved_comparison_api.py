"""``GET /api/v1/compare/saved/<slug or id>`` (issue 34): a saved comparison's curves as
its page requests them on opening; the lab's permissions per actor."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scheduler.launch import sweep_launch
from tests.webapp.metrics.test_api_support import point, post_batch
from tests.webapp.metrics.test_fuzz_ingest import validate
from webapp.compare.models import SavedComparison
from webapp.core.services import personal_token_create
from webapp.metrics.views_schema import OPENAPI
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.django_db


@pytest.fixture
def saved(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> SavedComparison:
    """A sweep of standalone and SGT (seeds 0, 1) with curves, saved as a comparison of
    validation reward, 95% CI, some smoothing; its query names one metric the runs lack."""
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="cmp", regimes=["standalone", "sgt"], seeds=[0, 1]
    )
    for run in Run.objects.filter(experiment__sweep=sweep):
        token = services.run_token_issue(run)
        lift = 0.1 if run.regime == "sgt" else 0.0
        points = [
            point(step, lift + step / 50 + 0.01 * run.seed, policy=policy, key=key)
            for policy in run.policy_names
            for key in ("val/reward@1", "train/reward_mean")
            for step in range(0, 30, 3)
        ]
        assert post_batch(client, run, token, {"points": points}).status_code == 200
    query = urlencode(
        [
            ("sweep", sweep.pk),
            ("group_by", "regime"),
            ("metric", "val/reward@1"),
            ("metric", "not/logged"),
            ("policy", "qwen"),
            ("band", "ci95"),
            ("smooth", "0.3"),
            ("x", "nonsense"),  # the page's select falls back to its first option, step
        ]
    )
    return SavedComparison.objects.create(
        lab=source.lab, owner=alice, name="SGT vs standalone", slug="abcDEF123456", query=query
    )


def test_the_saved_comparison_is_what_the_page_requests(
    client: Client, alice: User, saved: SavedComparison
) -> None:
    client.force_login(alice)
    page = client.get(saved.get_absolute_url())
    assert page.status_code == 200
    run_ids = page.context["page_config"]["runs"]
    assert len(run_ids) == 4
    # what compare-page.js's viewParams sends on opening for this saved query
    sent = {"runs": ",".join(map(str, run_ids)), "group_by": "regime", "x": "step"}
    sent |= {"band": "ci95", "smooth": "0.3", "metric": "val/reward@1", "policy": "qwen"}
    drawn = client.get("/api/v1/compare", sent).json()
    reply = client.get(f"/api/v1/compare/saved/{saved.slug}")
    assert reply.status_code == 200
    data = reply.json()
    assert not validate(data, OPENAPI["components"]["schemas"]["SavedComparisonData"])
    assert data["comparison"] == drawn
    assert [panel["metric"] for panel in drawn["panels"]] == ["val/reward@1"]
    assert {trace["group"] for trace in drawn["panels"][0]["traces"]} == {"standalone", "sgt"}
    assert data["selection"]["runs"] == run_ids
    assert data["saved"]["name"] == "SGT vs standalone" and data["saved"]["owner"] == "alice"
    assert data["saved"]["page"].endswith(saved.get_absolute_url())
    by_id = client.get(f"/api/v1/compare/saved/{saved.pk}").json()
    assert by_id["comparison"] == drawn


def test_a_query_naming_no_offered_metric_shows_the_defaults(
    client: Client, alice: User, saved: SavedComparison
) -> None:
    SavedComparison.objects.filter(pk=saved.pk).update(
        query=saved.query.replace("metric=val%2Freward%401&", "")
    )
    client.force_login(alice)
    data = client.get(f"/api/v1/compare/saved/{saved.slug}").json()["comparison"]
    assert [panel["metric"] for panel in data["panels"]] == ["val/reward@1", "train/reward_mean"]


def test_who_may_read_a_saved_comparison(
    client: Client, bob: User, charlie: User, saved: SavedComparison
) -> None:
    url = f"/api/v1/compare/saved/{saved.slug}"
    assert client.get(url).status_code == 401
    client.force_login(bob)
    assert client.get(url).status_code == 200  # the lab's
    assert client.get(f"/api/v1/compare/saved/{saved.pk}").status_code == 200
    client.force_login(charlie)
    for ref in (saved.slug, saved.pk, "nope"):
        response = client.get(f"/api/v1/compare/saved/{ref}")
        assert response.status_code == 404
        assert response.json() == {"error": "no such saved comparison"}
    client.logout()
    token = personal_token_create(user=charlie, name="n").secret
    assert client.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 404
    token = personal_token_create(user=bob, name="n").secret
    assert client.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_a_selection_with_no_visible_run_is_not_found(
    client: Client, alice: User, saved: SavedComparison
) -> None:
    SavedComparison.objects.filter(pk=saved.pk).update(query="runs=999999&group_by=regime")
    client.force_login(alice)
    response = client.get(f"/api/v1/compare/saved/{saved.slug}")
    assert response.status_code == 404
    assert "999999" in response.json()["error"]
