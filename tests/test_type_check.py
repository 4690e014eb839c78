"""The type checker: mypy, configured by ``[tool.mypy]`` in pyproject.toml (the checked
files, the strictness), finds no error; and it does report one, so the check can fail.

``make test`` runs ``.venv/bin/mypy`` next to ruff (scripts/test) before the suite; this
test runs it again through its API, on the warm cache (``.mypy_cache``: a cold run takes
about a minute, a warm one seconds). It needs no database, broker or browser.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parents[1]
WRONG = """\
def f(x: int) -> str:
    return x


def g(x):
    return x
"""


def test_the_checked_files_have_no_type_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # mypy reads pyproject.toml (its `files`) from here
    stdout, stderr, status = api.run([])
    assert status == 0, f"mypy (run `.venv/bin/mypy` to see the same):\n{stdout}{stderr}"
    assert stdout.startswith("Success: no issues found in ")


def test_a_wrong_type_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's settings apply (an untyped def is an error too) and mypy fails on a
    return of the wrong type: the test above can fail."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG)
    monkeypatch.chdir(tmp_path)
    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            str(wrong),
        ]
    )
    assert status == 1, stdout + stderr
    assert 'wrong.py:2: error: Incompatible return value type (got "int", expected "str")' in (
        stdout
    )
    assert "wrong.py:5: error: Function is missing a type annotation" in stdout
    assert "Found 2 errors in 1 file" in stdout
