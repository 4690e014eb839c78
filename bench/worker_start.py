"""How a CPU run starts its workers: forked from the launcher or spawned afresh (issue 35).

    PYTHONPATH=. .venv/bin/python bench/worker_start.py [--reps 3] [--steps 2]
        [--config examples/sgt.json]

Runs ``python -m trainer run`` on a tiny-zoo config (3 policies, 3 tokenizers) for
``--steps`` steps, ``--reps`` times each way, alternating: ``fork`` is what the launcher
does for a CPU job (the workers share its imports of torch and transformers), ``spawn``
what it did before (each worker imports them afresh; forced here by replacing
``trainer.run.worker_start_method`` in the launcher's process). For each run: the wall
time and the CPU seconds of the launcher and its workers (``resource.RUSAGE_CHILDREN``).
Checks that both ways log the same metrics (every key but timings). Prints markdown for
bench/RESULTS.md. The suite starts a few hundred such runs, so this is most of what the
change saved there.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from trainer import metrics as m  # noqa: E402
from trainer.spool import decode_value, read_points  # noqa: E402
from trainer.zoo import build_zoo, default_zoo_dir  # noqa: E402

SPAWNING = (
    "import sys, trainer.run as run; run.worker_start_method = lambda env: 'spawn'; "
    "from trainer.cli import main; sys.exit(main(sys.argv[1:]))"
)


def one_run(
    way: str, config: Path, steps: int, zoo_dir: Path, run_dir: Path
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the launcher and its workers) of one run."""
    head = [sys.executable, "-m", "trainer"] if way == "fork" else [sys.executable, "-c", SPAWNING]
    command = [*head, "run", "--config", str(config), "--run-dir", str(run_dir)]
    command += ["--steps", str(steps)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def series(run_dir: Path) -> dict[tuple[str, str, int], str]:
    return {
        (p["policy"], p["key"], p["step"]): repr(decode_value(p["value"]))
        for p in read_points(run_dir)
        if p["key"] not in m.TIMING_KEYS
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--config", type=Path, default=REPO / "examples" / "sgt.json")
    args = parser.parse_args()
    zoo_dir = Path(os.environ.get("MRL_ZOO_DIR") or default_zoo_dir())
    build_zoo(zoo_dir, seed=0)
    config = json.loads(args.config.read_text())
    results: dict[str, list[tuple[float, float]]] = {"spawn": [], "fork": []}
    with tempfile.TemporaryDirectory(prefix="mrl-worker-start-") as tmp:
        for rep in range(args.reps):
            for way in ("spawn", "fork"):
                run_dir = Path(tmp) / f"{way}-{rep}"
                results[way].append(one_run(way, args.config, args.steps, zoo_dir, run_dir))
                print(f"{way} {rep}: {results[way][-1][0]:.2f} s wall, "
                      f"{results[way][-1][1]:.2f} CPU-s", flush=True)  # fmt: skip
        same = series(Path(tmp) / "spawn-0") == series(Path(tmp) / "fork-0")
    load = os.getloadavg()[0]
    print(f"\n{args.config.name}: {len(config['pool'])} policies, {args.steps} steps, "
          f"median of {args.reps}; load {load:.2f} at the end\n")  # fmt: skip
    print("| workers | wall s | CPU s (launcher + workers) |")
    print("| --- | ---: | ---: |")
    for way, rows in results.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        print(f"| {way} | {wall:.2f} | {cpu:.2f} |")
    print(f"\nthe same metrics both ways: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
