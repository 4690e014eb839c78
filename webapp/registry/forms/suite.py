"""The evaluation-suite registry's form: a name, a description and the tasks.

The tasks are a textarea, one task per line (``name type path [limit]``, whitespace
separated, quotes for a path with spaces; blank lines and ``#`` comments ignored), or a
suite JSON on the server (what ``python -m trainer eval-suite synthetic --out DIR``
writes as ``DIR/suite.json``), whose tasks then replace the textarea's. Validation builds
the trainer's :class:`~trainer.evals.suite.SuiteConfig` (all its rules and messages, a
task's put on its line: "line 2 (larger): unknown task type ...") and reads every file
(:mod:`webapp.registry.suite_checks`), so a saved suite is one the evaluation job
can run.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from trainer.config import ConfigError
from trainer.evals.suite import TASK_TYPES, EvalTask, SuiteConfig
from trainer.evals.synthetic import SUITE_FILE
from trainer.tasks.loaders import DATA_SUFFIXES
from webapp.core.configform import tag_fields
from webapp.core.digits import ascii_int
from webapp.core.models import Lab
from webapp.core.server_files import SUITE_FILE as SUITE_FILE_KIND
from webapp.core.server_files import ServerFileError, data_policy, read_bytes
from webapp.registry.forms.common import check_name
from webapp.registry.models import EvalSuite
from webapp.registry.suite_checks import TaskCheck, check_suite

LINE_FORMAT = "name type path [limit]"
TASK_KEY = re.compile(r"^tasks\[(\d+)\]\.(\w+)$")
TASK_REF = re.compile(r"\btasks\[(\d+)\]")
SUITE_FILE_SECONDS = 2.0
MAX_TASKS = 200
PLACEHOLDER_NAME = "suite"  # validates the tasks while the name is missing or invalid


def task_lines(tasks: list[dict[str, Any]]) -> str:
    """The textarea's text for stored tasks (paths quoted when they need it)."""
    lines = []
    for task in tasks:
        parts = [str(task.get("name", "")), str(task.get("type", "")), str(task.get("path", ""))]
        if task.get("limit") is not None:
            parts.append(str(task["limit"]))
        lines.append(" ".join(shlex.quote(part) for part in parts))
    return "\n".join(lines)


def parse_task_lines(text: str) -> tuple[list[EvalTask], list[int], list[tuple[int, str]]]:
    """The tasks of the textarea, the 1-based line of each, and the syntax errors (line,
    message) of the lines that are not tasks."""
    tasks: list[EvalTask] = []
    numbers: list[int] = []
    errors: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError as exc:
            errors.append((number, f'line {number}: {exc} (quote a path with spaces in "...")'))
            continue
        comment = next((i for i, word in enumerate(words) if word.startswith("#")), None)
        if comment is not None:
            words = words[:comment]
        if len(words) not in (3, 4):
            errors.append(
                (
                    number,
                    f"line {number}: expected `{LINE_FORMAT}`, got {len(words)} "
                    f"field{'' if len(words) == 1 else 's'} ({' '.join(words)!r})",
                )
            )
            continue
        limit: int | None = None
        if len(words) == 4:
            limit = ascii_int(words[3], max_digits=9)
            if limit is None:
                errors.append(
                    (
                        number,
                        f"line {number}: the limit {words[3]!r} is not a whole number (how "
                        "many items to score; leave it out to score all)",
                    )
                )
                continue
        tasks.append(EvalTask(name=words[0], type=words[1], path=words[2], limit=limit))
        numbers.append(number)
    return tasks, numbers, errors


SUITE_FIELD = re.compile(r"^(name|tasks)$|^tasks\[(\d+)\](?:\.(name|type|path|limit))?$")
SUITE_FIELD_RULES = {
    "name": "expected the suite's name: 1-64 letters, digits, '_', '.' or '-'",
    "tasks": "expected a non-empty list of task objects",
    "task": "expected an object with name, type, path and (optional) limit",
    "task.name": "expected a task name of 1-64 letters, digits, '_', '.' or '-', unique "
    "in the suite",
    "task.type": f"expected one of {', '.join(TASK_TYPES)}",
    "task.path": f"expected the path of a file ending in {', '.join(DATA_SUFFIXES)}",
    "task.limit": "expected a whole number of at least 1, or no limit",
}
"""What each field of a suite JSON must be: a suite file's problems are said with these,
never with what the file holds (it may be a file the user is not meant to see)."""


NOT_A_SUITE_FILE = "is not a suite file (a JSON object with name and tasks)"


