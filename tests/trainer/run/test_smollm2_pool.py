"""A real pretrained model in a heterogeneous pool (issue 33): SmolLM2-135M-Instruct
beside a tiny zoo policy, trained through the real entry point (``python -m trainer
run``) on the few-shot arithmetic task with a system prompt, each policy rendering the
prompt through its own chat template.

Two runs, started at once (each SmolLM2 worker gets half the CPUs, the tiny one a thread)
and shared by the tests below:

- SGT, {SmolLM2, tiny-qwen-bpe}, 2 steps, a checkpoint after each. The tiny policy, a
  stranger to few-shot prompts, fails them; SmolLM2 solves some, and its verified
  successes are retokenized into the tiny BPE's tokens and trained on (``sgt/nll``).
- PRP, {SmolLM2, tiny-gpt2-unigram}, 1 step: every prompt's group is pooled with the
  peer's rollouts in both directions, byte-level BPE <-> Unigram with byte fallback.
  (The char-level policy cannot take part: the two worked examples alone are longer
  than its 128 positions, and the rollout engine refuses such a prompt.)

The SGT run is then resumed from its step-1 checkpoint (in a copy without the step-2
checkpoint: a job that died while checkpointing step 2) and must repeat step 2 bit for
bit: its metrics, its events and both policies' weights.

Marked ``real_model``: skipped, saying how to build it, when the SmolLM2 entry is not
built. Each SmolLM2 checkpoint is about 1.6 GB (weights and AdamW state); everything is
written under one temporary folder that the module deletes when it is done.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerBase

from trainer import metrics as m
from trainer.checkpoint import checkpoint_dir, complete_checkpoints
from trainer.config import RunConfig
from trainer.devices import CPU_THREADS_ENV
from trainer.models import load_tokenizer
from trainer.regimes.prp import IS_WEIGHT_CLIPPED_FRAC, IS_WEIGHT_MEAN, PEER_SAMPLES
from trainer.regimes.prp import ROLLOUT_EVENT as PRP_EVENT
from trainer.regimes.sgt import NLL, RESCUE_SET_SIZE
from trainer.regimes.sgt import SUCCESS_EVENT as SGT_EVENT
from trainer.run import available_cpus
from trainer.spool import decode_value, read_events, read_points
from trainer.tasks import Problem, make_task, run_scoring
from trainer.tasks.rewards import counts_as_finished
from trainer.thl import encode_text
from trainer.thl.text import text_mismatch_fraction
from trainer.zoo import SMOLLM2_IDS

# Two real-model runs in the first test's setup: minutes on a busy two-core machine.
# One worker runs the module: its two SmolLM2 runs (the module fixture) are then made once,
# not once on each xdist worker (63-69 s each on CI).
pytestmark = [
    pytest.mark.real_model,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("trainer-run-smollm2-pool"),
]

REPO = Path(__file__).resolve().parents[3]
(SMOLLM2_ID,) = SMOLLM2_IDS
SYSTEM_PROMPT = "Answer with the result in \\boxed{}, and nothing else."
SMOLLM2 = {
    "name": "smollm2",
    "model": f"zoo:{SMOLLM2_ID}",
    "group_size": 2,
    "max_new_tokens": 16,
    "lr": 1e-5,
    "rollout_prefix_reuse": True,
}
TASK = {
    "kind": "arithmetic",
    "levels": [1],
    "val_size": 1,
    "few_shot": 2,
    "system_prompt": SYSTEM_PROMPT,
}
SGT_CONFIG: dict[str, Any] = {
    "name": "smollm2-sgt",
    "pool": [
        SMOLLM2,
        {"name": "qwen-bpe", "model": "zoo:tiny-qwen-bpe", "group_size": 2,
         "max_new_tokens": 16, "lr": 3e-4},
    ],
    "regime": "sgt",
    "sgt": {"lambda_sgt": 0.1, "k_sgt": 1},
    "task": TASK,
    "steps": 2,
    "prompts_per_step": 4,
    "val_every": 100,
    "checkpoint_every": 1,
    "checkpoint_keep_last": 2,
    # SmolLM2 solves prompts of both steps that the tiny policy fails with this seed,
    # so the resumed step 2 trains on a rescue too; the tests need one rescue, any step.
    "seed": 7,
}  # fmt: skip
PRP_CONFIG: dict[str, Any] = {
    "name": "smollm2-prp",
    "pool": [
        SMOLLM2,
        {"name": "gpt2-unigram", "model": "zoo:tiny-gpt2-unigram", "group_size": 2,
         "max_new_tokens": 16, "lr": 3e-4},
    ],
    "regime": "prp",
    "prp": {"k_peer": 2, "is_correction": True, "c_bar": 1.0},
    "task": TASK,
    "steps": 1,
    "prompts_per_step": 2,
    "val_every": 100,
    "seed": 7,
}  # fmt: skip
LOSSES = (m.PG_LOSS, m.KL_LOSS, m.ENTROPY, m.GRAD_NORM)


@dataclass(frozen=True)
class Runs:
    """The module's two finished runs and what the tests need to read them."""

    root: Path
    env: dict[str, str]
    sgt: Path
    prp: Path
    tokenizers: dict[str, PreTrainedTokenizerBase]
    """Each policy's tokenizer, by policy name (both runs' policies)."""


