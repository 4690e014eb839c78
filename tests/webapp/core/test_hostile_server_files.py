"""Hostile server paths in the suite form, the task lines and the run data fields (issue 36).

What a user may name is a regular file inside the data directories that is none of the
app's own; nothing else is opened, nothing is read without bounds, and no message says
what a file holds or whether a path outside exists. Real files, devices and FIFOs of this
machine; the form through Django's test client against PostgreSQL.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import reverse

from webapp.core import server_files
from webapp.core.models import Lab
from webapp.core.server_files import (
    SUITE_FILE,
    TASK_FILE,
    ServerFileError,
    app_owned_paths,
    data_policy,
    locate,
    make_policy,
    read_bytes,
    size_text,
)
from webapp.registry import suite_checks
from webapp.registry.models import EvalSuite, TaskFileCheck

pytestmark = pytest.mark.django_db

SECRET = "LAUNCH-CODE-7731"
"""A value planted in files: it must never reach a page."""
MATH_ROW = {"problem": "1+1", "answer": "2"}
UNAVAILABLE = "this deployment can read (missing, unreadable, or in a place the app does not"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    directory.mkdir()
    (directory / "good.jsonl").write_text(json.dumps(MATH_ROW) + "\n")
    return directory


@pytest.fixture
def app_dir(tmp_path: Path, settings: Any) -> Path:
    """The app's own state in a var directory of its own: a SQLite broker database in WAL
    mode, held open by this process while the tests run, the secret key and a run."""
    var = tmp_path / "var"
    (var / "runs" / "run-1").mkdir(parents=True)
    (var / "log").mkdir()
    (var / "secret_key").write_text("s" * 50)
    (var / "runs" / "run-1" / "token").write_text("t" * 40)
    settings.VAR_DIR = var
    settings.RUN_ROOT = var / "runs"
    settings.EMBEDDED_BROKER_PATH = var / "broker.sqlite3"
    return var


@pytest.fixture
def held_database(app_dir: Path) -> Iterator[sqlite3.Connection]:
    """The broker's SQLite file, open in this process (as the web process holds its own)."""
    database = sqlite3.connect(app_dir / "broker.sqlite3", check_same_thread=False)
    database.execute("PRAGMA journal_mode=WAL")
    database.execute("CREATE TABLE message (id INTEGER PRIMARY KEY, body TEXT)")
    database.commit()
    yield database
    database.close()


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post_suite(user: User, **data: str) -> Any:
    fields = {"name": "mine", "description": "", "suite_file": "", "tasks": ""} | data
    return logged_in(user).post(reverse("registry:suite_create"), fields)


def form_errors(response: Any) -> str:
    return " ".join(
        message for messages in response.context["form"].errors.values() for message in messages
    )


def timed(call: Any) -> tuple[Any, float, int]:
    """``call()``'s result, seconds and peak Python allocation (bytes)."""
    tracemalloc.start()
    start = time.monotonic()
    try:
        result = call()
    finally:
        seconds = time.monotonic() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return result, seconds, peak


