"""The comparison endpoints: who sees what, parameter errors, reply shapes."""

from __future__ import annotations

import math
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import QueryDict
from django.test import Client
from django.urls import reverse

from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare.spec import ComparisonSpec, SpecError
from webapp.runs.models import Run

VAL, TRAIN = "val/reward@1", "train/reward_mean"
JSON_ENDPOINTS = [("compare:data", ()), ("compare:summary", ())]
FILE_ENDPOINTS = [("compare:export", ("csv",)), ("compare:table", ("csv",))]


@pytest.fixture
def runs(alice: User) -> list[Run]:
    """sgt and standalone, two seeds each; llama and qwen log val and train reward."""
    runs = make_runs(alice, "sgt") + make_runs(alice, "standalone")
    for i, run in enumerate(runs):
        for policy in ("llama", "qwen"):
            add_series(run, policy, TRAIN, range(21), lambda s, i=i: s / 20 + i / 10)
            add_series(
                run,
                policy,
                VAL,
                range(0, 21, 5),
                lambda s, i=i: math.nan if (i, s) == (0, 5) else s / 40 + i / 20,
            )
    return runs


def ids(runs: list[Run]) -> str:
    return ",".join(str(run.pk) for run in runs)


def get(client: Client, name: str, args: tuple[str, ...] = (), **params: Any) -> Any:
    return client.get(reverse(name, args=args), params)


# --------------------------------------------------------------------------- spec


def test_a_spec_round_trips_through_its_query() -> None:
    spec = ComparisonSpec(
        runs=(3, 7, 12),
        group_by="grpo.kl_coef",
        metrics=("val/reward@1", "actor/kl_loss"),
        policies=("qwen", "_pool"),
        x="tokens",
        band="ci95",
        smooth=0.6,
        log_y=True,
        buckets=250,
    )
    query = spec.to_query()
    assert query.startswith("runs=3,7,12&group_by=grpo.kl_coef&metric=val/reward@1&")
    assert ComparisonSpec.from_query(QueryDict(query)) == spec
    assert ComparisonSpec.from_query(QueryDict(query)).to_query() == query


def test_runs_may_come_repeated_and_are_sorted_once_each() -> None:
    spec = ComparisonSpec.from_query(QueryDict("run=9&run=2&runs=2,5&metric=a&metric=a"))
    assert spec.runs == (2, 5, 9) and spec.metrics == ("a",)
    assert spec.to_query().startswith("runs=2,5,9&group_by=regime&metric=a&x=step")


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("", "runs"),
        ("runs=1,x", "runs"),
        ("runs=" + ",".join(str(i) for i in range(1, 202)), "runs"),
        ("runs=1&group_by=grpo..kl", "group_by"),
        ("runs=1&group_by=regime;drop", "group_by"),
        ("runs=1&" + "&".join(f"metric=m{i}" for i in range(17)), "metric"),
        ("runs=1&metric=bad name", "metric"),
        ("runs=1&" + "&".join(f"policy=p{i}" for i in range(9)), "policy"),
        ("runs=1&x=epochs", "x"),
        ("runs=1&band=iqr", "band"),
        ("runs=1&smooth=1", "smooth"),
        ("runs=1&smooth=nan", "smooth"),
        ("runs=1&smooth=abc", "smooth"),
        ("runs=1&log_y=maybe", "log_y"),
        ("runs=1&buckets=5", "buckets"),
        ("runs=1&buckets=2001", "buckets"),
    ],
)
def test_bad_specs_name_the_parameter(query: str, parameter: str) -> None:
    with pytest.raises(SpecError, match=f"^{parameter}: "):
        ComparisonSpec.from_query(QueryDict(query))


# --------------------------------------------------------------------------- permissions


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "args"), JSON_ENDPOINTS + FILE_ENDPOINTS)
def test_the_owner_and_a_labmate_can_compare(
    client: Client, alice: User, bob: User, runs: list[Run], name: str, args: tuple[str, ...]
) -> None:
    for user in (alice, bob):
        client.force_login(user)
        response = get(client, name, args, runs=ids(runs))
        assert response.status_code == 200, (user, response.content[:300])


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "args"), JSON_ENDPOINTS + FILE_ENDPOINTS)
def test_an_outsider_gets_404(
    client: Client, charlie: User, runs: list[Run], name: str, args: tuple[str, ...]
) -> None:
    client.force_login(charlie)
    assert get(client, name, args, runs=ids(runs)).status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "args"), JSON_ENDPOINTS)
