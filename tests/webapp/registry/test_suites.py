"""The evaluation-suite registry: list, create (textarea or suite file), detail with the
live file checks, edit, delete, with validation and the model registry's permissions.

Real files: the trainer's synthetic suite written into ``tmp_path``. Actors: alice owns,
bob is her labmate, charlie is in another lab.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.test_bad_form_input import VALUES, assert_escaped
from trainer.evals.suite import SuiteConfig
from trainer.evals.synthetic import write_synthetic_suite
from webapp.core.models import Lab
from webapp.evals.models import Evaluation
from webapp.registry.forms.suite import parse_task_lines, task_lines
from webapp.registry.models import EvalSuite
from webapp.registry.suite_checks import check_suite, suite_status
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db

UNAVAILABLE = (
    "not a task file this deployment can read (missing, unreadable, or in a place the app "
    "does not read from)"
)
"""The one message for a missing, unreadable or not-allowed task file."""
SYNTHETIC_TASKS = [
    "arith-addition",
    "arith-subtraction",
    "arith-mixed",
    "arith-multiplication",
    "larger",
    "word-problems",
]


@pytest.fixture
def suite_json(tmp_path: Path) -> Path:
    """The synthetic suite's suite.json (relative paths), 8 items a task."""
    return write_synthetic_suite(tmp_path / "synthetic", size=8)


@pytest.fixture
def synthetic(suite_json: Path) -> SuiteConfig:
    """The synthetic suite with absolute paths."""
    return SuiteConfig.from_file(suite_json)


@pytest.fixture
def suite(lab: Lab, alice: User, synthetic: SuiteConfig) -> EvalSuite:
    return EvalSuite.objects.create(
        lab=lab,
        owner=alice,
        name="synthetic",
        description="the trainer's own",
        tasks=synthetic.to_dict()["tasks"],
    )


