"""A real checkpoint for the evaluation tests: a short ``python -m trainer run`` of the
standalone example's two tiny zoo policies (different tokenizers), as a job writes one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
POLICIES = ("llama-char", "gpt2-unigram")
STEPS = 2


def trained_run(
    zoo_dir: Path, run_dir: Path, *, steps: int = STEPS, checkpoint_every: int | None = None
) -> Path:
    """Train the standalone pool for ``steps`` small steps into ``run_dir``, with a
    checkpoint every ``checkpoint_every`` (default: at the end only); the directory of
    its last checkpoint (``checkpoints/step_000002`` by default)."""
    data = json.loads((REPO / "examples/standalone.json").read_text())
    every = checkpoint_every or steps
    data.update(steps=steps, prompts_per_step=4, val_every=steps, checkpoint_every=every)
    data["task"]["val_size"] = 8
    for policy in data["pool"]:
        policy["group_size"] = 2
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    config = run_dir.parent / f"{run_dir.name}-config.json"
    config.write_text(json.dumps(data))
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(config), "--run-dir",
         str(run_dir)],
        cwd=REPO, env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = run_dir / "checkpoints" / f"step_{steps:06d}"
    assert (checkpoint / "state.json").is_file()
    return checkpoint


def trainer_eval(
    zoo_dir: Path, *args: str | Path, env: dict[str, str] | None = None, command: str = "eval"
) -> subprocess.CompletedProcess[str]:
    """``python -m trainer eval ARGS`` (the real entry point; ``command="eval-run"``
    for that one), two CPU threads."""
    return subprocess.run(
        [sys.executable, "-m", "trainer", command, "--threads", "2", *map(str, args)],
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