def test_one_invisible_or_unknown_run_is_a_json_404(
    client: Client, alice: User, charlie: User, runs: list[Run], name: str, args: tuple
) -> None:
    [other] = make_runs(charlie, "sgt", seeds=[0])
    client.force_login(alice)
    for extra in (other.pk, 999_999):
        response = get(client, name, args, runs=f"{ids(runs)},{extra}")
        assert response.status_code == 404
        assert response.json() == {"error": "no such run"}


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "args"), JSON_ENDPOINTS)
def test_anonymous_users_get_401_json(
    client: Client, runs: list[Run], name: str, args: tuple[str, ...]
) -> None:
    response = get(client, name, args, runs=ids(runs))
    assert response.status_code == 401
    assert response.json() == {"error": "log in first"}


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "args"), FILE_ENDPOINTS)
def test_anonymous_users_are_sent_to_log_in_for_files(
    client: Client, runs: list[Run], name: str, args: tuple[str, ...]
) -> None:
    response = get(client, name, args, runs=ids(runs))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "args", "params", "message"),
    [
        ("compare:data", (), {"x": "epochs"}, "x: must be one of"),
        ("compare:data", (), {"smooth": "1.5"}, "smooth: must be in [0, 1)"),
        ("compare:summary", (), {"table_metric": "no spaces"}, "table_metric: "),
        ("compare:export", ("pdf",), {"columns": "3"}, "columns: must be 1 or 2"),
        ("compare:export", ("png",), {"group_by": "a b"}, "group_by: "),
        ("compare:table", ("tex",), {"lower_is_better": "2"}, "lower_is_better: "),
    ],
)
def test_bad_parameters_are_a_json_400(
    client: Client,
    alice: User,
    runs: list[Run],
    name: str,
    args: tuple[str, ...],
    params: dict[str, str],
    message: str,
) -> None:
    client.force_login(alice)
    response = get(client, name, args, runs=ids(runs), **params)
    assert response.status_code == 400
    assert response.json()["error"].startswith(message)


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "fmt"), [("compare:export", "gif"), ("compare:table", "pdf")])
def test_unknown_file_formats_are_404(
    client: Client, alice: User, runs: list[Run], name: str, fmt: str
) -> None:
    client.force_login(alice)
    assert get(client, name, (fmt,), runs=ids(runs)).status_code == 404


# --------------------------------------------------------------------------- shapes


@pytest.mark.django_db
def test_data_reply_shape(client: Client, alice: User, runs: list[Run]) -> None:
    client.force_login(alice)
    response = get(client, "compare:data", runs=ids(runs), metric=[VAL, TRAIN], buckets=21)
    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0")
    reply = response.json()
    assert set(reply) == {"spec", "groups", "panels", "notes", "x_label", "grid"}
    assert reply["spec"].startswith(f"runs={ids(runs)}&group_by=regime")
    assert [g["label"] for g in reply["groups"]] == ["standalone", "sgt"]
    assert reply["groups"][1]["runs"] == [runs[0].pk, runs[1].pk]
    assert [(p["policy"], p["metric"]) for p in reply["panels"]] == [
        ("llama", VAL),
        ("llama", TRAIN),
        ("qwen", VAL),
        ("qwen", TRAIN),
        ("gpt2", VAL),
        ("gpt2", TRAIN),
    ]
    trace = reply["panels"][0]["traces"][1]
    assert set(trace) == {
        "group", "colour", "dash", "x", "mean", "lower", "upper", "n", "raw_mean"
    }  # fmt: skip
    assert trace["group"] == "sgt" and trace["colour"] == reply["groups"][1]["colour"]
    assert trace["x"] == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert trace["n"] == [2, 1, 2, 2, 2]  # run 0's NaN at step 5
    assert trace["mean"][1] == pytest.approx(5 / 40 + 1 / 20)
    assert "gpt2 / Validation reward@1: no data in any run" in reply["notes"]
    assert reply["x_label"] == "step" and reply["grid"] == 21


@pytest.mark.django_db
def test_all_nan_points_are_encoded_as_strings(client: Client, alice: User) -> None:
    [run] = make_runs(alice, "sgt", seeds=[0])
    add_series(run, "llama", TRAIN, range(3), lambda s: math.nan if s == 1 else float(s))
    client.force_login(alice)
    reply = get(client, "compare:data", runs=run.pk, metric=TRAIN, policy="llama").json()
    trace = reply["panels"][0]["traces"][0]
    assert trace["mean"] == [0.0, "NaN", 2.0] and trace["n"] == [1, 0, 1]


@pytest.mark.django_db
def test_summary_reply_shape(client: Client, alice: User, runs: list[Run]) -> None:
    client.force_login(alice)
    reply = get(
        client, "compare:summary", runs=ids(runs), metric=[TRAIN, VAL], policy=["llama", "qwen"]
    ).json()
    assert reply["metric"] == VAL  # the last metric parameter
    assert reply["groups"] == ["standalone", "sgt"] and reply["policies"] == ["llama", "qwen"]
    assert reply["lower_is_better"] is False
    cell = reply["rows"][0]["cells"][0]
    assert cell["group"] == "standalone"
    # standalone runs are i = 2, 3: final val = 0.5 + i / 20
    assert cell["final"] == {
        "mean": pytest.approx(0.625),
        "std": pytest.approx(0.05 / math.sqrt(2)),  # sample std of 0.6 and 0.65
        "n": 2,
    }
    assert reply["best"] == {
        "final": {"llama": "standalone", "qwen": "standalone"},
        "best": {"llama": "standalone", "qwen": "standalone"},
        "mean": {"llama": "standalone", "qwen": "standalone"},
    }
    chosen = get(
        client, "compare:summary", runs=ids(runs), table_metric=TRAIN, lower_is_better=1
    ).json()
    assert chosen["metric"] == TRAIN and chosen["lower_is_better"] is True
    assert chosen["best"]["final"]["llama"] == "sgt"