def _env(zoo_dir: Path) -> dict[str, str]:
    """The trainer's environment: the test zoo; two runs at once, so each SmolLM2 worker
    (rank 0) gets half the CPUs, the tiny worker (rank 1) one thread."""
    threads = f"{max(1, available_cpus() // 2)};1"
    return {**os.environ, "MRL_ZOO_DIR": str(zoo_dir), CPU_THREADS_ENV: threads}


def _start(
    root: Path, name: str, config: dict[str, Any], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start a run of ``config`` in ``root / name`` (its own process group: the launcher
    and the workers it spawns), its output in ``root / f"{name}.log"``."""
    path = root / f"{name}.json"
    path.write_text(json.dumps(config))
    with (root / f"{name}.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "trainer", "run", "--config", path, "--run-dir", root / name],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _kill(process: subprocess.Popen[bytes]) -> None:
    """End a run that is still going, its workers with it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _finish(root: Path, name: str, process: subprocess.Popen[bytes]) -> str:
    """Wait for a run; its log, which must say it ended well."""
    try:
        returncode = process.wait(timeout=600)
    except subprocess.TimeoutExpired:
        _kill(process)
        raise
    log = (root / f"{name}.log").read_text()
    assert returncode == 0, log[-3000:]
    return log


@pytest.fixture(scope="module")
def runs(
    smollm2_dir: Path, zoo_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs]:
    assert smollm2_dir == zoo_dir / SMOLLM2_ID  # the trainer finds both in MRL_ZOO_DIR
    root = tmp_path_factory.mktemp("smollm2_pool")
    env = _env(zoo_dir)
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, config in (("sgt", SGT_CONFIG), ("prp", PRP_CONFIG)):
            started[name] = _start(root, name, config, env)
        for name, process in started.items():
            log = _finish(root, name, process)
            assert f"smollm2: {max(1, available_cpus() // 2)} intra-op threads" in log
        directories = {"smollm2": smollm2_dir} | {
            member["name"]: zoo_dir / member["model"].removeprefix("zoo:")
            for config in (SGT_CONFIG, PRP_CONFIG)
            for member in config["pool"][1:]
        }
        tokenizers = {name: load_tokenizer(path) for name, path in directories.items()}
        yield Runs(root, env, root / "sgt", root / "prp", tokenizers)
    finally:
        for process in started.values():
            _kill(process)
        shutil.rmtree(root, ignore_errors=True)  # gigabytes of checkpoints


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


def _problems(config: dict[str, Any], step: int) -> dict[str, Problem]:
    """The prompts of ``step`` of a run of ``config``, by id (as the workers draw them)."""
    run_config = RunConfig.from_dict(config)
    task = make_task(run_config.task, seed=run_config.seed)
    return {p.id: p for p in task.train_batch(step, run_config.prompts_per_step)}


def _reward(config: dict[str, Any], problem: Problem, sample: dict[str, Any]) -> float:
    """The sample's reward under the run's scoring: ``task.finished_only`` is "auto",
    which a pool with SmolLM2 resolves on, so a response cut off without a box scores 0."""
    scoring = run_scoring(RunConfig.from_dict(config))
    assert scoring.finished_only
    text, finished = sample["text"], sample["finished"]
    return scoring.rewards([problem.prompt], [text], [problem.answer], [finished])[0]


def _crossed_ids(tokenizer: PreTrainedTokenizerBase, sample: dict[str, Any]) -> list[int]:
    """The learner-side ids of a sample of an event, without the appended EOS (tokens
    are shipped as the learner tokenizer's token strings)."""
    assert not sample["truncated"]
    ids = tokenizer.convert_tokens_to_ids(sample["tokens"])
    return ids[:-1] if ids and ids[-1] == tokenizer.eos_token_id else ids


def _assert_is_the_texts_retokenization(
    tokenizer: PreTrainedTokenizerBase, sample: dict[str, Any]
) -> list[int]:
    """The sample's tokens are THL's encoding of its text on the learner's tokenizer."""
    ids = _crossed_ids(tokenizer, sample)
    ended = len(ids) < len(sample["tokens"])
    encoded = encode_text(sample["text"], tokenizer, ended_with_eos=ended)
    assert tokenizer.convert_ids_to_tokens(encoded.target_ids) == sample["tokens"]
    return ids


def _assert_losses_finite(series: dict[tuple[str, str, int], float], steps: int) -> None:
    policies = {policy for policy, _, _ in series if policy != m.POOL}
    for policy in policies:
        for step in range(1, steps + 1):
            for key in LOSSES:
                assert math.isfinite(series[(policy, key, step)]), (policy, key, step)


def test_sgt_rescues_cross_from_smollm2_into_the_tiny_bpe(runs: Runs) -> None:
    series = _series(runs.sgt)
    events = [e for e in read_events(runs.sgt) if e["kind"] == SGT_EVENT]
    assert events, "no rescue in 2 steps: the tiny policy solved every prompt SmolLM2 did"
    rescued: dict[tuple[str, int], set[str]] = {}
    for event in events:
        source, target, step = event["source"], event["target"], event["step"]
        assert {source, target} == {"smollm2", "qwen-bpe"}
        problem = _problems(SGT_CONFIG, step)[event["prompt_id"]]
        assert event["count"] == len(event["samples"]) == 1  # k_sgt
        rescued.setdefault((target, step), set()).add(problem.id)
        for sample in event["samples"]:
            text = sample["text"]  # a verified success on that very prompt
            assert _reward(SGT_CONFIG, problem, sample) == 1.0
            assert counts_as_finished(text, sample["finished"])  # never a cut-off answer
            assert sample["reason"].endswith(("; ended with EOS", "; cut off at max_new_tokens"))
            ids = _assert_is_the_texts_retokenization(runs.tokenizers[target], sample)
            assert runs.tokenizers[target].decode(ids) == text  # byte-level: lossless
            own = runs.tokenizers[source](text, add_special_tokens=False)["input_ids"]
            retokenized = runs.tokenizers[target].convert_ids_to_tokens(ids)
            assert runs.tokenizers[source].convert_ids_to_tokens(own) != retokenized

    for policy in ("smollm2", "qwen-bpe"):
        for step in (1, 2):
            chosen = rescued.get((policy, step), set())
            assert series[(policy, RESCUE_SET_SIZE, step)] == len(chosen)
            logged = {key for p, key, s in series if (p, s) == (policy, step)}
            thl = {m.THL_UNK_FRAC, m.THL_TEXT_MISMATCH_FRAC, NLL}
            if chosen:  # byte-level BPE to byte-level BPE: nothing unknown, nothing lost
                assert series[(policy, m.THL_UNK_FRAC, step)] == 0.0
                assert series[(policy, m.THL_TEXT_MISMATCH_FRAC, step)] == 0.0
                assert 0.0 < series[(policy, NLL, step)] < math.inf
            else:  # with an empty rescue set SGT is GRPO: no transfer, nothing to report
                assert not thl & logged
    _assert_losses_finite(series, 2)


def test_prp_pools_rollouts_both_ways_between_byte_bpe_and_unigram(runs: Runs) -> None:
    series = _series(runs.prp)
    events = [e for e in read_events(runs.prp) if e["kind"] == PRP_EVENT]
    problems = _problems(PRP_CONFIG, 1)
    policies = ("smollm2", "gpt2-unigram")
    assert {(e["source"], e["target"], e["prompt_id"]) for e in events} == {
        (source, target, prompt_id)
        for source, target in ((policies[0], policies[1]), (policies[1], policies[0]))
        for prompt_id in problems
    }
    mismatch: dict[str, list[float]] = {policy: [] for policy in policies}
    for event in events:
        target, problem = event["target"], problems[event["prompt_id"]]
        tokenizer = runs.tokenizers[target]
        assert event["step"] == 1 and event["count"] == len(event["samples"]) == 2  # k_peer
        assert 0.0 < event["weight"] <= 1.0  # the mean truncated IS weight (c_bar = 1)
        for sample in event["samples"]:
            text = sample["text"]
            assert sample["reward"] == _reward(PRP_CONFIG, problem, sample)  # its own answer
            assert sample["reason"]  # why it scored what it did
            ids = _assert_is_the_texts_retokenization(tokenizer, sample)
            assert tokenizer.unk_token_id not in ids  # both spell any character in bytes
            round_trip = tokenizer.decode(ids, skip_special_tokens=True)
            if target == "smollm2":  # byte-level BPE writes back whatever it is given
                assert round_trip == text
            else:  # Llama-2's Metaspace decoder drops a leading space, nothing else
                assert round_trip == text.removeprefix(" ")
            mismatch[target].append(text_mismatch_fraction(text, round_trip))

    for policy in policies:
        assert series[(policy, PEER_SAMPLES, 1)] == len(mismatch[policy]) == 2 * len(problems)
        assert series[(policy, m.THL_UNK_FRAC, 1)] == 0.0
        assert series[(policy, m.THL_TEXT_MISMATCH_FRAC, 1)] == pytest.approx(
            sum(mismatch[policy]) / len(mismatch[policy]), abs=1e-12
        )
        assert series[(policy, m.THL_MASS_ERROR, 1)] == pytest.approx(0.0, abs=1e-6)
        assert 0.0 <= series[(policy, m.THL_RESIDUAL_SPAN_FRAC, 1)] <= 1.0
        assert 0.0 < series[(policy, IS_WEIGHT_MEAN, 1)] <= 1.0
        assert 0.0 <= series[(policy, IS_WEIGHT_CLIPPED_FRAC, 1)] <= 1.0
    assert series[("smollm2", m.THL_TEXT_MISMATCH_FRAC, 1)] == 0.0
    _assert_losses_finite(series, 1)


def _link_checkpoints(source: str, destination: str) -> None:
    """Copy a run's files, hard-linking the checkpoints' (read, never rewritten, on
    resume) and copying the rest (the spool is truncated in place)."""
    if f"{os.sep}checkpoints{os.sep}" in source:
        os.link(source, destination)
    else:
        shutil.copy2(source, destination)


def test_a_resumed_sgt_run_repeats_step_2_bit_for_bit(runs: Runs) -> None:
    straight, resumed = runs.sgt, runs.root / "sgt-resumed"
    assert [c.step for c in complete_checkpoints(straight)] == [1, 2]
    # A job killed while it checkpointed step 2: its spool holds step 2, its checkpoints
    # end at step 1.
    shutil.copytree(
        straight,
        resumed,
        ignore=shutil.ignore_patterns(checkpoint_dir(straight, 2).name),
        copy_function=_link_checkpoints,
    )
    assert [c.step for c in complete_checkpoints(resumed)] == [1]

    result = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", runs.root / "sgt.json",
         "--run-dir", resumed, "--resume"],
        cwd=REPO, env=runs.env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "smollm2 resumed from the checkpoint of step 1" in result.stderr

    assert _series(resumed) == _series(straight)
    assert list(read_events(resumed)) == list(read_events(straight))
    assert [c.step for c in complete_checkpoints(resumed)] == [1, 2]
    for policy in ("smollm2", "qwen-bpe"):
        weights = [
            load_file(checkpoint_dir(run, 2) / policy / "model.safetensors")
            for run in (straight, resumed)
        ]
        assert weights[0].keys() == weights[1].keys()
        assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
        first = load_file(checkpoint_dir(straight, 1) / policy / "model.safetensors")
        assert any(not torch.equal(first[k], weights[0][k]) for k in first)  # step 2 learned
