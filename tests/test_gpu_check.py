"""Issue 21: the rollout engine's static KV cache, and the GPU check's CPU dry run.

The static cache is compared with the default dynamic one on the tiny zoo (CPU: the
same greedy tokens). ``scripts/gpu-check --cpu`` runs the whole GPU check with tiny
shapes on the CPU, as a subprocess, exactly as a developer would; on a GPU machine the
same script measures (docs/DEVELOPERS.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer.models import load_causal_lm, load_tokenizer
from trainer.rollout import HFRolloutEngine
from trainer.rollout.engine import STATIC_WIDTH_MULTIPLE

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("a_pool", "b_engines", "c_precision", "d_resume")
PROMPTS = ["12+3=", "4+55=", "7*8= and then some more text to widen the batch"]


@pytest.mark.parametrize("zoo_id", ["tiny-qwen-bpe", "tiny-llama-char", "tiny-gpt2-unigram"])
def test_static_cache_gives_the_dynamic_cache_greedy_tokens(zoo_dir: Path, zoo_id: str) -> None:
    model = load_causal_lm(zoo_dir / zoo_id)
    tokenizer = load_tokenizer(zoo_dir / zoo_id)
    dynamic = HFRolloutEngine(model, tokenizer)
    static = HFRolloutEngine(model, tokenizer, cache="static")
    widths = [len(ids) for ids in dynamic.encode_prompts(PROMPTS)]
    assert max(widths) % STATIC_WIDTH_MULTIPLE != 0  # the static engine pads further
    kwargs = {"n": 1, "max_new_tokens": 12, "temperature": 1.0, "greedy": True}
    a = dynamic.generate(PROMPTS, **kwargs)
    b = static.generate(PROMPTS, **kwargs)
    assert a.response_ids == b.response_ids
    assert a.prompt_ids == b.prompt_ids and a.finished == b.finished
    assert a.response_texts == b.response_texts


def test_static_cache_samples_n_per_prompt(zoo_dir: Path) -> None:
    model = load_causal_lm(zoo_dir / "tiny-qwen-bpe")
    engine = HFRolloutEngine(model, load_tokenizer(zoo_dir / "tiny-qwen-bpe"), cache="static")
    torch.manual_seed(0)
    batch = engine.generate(PROMPTS[:2], n=3, max_new_tokens=8, temperature=1.0)
    assert len(batch) == 6 and all(1 <= len(ids) <= 8 for ids in batch.response_ids)


def test_cache_options_are_checked(zoo_dir: Path) -> None:
    model = load_causal_lm(zoo_dir / "tiny-qwen-bpe")
    tokenizer = load_tokenizer(zoo_dir / "tiny-qwen-bpe")
    with pytest.raises(ValueError, match="unknown KV cache 'paged'"):
        HFRolloutEngine(model, tokenizer, cache="paged")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs cache='static'"):
        HFRolloutEngine(model, tokenizer, compile=True)
    with pytest.raises(ValueError, match="on CUDA only"):
        HFRolloutEngine(model, tokenizer, cache="static", compile=True)
    assert HFRolloutEngine(model, tokenizer)._cache_options() == {}  # default unchanged


@pytest.mark.slow
def test_gpu_check_cpu_dry_run(zoo_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    env = {**os.environ, "MRL_ZOO_DIR": str(zoo_dir), "PYTHON": sys.executable}
    env.pop("OUT", None)
    result = subprocess.run(
        [str(REPO / "scripts" / "gpu-check"), "--cpu", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu" and report["ok"] is True
    assert report["machine"]["torch"] == torch.__version__
    for name in SECTIONS:
        section = report["sections"][name]
        assert section["ok"] is True, (name, section)
        assert section["seconds"] > 0
    pool = report["sections"]["a_pool"]
    assert len(pool["policies"]) == 3
    assert abs(sum(p["memory_fraction"] for p in pool["policies"]) - 1.0) < 1e-3
    assert all(p["steps"] == pool["steps"] for p in pool["policies"])
    engines = report["sections"]["b_engines"]["engines"]
    assert {e["name"] for e in engines} >= {"dynamic", "static"}
    for engine in engines:
        assert engine["rollout_tokens_per_s"] > 0 and engine["step_s"] > 0
    precision = report["sections"]["c_precision"]
    assert precision["loss_fp32"] > 0 and precision["loss_rel_diff"] < precision["tolerance"]
    assert report["sections"]["d_resume"]["steps_seen"] == [1, 2, 3]
