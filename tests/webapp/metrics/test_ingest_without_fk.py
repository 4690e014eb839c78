"""Points without a foreign key in the database (issue 35): no delete leaves orphans.

``experiments_metricpoint.series_id`` has no constraint in PostgreSQL, so nothing there
cascades a delete or refuses one. What stands in for it, tested here:

- a late batch for a deleted run is refused (its token went with it) and stores nothing;
- ingestion holds the run's row ``FOR KEY SHARE`` and a run's delete takes it ``FOR
  UPDATE`` before deleting anything (webapp.metrics.ingest._run_lock,
  webapp.metrics.deletion): a delete racing a batch in flight ends with the batch's points
  either all deleted with the run or never stored, in both orders. Without the ingest's
  lock the delete-first test leaves orphans; without the delete's, the batch-first one;
- each of the product's delete paths (Run.delete, the dashboard's experiment delete, the
  admin's run delete and its bulk delete of experiments, a lab's delete) removes the
  points of what it deletes, and only those.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.db.models.signals import post_delete
from django.test import Client
from django.urls import reverse

from tests.webapp.metrics.test_api_support import make_run, point, post_batch
from webapp.core.models import Lab
from webapp.metrics import ingest
from webapp.metrics.batch import parse_batch
from webapp.metrics.models import MetricPoint, MetricSeries
from webapp.runs import services
from webapp.runs.models import Experiment, Run

ORPHANS_SQL = (
    "SELECT count(*) FROM experiments_metricpoint p "
    "LEFT JOIN experiments_metricseries s ON s.id = p.series_id WHERE s.id IS NULL"
)
WAIT_S = 10.0
"""How long a test waits for the other thread before calling it stuck."""
BLOCKED_S = 0.5
"""How long a thread that should be waiting on a lock is watched still waiting."""


def _count(sql: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        (n,) = cursor.fetchone()
    return int(n)


def orphans() -> int:
    """Points whose series does not exist."""
    return _count(ORPHANS_SQL)


def batch_body(steps: range, policy: str = "a", keys: int = 3) -> bytes:
    """A batch of ``keys`` series of ``policy``, one point a step each."""
    records = [point(s, float(s), policy=policy, key=f"k{k}") for s in steps for k in range(keys)]
    return json.dumps({"points": records}).encode()


def ingest_now(run: Run, steps: range, **kwargs: Any) -> dict[str, Any]:
    return ingest.metrics_ingest(run=run, batch=parse_batch(batch_body(steps, **kwargs))).as_json()


class Worker(threading.Thread):
    """Runs ``action`` on its own database connection; keeps its result or exception."""

    def __init__(self, action: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.action = action
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.action()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
        finally:
            connections.close_all()

    def finish(self) -> Any:
        self.join(WAIT_S)
        assert not self.is_alive(), "the thread is stuck"
        return self.result


# --------------------------------------------------------------------------- a late batch


@pytest.mark.django_db
def test_a_late_batch_for_a_deleted_run_is_refused_and_stores_nothing(
    client: Client, alice: User
) -> None:
    """The run's token goes with it: the shipper's next batch gets the unknown token's 401
    (never a 5xx), and the tables hold nothing of it."""
    run = make_run(alice, state=Run.State.COMPLETED)
    token = services.run_token_issue(run)
    assert post_batch(client, run, token, {"points": [point(0), point(1)]}).status_code == 200
    client.force_login(alice)
    client.post(reverse("dashboard:experiment_delete", args=[run.experiment_id]))
    assert not Run.objects.filter(pk=run.pk).exists()
    client.logout()

    response = post_batch(client, run, token, {"points": [point(2), point(3, policy="b")]})

    assert response.status_code == 401, response.content
    assert "token" in response.json()["error"]
    assert _count("SELECT count(*) FROM experiments_metricseries") == 0
    assert _count("SELECT count(*) FROM experiments_metricpoint") == 0
    assert orphans() == 0


@pytest.mark.django_db
def test_ingesting_for_a_run_that_is_gone_raises_and_stores_nothing(alice: User) -> None:
    """The ingest itself (a run deleted after the view loaded it): RunGone, nothing kept."""
    run = make_run(alice)
    Run.objects.filter(pk=run.pk).delete()
    with pytest.raises(ingest.RunGone):
        ingest_now(run, range(5))
    assert not MetricSeries.objects.exists() and not MetricPoint.objects.exists()


@pytest.mark.django_db
def test_a_run_deleted_after_its_token_was_checked_is_told_401_not_500(
    client: Client, alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's race: the token found the run, then the run was deleted before the
    ingest locked it. The shipper is told what its retry would be (401), never a 5xx."""
    run = make_run(alice)
    token = services.run_token_issue(run)
    stale = Run.objects.get(pk=run.pk)
    monkeypatch.setattr(services, "run_for_token", lambda _token: stale)
    Run.objects.filter(pk=run.pk).delete()

    response = post_batch(client, run, token, {"points": [point(0), point(1)]})

    assert response.status_code == 401, response.content
    assert "token" in response.json()["error"]
    assert not MetricSeries.objects.exists() and not MetricPoint.objects.exists()


# --------------------------------------------------------------------------- races


@pytest.fixture
def cleanup() -> Iterator[list[Worker]]:
    """Threads a test started: joined at the end, whatever happened."""
    workers: list[Worker] = []
    yield workers
    for worker in workers:
        worker.join(WAIT_S)