def suite_file_problems(
    content: bytes, *, in_data_dir: bool
) -> tuple[list[str], SuiteConfig | None]:
    """The suite in a suite file's ``content``, or what is wrong with it: each problem
    names a place (``tasks[2].type``) and what belongs there, never a value or a key
    read from the file.

    Where the file lies in a data directory the deployment declared (``in_data_dir``),
    a parse error says where (line, column): the file is one users are meant to read.
    Elsewhere (no data directories set: any readable file may be named) every file that
    is no JSON object is :data:`NOT_A_SUITE_FILE` alone: a position or the kind of
    error would tell how long the file's JSON-looking start is, or its encoding."""
    try:
        data = json.loads(content.decode("utf-8"))
    except UnicodeDecodeError:
        return [_parse_problem("is not UTF-8 text, so not a suite JSON", in_data_dir)], None
    except json.JSONDecodeError as exc:
        where = f"is not valid JSON (line {exc.lineno}, column {exc.colno})"
        return [_parse_problem(where, in_data_dir)], None
    except RecursionError:
        return [_parse_problem("nests too deeply to be a suite JSON", in_data_dir)], None
    if not isinstance(data, dict):
        return [_parse_problem("must be a JSON object with name and tasks", in_data_dir)], None
    try:
        return [], SuiteConfig.from_dict(data)
    except ConfigError as exc:
        problems = sorted({_suite_file_problem(key) for key in exc.errors})
        return problems, None


def _parse_problem(problem: str, in_data_dir: bool) -> str:
    return problem if in_data_dir else NOT_A_SUITE_FILE


def _suite_file_problem(key: str) -> str:
    match = SUITE_FIELD.match(key)
    if match is None:
        task = re.match(r"^(tasks\[\d+\])\.", key)
        if task:
            return f"{task[1]}: has a field that is not a task field (name, type, path, limit)"
        return "has a field that is not a suite field (a suite JSON has name and tasks)"
    if match[1]:
        return f"{key}: {SUITE_FIELD_RULES[match[1]]}"
    rule = SUITE_FIELD_RULES["task." + match[3] if match[3] else "task"]
    return f"{key}: {rule}"


def _line_label(number: int, task: EvalTask) -> str:
    return f"line {number} ({task.name})" if task.name else f"line {number}"


