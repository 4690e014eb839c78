"""The trainer is a library that runs on Slurm nodes without the web app."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TRAINER = Path(__file__).resolve().parents[3] / "trainer"


def test_trainer_imports_without_django_loaded() -> None:
    code = "import sys, trainer; assert 'django' not in sys.modules, 'trainer imported django'"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(TRAINER.parent)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_no_trainer_module_imports_django_or_the_web_app() -> None:
    offenders = []
    for path in TRAINER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path}:{node.lineno} imports {name}"
                for name in names
                if name.split(".")[0] in {"django", "webapp", "scheduler", "celery"}
            ]
    assert offenders == []