def logged_in(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def suite_data(**overrides: Any) -> dict[str, Any]:
    data = {"name": "mine", "description": "", "suite_file": "", "tasks": ""}
    data.update(overrides)
    return data


def lines_of(directory: Path, *names: str) -> str:
    types = {"larger": "multiple_choice", "word-problems": "exact_match"}
    return "\n".join(
        f"{name} {types.get(name, 'math')} {directory / (name + '.jsonl')}" for name in names
    )


def errors(response: Any, field: str) -> list[str]:
    return list(response.context["form"].errors.get(field, []))


def create(user: User, **data: Any) -> Any:
    return logged_in(user).post(reverse("registry:suite_create"), suite_data(**data))


# --- the checks, without Django -------------------------------------------------------------
def test_check_suite_counts_each_files_items(synthetic: SuiteConfig) -> None:
    checks = check_suite(synthetic.tasks)

    assert [check.name for check in checks] == SYNTHETIC_TASKS
    assert all(check.ok and check.exists and check.items == 8 for check in checks)
    assert checks[0].status == "8 items"
    assert suite_status(checks).text == "all 6 files readable"


def test_check_suite_reports_each_problem(tmp_path: Path, synthetic: SuiteConfig) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem": "1+1"}\n')
    tasks = [
        {"name": "ok", "type": "math", "path": synthetic.tasks[0].path, "limit": 3},
        {"name": "gone", "type": "math", "path": str(tmp_path / "gone.jsonl"), "limit": None},
        {"name": "rel", "type": "math", "path": "rel.jsonl", "limit": None},
        {"name": "broken", "type": "math", "path": str(broken), "limit": None},
        {"name": "dir", "type": "math", "path": str(tmp_path), "limit": None},
        {"name": "kind", "type": "essay", "path": synthetic.tasks[0].path, "limit": None},
    ]

    ok, gone, rel, bad, directory, kind = check_suite(tasks)

    assert (ok.items, ok.scored, ok.status) == (8, 3, "8 items, the first 3 scored")
    assert (gone.exists, gone.items, gone.error) == (
        False,
        None,
        f"{tmp_path}/gone.jsonl: {UNAVAILABLE}",
    )
    assert gone.reason == UNAVAILABLE  # the path is in its own column
    assert "relative path; give the absolute path of the file on the server" in str(rel.error)
    assert bad.exists and bad.items is None and str(broken) in str(bad.error)
    assert "row 1" in str(bad.error)  # the math reader names the row without an answer
    assert "is a directory" in str(directory.error)
    assert "unknown task type 'essay'" in str(kind.error)
    assert suite_status([ok, gone, rel]).text == "2 problems"
    assert suite_status([gone]).text == "1 problem"


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text('{"problem": "1+1", "answer": "2"}\n')
    task = {"name": "one", "type": "math", "path": str(path)}
    assert check_suite([task])[0].items == 1

    path.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": "4"}\n')

    assert check_suite([task])[0].items == 2


def test_task_lines_round_trip(tmp_path: Path) -> None:
    tasks = [
        {"name": "a", "type": "math", "path": "/data/a.jsonl", "limit": None},
        {"name": "b", "type": "exact_match", "path": "/data/with space/b.jsonl", "limit": 5},
    ]
    text = task_lines(tasks)

    parsed, numbers, problems = parse_task_lines("# header\n\n" + text + "  # trailing note")

    assert problems == []
    assert numbers == [3, 4]
    assert [(t.name, t.type, t.path, t.limit) for t in parsed] == [
        ("a", "math", "/data/a.jsonl", None),
        ("b", "exact_match", "/data/with space/b.jsonl", 5),
    ]


# --- list ------------------------------------------------------------------------------------
def test_the_list_shows_the_labs_suites_with_their_file_status(
    suite: EvalSuite, charlie: User, tmp_path: Path
) -> None:
    EvalSuite.objects.create(lab=charlie.labs.get(), owner=charlie, name="secret", tasks=[])

    html = logged_in(suite.owner).get(reverse("registry:suite_list")).content.decode()

    assert 'data-suite="synthetic"' in html
    assert "secret" not in html
    assert "6 tasks" in html
    for name in SYNTHETIC_TASKS:
        assert name in html
    assert "all 6 files readable" in html
    assert "the trainer&#x27;s own" in html
    assert 'data-testid="suite-edit"' in html
    assert reverse("registry:suite_detail", args=[suite.pk]) in html


def test_labmates_see_but_cannot_edit_suites(suite: EvalSuite, bob: User) -> None:
    html = logged_in(bob).get(reverse("registry:suite_list")).content.decode()

    assert 'data-suite="synthetic"' in html
    assert 'data-testid="suite-edit"' not in html


def test_the_empty_list_says_how_to_make_a_suite(lab: Lab, alice: User) -> None:
    html = logged_in(alice).get(reverse("registry:suite_list")).content.decode()

    assert 'data-testid="suite-empty"' in html
    assert "python -m trainer eval-suite synthetic --out DIR" in html
    assert "suite file" in html


def test_the_nav_links_to_the_suites(lab: Lab, alice: User) -> None:
    html = logged_in(alice).get(reverse("registry:model_list")).content.decode()

    assert f'href="{reverse("registry:suite_list")}"' in html


def test_anonymous_users_are_sent_to_login(client: Client, suite: EvalSuite) -> None:
    for url in (
        reverse("registry:suite_list"),
        reverse("registry:suite_create"),
        reverse("registry:suite_detail", args=[suite.pk]),
        reverse("registry:suite_edit", args=[suite.pk]),
        reverse("registry:suite_delete", args=[suite.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


# --- create ----------------------------------------------------------------------------------
def test_it_creates_a_suite_from_the_textarea_with_csrf(
    lab: Lab, alice: User, suite_json: Path
) -> None:
    client = logged_in(alice, csrf=True)
    url = reverse("registry:suite_create")
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(url).content)
    assert token
    directory = suite_json.parent
    text = (
        "\n# two of the synthetic tasks\n\n"
        f"add math {directory / 'arith-addition.jsonl'} 5\n"
        f"   larger   multiple_choice\t{directory / 'larger.jsonl'}   # log-likelihood\n"
    )

    response = client.post(
        url,
        suite_data(
            name="small",
            description="two tasks",
            tasks=text,
            csrfmiddlewaretoken=token.group(1).decode(),
        ),
    )

    assert response.status_code == 302
    assert response["Location"] == reverse("registry:suite_list")
    suite = EvalSuite.objects.get()
    assert (suite.lab, suite.owner, suite.name, suite.description) == (
        lab,
        alice,
        "small",
        "two tasks",
    )
    assert suite.tasks == [
        {
            "name": "add",
            "type": "math",
            "path": str(directory / "arith-addition.jsonl"),
            "limit": 5,
        },
        {
            "name": "larger",
            "type": "multiple_choice",
            "path": str(directory / "larger.jsonl"),
            "limit": None,
        },
    ]
    # The stored JSON is a suite the trainer reads as it is.
    assert SuiteConfig.from_dict(suite.config).task("add").limit == 5


def test_a_post_without_csrf_is_refused(lab: Lab, alice: User, suite_json: Path) -> None:
    response = logged_in(alice, csrf=True).post(
        reverse("registry:suite_create"),
        suite_data(tasks=lines_of(suite_json.parent, "larger")),
    )

    assert response.status_code == 403
    assert not EvalSuite.objects.exists()


def test_it_creates_a_suite_from_a_suite_file(lab: Lab, alice: User, suite_json: Path) -> None:
    response = create(alice, name="", suite_file=str(suite_json), tasks="ignored text")

    assert response.status_code == 302
    suite = EvalSuite.objects.get()
    assert suite.name == "synthetic"  # the file's name, the form's name being blank
    assert [task["name"] for task in suite.tasks] == SYNTHETIC_TASKS
    assert suite.tasks[4] == {
        "name": "larger",
        "type": "multiple_choice",
        "path": str(suite_json.parent / "larger.jsonl"),
        "limit": None,
    }


def test_a_suite_directory_reads_its_suite_json(lab: Lab, alice: User, suite_json: Path) -> None:
    response = create(alice, name="from-dir", suite_file=str(suite_json.parent))

    assert response.status_code == 302
    suite = EvalSuite.objects.get()
    assert suite.name == "from-dir"
    assert len(suite.tasks) == 6


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        (
            "larger essay {dir}/larger.jsonl",
            "line 2 (larger): unknown task type 'essay'; use one of math, multiple_choice, "
            "exact_match",
        ),
        (
            "larger multiple_choice {dir}/nope.jsonl",
            "line 2 (larger): {dir}/nope.jsonl: not a task file this deployment can read",
        ),
        (
            "larger multiple_choice larger.jsonl",
            "line 2 (larger): larger.jsonl is a relative path; give the absolute path of the "
            "file on the server",
        ),
        (
            "larger multiple_choice {dir}/broken.jsonl",
            "line 2 (larger): {dir}/broken.jsonl, row 1: not valid JSON",
        ),
        (
            "larger multiple_choice {dir}/word-problems.jsonl",  # no choices in its rows
            "line 2 (larger): {dir}/word-problems.jsonl, row 1",
        ),
        (
            "arith-addition math {dir}/larger.jsonl",
            "line 2 (arith-addition): duplicate task name 'arith-addition' (also line 1)",
        ),
        (
            "larger multiple_choice {dir}/larger.txt",
            "line 2 (larger): '{dir}/larger.txt' has suffix '.txt'",
        ),
        (
            "larger multiple_choice {dir}/larger.jsonl 0",
            "line 2 (larger): limit must be >= 1; got 0",
        ),
        (
            "larger multiple_choice {dir}/larger.jsonl ten",
            "line 2: the limit 'ten' is not a whole number",
        ),
        ("larger multiple_choice", "line 2: expected `name type path [limit]`, got 2 fields"),
        (
            "bad/name math {dir}/larger.jsonl",
            "line 2 (bad/name): 'bad/name' is not a valid task name",
        ),
        ('larger math "{dir}/larger.jsonl', "line 2: No closing quotation"),
    ],
)
def test_bad_task_lines_get_messages_and_keep_the_input(
    lab: Lab, alice: User, suite_json: Path, line: str, fragment: str
) -> None:
    directory = suite_json.parent
    (directory / "broken.jsonl").write_text("{not json\n")
    text = f"arith-addition math {directory}/arith-addition.jsonl\n{line.format(dir=directory)}\n"

    response = create(alice, tasks=text, description="keep me")

    assert response.status_code == 200
    messages = errors(response, "tasks")
    assert any(fragment.format(dir=directory) in message for message in messages), messages
    form = response.context["form"]
    assert form["tasks"].value() == text
    assert form["description"].value() == "keep me"
    assert 'data-testid="error-tasks"' in response.content.decode()
    assert not EvalSuite.objects.exists()


def test_every_bad_line_is_reported(lab: Lab, alice: User, suite_json: Path) -> None:
    directory = suite_json.parent
    text = (
        "\n"  # the lines count from the first, blank or not
        f"a math {directory}/arith-addition.jsonl\n"
        f"b math {directory}/missing-1.jsonl\n"
        f"c essay {directory}/larger.jsonl\n"
        f"d math {directory}/missing-2.jsonl\n"
        "e math\n"
    )

    messages = errors(create(alice, tasks=text), "tasks")

    assert messages == [
        f"line 3 (b): {directory}/missing-1.jsonl: {UNAVAILABLE}",
        "line 4 (c): unknown task type 'essay'; use one of math, multiple_choice, exact_match",
        f"line 5 (d): {directory}/missing-2.jsonl: {UNAVAILABLE}",
        "line 6: expected `name type path [limit]`, got 2 fields ('e math')",
    ]


def test_no_tasks_at_all_is_refused(lab: Lab, alice: User) -> None:
    response = create(alice, tasks="# only a comment\n\n")

    assert response.status_code == 200
    assert "a suite needs at least one task" in errors(response, "tasks")[0]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("", "give the suite a name"), ("bad name!", "is not a valid name")],
)
def test_a_bad_name_is_refused(
    lab: Lab, alice: User, suite_json: Path, name: str, fragment: str
) -> None:
    response = create(alice, name=name, tasks=lines_of(suite_json.parent, "larger"))

    assert response.status_code == 200
    assert fragment in errors(response, "name")[0]
    assert errors(response, "tasks") == []


