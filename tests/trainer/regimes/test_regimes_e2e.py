"""Each regime end to end: a 3-policy pool with three tokenizers, a few steps on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import metrics as m
from trainer.regimes import prp, sgt, xgrpo
from trainer.spool import read_events, read_points

REPO = Path(__file__).resolve().parents[3]
POLICIES = ("llama-char", "qwen-bpe", "gpt2-unigram")

# Metrics each regime must log for every policy at every step, and its event kind.
EXPECTED = {
    "standalone": (set(), None),
    "prp": ({prp.PEER_SAMPLES, prp.IS_WEIGHT_MEAN, m.THL_MASS_ERROR}, "rollout"),
    "xgrpo": ({xgrpo.BASELINE_SHIFT, xgrpo.POOLED_STD}, "advantage_stats"),
    "sgt": ({sgt.RESCUE_SET_SIZE, sgt.RESCUE_RATE}, "success"),
}


@pytest.mark.slow
@pytest.mark.parametrize("regime", list(EXPECTED))
def test_a_three_tokenizer_pool_runs_the_regime(regime: str, zoo_dir: Path, tmp_path: Path) -> None:
    config = json.loads((REPO / f"examples/{regime}.json").read_text())
    if regime == "standalone":
        config["pool"] = json.loads((REPO / "examples/prp.json").read_text())["pool"]
    config |= {"steps": 3, "prompts_per_step": 8, "val_every": 3, "checkpoint_every": 3}
    config["task"]["val_size"] = 8
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    run_dir = tmp_path / "run"

    argv = [sys.executable, "-m", "trainer", "run", "--config", str(config_path)]
    result = subprocess.run(
        [*argv, "--run-dir", str(run_dir)],
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    points = {(p["policy"], p["key"], p["step"]) for p in read_points(run_dir)}
    uncatalogued = {key for _policy, key, _step in points} - set(m.catalogue().by_key)
    assert not uncatalogued, f"logged keys missing from trainer.metrics.CATALOGUE: {uncatalogued}"
    events = list(read_events(run_dir))
    keys, kind = EXPECTED[regime]
    for policy in POLICIES:
        for step in (1, 2, 3):
            assert (policy, m.PG_LOSS, step) in points
            for key in keys:
                assert (policy, key, step) in points, (policy, key, step)
    if kind is None:
        assert events == []
        return
    assert events, f"{regime} recorded no transfer event"
    assert {e["kind"] for e in events} == {kind}
    assert {e["target"] for e in events} <= set(POLICIES)
    assert all(e["source"] != e["target"] for e in events)
    keys_seen = [(e["step"], e["source"], e["target"], e["kind"], e["prompt_id"]) for e in events]
    assert len(keys_seen) == len(set(keys_seen)), "an event was recorded twice"
    if regime in {"prp", "xgrpo"}:  # every policy receives from both peers every step
        pairs = {(e["source"], e["target"]) for e in events}
        assert pairs == {(s, t) for s in POLICIES for t in POLICIES if s != t}
    if regime == "prp":
        assert all(0 < e["weight"] <= 1.0 for e in events)
    if regime in {"prp", "sgt"}:  # what crossed: the texts, retokenized for the target
        for e in events:
            assert 1 <= len(e["samples"]) == min(e["count"], 4), e
            assert all(isinstance(s["text"], str) and s["tokens"] for s in e["samples"]), e
    else:
        assert all("samples" not in e for e in events)  # only reward statistics crossed
