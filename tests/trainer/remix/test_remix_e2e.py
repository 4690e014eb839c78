"""ReMix through the real entry point: diagnostics every step across the reincarnation
step, and a stopped + SIGKILLed + resumed run that reproduces the uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.trainer.run.test_run_e2e import _series, _trainer
from trainer import metrics as m

REPO = Path(__file__).resolve().parents[3]
POLICIES = ("llama-char", "gpt2-unigram")
T = 3  # reincarnation step
STEPS = 8

REMIX_KEYS = {
    m.REMIX_IS_RATIO_MEAN,
    m.REMIX_IS_RATIO_MAX,
    m.REMIX_KL_BASE,
    m.REMIX_KL_PREV,
    m.REMIX_LAMBDA,
}
EVERY_STEP = {
    m.REMIX_OFFPOLICY_FRAC,
    m.SELF_REFLECTION_RATE,
    m.ROLLOUTS_TOTAL,
    m.RESPONSE_TOKENS_TOTAL,
    m.RESPONSE_LENGTH_MEAN,
}


def _config(tmp_path: Path) -> Path:
    data = json.loads((REPO / "examples/remix.json").read_text())
    data |= {"steps": STEPS, "prompts_per_step": 5, "val_every": 2, "checkpoint_every": 2}
    data["remix"]["reincarnation_step"] = T
    data["task"]["val_size"] = 8
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.slow
def test_remix_logs_its_diagnostics_and_resumes_exactly(zoo_dir: Path, tmp_path: Path) -> None:
    config = _config(tmp_path)
    straight = tmp_path / "straight"
    result = _trainer(zoo_dir, "run", "--config", config, "--run-dir", straight)
    assert result.returncode == 0, result.stderr[-3000:]

    series = _series(straight)
    uncatalogued = {key for _policy, key, _step in series} - set(m.catalogue().by_key)
    assert not uncatalogued, f"logged keys missing from trainer.metrics.CATALOGUE: {uncatalogued}"
    for policy in POLICIES:
        for step in range(1, STEPS + 1):
            expected = EVERY_STEP | (REMIX_KEYS if step <= T else set())
            missing = {key for key in expected if (policy, key, step) not in series}
            assert not missing, (policy, step, missing)
        # p = 0.4 of 5 prompts: 3 fresh until T, then all 5; G = 8.
        fresh = [3 if step <= T else 5 for step in range(1, STEPS + 1)]
        assert series[(policy, m.ROLLOUTS_TOTAL, STEPS)] == 8 * sum(fresh)
        assert series[(policy, m.REMIX_OFFPOLICY_FRAC, 1)] == 0.0
        assert series[(policy, m.REMIX_OFFPOLICY_FRAC, 2)] == pytest.approx(16 / (16 + 24))
        assert series[(policy, m.REMIX_OFFPOLICY_FRAC, T + 1)] == 0.0
        # Right after reincarnation the reference is the policy itself: KL exactly 0.
        assert series[(policy, m.KL_LOSS, T + 1)] == 0.0
        assert (policy, m.REMIX_IS_RATIO_MEAN, T + 1) not in series

    # Stop cleanly before T (the replay is in the checkpoint), resume and SIGKILL after T
    # (the reincarnated reference is), resume again.
    resumed = tmp_path / "resumed"
    first = _trainer(zoo_dir, "run", "--config", config, "--run-dir", resumed, "--steps", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer", "run", "--config", str(config), "--run-dir",
         str(resumed), "--resume"],
        cwd=REPO, env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    marker = resumed / "checkpoints" / "step_000004" / "state.json"
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert process.poll() is None, "the resumed run ended before its step-4 checkpoint"
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (resumed / "checkpoints" / f"step_{STEPS:06d}").exists()
    assert (
        resumed / "checkpoints" / "step_000004" / "llama-char" / "reference.safetensors"
    ).exists()

    last = _trainer(zoo_dir, "run", "--config", config, "--run-dir", resumed, "--resume")
    assert last.returncode == 0, last.stderr[-3000:]

    assert _series(resumed) == series
