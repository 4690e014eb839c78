"""End to end: the trainer's real shipper sends a spool into this Django API over HTTP."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from tests.webapp.metrics.test_api_support import make_run
from trainer.shipper import CURSOR_FILE, Shipper
from trainer.spool import Spool
from webapp.metrics.models import MetricPoint, TransferEvent
from webapp.runs import services
from webapp.runs.models import Run

POLICIES = ("a", "b")
KEYS = ("train/reward_mean", "actor/pg_loss", "actor/entropy")
STEPS = 120


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def write_spool(run_dir: Path) -> None:
    with Spool(run_dir) as spool:
        for step in range(STEPS):
            value = math.nan if step == 50 else step / STEPS
            spool.append_points(
                {"policy": p, "key": k, "step": step, "value": value, "wall_time": 1.7e9 + step}
                for p in POLICIES
                for k in KEYS
            )
            spool.append_events(
                [
                    {
                        "step": step,
                        "source": "a",
                        "target": "b",
                        "kind": "success",
                        "prompt_id": f"arith-{step:05d}",
                        "count": 1,
                        "weight": None,
                    }
                ]
            )


def test_the_shipper_delivers_a_spool_exactly_once(
    transactional_db: None, live_server: Any, alice: User, tmp_path: Path
) -> None:
    run = make_run(alice, state=Run.State.SUBMITTED)
    token = services.run_token_issue(run)
    url = live_server.url + reverse("api:ingest", args=[run.pk])
    write_spool(tmp_path)
    n_points, n_events = STEPS * len(POLICIES) * len(KEYS), STEPS

    shipper = Shipper(tmp_path, url, token, max_points_per_batch=250, max_events_per_batch=50)
    shipper.set_status("running", f"step {STEPS - 1}/{STEPS}")
    assert shipper.drain(deadline=time.monotonic() + 30)
    assert shipper.stats.accepted == n_points + n_events
    assert shipper.stats.duplicates == 0 and shipper.stats.rejected == 0
    assert MetricPoint.objects.filter(series__run=run).count() == n_points
    assert TransferEvent.objects.filter(run=run).count() == n_events
    nan = MetricPoint.objects.get(series__run=run, series__policy="a", series__key=KEYS[0], step=50)
    assert math.isnan(nan.value)
    run.refresh_from_db()
    assert (run.state, run.last_step, run.status_message) == ("running", STEPS - 1, "step 119/120")

    # A restart that lost its cursor resends everything: nothing is stored twice.
    (tmp_path / CURSOR_FILE).unlink()
    again = Shipper(tmp_path, url, token, max_points_per_batch=1000)
    again.set_status("completed", "done")
    assert again.drain(deadline=time.monotonic() + 30)
    assert (again.stats.accepted, again.stats.duplicates) == (0, n_points + n_events)
    assert MetricPoint.objects.filter(series__run=run).count() == n_points
    assert TransferEvent.objects.filter(run=run).count() == n_events
    run.refresh_from_db()
    assert (run.state, run.status_message) == ("completed", "done")
    assert not (tmp_path / "ship_rejected.jsonl").exists()