@pytest.mark.django_db(transaction=True)
def test_a_delete_during_a_batch_waits_for_it_and_deletes_its_points(
    alice: User, monkeypatch: pytest.MonkeyPatch, cleanup: list[Worker]
) -> None:
    """The batch has inserted its points, not committed: the run's delete waits (the
    batch holds the run's row), then deletes every point, the batch's too."""
    run = make_run(alice)
    ingest_now(run, range(10))  # the series exist: the batch only adds points to them
    stored = threading.Event()
    go_on = threading.Event()
    store = ingest._points_store

    def store_then_wait(run_id: int, points: Any) -> Any:
        found = store(run_id, points)
        stored.set()
        assert go_on.wait(WAIT_S)
        return found

    monkeypatch.setattr(ingest, "_points_store", store_then_wait)
    batch = Worker(lambda: ingest_now(run, range(10, 1010)))
    cleanup.append(batch)
    batch.start()
    assert stored.wait(WAIT_S)
    delete = Worker(lambda: Run.objects.get(pk=run.pk).delete())
    cleanup.append(delete)
    delete.start()
    delete.join(BLOCKED_S)
    waited = delete.is_alive()
    go_on.set()
    reply = batch.finish()
    delete.finish()

    assert batch.error is None and delete.error is None, (batch.error, delete.error)
    assert waited, "the delete did not wait for the batch in flight"
    assert reply["points"] == {"accepted": 3000, "duplicates": 0}  # all of it, before
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not MetricSeries.objects.exists()
    assert orphans() == 0
    assert _count("SELECT count(*) FROM experiments_metricpoint") == 0


@pytest.mark.django_db(transaction=True)
def test_a_batch_during_a_delete_waits_for_it_and_stores_nothing(
    alice: User, cleanup: list[Worker]
) -> None:
    """The delete has deleted the run, not committed: the batch waits for it, finds no run
    and stores nothing (RunGone)."""
    run = make_run(alice)
    ingest_now(run, range(10))
    deleted = threading.Event()
    go_on = threading.Event()

    def hold(sender: type[Run], **kwargs: Any) -> None:
        deleted.set()
        assert go_on.wait(WAIT_S)

    def delete_and_hold() -> None:
        with transaction.atomic():
            Run.objects.get(pk=run.pk).delete()  # post_delete holds the transaction open

    post_delete.connect(hold, sender=Run, dispatch_uid="test-hold")
    try:
        delete = Worker(delete_and_hold)
        cleanup.append(delete)
        delete.start()
        assert deleted.wait(WAIT_S)
        batch = Worker(lambda: ingest_now(run, range(10, 1010)))
        cleanup.append(batch)
        batch.start()
        batch.join(BLOCKED_S)
        waited = batch.is_alive()
        go_on.set()
        delete.finish()
        batch.finish()
    finally:
        post_delete.disconnect(sender=Run, dispatch_uid="test-hold")

    assert delete.error is None, delete.error
    assert isinstance(batch.error, ingest.RunGone), batch.error
    assert waited, "the batch did not wait for the delete"
    assert not MetricSeries.objects.exists()
    assert orphans() == 0
    assert _count("SELECT count(*) FROM experiments_metricpoint") == 0


# --------------------------------------------------------------------------- delete paths


def _staff_client(client: Client) -> Client:
    admin = User.objects.create_user("root", password="x", is_staff=True, is_superuser=True)
    client.force_login(admin)
    return client


def _delete_run(run: Run, client: Client) -> None:
    run.delete()


def _delete_experiment_in_dashboard(run: Run, client: Client) -> None:
    client.force_login(run.experiment.owner)
    response = client.post(reverse("dashboard:experiment_delete", args=[run.experiment_id]))
    assert response.status_code == 302


def _delete_run_in_admin(run: Run, client: Client) -> None:
    url = reverse("admin:runs_run_delete", args=[run.pk])
    assert _staff_client(client).post(url, {"post": "yes"}).status_code == 302


def _delete_experiments_in_admin(run: Run, client: Client) -> None:
    """The admin's bulk action (a queryset's delete)."""
    data = {"action": "delete_selected", "_selected_action": [run.experiment_id], "post": "yes"}
    response = _staff_client(client).post(reverse("admin:runs_experiment_changelist"), data)
    assert response.status_code == 302


def _delete_lab(run: Run, client: Client) -> None:
    run.experiment.lab.delete()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "delete",
    [
        _delete_run,
        _delete_experiment_in_dashboard,
        _delete_run_in_admin,
        _delete_experiments_in_admin,
        _delete_lab,
    ],
    ids=lambda f: f.__name__.lstrip("_"),
)
def test_the_delete_paths_delete_the_points_and_only_theirs(
    delete: Callable[[Run, Client], None], client: Client, alice: User, charlie: User
) -> None:
    run = make_run(alice, state=Run.State.COMPLETED)
    kept = make_run(charlie, state=Run.State.COMPLETED, name="other")  # another lab's
    for each in (run, kept):
        ingest_now(each, range(50))
        ingest_now(each, range(50), policy="b")
    series = list(MetricSeries.objects.filter(run=run).values_list("id", flat=True))
    assert MetricPoint.objects.filter(series_id__in=series).count() == 300

    delete(run, client)

    assert not Run.objects.filter(pk=run.pk).exists()
    assert not MetricPoint.objects.filter(series_id__in=series).exists()
    assert orphans() == 0
    assert MetricPoint.objects.filter(series__run=kept).count() == 300
    assert Lab.objects.exists() and Experiment.objects.filter(pk=kept.experiment_id).exists()