# --- what is never opened ------------------------------------------------------------------------
def test_devices_fifos_sockets_and_directories_are_refused_unopened(
    lab: Lab, alice: User, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock.json"))
    cases = {
        # The kernel's trees are refused by their path (issue 44): the one message.
        "/dev/zero": UNAVAILABLE,  # reading it never ends
        "/dev/urandom": UNAVAILABLE,
        str(fifo): "is a FIFO (named pipe), not a regular file",
        str(tmp_path / "sock.json"): "is a socket, not a regular file",
        "/proc/self/fd/0": UNAVAILABLE,
    }
    post_suite(alice, suite_file=str(tmp_path / "warm-up.json"))  # templates, imports
    try:
        for path, fragment in cases.items():
            response, seconds, peak = timed(lambda path=path: post_suite(alice, suite_file=path))
            assert response.status_code == 200, path
            assert fragment in form_errors(response), (path, form_errors(response))
            assert seconds < 5 and peak < 8 << 20, (path, seconds, peak)
            # The same through a task line (a name with a task file's suffix, linked to it).
            link = tmp_path / f"link-{len(list(tmp_path.iterdir()))}.jsonl"
            link.symlink_to(path)
            response, seconds, peak = timed(
                lambda link=link: post_suite(alice, tasks=f"t math {link}")
            )
            assert fragment in form_errors(response), (path, form_errors(response))
            assert seconds < 5 and peak < 8 << 20, (path, seconds, peak)
    finally:
        server.close()
    assert not EvalSuite.objects.exists()


def test_an_oversized_suite_file_is_refused_with_the_cap_unread(
    lab: Lab, alice: User, data_dir: Path
) -> None:
    big = data_dir / "big.json"
    big.write_bytes(b"{" + b" " * (3 << 20) + b"}")
    post_suite(alice, suite_file=str(data_dir / "warm-up.json"))  # templates, imports

    response, seconds, peak = timed(lambda: post_suite(alice, suite_file=str(big)))

    assert f"{big} is 3 MiB; a suite JSON may be at most 1 MiB" in form_errors(response)
    assert peak < 2 << 20 and seconds < 5  # never read: 3 MiB would show in the peak


def test_a_file_growing_past_its_cap_while_read_is_refused(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = data_dir / "growing.json"
    path.write_bytes(b"{}")
    policy = data_policy()
    located = locate(str(path), SUITE_FILE, policy)
    path.write_bytes(b" " * (2 << 20))  # grew after it was looked at (same inode)
    monkeypatch.setattr(server_files, "locate", lambda *args, **kwargs: located)

    with pytest.raises(ServerFileError, match="larger than the 1 MiB a suite JSON may be"):
        read_bytes(str(path), SUITE_FILE, policy, timeout_s=5)


# --- the app's own files -------------------------------------------------------------------------
def test_the_apps_own_files_are_never_opened(
    lab: Lab, alice: User, app_dir: Path, held_database: sqlite3.Connection, data_dir: Path
) -> None:
    database = app_dir / "broker.sqlite3"
    held_database.execute("INSERT INTO message (body) VALUES ('before')")
    held_database.commit()
    for suffix in (".json", ".jsonl"):  # a suite file's and a task file's
        (data_dir / f"hard-link{suffix}").hardlink_to(database)
        (data_dir / f"sym-link{suffix}").symlink_to(database)
    opened: list[str] = []
    real_open = os.open

    def watching_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.path.realpath(path))
        return real_open(path, *args, **kwargs)

    paths = [
        str(database),
        f"{database}-wal",
        f"{database}-shm",
        str(app_dir / "secret_key"),
        str(app_dir / "runs" / "run-1" / "token"),
        str(app_dir / "runs"),
        str(data_dir / "hard-link.json"),
        str(data_dir / "sym-link.json"),
        f"{data_dir}/../var/broker.sqlite3",
    ]
    links = [str(data_dir / "hard-link.jsonl"), str(data_dir / "sym-link.jsonl")]
    os.open = watching_open  # type: ignore[assignment]
    try:
        for path in paths:
            response = post_suite(alice, suite_file=path)
            assert UNAVAILABLE in form_errors(response), (path, form_errors(response))
            # As a task file: refused for its suffix, or as one of the app's own.
            response = post_suite(alice, tasks=f"t math {path}")
            assert "a task file must end in one of" in form_errors(response) or (
                UNAVAILABLE in form_errors(response)
            ), (path, form_errors(response))
        for path in links:
            response = post_suite(alice, tasks=f"t math {path}")
            assert UNAVAILABLE in form_errors(response), (path, form_errors(response))
    finally:
        os.open = real_open  # type: ignore[assignment]
    assert not any(path.startswith(str(app_dir.resolve())) for path in opened), opened
    assert not any("broker.sqlite3" in path for path in opened), opened
    # The held connection still writes and the database is whole.
    held_database.execute("INSERT INTO message (body) VALUES ('after')")
    held_database.commit()
    assert held_database.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert held_database.execute("SELECT count(*) FROM message").fetchone() == (2,)


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")  # read by our code only
def test_the_app_owned_paths_come_from_the_settings(app_dir: Path, settings: Any) -> None:
    settings.DATABASES = {
        **settings.DATABASES,
        "demo": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(app_dir / "demo.sqlite3")},
    }
    files, directories = app_owned_paths()
    for suffix in ("", "-wal", "-shm", "-journal"):
        assert f"{app_dir}/demo.sqlite3{suffix}" in files
        assert f"{app_dir}/broker.sqlite3{suffix}" in files
    assert str(app_dir / "secret_key") in files
    assert directories == [str(app_dir / "runs"), str(app_dir / "log")]


