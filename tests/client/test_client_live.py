"""The notebook client against a live server on PostgreSQL (issue 34): filters, paging,
the permissions per actor, token revocation, history equal to the points stored, and a
saved comparison equal to what its page draws (in Chromium).

pytest-django's live server runs in a thread of this process on the test database
(transactional: the data is committed so that the server sees it); the client talks to
it over HTTP with personal tokens. Actors: alice owns the runs, bob is her labmate,
charlie is in another lab, dora is staff.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mutual_rl_lab_client.lab as client_lab
import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client
from mutual_rl_lab_client import Lab, NotFound, Unauthorized

from scheduler.launch import sweep_launch
from tests.fixtures_browser import log_in
from webapp.compare.models import SavedComparison
from webapp.core.services import personal_token_create
from webapp.metrics.models import MetricPoint
from webapp.metrics.selectors import as_float
from webapp.runs import services
from webapp.runs.models import Experiment, Run

REPO = Path(__file__).resolve().parents[2]
STEPS = 12
pytestmark = pytest.mark.usefixtures("transactional_db")


def ship(base_url: str, run: Run) -> None:
    """Curves for each policy (a reward rising by regime and seed, an entropy, the
    consumption counters), a NaN in llama's entropy, and success transfer events."""
    token = services.run_token_issue(run)
    lift = {"standalone": 0.0, "sgt": 0.1}.get(run.regime, 0.05)
    points = []
    for policy in run.policy_names:
        for step in range(STEPS):
            reward = lift + step / 50 + 0.01 * math.sin(step + run.seed)
            entropy = "NaN" if (policy, step) == ("llama", 5) else 2.0 - step / 20
            points += [
                {"policy": policy, "key": "val/reward@1", "step": step, "value": reward},
                {"policy": policy, "key": "actor/entropy", "step": step, "value": entropy},
                {"policy": policy, "key": "perf/response_tokens_total", "step": step + 1,
                 "value": 100.0 * (step + 1)},
            ]  # fmt: skip
    events = [
        {"step": step, "source": "qwen", "target": "llama", "kind": "success",
         "prompt_id": f"p{step}", "count": 1, "weight": None}
        for step in range(3)
    ]  # fmt: skip
    body: dict[str, Any] = {"points": points}
    if run.regime == "sgt":
        body["events"] = events
    reply = requests.post(
        f"{base_url}/api/v1/runs/{run.pk}/ingest",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text


@pytest.fixture
def lab_world(
    live_server: Any, alice: User, make_experiment: Callable[..., Experiment]
) -> dict[str, Any]:
    """A sweep of alice's (standalone and SGT x seeds 0, 1, completed) with curves, and a
    saved comparison of it."""
    source = make_experiment(seeds=(0,))
    sweep = sweep_launch(
        owner=alice, source=source, name="grid", regimes=["standalone", "sgt"], seeds=[0, 1]
    )
    runs = list(Run.objects.filter(experiment__sweep=sweep).order_by("pk"))
    Run.objects.filter(pk__in=[run.pk for run in runs]).update(state=Run.State.COMPLETED)
    for run in runs:
        ship(live_server.url, run)
    saved = SavedComparison.objects.create(
        lab=source.lab,
        owner=alice,
        name="sgt vs standalone",
        slug="savedSlug123",
        query=f"sweep={sweep.pk}&group_by=regime&metric=val/reward@1&band=ci95&smooth=0.2",
    )
    return {"url": live_server.url, "runs": runs, "sweep": sweep, "saved": saved}


def lab_of(world: dict[str, Any], user: User | None) -> Lab:
    token = personal_token_create(user=user, name="notebook").secret if user else ""
    return Lab(world["url"], token=token, retries=0)


def test_filters_and_paging(
    lab_world: dict[str, Any], alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = lab_of(lab_world, alice)
    runs = lab_world["runs"]
    table = lab.runs(metrics=["val/reward@1"], policies=["llama"])
    assert sorted(table["id"]) == sorted(run.pk for run in runs)
    assert list(table["id"]) == sorted(table["id"], reverse=True)  # newest first
    assert set(table["regime"]) == {"standalone", "sgt"}
    assert (table["config.regime"] == table["regime"]).all()
    assert (table["final_step/llama/val/reward@1"] == STEPS - 1).all()
    for _, row in table.iterrows():
        lift = 0.1 if row["regime"] == "sgt" else 0.0
        last = lift + (STEPS - 1) / 50 + 0.01 * math.sin(STEPS - 1 + row["seed"])
        assert row["final/llama/val/reward@1"] == pytest.approx(last)
        assert row["best/llama/val/reward@1"] == pytest.approx(last)  # a rising curve
    assert "final/qwen/val/reward@1" not in table.columns  # only the policy asked for
    sgt = lab.runs(regime="sgt", state="completed", config={"seed": 1})
    assert list(sgt["id"]) == [run.pk for run in runs if run.regime == "sgt" and run.seed == 1]
    assert lab.runs(config={"sgt.lambda_sgt__gt": 5}).empty
    assert len(lab.runs(sweep=lab_world["sweep"].pk, limit=3)) == 3
    monkeypatch.setattr(client_lab, "RUNS_PAGE", 1)  # one run a page: four requests
    paged = lab.runs(sweep=lab_world["sweep"].pk)
    assert list(paged["id"]) == sorted((run.pk for run in runs), reverse=True)


def test_permissions_per_actor(
    lab_world: dict[str, Any], alice: User, bob: User, charlie: User
) -> None:
    run_ids = sorted(run.pk for run in lab_world["runs"])
    one = run_ids[0]
    dora = User.objects.create_user("dora", password="x", is_staff=True)
    for user, sees in ((alice, True), (bob, True), (dora, True), (charlie, False)):
        lab = lab_of(lab_world, user)
        assert sorted(lab.runs()["id"]) == (run_ids if sees else []), user
        if sees:
            assert not lab.history(one, "val/reward@1").empty
            assert len(lab.comparison(lab_world["saved"].slug)) > 0
        else:
            with pytest.raises(NotFound, match="no such run"):
                lab.history(one, "val/reward@1")
            with pytest.raises(NotFound, match="no such saved comparison"):
                lab.comparison(lab_world["saved"].slug)
            with pytest.raises(NotFound):
                lab.events(one)
    with pytest.raises(Unauthorized, match="log in first"):
        lab_of(lab_world, None).runs()


def test_a_revoked_token_stops_reading(lab_world: dict[str, Any], alice: User) -> None:
    issued = personal_token_create(user=alice, name="laptop")
    lab = Lab(lab_world["url"], token=issued.secret, retries=0)
    assert len(lab.runs()) == 4
    page = Client()
    page.force_login(alice)
    assert page.post("/settings/tokens/", {"revoke": str(issued.record.pk)}).status_code == 302
    with pytest.raises(Unauthorized, match="revoked personal token"):
        lab.runs()
    run_token = services.run_token_issue(lab_world["runs"][0])  # a run's token reads nothing
    with pytest.raises(Unauthorized):
        Lab(lab_world["url"], token=run_token, retries=0).runs()


def test_history_is_the_points_stored(lab_world: dict[str, Any], bob: User) -> None:
    lab = lab_of(lab_world, bob)
    runs = lab_world["runs"]
    keys = ["val/reward@1", "actor/entropy"]
    table = lab.history(lab.runs(), keys)
    stored = MetricPoint.objects.filter(series__run__in=runs, series__key__in=keys)
    assert len(table) == stored.count() == len(runs) * 3 * 2 * STEPS
    expected = {
        (p.series.run_id, p.series.policy, p.series.key, p.step): as_float(p.value)
        for p in stored.select_related("series")
    }
    for row in table.itertuples(index=False):
        value = expected[(row.run, row.policy, row.key, row.step)]
        assert row.value == value or (math.isnan(row.value) and math.isnan(value))
        assert row.x == row.step
    tokens = lab.history(runs[0].pk, "val/reward@1", policies="qwen", x="tokens")
    assert list(tokens["x"]) == [0.0] + [100.0 * step for step in range(1, STEPS)]
    small = lab.history(runs[0].pk, "val/reward@1", policies="qwen", max_points=4)
    # a rising curve's only bucket: its lowest and highest are its first and last point
    assert list(small["step"]) == [0, STEPS - 1]


def test_events_and_the_comparison_equal_to_the_page(
    lab_world: dict[str, Any], alice: User, page: Any
) -> None:
    lab = lab_of(lab_world, alice)
    sgt_run = next(run for run in lab_world["runs"] if run.regime == "sgt")
    events = lab.events(sgt_run.pk, kind="success")
    assert list(events["step"]) == [0, 1, 2] and set(events["source"]) == {"qwen"}
    assert lab.events(sgt_run.pk, kind="rollout").empty

    saved = lab_world["saved"]
    log_in(page, lab_world["url"], alice, "alice-password")
    with page.expect_response(lambda r: "/api/v1/compare?" in r.url) as drawn:
        page.goto(f"{lab_world['url']}{saved.get_absolute_url()}")
    shown = drawn.value.json()
    page.get_by_test_id("compare-panel").first.wait_for()
    table = lab.comparison(saved.slug)
    assert table.attrs["spec"] == shown["spec"]
    assert table.attrs["runs"] == sorted(run.pk for run in lab_world["runs"])
    expected = [
        (panel["policy"], panel["metric"], trace["group"], x, mean, lower, upper, n)
        for panel in shown["panels"]
        for trace in panel["traces"]
        for x, mean, lower, upper, n in zip(
            trace["x"], trace["mean"], trace["lower"], trace["upper"], trace["n"], strict=True
        )
    ]
    got = list(
        table[["policy", "metric", "group", "x", "mean", "lower", "upper", "n"]].itertuples(
            index=False, name=None
        )
    )
    assert len(got) == len(expected) == 3 * 2 * STEPS  # 3 policies x 2 groups x 12 steps
    for ours, theirs in zip(got, expected, strict=True):
        assert ours[:3] == theirs[:3] and ours[7] == theirs[7]
        assert ours[3:7] == pytest.approx(theirs[3:7], nan_ok=True)
    by_url = lab.comparison(f"{lab_world['url']}{saved.get_absolute_url()}")
    assert by_url.equals(table)


def test_the_example_notebook_draws_the_demos_regime_comparison(
    live_server: Any, alice: User, make_experiment: Callable[..., Experiment], tmp_path: Path
) -> None:
    """examples/notebook.py, run as a script against the live server, on runs named as the
    demo's: it lists them and writes the figure (matplotlib is in the dev venv)."""
    for regime in ("standalone", "sgt"):
        experiment = make_experiment(name=f"demo-{regime}", regime=regime, seeds=(0, 1))
        for run in services.runs_create(experiment):
            ship(live_server.url, run)
    token = personal_token_create(user=alice, name="notebook").secret
    figure = tmp_path / "regimes.png"
    script = [sys.executable, str(REPO / "examples" / "notebook.py"), "--url", live_server.url]
    done = subprocess.run(
        [*script, "--out", str(figure)],
        env={**os.environ, "MRL_API_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("demo-sgt") == 2 and f"wrote {figure}" in done.stdout
    assert figure.read_bytes().startswith(b"\x89PNG")
    refused = subprocess.run(
        [*script, "--token", "mrlp_wrong"], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 1 and "401 Unauthorized" in refused.stderr