class SuiteForm(forms.Form):
    """A suite of the lab: name unique in the lab, tasks the trainer accepts, files that
    exist and parse. ``cleaned_data``: name, description, tasks (the stored JSON list)."""

    use_required_attribute = False

    name = forms.CharField(
        max_length=64,
        required=False,
        help_text="1-64 letters, digits, '_', '.' or '-'; the <suite> of the metric keys "
        "eval/<suite>/<task>/accuracy. Blank with a suite file: the file's name",
    )
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), label="Description"
    )
    suite_file = forms.CharField(
        max_length=1000,
        required=False,
        label="Suite file",
        help_text="Optional: the absolute path of a suite JSON on the server (e.g. DIR/"
        "suite.json from `python -m trainer eval-suite synthetic --out DIR`, or DIR "
        "itself). Its tasks replace the lines below, its relative paths read against its "
        "directory",
    )
    tasks = forms.CharField(
        required=False,
        strip=False,  # the line numbers of the messages count the leading blank lines
        widget=forms.Textarea(
            attrs={
                "rows": 8,
                "spellcheck": "false",
                "placeholder": "# name type path [limit]\n"
                "arith-addition math /data/evals/arith-addition.jsonl\n"
                "larger multiple_choice /data/evals/larger.jsonl 100",
            }
        ),
        label="Tasks",
        help_text=f"One task per line: `{LINE_FORMAT}`, separated by spaces; type is one of "
        f"{', '.join(TASK_TYPES)}; path is the absolute path of a .jsonl or .parquet file on "
        "the server; limit (optional) scores only the first N items. Blank lines and # "
        "comments are ignored",
    )

    def __init__(self, *args: Any, lab: Lab, instance: EvalSuite | None = None, **kwargs: Any):
        if instance is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                "name": instance.name,
                "description": instance.description,
                "tasks": task_lines(list(instance.tasks)),
            }
        super().__init__(*args, **kwargs)
        self.lab = lab
        self.instance = instance
        self.file_suite: SuiteConfig | None = None
        self.checks: list[TaskCheck] = []
        """The file checks of the tasks (after validation; some may be pending)."""
        tag_fields(self, raw_labels=False)

    # --- fields -------------------------------------------------------------------------
    def clean_name(self) -> str:
        name = self.cleaned_data.get("name", "").strip()
        if name:
            check_name(name)
        return name

    def clean_description(self) -> str:
        return self.cleaned_data.get("description", "").strip()

    def clean_suite_file(self) -> str:
        value = self.cleaned_data.get("suite_file", "").strip()
        if not value:
            return value
        policy = data_policy()
        try:
            located, content = read_bytes(
                value,
                SUITE_FILE_KIND,
                policy,
                timeout_s=SUITE_FILE_SECONDS,
                directory_file=SUITE_FILE,
            )
        except ServerFileError as exc:
            raise ValidationError(exc.message, code=exc.code) from None
        # read_bytes read it from inside a root, if the deployment lists any.
        problems, suite = suite_file_problems(content, in_data_dir=bool(policy.roots))
        if suite is None:
            raise ValidationError(
                [ValidationError(f"{value}: {problem}") for problem in problems],
                code="invalid_suite",
            )
        self.file_suite = suite.resolved(Path(located.real).parent)
        # The file's tasks replace the textarea's, also on the page shown again.
        data = self.data.copy()
        data[self.add_prefix("tasks")] = task_lines([asdict(t) for t in self.file_suite.tasks])
        self.data = data
        self.cleaned_data["tasks"] = data[self.add_prefix("tasks")]
        return value

    # --- the whole suite ----------------------------------------------------------------
    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.has_error("suite_file"):
            return cleaned
        name = cleaned.get("name", "")
        if not name and self.file_suite is not None and not self.has_error("name"):
            name = self.file_suite.name
            cleaned["name"] = name
        if not name and not self.has_error("name"):
            self.add_error("name", ValidationError("give the suite a name", code="required"))
        if name and not self.has_error("name"):
            self._check_unique(name)

        tasks, numbers, syntax_errors = parse_task_lines(cleaned.get("tasks", ""))
        if len(tasks) > MAX_TASKS:
            self.add_error(
                "tasks", f"{len(tasks)} tasks; a suite has at most {MAX_TASKS} (split it in two)"
            )
            return cleaned
        if not tasks and not syntax_errors:
            self.add_error(
                "tasks",
                ValidationError(
                    f"a suite needs at least one task: write one per line, `{LINE_FORMAT}`, "
                    "or give a suite file",
                    code="required",
                ),
            )
            return cleaned
        problems = list(syntax_errors)  # (line, message), reported in line order
        if tasks:
            suite_name = name if name and not self.has_error("name") else PLACEHOLDER_NAME
            config_problems, unreadable = self._config_problems(suite_name, tasks, numbers)
            problems += config_problems
            self.checks = check_suite(tasks)
            for task, number, check in zip(tasks, numbers, self.checks, strict=True):
                if number not in unreadable and not check.ok:
                    problems.append((number, f"{_line_label(number, task)}: {check.error}"))
        for _, message in sorted(problems, key=lambda problem: problem[0]):
            self.add_error("tasks", message)
        if not self.has_error("tasks"):
            cleaned["tasks"] = [asdict(task) for task in tasks]
        return cleaned

    def _check_unique(self, name: str) -> None:
        clash = EvalSuite.objects.filter(lab=self.lab, name=name)
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if clash.exists():
            self.add_error(
                "name",
                ValidationError(
                    f"the lab already has a suite named {name!r}; choose another name",
                    code="duplicate",
                ),
            )

    def _config_problems(
        self, name: str, tasks: list[EvalTask], numbers: list[int]
    ) -> tuple[list[tuple[int, str]], set[int]]:
        """The trainer's rules (:class:`SuiteConfig`), each task's problem on its line
        ("line 2 (larger): unknown task type ..."), the suite's name's on the name field;
        and the lines whose path or type is wrong (their files are not read)."""
        try:
            SuiteConfig(name=name, tasks=tasks)
        except ConfigError as exc:
            problems: list[tuple[int, str]] = []
            unreadable: set[int] = set()
            for key, message in exc.errors.items():
                match = TASK_KEY.match(key)
                if match and int(match.group(1)) < len(tasks):
                    index = int(match.group(1))
                    if match.group(2) in ("path", "type"):
                        unreadable.add(numbers[index])
                    text = TASK_REF.sub(lambda ref: f"line {numbers[int(ref[1])]}", message)
                    label = _line_label(numbers[index], tasks[index])
                    problems.append((numbers[index], f"{label}: {text}"))
                elif key == "name":
                    if not self.has_error("name"):
                        self.add_error("name", message)
                else:
                    self.add_error("tasks" if key.startswith("tasks") else None, message)
            return problems, unreadable
        return [], set()


__all__ = ["LINE_FORMAT", "SuiteForm", "parse_task_lines", "task_lines"]
