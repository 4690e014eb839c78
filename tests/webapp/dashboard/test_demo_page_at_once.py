"""A page at once (issue 31): `make demo` serves the app before the zoo is built; the
background `demo_setup --build-zoo --sweep` records its progress (webapp/core/demo_status.py)
and the home page shows it: models ready of how many, then the demo runs, or what failed."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from trainer.zoo import GAP_IDS, ZOO_IDS
from webapp.core import demo_status
from webapp.core.demo_status import DemoStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def var_dir(settings: Any, tmp_path: Path) -> Path:
    settings.VAR_DIR = tmp_path
    return tmp_path


def home_text(client: Client, user: User) -> str:
    client.force_login(user)
    return " ".join(client.get("/").content.decode().split())


def test_the_background_setup_records_each_model_then_the_runs(
    var_dir: Path,
    zoo_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    monkeypatch.setenv("MRL_ZOO_DIR", str(zoo_dir))
    seen: list[tuple[str, int]] = []
    save = DemoStatus.save

    def recording_save(self: DemoStatus) -> None:
        seen.append((self.state, len(self.ready)))
        save(self)

    monkeypatch.setattr(DemoStatus, "save", recording_save)
    with django_capture_on_commit_callbacks():
        call_command("demo_setup", "--build-zoo", "--sweep", stdout=io.StringIO())
    # Saved before anything is ready, once per gap model, launched, then the normal zoo.
    gap, every = len(GAP_IDS), len(GAP_IDS + ZOO_IDS)
    building = [("building", n) for n in range(gap + 1)]
    assert seen == building + [("launched", n) for n in range(gap, every + 1)]
    status = demo_status.demo_status()
    assert status is not None and sorted(status.ready) == sorted(ZOO_IDS + GAP_IDS)
    assert [run["regime"] for run in status.runs] == ["standalone", "sgt"]
    user = User.objects.get(username="demo")
    shown = home_text(Client(), user)
    assert "The demo runs: " in shown and "Every zoo model is ready" in shown
    for run in status.runs:
        assert f'<a href="{run["url"]}">{run["regime"]}</a>' in shown


def test_the_normal_zoo_builds_beside_the_demo_runs_at_a_lower_priority(
    var_dir: Path,
    zoo_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Callable[..., Any],
) -> None:
    """The gap pool (the runs wait for it) builds at full priority; the normal zoo, built
    while the demo runs train, at a lower one, so their curves keep their pace."""
    from webapp.dashboard.management.commands import demo_setup

    monkeypatch.setenv("MRL_ZOO_DIR", str(zoo_dir))
    builds: list[tuple[tuple[str, ...], int]] = []
    real_build = demo_setup.build_zoo

    def recording_build(root: Path, *, ids: tuple[str, ...], niceness: int, **kw: Any) -> Any:
        builds.append((tuple(ids), niceness))
        return real_build(root, ids=ids, niceness=niceness, **kw)

    monkeypatch.setattr(demo_setup, "build_zoo", recording_build)
    with django_capture_on_commit_callbacks():
        call_command("demo_setup", "--build-zoo", "--sweep", stdout=io.StringIO())
    assert builds == [(GAP_IDS, 0), (ZOO_IDS, demo_setup.BESIDE_RUNS_NICENESS)]
    assert demo_setup.BESIDE_RUNS_NICENESS > 0


def test_the_home_page_shows_the_build_in_progress_and_reloads(
    var_dir: Path, client: Client, alice: User
) -> None:
    status = DemoStatus(models=list(ZOO_IDS + GAP_IDS), ready=list(ZOO_IDS[:2]))
    status.started_at = time.time() - 42
    status.save()
    shown = home_text(client, alice)
    waiting = ", ".join(ZOO_IDS[2:] + GAP_IDS)
    assert (
        "Setting up the demo: building the gap pool the demo runs train, <strong>2 of 6 models "
        "ready</strong> "
        f"(not ready yet: {waiting}), 4"
    ) in shown
    # The reload is static/js/demo-setup.js's, armed by data-reload-ms (the CSP runs no
    # inline script); tests/browser/test_csp.py sees the page reload.
    assert "data-reload-ms" in shown and "js/demo-setup.js" in shown


def test_an_interrupted_build_says_so_and_stops_reloading(
    var_dir: Path, client: Client, alice: User
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    DemoStatus(models=list(ZOO_IDS), ready=[ZOO_IDS[0]], pid=gone.pid).save()
    shown = home_text(client, alice)
    assert "The demo setup stopped while building the zoo (1 of 3 models ready)." in shown
    assert "make demo</code> again" in shown and "js/demo-setup.js" not in shown


def test_a_failed_setup_shows_its_reason_and_the_log(
    var_dir: Path, client: Client, alice: User
) -> None:
    DemoStatus(state="failed", error="No space left on device").save()
    shown = home_text(client, alice)
    assert "The demo setup failed: No space left on device" in shown
    assert str(var_dir / "log" / "demo-setup.log") in shown


def test_no_demo_no_card(var_dir: Path, client: Client, alice: User) -> None:
    assert 'id="demo-setup"' not in home_text(client, alice)
