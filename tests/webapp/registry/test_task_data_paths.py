"""A file task's ``train_path`` / ``val_path`` are checked when the experiment is saved.

Shell syntax, line breaks, relative paths, ``..``, missing, unreadable, empty and
non-regular files, suffixes the loaders do not read, and (with ``MRL_TASK_DATA_DIRS``)
files outside the allowed directories are refused next to the field, on the compose
page, in an imported config and when a sweep copies an experiment's task; a readable
JSONL/Parquet file is saved. The arithmetic task reads no file: its paths must be empty.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import reverse

from tests.conftest import pool_config
from tests.webapp.core.test_settings import REPO, _django_check
from tests.webapp.runs.test_forms import query, sgt_data
from tests.webapp.test_bad_form_input import field_errors, import_config, logged_in
from webapp.core.models import Lab
from webapp.registry.task_data import task_data_problems, task_path_problem
from webapp.runs import services
from webapp.runs.compose import ExperimentComposer
from webapp.runs.forms import config_problems
from webapp.runs.models import Experiment, Sweep

pytestmark = pytest.mark.django_db

ROWS = [{"problem": f"What is {n} + {n}?", "answer": str(2 * n)} for n in range(6)]
NOBODY = 65534


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A world-traversable directory (tmp_path is 0700: an unprivileged reader could not
    even reach a file in it) with a train and a validation file."""
    root = Path(tempfile.mkdtemp(prefix="mrl-task-data-"))
    root.chmod(0o755)
    for name in ("train.jsonl", "val.jsonl"):
        (root / name).write_text("".join(json.dumps(row) + "\n" for row in ROWS))
        (root / name).chmod(0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def unprivileged() -> Iterator[None]:
    """Checks run as an ordinary user: root reads a mode-000 file, so under root the
    effective uid drops to nobody's for the block (every import done before)."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)


UNAVAILABLE = "not a data file this deployment can read"
"""The start of the one message for a missing, outside or unreadable file."""


def file_task(lab: Lab, data_dir: Path, **task: str) -> dict[str, str]:
    """A valid SGT page whose task is a math file task on ``data_dir``'s files."""
    data = sgt_data(ExperimentComposer(lab=lab))
    data.update(
        {
            "task-kind": "math_file",
            "task-train_path": str(data_dir / "train.jsonl"),
            "task-val_path": str(data_dir / "val.jsonl"),
        }
    )
    data.update({f"task-{name}": value for name, value in task.items()})
    return data


def bad_values(data_dir: Path) -> dict[str, tuple[str, str]]:
    """What is tried: name -> (value, a fragment of the message)."""
    good = str(data_dir / "train.jsonl")
    (data_dir / "folder.jsonl").mkdir()
    os.mkfifo(data_dir / "pipe.jsonl")  # opening it for reading would block: never opened
    (data_dir / "empty.jsonl").touch()
    for suffix in ("csv", "json", "txt"):
        (data_dir / f"train.{suffix}").write_text("x\n")
    return {
        "shell-substitution": (f"{data_dir}/$(rm -rf ~).jsonl", "shell characters"),
        "shell-semicolon": (f"{good};rm -rf ~", "shell characters"),
        "shell-backticks": (f"{data_dir}/`id`.jsonl", "shell characters"),
        "shell-pipe": (f"{data_dir}/a|b.jsonl", "shell characters"),
        "space": (f"{data_dir}/my train.jsonl", "no spaces"),
        "quote": (f"{data_dir}/it's.jsonl", "quotes"),
        "newline": (f"{good}\n/etc/passwd", "line breaks"),
        "carriage-return": (f"{good}\r{good}", "line breaks"),
        "tab": (f"{good}\t{good}", "control characters"),
        "relative": ("train.jsonl", "must be an absolute path"),
        "relative-dir": ("data/train.jsonl", "must be an absolute path"),
        "traversal-relative": ("../../etc/passwd", "must be an absolute path"),
        "traversal": (f"{data_dir}/../../etc/passwd", "cannot go up a directory"),
        "traversal-back-in": (f"{data_dir}/../{data_dir.name}/train.jsonl", "'..'"),
        "missing": (f"{data_dir}/missing.jsonl", UNAVAILABLE),
        "missing-parent": (f"{data_dir}/train.jsonl/x.jsonl", UNAVAILABLE),
        "directory": (f"{data_dir}/folder.jsonl", "is a directory, not a regular file"),
        "fifo": (f"{data_dir}/pipe.jsonl", "is a FIFO (named pipe), not a regular file"),
        "empty": (f"{data_dir}/empty.jsonl", "is empty"),
        "suffix-csv": (f"{data_dir}/train.csv", ".jsonl, .json-lines, .parquet"),
        "suffix-json": (f"{data_dir}/train.json", "must be a file the task loaders read"),
        "suffix-txt": (f"{data_dir}/train.txt", "must be a file the task loaders read"),
        "no-suffix": ("/etc/passwd", "must be a file the task loaders read"),
        "too-long": ("/" + "a" * 1200 + ".jsonl", "longer than 1000"),
        "name-too-long": ("/" + "a" * 300 + ".jsonl", UNAVAILABLE),
    }


@pytest.mark.parametrize("field", ["train_path", "val_path"])
def test_every_bad_path_is_refused_next_to_its_field_at_save(
    lab: Lab, alice: User, data_dir: Path, field: str
) -> None:
    client = logged_in(alice)
    url = reverse("dashboard:experiment_create")
    for case, (value, fragment) in bad_values(data_dir).items():
        response = client.post(
            url, {**file_task(lab, data_dir, **{field: value}), "action": "save"}
        )
        assert response.status_code == 200, case
        assert not Experiment.objects.exists(), case
        errors = " ".join(field_errors(response.context["composer"], f"task-{field}"))
        assert fragment in errors, (case, errors)
        assert errors.startswith((field, "Ensure")), (case, errors)  # names the field
        other = "val_path" if field == "train_path" else "train_path"
        assert not field_errors(response.context["composer"], f"task-{other}"), case


def test_an_unreadable_file_is_refused(lab: Lab, data_dir: Path) -> None:
    secret = data_dir / "secret.jsonl"
    secret.write_text(json.dumps(ROWS[0]) + "\n")
    secret.chmod(0o000)
    data = query(file_task(lab, data_dir, train_path=str(secret)))
    ExperimentComposer(data, lab=lab).is_valid()  # every import and lazy load done here
    with unprivileged():
        problem = task_path_problem("train_path", str(secret))
        composer = ExperimentComposer(data, lab=lab)
        valid = composer.is_valid()
    assert problem is not None and "cannot read" in problem and "readable by" in problem
    assert not valid
    assert "Permission denied" in " ".join(field_errors(composer, "task-train_path"))


def test_a_readable_file_task_is_saved(lab: Lab, alice: User, data_dir: Path) -> None:
    client = logged_in(alice)
    parquet = data_dir / "val.parquet"
    pytest.importorskip("pyarrow.parquet").write_table(
        pytest.importorskip("pyarrow").Table.from_pylist(ROWS), parquet
    )
    shouting = data_dir / "TRAIN.JSONL"  # the loaders compare suffixes lower-cased
    shutil.copy(data_dir / "train.jsonl", shouting)
    data = file_task(lab, data_dir, train_path=str(shouting), val_path=str(parquet))
    response = client.post(reverse("dashboard:experiment_create"), {**data, "action": "save"})
    experiment = Experiment.objects.get()
    assert response["Location"] == experiment.get_absolute_url()
    task = experiment.config["task"]
    assert (task["kind"], task["train_path"], task["val_path"]) == (
        "math_file",
        str(shouting),
        str(parquet),
    )
    assert task_data_problems(task) == {}


def test_the_allowed_directories_bound_the_paths(lab: Lab, data_dir: Path) -> None:
    allowed = data_dir / "allowed"
    allowed.mkdir()
    inside = allowed / "train.jsonl"
    shutil.copy(data_dir / "train.jsonl", inside)
    (allowed / "escape.jsonl").symlink_to(data_dir / "val.jsonl")  # a link leading out
    (data_dir / "link-in.jsonl").symlink_to(inside)  # a link leading in: its file is inside
    # Outside (directly or through a link), missing inside or outside: one message, so a
    # path says nothing of what exists where the user may not look.
    cases = [
        str(data_dir / "val.jsonl"),
        str(allowed / "escape.jsonl"),
        "/etc/missing-secret.jsonl",
        str(allowed / "missing.jsonl"),
    ]
    with override_settings(TASK_DATA_DIRS=[str(allowed), "/srv/other-data"]):
        for value in cases:
            composer = ExperimentComposer(
                query(file_task(lab, data_dir, train_path=value, val_path=str(inside))), lab=lab
            )
            assert not composer.is_valid(), value
            errors = " ".join(field_errors(composer, "task-train_path"))
            assert errors == (
                f"train_path: {value}: not a data file this deployment can read (missing, "
                "unreadable, or in a place the app does not read from); give a file inside "
                f"{allowed}, /srv/other-data (MRL_TASK_DATA_DIRS)"
            ), (value, errors)
        for value in (str(inside), str(data_dir / "link-in.jsonl")):
            data = file_task(lab, data_dir, train_path=value, val_path=str(inside))
            assert ExperimentComposer(query(data), lab=lab).is_valid(), value
    # The default (no directories listed): any readable file.
    data = file_task(lab, data_dir)
    assert ExperimentComposer(query(data), lab=lab).is_valid()


def test_the_arithmetic_task_takes_no_paths(lab: Lab, data_dir: Path) -> None:
    good = str(data_dir / "train.jsonl")
    data = file_task(lab, data_dir, kind="arithmetic", train_path=good, val_path="")
    composer = ExperimentComposer(query(data), lab=lab)
    assert not composer.is_valid()
    assert "reads no data file: clear train_path" in " ".join(
        field_errors(composer, "task-train_path")
    )
    assert not field_errors(composer, "task-val_path")
    data = file_task(lab, data_dir, kind="arithmetic", train_path="", val_path="")
    assert ExperimentComposer(query(data), lab=lab).is_valid()


def test_a_file_task_still_needs_both_paths(lab: Lab, data_dir: Path) -> None:
    composer = ExperimentComposer(query(file_task(lab, data_dir, val_path="")), lab=lab)
    assert not composer.is_valid()
    assert "a math_file task needs val_path" in " ".join(field_errors(composer, "task-val_path"))


def test_an_imported_config_with_bad_paths_is_refused_at_the_fields(
    lab: Lab, alice: User, data_dir: Path
) -> None:
    client = logged_in(alice)
    for case, (value, fragment) in bad_values(data_dir).items():
        if "\n" in value or "\r" in value:
            continue  # not a line of the page: the import box's JSON keeps it, see below
        config = pool_config(
            task={"kind": "multiple_choice_file", "train_path": value, "val_path": value}
        )
        composer = import_config(client, config).context["composer"]
        assert not composer.config, case  # no preview
        for field in ("train_path", "val_path"):
            errors = " ".join(field_errors(composer, f"task-{field}"))
            assert fragment in errors, (case, field, errors)
    newline = str(data_dir / "train.jsonl") + "\n/etc/passwd"
    config = pool_config(task={"kind": "math_file", "train_path": newline, "val_path": newline})
    assert "line breaks" in config_problems(config)["task.train_path"]
    composer = import_config(client, config).context["composer"]
    assert "line breaks" in " ".join(field_errors(composer, "task-train_path"))
    config = pool_config(task={"kind": "arithmetic", "train_path": "$(rm -rf ~)"})
    assert "clear train_path" in " ".join(
        field_errors(import_config(client, config).context["composer"], "task-train_path")
    )
    good = {
        "kind": "math_file",
        "train_path": str(data_dir / "train.jsonl"),
        "val_path": str(data_dir / "val.jsonl"),
    }
    response = import_config(client, pool_config(task=good))
    assert response.context["previewing"]
    assert response.context["composer"].config["task"]["train_path"] == good["train_path"]


def _sweep(client: Client, source: Experiment) -> Any:
    url = reverse("compare:sweep_create", args=[source.pk])
    return client.post(url, {"name": "grid", "regimes": ["standalone", "sgt"], "seeds": "0"})


def test_a_sweep_does_not_copy_a_bad_path(
    alice: User, data_dir: Path, make_experiment: Callable[..., Experiment]
) -> None:
    client = logged_in(alice)
    good = {
        "kind": "math_file",
        "train_path": str(data_dir / "train.jsonl"),
        "val_path": str(data_dir / "val.jsonl"),
    }
    # Saved before the checks existed (the service stores what it is given).
    for task, fragment in [
        ({**good, "train_path": "../../etc/passwd"}, "must be an absolute path"),
        ({**good, "val_path": f"{data_dir}/$(reboot).jsonl"}, "shell characters"),
        ({**good, "val_path": f"{good['val_path']}\n/etc/passwd"}, "line breaks"),
    ]:
        source = services.experiment_create(owner=alice, config=pool_config(task=task), seeds=[0])
        response = _sweep(client, source)
        assert response.status_code == 200
        errors = " ".join(response.context["form"].non_field_errors())
        assert fragment in errors and "edit that experiment first" in errors, errors
        assert not Sweep.objects.exists()
        assert Experiment.objects.count() == 1
        source.delete()
    # A good source sweeps; once its file is gone, the same sweep is refused.
    source = make_experiment(seeds=(0,), task=good)
    assert _sweep(client, source).status_code == 302
    Sweep.objects.all().delete()
    Experiment.objects.exclude(pk=source.pk).delete()
    (data_dir / "train.jsonl").unlink()
    errors = " ".join(_sweep(client, source).context["form"].non_field_errors())
    assert "task.train_path" in errors and UNAVAILABLE in errors, errors
    assert not Sweep.objects.exists()


def test_the_setting_lists_absolute_directories() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.TASK_DATA_DIRS)"],
        cwd=REPO,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            "MRL_TASK_DATA_DIRS": " /data/sets/, /scratch//data ,",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.strip() == "['/data/sets', '/scratch/data']"
    for name in ("MRL_TASK_DATA_DIRS", "MRL_MODEL_DIRS"):
        refused = _django_check({name: "/data/sets,data/relative"})
        assert refused.returncode != 0
        assert name in refused.stderr and "absolute directories" in refused.stderr
