"""Exports that cannot starve the server (issue 44, item 2).

One export of 200 runs grouped by seed, 16 metrics and 8 policies held a web worker for
8 minutes and 1.2 GB. Now an export over a cap (:mod:`webapp.compare.export_limits`)
is refused with a 400 naming the count, the cap and what to narrow, before anything is
drawn; an allowed one is drawn in a child process under CPU, memory and wall-clock
limits (:mod:`webapp.compare.export_render`), and a child stopped by one is answered 503
saying which limit; the web process never builds a matplotlib figure.
"""

from __future__ import annotations

import io
import subprocess
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from matplotlib.figure import Figure
from PIL import Image

from tests.webapp.compare.test_compare_support import add_series, make_runs
from webapp.compare import export_limits, export_render, views
from webapp.compare.assemble import Comparison, Group, Panel, Trace
from webapp.compare.export_limits import (
    MAX_FIGURE_BARS,
    MAX_FIGURE_GROUPS,
    MAX_FIGURE_PANELS,
    MAX_FIGURE_POINTS,
    MAX_FOREST_ROWS,
    ExportTooLarge,
)
from webapp.compare.export_render import RenderJob, RenderLimitExceeded, RenderLimits
from webapp.compare.palette import styles_for
from webapp.compare.spec import ComparisonSpec
from webapp.runs.models import Run

VAL, TRAIN = "val/reward@1", "train/reward_mean"
ALPHA = "eval/synthetic/alpha/accuracy"
PDFTOPPM = "/usr/bin/pdftoppm"
ISSUE_METRICS = [VAL, TRAIN] + [f"{VAL}/slice{k}" for k in range(14)]  # 16 metrics
ISSUE_POLICIES = ["llama", "qwen", "gpt2", "_pool", "p4", "p5", "p6", "p7"]  # 8 policies


# --------------------------------------------------------------------------- the caps


def test_the_caps_fit_the_papers_figures_and_refuse_the_issues_query() -> None:
    # The presets on the example pools (3 policies + the pool mean), 4 regimes.
    export_limits.check_curves_plan(groups=4, metrics=4, policies=4)  # gap: 16 panels
    # ... and on the largest pool the composer allows: 8 policies and the pool mean.
    export_limits.check_curves_plan(groups=4, metrics=4, policies=9)  # gap: 36 panels
    export_limits.check_curves_plan(groups=4, metrics=3, policies=9)  # Figure 5: 27
    export_limits.check_curves_built([_panel(4, 500)] * 16)  # 32,000 points
    export_limits.check_significance_plan(groups=4, metrics=1, policies=4)  # 12 rows
    export_limits.check_bars_built([_bar_panel(categories=10, groups=4)] * 4)  # 160 bars
    # Exactly at a cap is allowed; one more is not.
    export_limits.check_curves_plan(groups=MAX_FIGURE_GROUPS, metrics=MAX_FIGURE_PANELS, policies=1)
    with pytest.raises(ExportTooLarge):
        export_limits.check_curves_plan(groups=MAX_FIGURE_GROUPS + 1, metrics=1, policies=1)
    # The issue's query: 200 runs grouped by seed, 16 metrics, 8 policies.
    with pytest.raises(ExportTooLarge) as refused:
        export_limits.check_significance_plan(groups=200, metrics=16, policies=8)
    text = str(refused.value)
    assert "25,472 rows (16 metrics x 8 policies x 199 groups)" in text
    assert f"over the cap of {MAX_FOREST_ROWS} rows an export may draw" in text
    assert "coarser group_by" in text
    assert refused.value.as_json() == {
        "error": text,
        "cap": "MAX_FOREST_ROWS",
        "limit": MAX_FOREST_ROWS,
        "count": 25_472,
    }


@pytest.mark.parametrize(
    ("check", "cap", "advice"),
    [
        (
            lambda: export_limits.check_curves_plan(groups=200, metrics=1, policies=1),
            MAX_FIGURE_GROUPS,
            "fewer runs",
        ),
        (
            lambda: export_limits.check_curves_plan(groups=2, metrics=16, policies=8),
            MAX_FIGURE_PANELS,
            "fewer metrics or policies",
        ),
        (
            lambda: export_limits.check_curves_built([_panel(10, 2000)] * 5),
            MAX_FIGURE_POINTS,
            "fewer buckets",
        ),
        (
            lambda: export_limits.check_bars_built([_bar_panel(25, 16)] * 8),
            MAX_FIGURE_BARS,
            "fewer policies",
        ),
    ],
)
def test_each_cap_names_its_count_its_value_and_what_to_narrow(
    check: Any, cap: int, advice: str
) -> None:
    with pytest.raises(ExportTooLarge) as refused:
        check()
    assert refused.value.cap == cap and refused.value.count > cap
    assert f"{refused.value.count:,}" in str(refused.value) and f"{cap:,}" in str(refused.value)
    assert advice in str(refused.value)


# --------------------------------------------------------------------------- the views


