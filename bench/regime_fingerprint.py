"""A fingerprint of each regime's training: every logged number and the final weights.

For refactorings that must change no update (the issue-19 / issue-32 method): run it on
the commit before and on the change, with the same .venv and zoo, and compare::

    MRL_ZOO_DIR=var/test/zoo PYTHONPATH=. .venv/bin/python bench/regime_fingerprint.py > after.json
    (cd <worktree of the commit before> && MRL_ZOO_DIR=... PYTHONPATH=. python
     <this file> > before.json); diff before.json after.json

Each built-in regime (and ReMix on standalone, PRP and SGT; PRP with two passes over
each batch) trains a pool of two tiny zoo policies of different tokenizers for 4 steps
(8 prompts x G=4, a checkpoint at step 4) with
``python -m trainer run``; per run it prints the SHA-256 of every non-timing metric point
(policy, key, step, value as its exact float repr) and of each policy's final checkpoint
tensors (name, dtype, shape and bytes).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from trainer import metrics
from trainer.spool import decode_value, read_points

REPO = Path(__file__).resolve().parents[1]
CASES: dict[str, dict[str, Any]] = {
    "standalone": {"regime": "standalone"},
    "prp": {"regime": "prp"},
    "xgrpo": {"regime": "xgrpo"},
    "sgt": {"regime": "sgt"},
    "sequential_sft": {"regime": "sequential_sft"},
    "standalone+remix": {"regime": "standalone", "off_policy": "remix"},
    # The paths the cases above miss: PRP's weights against the no-grad forward of the
    # old log-probs (more than one pass), and a regime's batch under ReMix.
    "prp+2-epochs": {"regime": "prp", "grpo": {"epochs": 2}},
    "prp+remix": {"regime": "prp", "off_policy": "remix"},
    "sgt+remix": {"regime": "sgt", "off_policy": "remix"},
}


def config(case: dict[str, Any]) -> dict[str, Any]:
    policy = {"lr": 0.0003, "group_size": 4, "max_new_tokens": 12}
    return {
        "name": "fingerprint",
        "pool": [
            {"name": "llama-char", "model": "zoo:tiny-llama-char", **policy},
            {"name": "gpt2-unigram", "model": "zoo:tiny-gpt2-unigram", **policy},
        ],
        "task": {"kind": "arithmetic", "levels": [1, 2, 3], "val_size": 16},
        "steps": 4,
        "prompts_per_step": 8,
        "val_every": 2,
        "checkpoint_every": 4,
        "seed": 0,
        **case,
    }


def fingerprint(name: str, case: dict[str, Any], work: Path) -> dict[str, Any]:
    run_dir = work / name
    path = work / f"{name}.json"
    path.write_text(json.dumps(config(case)))
    done = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(path), "--run-dir", str(run_dir)],
        cwd=Path.cwd(),
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    points = sorted(
        (p["policy"], p["key"], p["step"], repr(decode_value(p["value"])))
        for p in read_points(run_dir)
        if p["key"] not in metrics.TIMING_KEYS
    )
    weights = hashlib.sha256()
    for file in sorted((run_dir / "checkpoints").rglob("*.safetensors")):
        weights.update(str(file.relative_to(run_dir)).encode())
        tensors = load_file(str(file))
        for key in sorted(tensors):
            tensor = tensors[key]
            weights.update(f"{key}{tensor.dtype}{tuple(tensor.shape)}".encode())
            weights.update(tensor.contiguous().numpy().tobytes())
    return {
        "points": len(points),
        "points_sha256": hashlib.sha256(json.dumps(points).encode()).hexdigest(),
        "weights_sha256": weights.hexdigest(),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as work:
        result = {name: fingerprint(name, case, Path(work)) for name, case in CASES.items()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
