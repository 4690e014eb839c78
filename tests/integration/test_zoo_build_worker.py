"""Issue 31: the compose page's "Build <recipe> zoo" button, end to end: the view sends the
task through the real Redis broker, a real worker process runs the real zoo build, the
status it records is what the compose page then reads."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.integration.conftest import CeleryWorker, start_celery_worker, stop_celery_worker
from trainer.zoo import ZOO_IDS
from webapp.registry import zoo_builds

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def var_dir(tmp_path: Path, settings: Any) -> Path:
    settings.VAR_DIR = tmp_path / "var"
    return settings.VAR_DIR


@pytest.fixture
def worker(var_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryWorker]:
    """A worker of this test's own (its var directory, the status files'), sent to while
    the test runs."""
    from scheduler.celery import app

    started = start_celery_worker(tmp_path_factory, extra_env={"MRL_VAR_DIR": str(var_dir)})
    default_queue = app.conf.task_default_queue
    app.conf.task_default_queue = started.queue
    try:
        yield started
    finally:
        app.conf.task_default_queue = default_queue
        stop_celery_worker(started)


def test_the_button_builds_the_recipe_in_a_real_worker(
    worker: CeleryWorker, alice: User, settings: Any, zoo_dir: Path, tmp_path: Path
) -> None:
    zoo = tmp_path / "zoo"  # the default recipe, built (linked from the test zoo)
    zoo.mkdir()
    for zoo_id in ZOO_IDS:
        (zoo / zoo_id).symlink_to(zoo_dir / zoo_id)
    settings.ZOO_DIR = str(zoo)
    client = Client()
    client.force_login(alice)

    response = client.post(
        reverse("registry:zoo_build"), {"recipe": "default"}, HTTP_ACCEPT="application/json"
    )

    assert response.status_code == 202, response.content
    deadline = time.monotonic() + 120
    build = zoo_builds.load("default")
    while (build is None or build.state != "ready") and time.monotonic() < deadline:
        assert worker.process.poll() is None, f"worker died:\n{worker.log()}"
        time.sleep(0.3)
        build = zoo_builds.load("default")
    assert build is not None and build.state == "ready", worker.log()
    assert build.ready == list(ZOO_IDS) and build.pid == worker.process.pid
    assert "scheduler.tasks.zoo_build" in worker.log()
    status = client.get(reverse("registry:zoo_build"), {"recipe": "default"}).json()
    assert (status["state"], status["progress"]) == ("ready", "3 of 3 models ready")
