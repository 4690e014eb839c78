"""With the worker stopped, the run and experiment pages say so; once a worker is back the
notice goes away, and when it stops again the notice comes back, all without a reload.

A real ``celery worker -B`` (embedded beat, on a queue of its own, against the test
database) sends the heartbeats; the intervals are shortened through the environment for
the worker and through the settings for the live server (a thread of this process).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from tests.conftest import log_in
from tests.integration.conftest import CeleryWorker, start_celery_worker, stop_celery_worker
from webapp.core.models import ServiceHeartbeat
from webapp.core.selectors import WORKER_SERVICE
from webapp.runs import services
from webapp.runs.models import Experiment

pytestmark = [pytest.mark.browser, pytest.mark.integration]

HEARTBEAT_SECONDS = 1.0
OFFLINE_AFTER_SECONDS = 5.0
WORKER_ENV = {
    "MRL_WORKER_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
    "MRL_WORKER_OFFLINE_AFTER_SECONDS": str(OFFLINE_AFTER_SECONDS),
    # Only heartbeats: beat's status sync must neither delay them nor submit the run.
    "MRL_STATUS_SYNC_SECONDS": "3600",
    "MRL_STALE_QUEUED_SECONDS": "3600",
}


@pytest.fixture
def worker_starter(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[], CeleryWorker]]:
    """Starts real workers on demand; stops whichever are still running at the end."""
    started: list[CeleryWorker] = []

    def start() -> CeleryWorker:
        worker = start_celery_worker(tmp_path_factory, extra_env=WORKER_ENV, beat=True)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            stop_celery_worker(worker)


def test_the_offline_notice_comes_and_goes_without_a_reload(
    page: Page,
    live_server: Any,
    settings: Any,
    alice: User,
    make_experiment: Callable[..., Experiment],
    worker_starter: Callable[[], CeleryWorker],
) -> None:
    settings.WORKER_OFFLINE_AFTER_SECONDS = OFFLINE_AFTER_SECONDS
    base = live_server.url
    experiment = make_experiment(seeds=(0,))
    run = services.runs_create(experiment, state="queued")[0]
    # A worker that stopped three minutes ago.
    ServiceHeartbeat.objects.create(
        service=WORKER_SERVICE,
        hostname="gone",
        pid=1,
        seen_at=timezone.now() - timedelta(minutes=3),
    )

    log_in(page, base, alice, "alice-password")
    page.goto(f"{base}{run.get_absolute_url()}")
    experiment_page = page.context.new_page()
    errors: list[str] = []
    experiment_page.on("pageerror", lambda error: errors.append(str(error)))
    experiment_page.goto(f"{base}{experiment.get_absolute_url()}")
    run_notice = page.get_by_test_id("worker-notice")
    experiment_notice = experiment_page.get_by_test_id("worker-notice")
    expect(run_notice).to_be_visible()
    expect(run_notice).to_have_text(
        "No worker has been seen for 3 min: this run will start when a worker is back."
    )
    expect(experiment_notice).to_be_visible()
    expect(experiment_notice).to_have_text(
        "No worker has been seen for 3 min: its runs will start when a worker is back."
    )
    for tab in (page, experiment_page):
        tab.evaluate("window.__sameDocument = true")

    started = time.monotonic()
    worker = worker_starter()
    # The worker reports in once it is ready, then beat every second: the pages (polling
    # every 5 s) hide the notice.
    try:
        expect(run_notice).to_be_hidden(timeout=45_000)
        expect(experiment_notice).to_be_hidden(timeout=10_000)
    except AssertionError:
        raise AssertionError(f"the notice stayed; worker log:\n{worker.log()[-3000:]}") from None
    hidden_after = time.monotonic() - started
    # It stays hidden while beat keeps the heartbeat fresh (two offline windows).
    page.wait_for_timeout(2 * OFFLINE_AFTER_SECONDS * 1000)
    expect(run_notice).to_be_hidden()
    expect(experiment_notice).to_be_hidden()

    stop_celery_worker(worker)
    stopped = time.monotonic()
    expect(run_notice).to_be_visible(timeout=20_000)
    expect(run_notice).to_contain_text("No worker has been seen for")
    expect(run_notice).to_contain_text("this run will start when a worker is back")
    expect(experiment_notice).to_be_visible(timeout=10_000)
    expect(experiment_notice).to_contain_text("its runs will start when a worker is back")
    shown_after = time.monotonic() - stopped

    for tab in (page, experiment_page):
        assert tab.evaluate("window.__sameDocument") is True  # no reload happened
    assert not errors, f"JavaScript errors on the experiment page: {errors}"
    print(f"notice hidden {hidden_after:.1f} s after the start, back {shown_after:.1f} s after")
