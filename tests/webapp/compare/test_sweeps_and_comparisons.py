"""Sweeps (one form, a grid of runs) and the compare page's selection and saving."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.http import QueryDict
from django.test import Client
from django.urls import reverse

from scheduler.launch import sweep_launch
from trainer.config import ConfigError
from webapp.compare.models import SavedComparison
from webapp.compare.selection import SelectionError, select_runs
from webapp.runs import services
from webapp.runs.models import Experiment, Run, Sweep

pytestmark = pytest.mark.django_db


def test_a_sweep_of_four_regimes_and_two_seeds_creates_eight_runs(
    alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice,
        source=source,
        name="grid",
        regimes=["standalone", "prp", "xgrpo", "sgt"],
        seeds=[0, 1],
    )
    runs = Run.objects.filter(experiment__sweep=sweep)
    assert runs.count() == 8
    assert sorted({(r.regime, r.seed) for r in runs}) == [
        (regime, seed) for regime in ("prp", "sgt", "standalone", "xgrpo") for seed in (0, 1)
    ]
    assert all(r.state == "queued" for r in runs)
    for run in runs:  # the same pool and settings, only the regime differs
        assert run.config["pool"] == source.config["pool"]
        assert run.config["regime"] == run.regime
    assert sorted(e.name for e in sweep.experiments.all()) == [
        "grid-prp",
        "grid-sgt",
        "grid-standalone",
        "grid-xgrpo",
    ]


def test_a_sweep_over_a_hyperparameter_varies_it_per_cell(
    alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice,
        source=source,
        name="klgrid",
        regimes=["sgt"],
        seeds=[0, 1, 2],
        param_path="grpo.kl_coef",
        param_values=[0.0, 0.01],
    )
    cells = {e.name: e.config["grpo"]["kl_coef"] for e in sweep.experiments.all()}
    assert cells == {"klgrid-sgt-kl_coef0.0": 0.0, "klgrid-sgt-kl_coef0.01": 0.01}
    assert Run.objects.filter(experiment__sweep=sweep).count() == 6


def test_a_bad_cell_stores_nothing(alice: User, make_experiment: Callable[..., Experiment]) -> None:
    source = make_experiment(seeds=(0,))
    with pytest.raises(ConfigError):
        sweep_launch(
            owner=alice,
            source=source,
            name="bad",
            regimes=["sgt"],
            seeds=[0],
            param_path="grpo.clip_eps",
            param_values=[0.2, 5.0],  # 5.0 is out of (0, 1)
        )
    assert not Sweep.objects.exists() and Experiment.objects.count() == 1
    with pytest.raises(services.SweepError, match="at most 64"):
        sweep_launch(owner=alice, source=source, name="big", regimes=["sgt"], seeds=list(range(65)))


def test_the_sweep_form_launches_and_reports_errors_per_field(
    client: Client, bob: User, make_experiment: Callable[..., Experiment]
) -> None:
    source = make_experiment(seeds=(0,))
    client.force_login(bob)  # a labmate sweeps alice's experiment into his own runs
    url = reverse("compare:sweep_create", args=[source.pk])
    bad = client.post(
        url, {"name": "x y", "regimes": ["sgt"], "seeds": "0, 0", "param_values": "1"}
    )
    assert bad.status_code == 200
    errors = bad.context["form"].errors
    assert "name" in errors and "seeds" in errors and "param_path" in errors
    response = client.post(
        url, {"name": "bobgrid", "regimes": ["standalone", "sgt"], "seeds": "0, 1"}, follow=True
    )
    sweep = Sweep.objects.get()
    assert sweep.owner == bob and response.redirect_chain[-1][0] == sweep.get_absolute_url()
    assert "4 runs queued" in response.content.decode()
    assert "sweep=" in response.context["compare_url"]


def test_the_sweep_form_preselects_only_the_regimes_the_source_fits(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    """A regime the source's config is not valid under is offered but not checked: a
    one-policy experiment cannot share, so only standalone is checked; a three-policy
    one of any length gets every regime (sequential SFT adds its SFT steps after the
    full RL schedule, so it fits a 4-step source too)."""
    client.force_login(alice)

    def offered_and_checked(experiment: Experiment) -> tuple[set[str], set[str]]:
        url = reverse("compare:sweep_create", args=[experiment.pk])
        form = client.get(url).context["form"]
        offered = {value for value, _label in form.fields["regimes"].choices}
        return offered, set(form["regimes"].initial)

    every = {"standalone", "prp", "xgrpo", "sgt", "sequential_sft"}
    solo = make_experiment(
        seeds=(0,), regime="standalone", pool=[{"name": "llama", "model": "zoo:tiny-llama-char"}]
    )
    assert offered_and_checked(solo) == (every, {"standalone"})
    short, long = make_experiment(seeds=(0,), steps=4), make_experiment(seeds=(0,), steps=40)
    assert offered_and_checked(short) == (every, every)
    assert offered_and_checked(long) == (every, every)


def test_outsiders_cannot_sweep_or_see_sweeps(
    client: Client, charlie: User, make_experiment: Callable[..., Experiment], alice: User
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(owner=alice, source=source, name="g", regimes=["sgt"], seeds=[0])
    client.force_login(charlie)
    assert client.get(reverse("compare:sweep_create", args=[source.pk])).status_code == 404
    assert client.get(sweep.get_absolute_url()).status_code == 404


# --- selection -----------------------------------------------------------------------------
def test_selection_by_sweep_ids_and_filters(
    alice: User, charlie: User, make_experiment: Callable[..., Experiment]
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="g", regimes=["standalone", "sgt"], seeds=[0, 1]
    )
    other = make_experiment(
        name="duo",
        regime="sgt",
        seeds=(0,),
        pool=[
            {"name": "llama", "model": "zoo:tiny-llama-char"},
            {"name": "gpt2", "model": "zoo:tiny-gpt2-unigram"},
        ],
    )
    duo_run = services.runs_create(other, state="queued")[0]
    by_sweep = select_runs(alice, QueryDict(f"sweep={sweep.pk}"))
    assert len(by_sweep.runs) == 4
    ids = [r.pk for r in by_sweep.runs[:2]]
    assert [r.pk for r in select_runs(alice, QueryDict(f"runs={ids[0]},{ids[1]}")).runs] == ids
    assert [r.pk for r in select_runs(alice, QueryDict(f"run={ids[0]}&run={ids[1]}")).runs] == ids
    sgt = select_runs(alice, QueryDict("q_regime=sgt"))
    assert len(sgt.runs) == 3
    # "All SGT runs on pool X": the pool's policy names, in any order.
    on_duo = select_runs(alice, QueryDict("q_regime=sgt&q_pool=gpt2,llama"))
    assert [r.pk for r in on_duo.runs] == [duo_run.pk] and "on pool" in on_duo.description
    assert select_runs(charlie, QueryDict(f"sweep={sweep.pk}")).runs == []
    with pytest.raises(SelectionError, match="choose runs"):
        select_runs(alice, QueryDict(""))
    with pytest.raises(SelectionError, match="runs"):
        select_runs(alice, QueryDict("runs=1,x"))


def test_the_compare_page_and_a_saved_comparison(
    client: Client, alice: User, bob: User, charlie: User, make_experiment: Callable
) -> None:
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(owner=alice, source=source, name="g", regimes=["sgt"], seeds=[0])
    client.force_login(alice)
    page = client.get(reverse("compare:page"), {"sweep": sweep.pk, "preset": "fig5"})
    assert page.status_code == 200
    assert page.context["chosen_metrics"] == ["actor/entropy", "actor/kl_coef", "actor/kl_loss"]
    assert client.get(reverse("compare:page")).status_code == 400
    query = f"sweep={sweep.pk}&group_by=regime&metric=val%2Freward%401"
    response = client.post(reverse("compare:comparison_save"), {"name": "SGT grid", "query": query})
    saved = SavedComparison.objects.get()
    assert response["Location"] == saved.get_absolute_url() and saved.query == query
    client.force_login(bob)
    shared = client.get(saved.get_absolute_url())
    assert shared.status_code == 200 and len(shared.context["selection"].runs) == 1
    client.force_login(charlie)
    assert client.get(saved.get_absolute_url()).status_code == 404


def test_the_sweep_form_renders_the_run_count_without_javascript(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    """The count above Launch is the server's before any script runs: the defaults, and
    what a form sent back with an error would launch once fixed."""
    client.force_login(alice)
    url = reverse("compare:sweep_create", args=[make_experiment(seeds=(0,)).pk])
    shown = " ".join(client.get(url).content.decode().split())
    assert 'Launches <strong data-part="runs">15 runs</strong>' in shown
    posted = {
        "name": "x y",
        "regimes": ["standalone", "sgt"],
        "seeds": "0, 1, 2, 3",
        "param_path": "grpo.kl_coef",
        "param_values": "0.0, 0.1",
    }
    shown = " ".join(client.post(url, posted).content.decode().split())
    assert 'Launches <strong data-part="runs">16 runs</strong>' in shown


def test_a_swept_value_a_person_would_question_needs_acknowledging_before_launch(
    client: Client, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    """Preview never saw a swept value: the sweep form warns of one outside its usual
    range and launches nothing until "I have checked these sizes" is ticked for it."""
    client.force_login(alice)
    url = reverse("compare:sweep_create", args=[make_experiment(seeds=(0,)).pk])
    posted = {
        "name": "long",
        "regimes": ["standalone"],
        "seeds": "0",
        "param_path": "steps",
        "param_values": "4, 100000000",
    }
    shown = " ".join(client.post(url, posted).content.decode().split())
    assert not Sweep.objects.exists()
    assert "Sizes to check" in shown
    assert "Steps: steps is 100000000, far outside the usual 1 to 100000" in shown
    assert "Nothing was launched yet: tick \u201cI have checked these sizes\u201d" in shown
    assert "in 2 runs; wall time: <strong" in shown
    digest = re.search(r'name="sizes_checked" value="(\w+)"', shown)
    assert digest is not None
    # Ticked for other sizes (another value since): refused again, saying why.
    changed = {**posted, "param_values": "4, 200000000", "sizes_checked": digest[1]}
    shown = " ".join(client.post(url, changed).content.decode().split())
    assert "the sizes changed since you ticked" in shown and not Sweep.objects.exists()
    launched = client.post(url, {**posted, "sizes_checked": digest[1]})
    assert launched.status_code == 302 and Sweep.objects.get().name == "long"
    # A sweep of usual values needs no tick.
    usual = {**posted, "name": "short", "param_values": "4, 8"}
    assert client.post(url, usual).status_code == 302


def test_the_sweep_size_counts_every_run_and_the_local_limit() -> None:
    from webapp.runs.compose_sizes import StepRate, sweep_size

    pool = [{"name": "a", "model": "zoo:x", "group_size": 4, "max_new_tokens": 10}]
    cells = [
        {"steps": 10, "prompts_per_step": 2, "pool": pool},  # 80 tokens a step
        {"steps": 30, "prompts_per_step": 2, "pool": pool},
    ]
    size = sweep_size(cells, 3, StepRate(0.5, 4), time_limit_s=1000, at_once=2)
    assert size.runs == 6 and size.total_tokens == 3 * (10 + 30) * 80
    assert size.run_seconds == (400.0,) * 3 + (1200.0,) * 3  # 0.5 s a token
    # The longest run, and the six runs two at a time: 4,800 s of runs / 2.
    assert (
        size.wall_time_text
        == "each run up to about 20 min; at most 2 at once here: about 40 min in all"
    )
    assert size.warnings == (
        "The longest run's estimated wall time, 20 min, exceeds the time limit of 17 min: "
        "its job would be stopped before it ends",
    )
    unmeasured = sweep_size(cells, 1, None, time_limit_s=None, at_once=None)
    assert unmeasured.wall_time_text == "no step rate measured on this backend yet"
    assert unmeasured.warnings == ()