@pytest.fixture
def logged_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[RenderJob]:
    """Every figure the views send to a child process (and send on)."""
    started: list[RenderJob] = []
    real = export_render.render_in_child

    def spy(job: RenderJob, limits: RenderLimits) -> dict[str, bytes]:
        started.append(job)
        return real(job, limits)

    monkeypatch.setattr(views, "render_in_child", spy, raising=False)
    return started


@pytest.fixture
def figures_here(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every matplotlib figure built in this (the web) process."""
    built: list[Figure] = []
    real = Figure.__init__

    def spy(self: Figure, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "__init__", spy)
    return built


@pytest.fixture
def seeds(alice: User) -> list[Run]:
    """17 seeds of one sgt experiment (one group each when grouped by seed)."""
    return make_runs(alice, "sgt", seeds=range(MAX_FIGURE_GROUPS + 1))


def issue_query(runs: list[Run], **extra: Any) -> dict[str, Any]:
    return {
        "runs": ",".join(str(run.pk) for run in runs),
        "group_by": "seed",
        "metric": ISSUE_METRICS,
        "policy": ISSUE_POLICIES,
        **extra,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "fmt", "extra", "cap"),
    [
        ("compare:bars_file", "pdf", {"view": "significance"}, "MAX_FOREST_ROWS"),
        ("compare:bars_file", "png", {"view": "tasks"}, "MAX_FIGURE_GROUPS"),
        ("compare:export", "zip", {}, "MAX_FIGURE_GROUPS"),
        ("compare:export", "pdf", {}, "MAX_FIGURE_GROUPS"),
    ],
)
def test_the_issues_query_is_refused_at_once_naming_the_cap(
    logged_in: Client,
    seeds: list[Run],
    children: list[RenderJob],
    figures_here: list[Figure],
    url: str,
    fmt: str,
    extra: dict[str, str],
    cap: str,
) -> None:
    started = time.monotonic()
    response = logged_in.get(reverse(url, args=[fmt]), issue_query(seeds, **extra))
    assert time.monotonic() - started < 5
    assert response.status_code == 400, response.content[:300]
    reply = response.json()
    assert reply["cap"] == cap and reply["count"] > reply["limit"]
    assert reply["error"].startswith("export too large: this figure would draw")
    assert f"cap of {reply['limit']:,}" in reply["error"] and "group_by" in reply["error"]
    assert children == [] and figures_here == []  # nothing drawn, no child started


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "fmt", "extra"),
    [
        ("compare:bars_file", "csv", {"view": "significance"}),
        ("compare:bars_file", "tex", {"view": "tasks"}),
        ("compare:export", "csv", {}),
        ("compare:table", "tex", {}),
    ],
)
def test_the_issues_query_as_csv_or_latex_is_served_as_its_json_is(
    logged_in: Client,
    seeds: list[Run],
    children: list[RenderJob],
    figures_here: list[Figure],
    url: str,
    fmt: str,
    extra: dict[str, str],
) -> None:
    """The data files cost what the JSON of the same query costs (no figure): not capped,
    so a seed-by-seed table of a large sweep still exports."""
    response = logged_in.get(reverse(url, args=[fmt]), issue_query(seeds, **extra))
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Disposition"].endswith(f'.{fmt}"')
    assert children == [] and figures_here == []


@pytest.fixture
def runs(alice: User) -> list[Run]:
    """standalone and sgt, two seeds each; llama and qwen log val reward (steps 0..40)
    and are evaluated on synthetic/alpha."""
    runs = make_runs(alice, "standalone") + make_runs(alice, "sgt")
    for i, run in enumerate(runs):
        for policy in ("llama", "qwen"):
            add_series(run, policy, VAL, range(0, 41, 5), lambda s, i=i: s / 100 + i / 10)
            add_series(run, policy, ALPHA, (0, 10), lambda s, i=i: 0.1 if s == 0 else 0.3 + i / 10)
    return runs


def allowed(runs: list[Run], **extra: Any) -> dict[str, Any]:
    return {
        "runs": ",".join(str(run.pk) for run in runs),
        "metric": [VAL],
        "policy": ["llama", "qwen"],
        "buckets": "10",
        **extra,
    }


@pytest.mark.django_db
def test_allowed_figures_are_drawn_in_a_child_never_in_the_web_process(
    logged_in: Client,
    runs: list[Run],
    children: list[RenderJob],
    figures_here: list[Figure],
    tmp_path: Path,
) -> None:
    pdf = logged_in.get(reverse("compare:export", args=["pdf"]), allowed(runs))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    (tmp_path / "figure.pdf").write_bytes(pdf.content)
    subprocess.run(
        [PDFTOPPM, "-png", "-r", "50", tmp_path / "figure.pdf", tmp_path / "page"], check=True
    )
    assert list(tmp_path.glob("page*.png"))

    png = logged_in.get(reverse("compare:bars_file", args=["png"]), allowed(runs, view="tasks"))
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert Image.open(io.BytesIO(png.content)).size[0] == 1050  # 3.5 in at 300 dpi

    query = allowed(runs, view="significance", group_by="regime", baseline="standalone")
    svg = logged_in.get(reverse("compare:bars_file", args=["svg"]), query)
    assert svg.status_code == 200
    assert ET.fromstring(svg.content).tag.endswith("svg")

    bundle = logged_in.get(reverse("compare:export", args=["zip"]), allowed(runs))
    assert bundle.status_code == 200
    names = zipfile.ZipFile(io.BytesIO(bundle.content)).namelist()
    assert {"figure.pdf", "figure.svg", "figure.png", "data.csv", "table.tex"} <= set(names)

    assert [(job.kind, job.formats) for job in children] == [
        ("curves", ("pdf",)),
        ("bars", ("png",)),
        ("significance", ("svg",)),
        ("curves", ("pdf", "svg", "png")),
    ]
    assert all(getattr(job.figure, "runs", []) == [] for job in children)  # no models sent
    assert figures_here == []  # the web process built no matplotlib figure


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("setting", "value", "limit", "words"),
    [
        ("EXPORT_RENDER_WALL_SECONDS", 0.05, "time", "took longer than 0.05 s to draw"),
        ("EXPORT_RENDER_MEMORY_MB", 40, "memory", "needed more than 40 MB of memory"),
    ],
)
def test_a_figure_stopped_by_its_limit_is_a_clear_503(
    logged_in: Client,
    runs: list[Run],
    settings: Any,
    setting: str,
    value: float,
    limit: str,
    words: str,
) -> None:
    setattr(settings, setting, value)
    for url, extra in (("compare:export", {}), ("compare:bars_file", {"view": "tasks"})):
        response = logged_in.get(reverse(url, args=["png"]), allowed(runs, **extra))
        assert response.status_code == 503, response.content[:300]
        reply = response.json()
        assert reply["limit"] == limit
        assert words in reply["error"] and "draw less: fewer metrics" in reply["error"]


# --------------------------------------------------------------------------- the child


def _panel(groups: int, points: int, policy: str = "llama", metric: str = VAL) -> Panel:
    labels = [f"group {g}" for g in range(groups)]
    styles = styles_for(labels)
    rng = np.random.default_rng(0)
    traces = []
    for label in labels:
        y = rng.normal(size=points).cumsum()
        x = np.arange(points, dtype=float)
        colour, dash = styles[label].colour, styles[label].dash
        traces.append(Trace(label, colour, dash, x, y, y - 1, y + 1, np.full(points, 3), y))
    return Panel(policy, metric, "step", traces)


def _bar_panel(categories: int, groups: int) -> Any:
    class Counted:
        def __init__(self) -> None:
            self.categories = [f"task{k}" for k in range(categories)]
            self.traces = [object()] * groups

    return Counted()


def heaviest_allowed_comparison() -> Comparison:
    """At the caps: 36 panels (9 metrics x 4 policies) of 16 groups, 79,488 points."""
    metrics = tuple(f"{VAL}/m{k}" for k in range(9))
    policies = ("llama", "qwen", "gpt2", "_pool")
    spec = ComparisonSpec(runs=(1,), metrics=metrics, policies=policies, band="ci95")
    panels = [_panel(16, 138, policy, metric) for policy in policies for metric in metrics]
    export_limits.check_curves_plan(groups=16, metrics=9, policies=4)
    export_limits.check_curves_built(panels)
    groups = [Group(t.group, t.colour, t.dash, [1]) for t in panels[0].traces]
    return Comparison(spec, groups, panels, [], "step", [], grid=138)


def test_a_child_past_its_cpu_limit_is_killed_and_named() -> None:
    job = RenderJob.of("curves", heaviest_allowed_comparison(), ("pdf", "svg", "png"), 2)
    started = time.monotonic()
    with pytest.raises(RenderLimitExceeded) as stopped:
        export_render.render_in_child(job, RenderLimits(1, 1024, 120.0))
    assert stopped.value.limit == "cpu"
    assert "took more than 1 s of CPU" in str(stopped.value)
    assert time.monotonic() - started < 60


def test_the_child_draws_what_the_web_process_would_have() -> None:
    comparison = heaviest_allowed_comparison()
    comparison.panels = comparison.panels[:2]
    job = RenderJob.of("curves", comparison, ("svg",), 1)
    drawn = export_render.render_in_child(job, RenderLimits(20, 1024, 60.0))
    assert drawn == export_render.render_job(job)  # the same bytes


def test_a_child_past_its_wall_clock_is_killed() -> None:
    job = RenderJob.of("curves", heaviest_allowed_comparison(), ("png",), 1)
    started = time.monotonic()
    with pytest.raises(RenderLimitExceeded) as stopped:
        export_render.render_in_child(job, RenderLimits(60, 1024, 1.0))
    assert stopped.value.limit == "time" and time.monotonic() - started < 5
