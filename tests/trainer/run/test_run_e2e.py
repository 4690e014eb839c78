"""The real entry point (`python -m trainer run`) on a pool of tiny zoo policies."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.ingest_server import TOKEN, Ingest
from trainer import metrics as m
from trainer.spool import decode_value, read_points

REPO = Path(__file__).resolve().parents[3]


def _config(tmp_path: Path, **overrides: Any) -> Path:
    data = json.loads((REPO / "examples/standalone.json").read_text())
    data.update(overrides)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def _trainer(
    zoo_dir: Path, *args: str | Path, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainer", *map(str, args)],
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _series(run_dir: Path) -> dict[tuple[str, str, int], float]:
    """Every point except machine-speed timings, keyed like the ingestion API."""
    series: dict[tuple[str, str, int], float] = {}
    for point in read_points(run_dir):
        if point["key"] in m.TIMING_KEYS:
            continue
        key = (point["policy"], point["key"], point["step"])
        assert key not in series, f"duplicate point {key}"
        series[key] = decode_value(point["value"])
    return series


@pytest.mark.slow
def test_a_two_policy_pool_with_different_tokenizers_learns(zoo_dir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = _trainer(zoo_dir, "run", "--config", _config(tmp_path), "--run-dir", run_dir)
    assert result.returncode == 0, result.stderr[-3000:]

    series = _series(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    steps = config["steps"]
    # One evaluation of 64 prompts has a standard error of about 0.06 and the zoo's exact
    # weights depend on the CPU it was built on, so learning is judged on averages: the
    # training reward over the last vs the first 10 steps (256 samples a step), and the
    # last three evaluations vs the start.
    for policy in ("llama-char", "gpt2-unigram"):
        train = [series[(policy, m.TRAIN_REWARD_MEAN, step)] for step in range(1, steps + 1)]
        first, last = sum(train[:10]) / 10, sum(train[-10:]) / 10
        assert last - first >= 0.04, f"{policy}: train reward {first:.3f} -> {last:.3f}"
        val_steps = sorted(s for (p, k, s) in series if p == policy and k == m.VAL_REWARD_AT_1)
        start = series[(policy, m.VAL_REWARD_AT_1, 0)]
        final = sum(series[(policy, m.VAL_REWARD_AT_1, s)] for s in val_steps[-3:]) / 3
        assert final > start, f"{policy}: val/reward@1 {start:.3f} -> {final:.3f} (last 3)"
        for key in (m.TRAIN_REWARD_MEAN, m.PG_LOSS, m.KL_LOSS, m.ENTROPY, m.CLIP_FRAC, m.LR):
            assert (policy, key, steps) in series
    assert (m.POOL, m.TRAIN_REWARD_MEAN, steps) in series


@pytest.mark.slow
def test_resume_after_sigkill_reproduces_the_uninterrupted_run(
    zoo_dir: Path, tmp_path: Path
) -> None:
    config = _config(tmp_path, steps=8, checkpoint_every=3, val_every=4)
    straight = tmp_path / "straight"
    result = _trainer(zoo_dir, "run", "--config", config, "--run-dir", straight)
    assert result.returncode == 0, result.stderr[-3000:]

    killed = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, "-m", "trainer", "run", "--config", str(config), "--run-dir", str(killed)],
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    marker = killed / "checkpoints" / "step_000003" / "state.json"
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert process.poll() is None, "the run ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (killed / "checkpoints" / "step_000008").exists()

    result = _trainer(zoo_dir, "run", "--config", config, "--run-dir", killed, "--resume")
    assert result.returncode == 0, result.stderr[-3000:]

    assert _series(killed) == _series(straight)


def test_a_bad_config_fails_before_any_worker_starts(zoo_dir: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, steps=0)
    result = _trainer(zoo_dir, "run", "--config", config, "--run-dir", tmp_path / "run")
    assert result.returncode == 2
    assert "steps: steps must be >= 1" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_bad_model_path_names_the_policy_and_the_problem(zoo_dir: Path, tmp_path: Path) -> None:
    data = json.loads((REPO / "examples/standalone.json").read_text())
    data["pool"][1]["model"] = str(tmp_path / "nowhere")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))

    result = _trainer(zoo_dir, "run", "--config", config, "--run-dir", tmp_path / "run")

    assert result.returncode == 2
    assert "pool[1] (gpt2-unigram):" in result.stderr
    assert str(tmp_path / "nowhere") in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_run_dir_is_never_overwritten_without_resume(zoo_dir: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, steps=1, val_every=1)
    run_dir = tmp_path / "run"
    assert _trainer(zoo_dir, "run", "--config", config, "--run-dir", run_dir).returncode == 0

    again = _trainer(zoo_dir, "run", "--config", config, "--run-dir", run_dir)

    assert again.returncode == 2
    assert "already holds a run; pass --resume" in again.stderr


def test_validate_prints_the_normalised_config(zoo_dir: Path, tmp_path: Path) -> None:
    result = _trainer(zoo_dir, "validate", "--config", _config(tmp_path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["grpo"]["clip_eps"] == 0.2


def test_a_run_ships_its_spool_to_the_ingestion_api(
    zoo_dir: Path, tmp_path: Path, ingest: Ingest
) -> None:
    ingest.state.script.extend([503, 503])  # the web app is briefly unavailable
    config = _config(tmp_path, steps=1, val_every=1, checkpoint_every=1)
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(config), "--run-dir",
         str(run_dir), "--ingest-url", ingest.url],
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir), "MRL_INGEST_TOKEN": TOKEN},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert TOKEN not in result.stderr

    spooled = {(p["policy"], p["key"], p["step"]) for p in read_points(run_dir)}
    assert set(ingest.state.points) == spooled
    assert ingest.state.statuses[-1]["state"] == "completed"


@pytest.mark.slow
def test_torchrun_starts_one_worker_per_policy(zoo_dir: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, steps=2, val_every=2, checkpoint_every=2, prompts_per_step=8)
    run_dir = tmp_path / "run"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_addr", "127.0.0.1", "--master_port", port,
         "-m", "trainer", "run", "--config", str(config),
         "--run-dir", str(run_dir)],
        cwd=REPO, env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    series = _series(run_dir)
    for policy in ("llama-char", "gpt2-unigram"):
        assert (policy, m.PG_LOSS, 2) in series
        assert (policy, m.VAL_REWARD_AT_1, 2) in series


def test_a_pool_larger_than_the_torchrun_world_is_refused(zoo_dir: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(_config(tmp_path)),
         "--run-dir", str(tmp_path / "run")],
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir), "RANK": "0", "WORLD_SIZE": "3"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "started 3 processes but the pool has 2 policies" in result.stderr


# A CPU run forks its workers (issue 35): they share the launcher's imports of torch and
# transformers instead of importing them afresh, and train exactly as spawned ones do.
SPAWNING_TRAINER = (
    "import sys, trainer.run as run; run.worker_start_method = lambda env: 'spawn'; "
    "from trainer.cli import main; sys.exit(main(sys.argv[1:]))"
)


def test_forked_workers_train_exactly_as_spawned_ones(zoo_dir: Path, tmp_path: Path) -> None:
    from trainer.run import worker_start_method

    assert worker_start_method({}) == "fork"  # no device plan: every worker on the CPU
    assert worker_start_method({"MRL_DEVICES_BY_RANK": "cuda:0;cuda:1"}) == "spawn"
    config = _config(tmp_path, steps=1, val_every=1, checkpoint_every=1)
    forked = _trainer(zoo_dir, "run", "--config", config, "--run-dir", tmp_path / "forked")
    assert forked.returncode == 0, forked.stderr[-3000:]
    spawned = subprocess.run(
        [sys.executable, "-c", SPAWNING_TRAINER, "run", "--config", str(config),
         "--run-dir", str(tmp_path / "spawned")],
        cwd=REPO, env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert spawned.returncode == 0, spawned.stderr[-3000:]
    a, b = _series(tmp_path / "forked"), _series(tmp_path / "spawned")
    assert a == b and len(a) > 20
    # Each forked worker logs under its own rank, not the launcher's format.
    for rank in (0, 1):
        assert f"[rank {rank}] INFO" in forked.stderr
