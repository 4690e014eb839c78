"""Issue 32's move of the ``experiments`` models to their areas loses nothing.

The models moved with their tables: ``experiments`` 0012 takes them out of that app's
state, ``core`` 0002 and the areas' 0001 put them in theirs, and no table, column or row
is touched; only the content types change their app label (keeping their ids, so the
permissions and admin log entries that point at them follow).

:func:`test_a_populated_database_migrates_to_the_areas_with_every_row` takes the test
database back to before the move, fills every moved table through the historical models
of that state, migrates forward and reads it all back through today's models.
:func:`test_the_move_migrations_write_no_sql` and
:func:`test_a_fresh_migrate_creates_every_table_once` read the SQL the migrations would
run (what ``sqlmigrate`` prints) without running it.

What catches a migration that loses data (tried on a scratch copy of the repository,
never on the real migrations):

* 0012 with ``database_operations=[DeleteModel("SavedComparison")]``: its SQL holds
  ``DROP TABLE "experiments_savedcomparison"`` (:func:`test_the_move_migrations_write_no_sql`),
  and after the forward migrate the snapshot fails (relation does not exist). Had an
  area's 0001 re-created the table, it would be empty (the snapshot differs) and
  :func:`test_a_fresh_migrate_creates_every_table_once` would report a second
  ``CREATE TABLE``.
* 0012 with ``RunSQL("DELETE FROM experiments_run_tags")``: the SQL is not empty, and the
  snapshot differs (``experiments_run_tags`` lost its row).
* A content-type step that deletes and re-creates the rows instead of relabelling them:
  ``get_for_model(Lab).pk`` is not the old id (and the delete cascades to the
  permissions and admin log entries that pointed at it).
* A move that renames a table (``AlterModelTable``) or a column: ``ALTER TABLE`` in the
  SQL, and the snapshot of ``experiments_*`` fails.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.apps import apps as current_apps
from django.apps.registry import Apps
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.migration import Migration

from webapp.compare.models import SavedComparison
from webapp.core.models import Lab, LabMembership
from webapp.evals.models import Evaluation
from webapp.metrics.models import (
    MetricPoint,
    MetricSeries,
    SeriesPack,
    SeriesRollup,
    TransferEvent,
)
from webapp.registry.models import EvalSuite, ModelEntry, TaskFileCheck
from webapp.runs.models import Experiment, Run, RunStateChange, Sweep, Tag

Node = tuple[str, str]
Target = tuple[str, str | None]

AREAS = ("registry", "runs", "metrics", "evals", "compare")
PRE_MOVE: list[Target] = [
    ("experiments", "0011_regime_name_length"),
    ("core", "0001_initial"),
    *((area, None) for area in AREAS),
]
"""Today's schema before issue 32: the new areas unapplied (zero)."""

MOVE_MIGRATIONS: list[Node] = [
    ("experiments", "0012_hand_the_tables_to_their_areas"),
    ("core", "0002_lab_moves_here"),
    *((area, "0001_initial") for area in AREAS),
]

MOVED: dict[str, type[Any]] = {
    "lab": Lab,
    "labmembership": LabMembership,
    "modelentry": ModelEntry,
    "evalsuite": EvalSuite,
    "taskfilecheck": TaskFileCheck,
    "tag": Tag,
    "sweep": Sweep,
    "experiment": Experiment,
    "run": Run,
    "runstatechange": RunStateChange,
    "metricseries": MetricSeries,
    "metricpoint": MetricPoint,
    "seriespack": SeriesPack,
    "seriesrollup": SeriesRollup,
    "transferevent": TransferEvent,
    "evaluation": Evaluation,
    "savedcomparison": SavedComparison,
}
"""Each moved model (by its lowercase name) and where it lives now."""

TABLES = [f"experiments_{name}" for name in MOVED] + [
    "experiments_experiment_tags",
    "experiments_run_tags",
]

