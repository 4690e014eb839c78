"""Helpers shared by the API tests (plain functions; each test module makes its fixtures).

Actors (tests/conftest.py): alice owns the run, bob is in her lab, charlie in another.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse

from webapp.core.models import LabMembership
from webapp.core.services import lab_join
from webapp.metrics.models import MetricSeries
from webapp.runs import services
from webapp.runs.models import Run

CONFIG: dict[str, Any] = {
    "name": "e",
    "pool": [
        {"name": "a", "model": "zoo:tiny-llama-char"},
        {"name": "b", "model": "zoo:tiny-gpt2-unigram"},
    ],
    "regime": "sgt",
}


def make_run(owner: User, *, state: str = Run.State.SUBMITTED, name: str = "e") -> Run:
    """A run of a fresh experiment of ``owner``, in ``state``, in the owner's first lab."""
    if not LabMembership.objects.filter(user=owner).exists():
        lab_join(owner)
    experiment = services.experiment_create(owner=owner, config={**CONFIG, "name": name}, seeds=[0])
    run = services.runs_create(experiment)[0]
    Run.objects.filter(pk=run.pk).update(state=state)
    run.refresh_from_db()
    return run


def point(step: int, value: Any = 0.5, policy: str = "a", key: str = "train/reward_mean") -> dict:
    return {"policy": policy, "key": key, "step": step, "value": value, "wall_time": 1.7e9}


def event(
    step: int, source: str = "a", target: str = "b", kind: str = "success", **extra: Any
) -> dict:
    record = {"step": step, "source": source, "target": target, "kind": kind}
    record.update({"prompt_id": f"p-{step}", "count": 1, "weight": None})
    record.update(extra)
    return record


def post_batch(client: Client, run: Run, token: str, body: Any, **extra: Any) -> Any:
    """POST ``body`` (a dict, or raw bytes/str) to ``run``'s ingest endpoint."""
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(
        reverse("api:ingest", args=[run.pk]),
        data=data,
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"} if token else {},
        **extra,
    )


def fill_series(run: Run, n: int, *, policy: str = "a", key: str = "big", spike: int = -1) -> int:
    """A series of ``n`` points (steps 0..n-1, a sine with noise) made by one SQL statement;
    value at ``spike`` (if >= 0) is 1000.0 and at ``n // 3`` it is -1000.0."""
    series = MetricSeries.objects.create(run=run, policy=policy, key=key)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO experiments_metricpoint (series_id, step, value, wall_time) "
            "SELECT %s, s, CASE WHEN s = %s THEN 1000.0 WHEN s = %s THEN -1000.0 "
            "ELSE sin(s / 5000.0) + ((s::bigint * 7919) %% 1000) / 1000.0 END, NULL "
            "FROM generate_series(0, %s - 1) AS s",
            [series.pk, spike, n // 3, n],
        )
    return series.pk