# --- the data directories ------------------------------------------------------------------------
def test_paths_outside_the_data_directories_get_one_message_through_every_route(
    lab: Lab, alice: User, tmp_path: Path, data_dir: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text(json.dumps(MATH_ROW) + "\n")
    (outside / "suite.json").write_text(
        json.dumps({"name": "s", "tasks": [{"name": "t", "type": "math", "path": "secret.jsonl"}]})
    )
    (data_dir / "out.jsonl").symlink_to(outside / "secret.jsonl")
    (data_dir / "out.json").symlink_to(outside / "suite.json")
    # A suite inside whose relative task path climbs out.
    (data_dir / "climbing.json").write_text(
        json.dumps(
            {
                "name": "c",
                "tasks": [{"name": "t", "type": "math", "path": "../outside/secret.jsonl"}],
            }
        )
    )
    task_paths = [
        str(outside / "secret.jsonl"),  # exists, outside
        str(outside / "nothing.jsonl"),  # missing, outside
        str(data_dir / "out.jsonl"),  # a link leading out
        f"{data_dir}/../outside/secret.jsonl",  # '..' leading out
        str(data_dir / "missing.jsonl"),  # missing, inside
    ]
    suite_paths = [
        str(outside / "suite.json"),
        str(outside / "nothing.json"),
        str(data_dir / "out.json"),
        f"{data_dir}/../outside/suite.json",
        str(outside),  # a directory outside holding a suite.json
    ]
    expected_task = (
        "not a task file this deployment can read (missing, unreadable, or in a place the app "
        f"does not read from); give a file inside {data_dir} (MRL_TASK_DATA_DIRS)"
    )
    with override_settings(TASK_DATA_DIRS=[str(data_dir)]):
        for path in task_paths:
            response = post_suite(alice, tasks=f"t math {path}")
            assert form_errors(response) == f"line 1 (t): {path}: {expected_task}", path
        for path in suite_paths:
            response = post_suite(alice, suite_file=path)
            assert form_errors(response) == expected_task.replace("task file", "suite JSON").join(
                [f"{path}: ", ""]
            ), (path, form_errors(response))
        response = post_suite(alice, name="", suite_file=str(data_dir / "climbing.json"))
        assert form_errors(response) == (
            f"line 1 (t): {data_dir}/../outside/secret.jsonl: {expected_task}"
        )
        # Inside is fine.
        response = post_suite(alice, tasks=f"t math {data_dir / 'good.jsonl'}")
        assert response.status_code == 302
    assert EvalSuite.objects.count() == 1


# --- messages that say what is wrong, not what is there ------------------------------------------
def test_no_value_read_from_a_file_reaches_a_message(
    lab: Lab, alice: User, data_dir: Path, settings: Any
) -> None:
    settings.TASK_DATA_DIRS = [str(data_dir)]  # the positions are said inside a data directory
    suite_files = {
        "keys.json": {"name": "s", "tasks": [], f"db_password_{SECRET}": SECRET},
        "task-key.json": {"name": "s", "tasks": [{"name": "t", SECRET: 1}]},
        "values.json": {
            "name": SECRET,
            "tasks": [{"name": SECRET, "type": SECRET, "path": SECRET}],
        },
        "types.json": {"name": [SECRET], "tasks": {SECRET: SECRET}},
        "limit.json": {
            "name": "s",
            "tasks": [{"name": "t", "type": "math", "path": "a.jsonl", "limit": SECRET}],
        },
        "list.json": [SECRET],
    }
    for name, content in suite_files.items():
        (data_dir / name).write_text(json.dumps(content))
    (data_dir / "broken.json").write_text('{"name": "' + SECRET + '", oops')
    (data_dir / "binary.json").write_bytes(b'{"name": "\xff' + SECRET.encode() + b'"}')
    (data_dir / "control.json").write_text('{"name": "\x01' + SECRET + '"}')
    task_files = {
        "label.jsonl": {"question": "q", "choices": ["a", "b"], "label": SECRET},
        "range.jsonl": {"question": "q", "choices": ["a", "b"], "label": 7},
        "level.jsonl": {**MATH_ROW, "level": [SECRET]},
        "fraction.jsonl": {**MATH_ROW, "level": 2.5},
        "choice.jsonl": {"question": "q", "choices": ["a", {SECRET: SECRET}], "label": 0},
        "boolq.jsonl": {"question": "q", "answer": SECRET},
        "solution.jsonl": {"problem": "p", "solution": SECRET},
        "id.jsonl": {**MATH_ROW, "id": SECRET * 20},
    }
    for name, row in task_files.items():
        (data_dir / name).write_text(json.dumps(row) + "\n")
    (data_dir / "not-json.jsonl").write_text(f"{SECRET} is no JSON\n")
    (data_dir / "control.jsonl").write_text('{"problem": "\x01' + SECRET + '"}\n')
    (data_dir / "latin1.jsonl").write_bytes(b'{"problem": "\xe9' + SECRET.encode() + b'"}\n')
    (data_dir / "array.jsonl").write_text(json.dumps([SECRET]) + "\n")
    pq.write_table(pa.table({"question": [SECRET], "label": [SECRET]}), data_dir / "bad.parquet")
    (data_dir / "fake.parquet").write_text(SECRET * 10)

    seen: list[str] = []
    for name in [*suite_files, "broken.json", "binary.json", "control.json"]:
        response = post_suite(alice, suite_file=str(data_dir / name))
        seen.append(form_errors(response))
        assert response.status_code == 200 and form_errors(response), name
    kinds = {"label.jsonl": "multiple_choice", "range.jsonl": "multiple_choice"}
    kinds |= {"choice.jsonl": "multiple_choice", "boolq.jsonl": "multiple_choice"}
    kinds |= {"bad.parquet": "multiple_choice", "array.jsonl": "exact_match"}
    for name in [
        *task_files,
        "not-json.jsonl",
        "control.jsonl",
        "latin1.jsonl",
        "array.jsonl",
        "bad.parquet",
        "fake.parquet",
    ]:
        response = post_suite(alice, tasks=f"t {kinds.get(name, 'math')} {data_dir / name}")
        assert response.status_code == 200 and form_errors(response), name
        seen.append(form_errors(response))
        assert SECRET not in response.content.decode(), name
    for message in seen:
        assert SECRET not in message, message
        assert "\\x" not in message and "0xff" not in message and "0xe9" not in message, message
    # The messages still say where and what: a place and an expectation.
    joined = "\n".join(seen)
    assert "has a field that is not a suite field" in joined
    assert "tasks[0]: has a field that is not a task field" in joined
    assert "tasks[0].type: expected one of math, multiple_choice, exact_match" in joined
    assert "tasks[0].limit: expected a whole number of at least 1" in joined
    assert "is not valid JSON (line 1, column" in joined
    assert "is not UTF-8 text" in joined
    assert (
        f"{data_dir / 'label.jsonl'}, row 1, field 'label': expected a letter, an index" in joined
    )
    assert "field 'label': the answer is out of range for 2 choices" in joined
    assert "field 'level': expected a level such as 3 or 'Level 3', got a list" in joined
    assert "row 1: not UTF-8 text" in joined
    assert "not a readable Parquet file" in joined


# --- large files: checked off the request, cached by version -------------------------------------
def big_jsonl(path: Path, rows: int) -> Path:
    line = json.dumps({"problem": "x" * 100, "answer": "2"}) + "\n"
    path.write_text(line * rows)
    return path


def test_a_large_task_file_is_checked_by_the_worker_not_the_request(
    lab: Lab, alice: User, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = big_jsonl(data_dir / "big.jsonl", 20_000)  # about 2.4 MB
    assert big.stat().st_size > suite_checks.INLINE_BYTES
    sent: list[int] = []
    monkeypatch.setattr(
        "webapp.registry.views_suites.enqueue_file_checks", lambda ids: sent.extend(ids)
    )
    real_scan = suite_checks.scan
    scanned: list[str] = []

    def counting_scan(located: Any, *args: Any) -> Any:
        scanned.append(located.path)
        return real_scan(located, *args)

    monkeypatch.setattr(suite_checks, "scan", counting_scan)
    response, _, peak = timed(
        lambda: logged_in(alice).post(
            reverse("registry:suite_create"),
            {"name": "big", "description": "", "suite_file": "", "tasks": f"t math {big}"},
            follow=True,
        )
    )

    assert scanned == [] and peak < 2 << 20  # the request did not read the file
    html = response.content.decode()
    assert "1 file is being checked in the background" in html
    check = TaskFileCheck.objects.get()
    assert (check.state, check.path, check.size) == ("pending", str(big), big.stat().st_size)
    assert sent == [check.pk]
    suite = EvalSuite.objects.get()
    detail = logged_in(alice).get(suite.get_absolute_url()).content.decode()
    assert f"being checked ({size_text(big.stat().st_size)})" in detail
    assert "1 file being checked" in detail
    assert sent == [check.pk]  # a page shown again asks for nothing more

    assert suite_checks.refresh(check.pk) == "checked"  # what the worker's task runs

    check.refresh_from_db()
    assert (check.state, check.items, check.error) == ("done", 20_000, "")
    detail = logged_in(alice).get(suite.get_absolute_url()).content.decode()
    assert "20000 items" in detail and "1 file readable" in detail
    assert scanned == [str(big)]  # read once, by the worker's function
    # A new version of the file is checked again; the same version is not.
    logged_in(alice).get(suite.get_absolute_url())
    assert scanned == [str(big)]
    big_jsonl(big, 20_001)
    logged_in(alice).get(suite.get_absolute_url())
    assert TaskFileCheck.objects.get().state == "pending" and len(sent) == 2


def test_a_single_huge_line_is_refused_without_holding_it(data_dir: Path) -> None:
    huge = data_dir / "one-line.jsonl"
    with huge.open("w") as out:
        out.write('{"problem": "')
        out.write("x" * (40 << 20))  # 40 MiB on one line
        out.write('", "answer": "2"}\n')
    check = suite_checks.check_task({"name": "t", "type": "math", "path": str(huge)})
    assert check.pending

    result, _, peak = timed(lambda: suite_checks.refresh(check.pending_id or 0))

    assert result == "checked"
    stored = TaskFileCheck.objects.get()
    assert stored.error == "row 1: longer than 4 MiB (one JSON object a line)"
    assert peak < 16 << 20, peak  # at most a line's cap and a chunk, never 40 MiB


def test_stale_pending_checks_are_found_for_beat(data_dir: Path) -> None:
    big = big_jsonl(data_dir / "big.jsonl", 20_000)
    check = suite_checks.check_task({"name": "t", "type": "math", "path": str(big)})
    assert suite_checks.stale_pending_ids() == []
    TaskFileCheck.objects.update(
        requested_at=TaskFileCheck.objects.get().requested_at - suite_checks.STALE_PENDING * 2
    )
    assert suite_checks.stale_pending_ids() == [check.pending_id]


def test_two_requests_asking_at_once_store_one_check(data_dir: Path) -> None:
    big = big_jsonl(data_dir / "big.jsonl", 20_000)
    policy = make_policy([], app_owned_paths())
    located = locate(str(big), TASK_FILE, policy)
    rows = [suite_checks._request(located, "math") for _ in range(2)]
    assert rows[0].pk == rows[1].pk and TaskFileCheck.objects.count() == 1


# --- model and tokenizer directories ----------------------------------------------------------
def test_model_directories_outside_the_listed_ones_get_one_message(
    lab: Lab, alice: User, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    inside = models / "qwen"
    inside.mkdir(parents=True)
    (inside / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (inside / "tokenizer.json").write_text("{}")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    (models / "out").symlink_to(outside)
    entry = {"name": "m", "tokenizer": "", "family": "", "parameter_count": "", "notes": ""}
    entry |= {"chat_template": ""}
    expected = (
        "not a directory this deployment can read (missing, unreadable, or in a place the app "
        f"does not read from); give a directory inside {models} (MRL_MODEL_DIRS)"
    )
    with override_settings(MODEL_DIRS=[str(models)]):
        for path in [
            str(outside),
            str(tmp_path / "none"),
            str(models / "out"),
            str(models / "none"),
        ]:
            for field in ("source", "tokenizer"):
                data = entry | {"source": str(inside), field: path}
                response = logged_in(alice).post(reverse("registry:model_create"), data)
                errors = response.context["form"].errors[field]
                assert errors == [f"{path}: {expected}"], (path, field, errors)
        data = entry | {"source": str(inside), "tokenizer": str(inside)}
        assert logged_in(alice).post(reverse("registry:model_create"), data).status_code == 302


def test_a_config_json_that_is_a_fifo_or_huge_is_not_read(tmp_path: Path) -> None:
    from trainer.mwra_counting import MAX_CONFIG_BYTES, parameter_count

    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "config.json")
    huge_dir = tmp_path / "huge"
    huge_dir.mkdir()
    (huge_dir / "config.json").write_bytes(b"{" + b" " * MAX_CONFIG_BYTES + b"}")
    for directory in (fifo_dir, huge_dir):
        counted, seconds, peak = timed(lambda directory=directory: parameter_count(str(directory)))
        assert counted.origin == "fallback" and seconds < 2 and peak < 1 << 20, directory


# --- the kernel's trees (issue 44) ------------------------------------------------------------
KERNEL_FILES = ("/proc/kmsg", "/proc/self/mem", "/proc/self/environ", "/sys/kernel/notes")
"""Files that look regular to ``stat``: the kernel log (which blocks a reader, and root
may read it), the process's memory and environment, a sysfs attribute."""


def test_the_kernels_trees_are_refused_unopened_and_unstatted(
    lab: Lab, alice: User, data_dir: Path
) -> None:
    for suffix in (".json", ".jsonl"):
        (data_dir / f"kmsg{suffix}").symlink_to("/proc/kmsg")
        (data_dir / f"mem{suffix}").symlink_to("/proc/self/mem")
    post_suite(alice, suite_file=str(data_dir / "warm-up.json"))  # templates, imports
    touched: list[str] = []
    real_open, real_stat = os.open, os.stat

    def watching_open(path: Any, *args: Any, **kwargs: Any) -> int:
        touched.append(os.path.realpath(path))
        return real_open(path, *args, **kwargs)

    def watching_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if isinstance(path, str | bytes | os.PathLike):
            touched.append(os.path.realpath(path))
        return real_stat(path, *args, **kwargs)

    given = [
        *KERNEL_FILES,
        "/dev/zero",
        "//proc/kmsg",
        "/proc/../proc/self/mem",
        f"{data_dir}/../../../../../../proc/kmsg",
        str(data_dir / "kmsg.json"),
        str(data_dir / "mem.json"),
    ]
    task_lines = [f"t math {data_dir / 'kmsg.jsonl'}", f"t math {data_dir / 'mem.jsonl'}"]
    os.open = watching_open  # type: ignore[assignment]
    os.stat = watching_stat  # type: ignore[assignment]
    try:
        seen = []
        for path in given:
            seen.append((path, form_errors(post_suite(alice, suite_file=path))))
        for line in task_lines:
            seen.append((line, form_errors(post_suite(alice, tasks=line))))
    finally:
        os.open = real_open  # type: ignore[assignment]
        os.stat = real_stat  # type: ignore[assignment]
    for path, errors in seen:
        assert UNAVAILABLE in errors, (path, errors)
    kernel = [path for path in touched if path.startswith(("/proc/", "/sys/", "/dev/"))]
    assert not kernel, kernel
    assert not EvalSuite.objects.exists()


@pytest.mark.parametrize(
    "path", ["/proc", "/proc/kmsg", "//sys/x", "/dev/../dev/zero", "/a/../proc/self/mem"]
)
def test_a_path_in_the_kernels_trees_is_refused_as_given(path: str) -> None:
    policy = make_policy([], ([], []))
    with pytest.raises(ServerFileError) as refused:
        locate(path, SUITE_FILE, policy)
    assert refused.value.code == "unavailable"
    assert server_files.in_system_tree(path)


@pytest.mark.parametrize("path", ["/procfs/x.json", "/devices.json", "/data/proc/kmsg.json"])
def test_a_path_that_only_looks_like_the_kernels_is_not_refused_for_it(path: str) -> None:
    assert not server_files.in_system_tree(path)


def test_a_file_that_is_no_suite_says_so_alone_outside_a_data_directory(
    lab: Lab, alice: User, data_dir: Path, settings: Any
) -> None:
    """With no data directory set, any file the app can read may be named: its parse error
    must say nothing of its content (a "line 1, column N" measured how long its
    JSON-looking start was), so one message whatever the file holds."""
    settings.TASK_DATA_DIRS = []
    contents = {
        "short.txt": b'{"a": 1}x',
        "longer.txt": b'{"password": "' + SECRET.encode() + b'", "other": 12345}tail',
        "prose.txt": b"root:x:0:0:root:/root:/bin/bash\n",
        "binary.txt": b"\xff\xfe" + SECRET.encode(),
        "list.txt": b"[1, 2, 3]",
        "deep.txt": b"[" * 100_000,
        "empty.txt": b"",
    }
    messages = set()
    for name, content in contents.items():
        (data_dir / name).write_bytes(content)
        errors = form_errors(post_suite(alice, suite_file=str(data_dir / name)))
        assert errors.startswith(f"{data_dir / name}: "), errors
        messages.add(errors.removeprefix(f"{data_dir / name}: "))
    assert messages == {"is not a suite file (a JSON object with name and tasks)"}

    # Inside a declared data directory the position helps the author fix the file.
    settings.TASK_DATA_DIRS = [str(data_dir)]
    errors = form_errors(post_suite(alice, suite_file=str(data_dir / "short.txt")))
    assert "is not valid JSON (line 1, column 9)" in errors, errors