def test_names_are_unique_per_lab(suite: EvalSuite, charlie: User, suite_json: Path) -> None:
    tasks = lines_of(suite_json.parent, "larger")
    response = create(suite.owner, name="synthetic", tasks=tasks)

    assert response.status_code == 200
    assert "the lab already has a suite named 'synthetic'" in errors(response, "name")[0]
    assert response.context["form"]["tasks"].value() == tasks

    # Another lab may use the same name.
    assert create(charlie, name="synthetic", tasks=tasks).status_code == 302
    assert EvalSuite.objects.filter(name="synthetic").count() == 2


def test_a_suite_files_name_clashing_is_refused_too(suite: EvalSuite, suite_json: Path) -> None:
    response = create(suite.owner, name="", suite_file=str(suite_json))

    assert "already has a suite named 'synthetic'" in errors(response, "name")[0]


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda d: "synthetic/suite.json", "is a relative path; give the absolute path"),
        (lambda d: str(d / "none.json"), "none.json: not a suite JSON this deployment can read"),
        (lambda d: str(d.parent), "is a directory without a suite.json"),
        (
            lambda d: _write(d / "bad.json", "{oops"),
            "bad.json: is not valid JSON (line 1, column 2)",
        ),
        (
            lambda d: _write(
                d / "typed.json",
                json.dumps(
                    {"name": "s", "tasks": [{"name": "t", "type": "essay", "path": "x.jsonl"}]}
                ),
            ),
            "typed.json: tasks[0].type: expected one of math, multiple_choice, exact_match",
        ),
        (lambda d: _write(d / "list.json", "[]"), "must be a JSON object"),
    ],
)
def test_a_bad_suite_file_gets_a_message(
    lab: Lab, alice: User, suite_json: Path, make: Any, fragment: str, settings: Any
) -> None:
    # A declared data directory: parse errors say where (outside one they say only "not a
    # suite file": tests/webapp/core/test_hostile_server_files.py).
    settings.TASK_DATA_DIRS = [str(suite_json.parent.parent)]
    typed = "larger multiple_choice /typed/by/hand.jsonl"
    value = make(suite_json.parent)

    response = create(alice, suite_file=value, tasks=typed)

    assert response.status_code == 200
    assert any(fragment in message for message in errors(response, "suite_file"))
    form = response.context["form"]
    assert (form["suite_file"].value(), form["tasks"].value()) == (value, typed)
    assert not EvalSuite.objects.exists()