DDL = re.compile(r"\b(CREATE|ALTER|DROP|RENAME|TRUNCATE|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
CREATE_TABLE = re.compile(r'CREATE TABLE "([^"]+)"')
WHEN = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def executor() -> MigrationExecutor:
    """A fresh executor: its graph and applied set read from the database now."""
    return MigrationExecutor(connection)


def migrate(targets: list[Target]) -> MigrationExecutor:
    current = executor()
    current.migrate(targets, plan=current.migration_plan(targets))
    return executor()


def migrate_to_latest() -> MigrationExecutor:
    return migrate(list(executor().loader.graph.leaf_nodes()))


def applied_state_apps(current: MigrationExecutor) -> Apps:
    """The historical models of exactly what the database has applied."""
    applied = list(current.loader.applied_migrations)
    return current.loader.project_state(applied).apps


def table_columns() -> dict[str, list[str]]:
    """The columns of every moved table, in their order."""
    with connection.cursor() as cursor:
        return {
            table: [c.name for c in connection.introspection.get_table_description(cursor, table)]
            for table in TABLES
        }


def snapshot(columns: dict[str, list[str]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every moved table (the M2M tables too), in a stable order, read in
    ``columns`` (those of before the move: a later migration may add columns, which the
    move did not write)."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            names = ", ".join(connection.ops.quote_name(name) for name in columns[table])
            cursor.execute(f"SELECT {names} FROM {table}")
            rows[table] = sorted(cursor.fetchall(), key=repr)
    return rows


def collected_sql(current: MigrationExecutor, plan: list[tuple[Migration, bool]]) -> list[str]:
    """What ``sqlmigrate`` would print for ``plan``, comments dropped."""
    statements = current.loader.collect_sql(plan)
    return [s for s in statements if s.strip() and not s.lstrip().startswith("--")]


@pytest.fixture
def before_the_move() -> Iterator[MigrationExecutor]:
    """The test database taken back to before the move; forward again after the test,
    even a failing one, so the tests that follow find today's schema."""
    try:
        yield migrate(PRE_MOVE)
    finally:
        migrate_to_latest()
        ContentType.objects.clear_cache()


def populate(apps: Apps) -> dict[str, Any]:
    """One row (or a few) in every moved table, through the pre-move historical models;
    the ids and content-type ids the checks look for afterwards."""
    user_model = apps.get_model("auth", "User")
    content_type = apps.get_model("contenttypes", "ContentType")
    permission = apps.get_model("auth", "Permission")
    log_entry = apps.get_model("admin", "LogEntry")

    def model(name: str) -> Any:
        return apps.get_model("experiments", name)

    user = user_model.objects.create(username="migr-alice", password="!")
    lab = model("Lab").objects.create(name="Migration lab")
    membership = model("LabMembership").objects.create(lab=lab, user=user)
    tag = model("Tag").objects.create(lab=lab, name="baseline")
    other_tag = model("Tag").objects.create(lab=lab, name="ablation")
    entry = model("ModelEntry").objects.create(
        lab=lab,
        owner=user,
        name="tiny-llama",
        source="zoo:tiny-llama",
        family="llama",
        parameter_count=123_456,
    )
    suite = model("EvalSuite").objects.create(
        lab=lab,
        owner=user,
        name="gsm-mini",
        tasks=[{"name": "gsm", "type": "gsm8k", "path": "/data/gsm.jsonl", "limit": 10}],
    )
    check = model("TaskFileCheck").objects.create(
        path="/data/gsm.jsonl", type="gsm8k", size=4096, mtime_ns=17, state="done", items=10
    )
    sweep = model("Sweep").objects.create(
        lab=lab, owner=user, name="lr-grid", regimes=["sgt", "prp"], seeds=[0, 1]
    )
    experiment = model("Experiment").objects.create(
        lab=lab,
        owner=user,
        name="sgt-trio",
        regime="sgt",
        config={"pool": ["a", "b"], "lr": 0.001},
        seeds=[0],
        auto_eval_suite=suite,
        sweep=sweep,
    )
    experiment.tags.set([tag, other_tag])
    clone = model("Experiment").objects.create(
        lab=lab, owner=user, name="sgt-trio-2", regime="sgt", config={}, cloned_from=experiment
    )
    run = model("Run").objects.create(
        experiment=experiment,
        name="sgt-trio-s0",
        seed=0,
        regime="sgt",
        config={"seed": 0},
        state="completed",
        last_step=2,
        worker_nodes=["node-a"],
    )
    run.tags.set([tag])
    change = model("RunStateChange").objects.create(
        run=run, state="completed", at=WHEN, note="done"
    )
    series = model("MetricSeries").objects.create(run=run, policy="a", key="train/reward")
    model("MetricPoint").objects.bulk_create(
        model("MetricPoint")(series=series, step=step, value=value, wall_time=float(step))
        for step, value in enumerate([0.25, 0.5, None])
    )
    model("SeriesPack").objects.create(series=series, steps=b"\x00\x01", values=b"\x02\x03")
    model("SeriesRollup").objects.create(
        series=series,
        level=1,
        block=0,
        n_points=2,
        low_value=0.25,
        low_step=0,
        high_value=0.5,
        high_step=1,
        value_sum=0.75,
    )
    event = model("TransferEvent").objects.create(
        run=run,
        step=1,
        source="a",
        target="b",
        kind="success",
        prompt_id="p1",
        samples=[{"text": "42", "truncated": False}],
    )
    evaluation = model("Evaluation").objects.create(
        run=run, suite=suite, owner=user, suite_config={"tasks": []}, state="completed"
    )
    comparison = model("SavedComparison").objects.create(
        lab=lab, owner=user, name="trio", slug="trio-1", query="runs=1&key=train/reward"
    )

    content_types = {
        name: content_type.objects.get_or_create(app_label="experiments", model=name)[0].pk
        for name in MOVED
    }
    inspect = permission.objects.create(
        name="Can inspect run",
        codename="migr_inspect_run",
        content_type_id=content_types["run"],
    )
    user.user_permissions.add(inspect)
    log = log_entry.objects.create(
        user=user,
        content_type_id=content_types["run"],
        object_id=str(run.pk),
        object_repr="sgt-trio-s0",
        action_flag=2,
        action_time=WHEN,
    )
    return {
        "user": user.pk,
        "lab": lab.pk,
        "membership": membership.pk,
        "tags": {tag.pk, other_tag.pk},
        "tag": tag.pk,
        "entry": entry.pk,
        "suite": suite.pk,
        "check": check.pk,
        "sweep": sweep.pk,
        "experiment": experiment.pk,
        "clone": clone.pk,
        "run": run.pk,
        "change": change.pk,
        "series": series.pk,
        "event": event.pk,
        "evaluation": evaluation.pk,
        "comparison": comparison.pk,
        "content_types": content_types,
        "permission": inspect.pk,
        "log": log.pk,
    }


@pytest.mark.django_db(transaction=True)
def test_a_populated_database_migrates_to_the_areas_with_every_row(
    before_the_move: MigrationExecutor,
) -> None:
    applied = set(before_the_move.loader.applied_migrations)
    assert ("experiments", "0011_regime_name_length") in applied
    assert not applied & set(MOVE_MIGRATIONS), "the move is still applied"

    ids = populate(applied_state_apps(before_the_move))
    columns_before = table_columns()
    before = snapshot(columns_before)
    assert all(before[table] for table in TABLES), "a moved table was left empty"

    after_executor = migrate_to_latest()
    assert set(MOVE_MIGRATIONS) <= set(after_executor.loader.applied_migrations)
    assert not after_executor.migration_plan(after_executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()

    # Nothing lost, nothing changed: every row of every table, byte for byte, and every
    # column kept (later migrations only add columns).
    columns_after = table_columns()
    assert all(set(columns_before[t]) <= set(columns_after[t]) for t in TABLES)
    assert snapshot(columns_before) == before

    # And today's models read it all, relations included.
    user = User.objects.get(pk=ids["user"])
    lab = Lab.objects.get(pk=ids["lab"])
    assert lab.name == "Migration lab"
    assert list(lab.members.all()) == [user]
    membership = LabMembership.objects.get(pk=ids["membership"])
    assert (membership.lab, membership.user) == (lab, user)

    assert set(Tag.objects.filter(lab=lab).values_list("pk", flat=True)) == ids["tags"]
    entry = ModelEntry.objects.get(pk=ids["entry"])
    assert (entry.lab, entry.owner, entry.name, entry.source, entry.parameter_count) == (
        lab,
        user,
        "tiny-llama",
        "zoo:tiny-llama",
        123_456,
    )
    suite = EvalSuite.objects.get(pk=ids["suite"])
    assert suite.lab == lab and suite.tasks[0]["path"] == "/data/gsm.jsonl"
    check = TaskFileCheck.objects.get(pk=ids["check"])
    assert (check.path, check.type, check.size, check.state, check.items) == (
        "/data/gsm.jsonl",
        "gsm8k",
        4096,
        "done",
        10,
    )

    sweep = Sweep.objects.get(pk=ids["sweep"])
    assert (sweep.regimes, sweep.seeds, sweep.owner) == (["sgt", "prp"], [0, 1], user)
    experiment = Experiment.objects.get(pk=ids["experiment"])
    assert experiment.lab == lab and experiment.owner == user
    assert experiment.config == {"pool": ["a", "b"], "lr": 0.001}
    assert set(experiment.tags.values_list("pk", flat=True)) == ids["tags"]
    assert experiment.auto_eval_suite == suite
    assert experiment.sweep == sweep
    assert list(sweep.experiments.all()) == [experiment]
    assert Experiment.objects.get(pk=ids["clone"]).cloned_from == experiment

    run = Run.objects.get(pk=ids["run"])
    assert run.experiment.lab.name == "Migration lab"
    assert (run.name, run.seed, run.state, run.last_step, run.worker_nodes) == (
        "sgt-trio-s0",
        0,
        Run.State.COMPLETED,
        2,
        ["node-a"],
    )
    assert list(run.tags.values_list("pk", flat=True)) == [ids["tag"]]
    assert list(run.state_changes.values_list("pk", "state", "at", "note")) == [
        (ids["change"], "completed", WHEN, "done")
    ]

    series = MetricSeries.objects.get(pk=ids["series"])
    assert (series.run, series.policy, series.key) == (run, "a", "train/reward")
    assert list(series.points.order_by("step").values_list("step", "value", "wall_time")) == [
        (0, 0.25, 0.0),
        (1, 0.5, 1.0),
        (2, None, 2.0),
    ]
    pack = SeriesPack.objects.get(series=series)
    assert (bytes(pack.steps), bytes(pack.values)) == (b"\x00\x01", b"\x02\x03")
    rollup = SeriesRollup.objects.get(series=series, level=1, block=0)
    assert (rollup.n_points, rollup.low_value, rollup.high_step, rollup.value_sum) == (
        2,
        0.25,
        1,
        0.75,
    )
    event = TransferEvent.objects.get(pk=ids["event"])
    assert (event.run, event.kind, event.samples) == (
        run,
        "success",
        [{"text": "42", "truncated": False}],
    )

    evaluation = Evaluation.objects.get(pk=ids["evaluation"])
    assert (evaluation.run, evaluation.suite, evaluation.owner) == (run, suite, user)
    assert list(suite.evaluations.all()) == [evaluation]
    comparison = SavedComparison.objects.get(pk=ids["comparison"])
    assert (comparison.lab, comparison.owner, comparison.slug, comparison.query) == (
        lab,
        user,
        "trio-1",
        "runs=1&key=train/reward",
    )

    # The content types kept their rows (ids), now under the areas' labels.
    for name, model in MOVED.items():
        assert ContentType.objects.get_for_model(model).pk == ids["content_types"][name], name
    assert not ContentType.objects.filter(app_label="experiments").exists()
    run_type = ContentType.objects.get_for_model(Run)
    assert (run_type.app_label, run_type.model) == ("runs", "run")
    assert Permission.objects.get(pk=ids["permission"]).content_type == run_type
    assert User.objects.get(pk=ids["user"]).has_perm("runs.migr_inspect_run")
    log = LogEntry.objects.get(pk=ids["log"])
    assert log.content_type == run_type
    assert log.get_edited_object() == run


@pytest.mark.django_db
def test_the_move_migrations_write_no_sql() -> None:
    """``sqlmigrate`` of each move migration is empty: it touches no table (the content
    types' relabelling is Python, run against rows, and prints as a comment)."""
    current = executor()
    graph = current.loader.graph
    for node in MOVE_MIGRATIONS:
        assert node in graph.nodes, node
        sql = collected_sql(current, [(graph.nodes[node], False)])
        assert not [s for s in sql if DDL.search(s)], (node, sql)
        assert sql == [], (node, sql)
        backwards = collected_sql(current, [(graph.nodes[node], True)])
        assert backwards == [], (node, backwards)


@pytest.mark.django_db
def test_a_fresh_migrate_creates_every_table_once() -> None:
    """From an empty database, the plan creates each table of today's models exactly once:
    the areas' 0001 do not create again the tables ``experiments`` already did."""
    current = executor()
    plan = current.migration_plan(current.loader.graph.leaf_nodes(), clean_start=True)
    created = [
        table
        for statement in collected_sql(current, plan)
        for table in CREATE_TABLE.findall(statement)
    ]
    twice = sorted({table for table in created if created.count(table) > 1})
    assert not twice, f"created more than once: {twice}"
    expected = {
        table
        for model in current_apps.get_models(include_auto_created=True)
        if model._meta.managed and not model._meta.proxy
        for table in [model._meta.db_table]
    }
    assert expected <= set(created), sorted(expected - set(created))
    assert set(TABLES) <= set(created)
