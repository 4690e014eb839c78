"""Outages users can see: with no fresh worker heartbeat, the run, experiment and sweep
pages and the launch message say that queued runs wait for a worker (issue 16).

The pages poll ``GET /api/v1/worker`` (static/js/worker-notice.js) to show and hide the
notice live; ``tests/browser/test_worker_notice.py`` drives that with a real worker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduler.launch import sweep_launch
from tests.webapp.metrics.test_fuzz_ingest import assert_reply_matches
from webapp.core.models import ServiceHeartbeat
from webapp.core.selectors import (
    WORKER_SERVICE,
    duration_text,
    service_is_online,
    worker_status,
)
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[3]
NOTICE = re.compile(r'<div class="worker-notice"[^>]*data-testid="worker-notice"[^>]*>')


def beat(ago: timedelta, service: str = WORKER_SERVICE, pid: int = 1) -> ServiceHeartbeat:
    return ServiceHeartbeat.objects.create(
        service=service, hostname="h", pid=pid, seen_at=timezone.now() - ago
    )


def notice_of(html: str) -> tuple[bool, str]:
    """(whether the page's worker notice is shown, its text without tags)."""
    match = NOTICE.search(html)
    assert match is not None, "the page has no worker notice"
    end = html.index("</div>", match.end())
    text = " ".join(re.sub(r"<[^>]+>", "", html[match.end() : end]).split())
    return " hidden" not in match.group(0), text


# --------------------------------------------------------------------------- the selector


def test_no_heartbeat_ever_says_no_worker_has_reported_yet() -> None:
    beat(timedelta(0), service="something-else")  # another service does not count
    status = worker_status()
    assert status.online is False
    assert status.last_seen is None and status.seconds_since is None
    assert status.message == "No worker has reported yet"
    assert status.notice("this run will start when a worker is back") == (
        "No worker has reported yet: this run will start when a worker is back"
    )


def test_a_stale_heartbeat_says_how_long_ago() -> None:
    seen = beat(timedelta(minutes=3, seconds=20))
    beat(timedelta(hours=5), pid=2)  # an older process: the latest heartbeat counts
    status = worker_status()
    assert status.online is False
    assert status.last_seen == seen.seen_at
    assert status.seconds_since is not None and 200 <= status.seconds_since < 210
    assert status.message == "No worker has been seen for 3 min"
    assert status.as_json()["message"] == "No worker has been seen for 3 min"


def test_a_fresh_heartbeat_is_online_with_no_message() -> None:
    beat(timedelta(minutes=30), pid=1)
    beat(timedelta(seconds=10), pid=2)
    status = worker_status()
    assert status.online is True and status.message == ""
    assert status.notice("anything") == ""
    assert service_is_online(service=WORKER_SERVICE)


def test_the_offline_threshold_is_a_setting(settings: Any) -> None:
    seen = beat(timedelta(0)).seen_at
    settings.WORKER_OFFLINE_AFTER_SECONDS = 5.0
    assert worker_status(now=seen + timedelta(seconds=5)).online is True
    late = worker_status(now=seen + timedelta(seconds=6))
    assert late.online is False and late.message == "No worker has been seen for 6 s"
    assert late.offline_after_seconds == 5.0
    # A worker clock a little ahead is "just now", not a negative age.
    assert worker_status(now=seen - timedelta(seconds=3)).seconds_since == 0.0
    settings.WORKER_OFFLINE_AFTER_SECONDS = 3600.0
    assert worker_status(now=seen + timedelta(minutes=59)).online is True


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (95.7, "95 s"),
        (119, "119 s"),
        (120, "2 min"),
        (180, "3 min"),
        (7199, "119 min"),
        (7200, "2 h"),
        (2 * 86400 - 1, "47 h"),
        (3 * 86400, "3 days"),
        (-5, "0 s"),
    ],
)
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_both_intervals_come_from_the_environment() -> None:
    code = (
        "from django.conf import settings as s; "
        "print(s.WORKER_HEARTBEAT_SECONDS, s.WORKER_OFFLINE_AFTER_SECONDS, "
        "s.CELERY_BEAT_SCHEDULE['worker-heartbeat']['schedule'])"
    )

    def read(**overrides: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MRL_WORKER_")}
        env.update(overrides, DJANGO_SETTINGS_MODULE="webapp.settings")
        result = subprocess.run(
            [sys.executable, "-c", f"import django; django.setup(); {code}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return result.stdout.strip()

    assert read() == "30.0 90.0 30.0"
    assert read(MRL_WORKER_HEARTBEAT_SECONDS="1.5", MRL_WORKER_OFFLINE_AFTER_SECONDS="4") == (
        "1.5 4.0 1.5"
    )


# --------------------------------------------------------------------------- the endpoint


def test_the_endpoint_needs_a_login(client: Client) -> None:
    response = client.get(reverse("api:worker"))
    assert response.status_code == 401
    assert response.json() == {"error": "log in first"}
    assert_reply_matches(response, "/api/v1/worker")


def test_the_endpoint_says_whether_a_worker_is_online(client: Client, charlie: User) -> None:
    client.force_login(charlie)  # not a lab matter: any logged-in user may ask
    url = reverse("api:worker")
    assert url == "/api/v1/worker"

    never = client.get(url)
    assert never.status_code == 200 and never["Cache-Control"].startswith("max-age=0")
    assert_reply_matches(never, "/api/v1/worker")
    assert never.json() == {
        "online": False,
        "last_seen": None,
        "seconds_since": None,
        "offline_after_seconds": 90.0,
        "message": "No worker has reported yet",
    }

    seen = beat(timedelta(minutes=4, seconds=5))
    stale = client.get(url)
    assert_reply_matches(stale, "/api/v1/worker")
    body = stale.json()
    assert body["online"] is False and body["message"] == "No worker has been seen for 4 min"
    assert datetime.fromisoformat(body["last_seen"]) == seen.seen_at
    assert 245 <= body["seconds_since"] < 255

    beat(timedelta(seconds=2), pid=2)
    fresh = client.get(url)
    assert_reply_matches(fresh, "/api/v1/worker")
    assert fresh.json()["online"] is True and fresh.json()["message"] == ""

    wrong_method = client.post(url)
    assert wrong_method.status_code == 405 and wrong_method["Allow"] == "GET, HEAD"
    assert_reply_matches(wrong_method, "/api/v1/worker")


# --------------------------------------------------------------------------- the pages


@pytest.fixture
def experiment(make_experiment: Callable[..., Experiment]) -> Experiment:
    return make_experiment(seeds=(0, 1))


def test_the_run_page_shows_the_notice_only_while_no_worker_is_fresh(
    client: Client, bob: User, experiment: Experiment
) -> None:
    run = services.runs_create(experiment, state=Run.State.QUEUED)[0]
    client.force_login(bob)  # a labmate sees it too
    shown, text = notice_of(client.get(run.get_absolute_url()).content.decode())
    assert shown
    assert text == "No worker has reported yet: this run will start when a worker is back."

    beat(timedelta(minutes=3, seconds=1))
    shown, text = notice_of(client.get(run.get_absolute_url()).content.decode())
    assert shown
    assert text == "No worker has been seen for 3 min: this run will start when a worker is back."

    beat(timedelta(seconds=1), pid=2)
    html = client.get(run.get_absolute_url()).content.decode()
    shown, text = notice_of(html)
    assert not shown and "No worker" not in text
    assert "js/worker-notice.js" in html and 'data-url="/api/v1/worker"' in html


@pytest.mark.parametrize(
    ("state", "consequence"),
    [
        ("running", "cancelling and state updates from the scheduler wait until a worker is back"),
        ("completed", "a resubmission will start when a worker is back"),
    ],
)
def test_the_run_page_says_what_the_outage_means_for_the_run(
    client: Client, alice: User, experiment: Experiment, state: str, consequence: str
) -> None:
    run = services.runs_create(experiment, state=state)[0]
    client.force_login(alice)
    shown, text = notice_of(client.get(run.get_absolute_url()).content.decode())
    assert shown and text == f"No worker has reported yet: {consequence}."


def test_the_experiment_page_shows_the_notice_only_while_no_worker_is_fresh(
    client: Client, alice: User, experiment: Experiment
) -> None:
    client.force_login(alice)
    beat(timedelta(minutes=7))
    shown, text = notice_of(client.get(experiment.get_absolute_url()).content.decode())
    assert shown
    assert text == "No worker has been seen for 7 min: its runs will start when a worker is back."
    beat(timedelta(seconds=0), pid=2)
    shown, _ = notice_of(client.get(experiment.get_absolute_url()).content.decode())
    assert not shown


def test_the_sweep_page_shows_the_notice_only_while_no_worker_is_fresh(
    client: Client, alice: User, experiment: Experiment
) -> None:
    sweep = sweep_launch(owner=alice, source=experiment, name="grid", regimes=["sgt"], seeds=[0])
    client.force_login(alice)
    shown, text = notice_of(client.get(sweep.get_absolute_url()).content.decode())
    assert shown
    assert text == "No worker has reported yet: its runs will start when a worker is back."
    beat(timedelta(seconds=5))
    shown, _ = notice_of(client.get(sweep.get_absolute_url()).content.decode())
    assert not shown


# --------------------------------------------------------------------------- launching


def _messages(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_launching_without_a_worker_says_the_runs_will_wait(
    client: Client, alice: User, experiment: Experiment
) -> None:
    beat(timedelta(minutes=3, seconds=30))
    client.force_login(alice)
    url = reverse("dashboard:experiment_launch", args=[experiment.pk])
    response = client.post(url, follow=True)
    assert _messages(response) == [
        f"Queued 2 run(s) of {experiment.name}. No worker has been seen for 3 min: "
        "the runs will start when a worker is back."
    ]
    assert experiment.runs.filter(state="queued").count() == 2


def test_launching_with_a_worker_says_only_queued(
    client: Client, alice: User, experiment: Experiment
) -> None:
    beat(timedelta(seconds=20))
    client.force_login(alice)
    url = reverse("dashboard:experiment_launch", args=[experiment.pk])
    response = client.post(url, follow=True)
    assert _messages(response) == [f"Queued 2 run(s) of {experiment.name}."]


def test_a_sweep_launched_without_a_worker_says_the_runs_will_wait(
    client: Client, alice: User, experiment: Experiment
) -> None:
    client.force_login(alice)
    url = reverse("compare:sweep_create", args=[experiment.pk])
    form = {"name": "grid", "regimes": ["standalone", "sgt"], "seeds": "0"}
    response = client.post(url, form, follow=True)
    assert _messages(response) == [
        "Sweep grid launched: 2 runs queued. No worker has reported yet: "
        "the runs will start when a worker is back."
    ]
    beat(timedelta(seconds=1))
    response = client.post(url, {**form, "name": "grid2"}, follow=True)
    assert _messages(response) == ["Sweep grid2 launched: 2 runs queued."]