def test_a_suite_file_with_a_missing_task_file_fills_the_textarea(
    lab: Lab, alice: User, suite_json: Path
) -> None:
    (suite_json.parent / "larger.jsonl").unlink()

    response = create(alice, name="", suite_file=str(suite_json), tasks="")

    assert response.status_code == 200
    assert errors(response, "tasks") == [
        f"line 5 (larger): {suite_json.parent / 'larger.jsonl'}: {UNAVAILABLE}"
    ]
    text = response.context["form"]["tasks"].value()
    assert text.splitlines()[4] == f"larger multiple_choice {suite_json.parent / 'larger.jsonl'}"
    assert str(suite_json.parent / "arith-addition.jsonl") in response.content.decode()


# --- detail ----------------------------------------------------------------------------------
def test_the_detail_page_shows_tasks_checks_json_and_evaluations(
    suite: EvalSuite, run: Run
) -> None:
    Evaluation.objects.create(
        run=run, suite=suite, suite_config=suite.config, owner=suite.owner, state="completed"
    )

    response = logged_in(suite.owner).get(reverse("registry:suite_detail", args=[suite.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('data-testid="task-row"') == 6
    assert "multiple_choice" in html and "exact_match" in html
    assert str(Path(suite.tasks[4]["path"])) in html
    assert "8 items" in html
    assert "all 6 files readable" in html
    assert json.loads(response.context["config_json"]) == suite.config
    assert 'data-testid="suite-json"' in html
    assert html.count('data-testid="evaluation-row"') == 1
    assert run.get_absolute_url() in html
    assert "state-completed" in html


def test_a_file_deleted_after_saving_shows_as_a_problem(suite: EvalSuite, bob: User) -> None:
    missing = Path(suite.tasks[4]["path"])
    missing.unlink()
    client = logged_in(bob)

    listing = client.get(reverse("registry:suite_list")).content.decode()
    detail = client.get(reverse("registry:suite_detail", args=[suite.pk])).content.decode()

    assert "1 problem" in listing
    assert 'data-status="problems"' in listing
    assert "all 6 files readable" not in listing
    assert f"{missing}: not a task file this deployment can read" in detail
    assert "1 problem" in detail


def test_a_file_that_stops_parsing_shows_as_a_problem(suite: EvalSuite) -> None:
    Path(suite.tasks[0]["path"]).write_text("garbage\n")

    detail = logged_in(suite.owner).get(reverse("registry:suite_detail", args=[suite.pk]))

    assert "not valid JSON" in detail.content.decode()
    assert "does not parse" in detail.content.decode()


# --- permissions, edit, delete ---------------------------------------------------------------
def test_an_outsider_gets_not_found(suite: EvalSuite, charlie: User) -> None:
    client = logged_in(charlie)

    assert client.get(reverse("registry:suite_detail", args=[suite.pk])).status_code == 404
    assert client.get(reverse("registry:suite_edit", args=[suite.pk])).status_code == 404
    assert client.post(reverse("registry:suite_delete", args=[suite.pk])).status_code == 404
    assert EvalSuite.objects.filter(pk=suite.pk).exists()


def test_a_labmate_sees_but_cannot_edit_or_delete(suite: EvalSuite, bob: User) -> None:
    client = logged_in(bob)

    detail = client.get(reverse("registry:suite_detail", args=[suite.pk]))
    assert detail.status_code == 200
    assert 'data-testid="suite-edit"' not in detail.content.decode()
    assert client.get(reverse("registry:suite_edit", args=[suite.pk])).status_code == 403
    edit = client.post(reverse("registry:suite_edit", args=[suite.pk]), suite_data())
    assert edit.status_code == 403
    assert client.post(reverse("registry:suite_delete", args=[suite.pk])).status_code == 403
    assert EvalSuite.objects.get(pk=suite.pk).name == "synthetic"


def test_staff_may_edit_anyones_suite(suite: EvalSuite) -> None:
    admin = User.objects.create_user("admin", password="x", is_staff=True)

    assert logged_in(admin).get(reverse("registry:suite_edit", args=[suite.pk])).status_code == 200


def test_the_owner_edits_a_suite(suite: EvalSuite) -> None:
    url = reverse("registry:suite_edit", args=[suite.pk])
    client = logged_in(suite.owner)
    form = client.get(url).context["form"]
    text = form["tasks"].value()
    assert text.splitlines()[4] == f"larger multiple_choice {suite.tasks[4]['path']}"

    kept = "\n".join(text.splitlines()[:2]) + "\n"
    response = client.post(
        url,
        suite_data(
            name="synthetic", description="two left", tasks=kept + text.splitlines()[4] + " 3"
        ),
    )

    assert response.status_code == 302
    assert response["Location"] == suite.get_absolute_url()
    suite.refresh_from_db()
    assert suite.description == "two left"
    assert [(t["name"], t["limit"]) for t in suite.tasks] == [
        ("arith-addition", None),
        ("arith-subtraction", None),
        ("larger", 3),
    ]


def test_the_delete_page_says_who_evaluates_with_it_then_deletes(
    suite: EvalSuite, run: Run
) -> None:
    experiment = run.experiment
    experiment.auto_eval_suite = suite
    experiment.save()
    evaluation = Evaluation.objects.create(
        run=run, suite=suite, suite_config=suite.config, owner=suite.owner
    )
    client = logged_in(suite.owner, csrf=True)
    url = reverse("registry:suite_delete", args=[suite.pk])

    page = client.get(url)
    html = page.content.decode()
    assert "1 experiment evaluates with it automatically" in html
    assert "Its evaluation keeps its results" in html
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.content)
    assert token
    assert client.post(url).status_code == 403  # no token
    response = client.post(url, {"csrfmiddlewaretoken": token.group(1).decode()})

    assert response.status_code == 302
    assert response["Location"] == reverse("registry:suite_list")
    assert not EvalSuite.objects.exists()
    evaluation.refresh_from_db()
    experiment.refresh_from_db()
    assert (evaluation.suite, experiment.auto_eval_suite) == (None, None)
    assert evaluation.suite_name == "synthetic"


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- bad input: never a 500 ---------------------------------------------------------------
@pytest.mark.parametrize("kind", VALUES)
def test_bad_values_in_any_field_get_a_page_not_a_500(
    lab: Lab, alice: User, suite_json: Path, kind: str
) -> None:
    value = VALUES[kind]
    good = lines_of(suite_json.parent, "larger")
    path = suite_json.parent / "larger.jsonl"
    attempts = [
        {"name": value, "tasks": good},
        {"description": value, "tasks": good},
        {"suite_file": value},
        {"tasks": value},
        {"tasks": f"{value} multiple_choice {path}"},
        {"tasks": f"larger {value} {path}"},
        {"tasks": f"larger multiple_choice {value}"},
        {"tasks": f"larger multiple_choice /{value}.jsonl"},
        {"tasks": f"larger multiple_choice {path} {value}"},
    ]
    client = logged_in(alice)
    for data in attempts:
        response = client.post(reverse("registry:suite_create"), suite_data(**data))
        assert_escaped(response)
        if response.status_code == 302:
            assert_escaped(client.get(response["Location"]))
            EvalSuite.objects.all().delete()
            continue
        assert response.status_code == 200, (data, kind)
        assert response.context["form"].errors, (data, kind)
        assert not EvalSuite.objects.exists()
