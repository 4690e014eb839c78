"""Lists, detail pages and owner-only actions, for every kind of visitor.

Actors: alice owns, bob is her labmate, charlie is in another lab, anonymous is nobody.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduler.launch import experiment_launch
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.django_db


def _login(client: Client, user: User | None) -> Client:
    if user is not None:
        client.force_login(user)
    return client


# --- lists -------------------------------------------------------------------------------
def test_lists_filter_sort_and_paginate(
    client: Client, alice: User, bob: User, make_experiment: Callable[..., Experiment]
) -> None:
    for index in range(30):
        make_experiment(
            owner=alice if index % 2 else bob,
            name=f"exp-{index:02d}",
            regime="standalone" if index % 3 else "xgrpo",
            seeds=(0,),
        )
    client.force_login(alice)
    url = reverse("dashboard:experiment_list")
    first = client.get(url)
    assert first.status_code == 200
    assert len(first.context["page"].object_list) == 25
    assert first.context["page"].paginator.count == 30
    assert client.get(url, {"page": 2}).context["page"].object_list[0].name == "exp-04"

    by_bob = client.get(url, {"owner": "bob", "regime": "xgrpo", "sort": "name"})
    names = [e.name for e in by_bob.context["page"].object_list]
    assert names == ["exp-00", "exp-06", "exp-12", "exp-18", "exp-24"]
    assert next(e.name for e in client.get(url, {"sort": "-name"}).context["page"]) == "exp-29"


def test_a_bad_filter_value_is_reported_not_a_500(client: Client, alice: User) -> None:
    client.force_login(alice)
    response = client.get(reverse("dashboard:run_list"), {"state": "exploded", "sort": "x"})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()


def test_run_list_filters_by_state_and_tag(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(seeds=(0, 1, 2))
    runs = experiment_launch(experiment)
    services.run_transition(runs[0], Run.State.SUBMITTED)
    runs[1].tags.set(services.tags_resolve(experiment.lab, ["baseline"]))
    client.force_login(alice)
    url = reverse("dashboard:run_list")
    submitted = client.get(url, {"state": "submitted"}).context["page"].object_list
    assert [run.pk for run in submitted] == [runs[0].pk]
    tagged = client.get(url, {"tag": "baseline"}).context["page"].object_list
    assert [run.pk for run in tagged] == [runs[1].pk]
    assert client.get(url, {"sort": "seed"}).context["page"].object_list[0].seed == 0


def test_outsiders_see_nothing_in_lists(
    client: Client, charlie: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment_launch(make_experiment())
    client.force_login(charlie)
    assert client.get(reverse("dashboard:experiment_list")).context["page"].paginator.count == 0
    assert client.get(reverse("dashboard:run_list")).context["page"].paginator.count == 0
    assert b"No experiments yet." in client.get(reverse("dashboard:index")).content


# --- permissions matrix --------------------------------------------------------------------
VIEW_STATUS = {"alice": 200, "bob": 200, "charlie": 404}


@pytest.mark.parametrize("who", ["alice", "bob", "charlie", "anonymous"])
def test_who_may_view(
    client: Client, who: str, request: pytest.FixtureRequest, make_experiment: Callable
) -> None:
    experiment = make_experiment()
    run = experiment_launch(experiment)[0]
    user = None if who == "anonymous" else request.getfixturevalue(who)
    _login(client, user)
    for url in (experiment.get_absolute_url(), run.get_absolute_url()):
        response = client.get(url)
        if who == "anonymous":
            assert response.status_code == 302 and response["Location"].startswith(
                "/accounts/login/"
            )
        else:
            assert response.status_code == VIEW_STATUS[who], url


@pytest.mark.parametrize(
    ("who", "expected"), [("alice", 302), ("bob", 403), ("charlie", 404), ("anonymous", 302)]
)
@pytest.mark.parametrize("action", ["experiment_launch", "experiment_delete", "run_token"])
def test_who_may_change(
    client: Client,
    who: str,
    expected: int,
    action: str,
    request: pytest.FixtureRequest,
    make_experiment: Callable[..., Experiment],
) -> None:
    experiment = make_experiment(seeds=(0,))
    run = services.runs_create(experiment)[0]
    target = run.pk if action == "run_token" else experiment.pk
    _login(client, None if who == "anonymous" else request.getfixturevalue(who))
    response = client.post(reverse(f"dashboard:{action}", args=[target]))
    assert response.status_code == expected
    if who == "anonymous":
        assert response["Location"].startswith("/accounts/login/")
    changed = {
        "experiment_launch": lambda: Run.objects.filter(state="queued").exists(),
        "experiment_delete": lambda: not Experiment.objects.filter(pk=experiment.pk).exists(),
        "run_token": lambda: bool(Run.objects.get(pk=run.pk).token_hash),
    }[action]()
    assert changed == (who == "alice")


def test_state_changing_views_refuse_get(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment()
    client.force_login(alice)
    for action in ("experiment_launch", "experiment_delete", "experiment_clone"):
        assert client.get(reverse(f"dashboard:{action}", args=[experiment.pk])).status_code == 405
    assert Experiment.objects.count() == 1 and not Run.objects.exists()


def test_posts_need_a_csrf_token(alice: User, make_experiment: Callable[..., Experiment]) -> None:
    experiment = make_experiment()
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(reverse("dashboard:experiment_launch", args=[experiment.pk]))
    assert response.status_code == 403
    assert not Run.objects.exists()


# --- actions -----------------------------------------------------------------------------
def test_launch_queues_one_run_per_seed(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(seeds=(0, 1, 2))
    client.force_login(alice)
    response = client.post(
        reverse("dashboard:experiment_launch", args=[experiment.pk]), follow=True
    )
    assert "Queued 3 run(s)" in response.content.decode()
    assert sorted(experiment.runs.values_list("seed", "state")) == [
        (0, "queued"),
        (1, "queued"),
        (2, "queued"),
    ]


def test_a_labmate_clones_into_their_own_draft(
    client: Client, bob: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment()
    client.force_login(bob)
    response = client.post(reverse("dashboard:experiment_clone", args=[experiment.pk]))
    clone = Experiment.objects.exclude(pk=experiment.pk).get()
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:experiment_edit", args=[clone.pk])
    assert clone.owner == bob and clone.config["pool"] == experiment.config["pool"]


def test_delete_refuses_while_runs_are_active(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(seeds=(0,))
    run = experiment_launch(experiment)[0]
    client.force_login(alice)
    url = reverse("dashboard:experiment_delete", args=[experiment.pk])
    assert "Cancel its active runs" in client.post(url, follow=True).content.decode()
    services.run_transition(run, Run.State.CANCELLED)
    client.post(url)
    assert not Experiment.objects.exists() and not Run.objects.exists()


def test_the_token_is_shown_once_and_only_its_hash_is_stored(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    run = experiment_launch(make_experiment(seeds=(0,)))[0]
    client.force_login(alice)
    page = client.post(reverse("dashboard:run_token", args=[run.pk]), follow=True)
    token = page.context["new_token"]
    assert token and token in page.content.decode()
    run.refresh_from_db()
    assert services.run_for_token(token) == run and token not in run.token_hash
    again = client.get(run.get_absolute_url())
    assert again.context["new_token"] is None and token not in again.content.decode()
    client.post(reverse("dashboard:run_token", args=[run.pk]), {"revoke": "1"})
    assert services.run_for_token(token) is None


def test_detail_pages_show_config_and_escape_names(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment()
    experiment.description = "<script>alert(1)</script>"
    experiment.save()
    run = experiment_launch(experiment)[0]
    client.force_login(alice)
    page = client.get(experiment.get_absolute_url()).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "&quot;regime&quot;: &quot;sgt&quot;" in page
    run_page = client.get(run.get_absolute_url()).content.decode()
    assert 'id="run-page-config"' in run_page and "vendor/plotly/plotly.min.js" in run_page
    assert run.name in run_page


def test_plotly_is_served_locally(client: Client) -> None:
    from django.contrib.staticfiles import finders

    assert finders.find("vendor/plotly/plotly.min.js")
    assert finders.find("js/run-page.js")


def test_the_owner_annotates_a_run_and_others_cannot(
    client: Client, alice: User, bob: User, make_experiment: Callable[..., Experiment]
) -> None:
    run = services.runs_create(make_experiment(seeds=(0,)))[0]
    url = reverse("dashboard:run_annotate", args=[run.pk])
    client.force_login(alice)
    client.post(url, {"notes": "diverged at step 40 <b>", "tags": "baseline, lr-3e-4"})
    run.refresh_from_db()
    assert run.notes == "diverged at step 40 <b>"
    assert sorted(t.name for t in run.tags.all()) == ["baseline", "lr-3e-4"]
    page = client.get(run.get_absolute_url()).content.decode()
    assert "diverged at step 40 &lt;b&gt;" in page
    refused = client.post(url, {"notes": "x", "tags": "no spaces allowed"}, follow=True)
    assert "Not a tag" in refused.content.decode()
    run.refresh_from_db()
    assert run.notes == "diverged at step 40 <b>"
    client.force_login(bob)
    assert client.post(url, {"notes": "bob was here"}).status_code == 403
