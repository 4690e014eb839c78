"""Time a fresh-clone ``make demo``: venv, first page, runs launched, first live point, done.

Run beside the demo, started at the same moment::

    git clone <repo> /tmp/demo_clone && cd /tmp/demo_clone
    t0=$(date +%s.%N); (PORT=8011 make demo > /tmp/demo.log 2>&1 &)
    python bench/demo_first_minutes.py /tmp/demo_clone 8011 "$t0"

It polls each second: ``var/`` appearing (the venv is ready: scripts/demo creates it
next), the SQLite database, ``GET /accounts/login/`` answering 200, the demo's runs in
the database, the first stored metric point, and both runs ended; each line is seconds
since ``t0``. Results: bench/RESULTS.md, "The first ten minutes of make demo".
"""

from __future__ import annotations

import sqlite3
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

TERMINAL = ("completed", "failed", "cancelled")


def main(root: Path, port: str, started: float, budget_s: float = 1500.0) -> None:
    database = root / "var" / "demo.sqlite3"
    marks: dict[str, float] = {}

    def mark(name: str) -> None:
        if name not in marks:
            marks[name] = time.time() - started
            print(f"{name}: {marks[name]:.0f} s", flush=True)

    while time.time() - started < budget_s:
        if (root / "var").is_dir():
            mark("venv ready (var/ created)")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=2):
                mark("first page")
        except OSError:
            pass
        if database.exists() and _demo_done(database, mark):
            return
        time.sleep(1)


def _demo_done(database: Path, mark: Callable[[str], None]) -> bool:
    try:
        db = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return False
    try:
        tables = {row[0] for row in db.execute("select name from sqlite_master")}
        if (
            "experiments_metricpoint" in tables
            and db.execute("select 1 from experiments_metricpoint limit 1").fetchone()
        ):
            mark("first live point")
        if "experiments_run" not in tables:
            return False
        states = [row[0] for row in db.execute("select state from experiments_run")]
        if states:
            mark("runs launched")
        if len(states) >= 2 and all(state in TERMINAL for state in states):
            mark("demo runs done: " + ", ".join(states))
            return True
    except sqlite3.Error:
        pass
    finally:
        db.close()
    return False


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
