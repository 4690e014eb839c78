"""The GPU check's SmolLM2-135M section (issue 33, bench/gpu_check.py ``e_smollm2``): the
stored shape is the real model's config.json, a one-layer model of it builds with the
real vocabulary, and the tokenizer is looked for where the docs say it is carried. The
section itself runs in ``scripts/gpu-check --cpu`` (tests/test_gpu_check.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from trainer.models import load_causal_lm, load_tokenizer

BENCH = Path(__file__).resolve().parents[3] / "bench" / "gpu_check.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_gpu_check", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()


@pytest.mark.real_model
def test_the_stored_config_is_the_real_models(smollm2_dir: Path) -> None:
    assert json.loads((smollm2_dir / "config.json").read_text()) == bench.SMOLLM2_CONFIG
    manifest = json.loads((smollm2_dir / "zoo.json").read_text())
    assert manifest["n_params"] == bench.SMOLLM2_PARAMETERS


def test_the_shape_config_changes_only_the_layers() -> None:
    config = bench.smollm2_shape_config(2)
    assert config["num_hidden_layers"] == 2
    assert {k: v for k, v in config.items() if k != "num_hidden_layers"} == {
        k: v for k, v in bench.SMOLLM2_CONFIG.items() if k != "num_hidden_layers"
    }
    assert bench.SMOLLM2_CONFIG["num_hidden_layers"] == 30  # the stored one is untouched
    assert bench.smollm2_shape_config() == bench.SMOLLM2_CONFIG
    with pytest.raises(ValueError, match="layers must be >= 1"):
        bench.smollm2_shape_config(0)


def _tokenizer_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in bench.SMOLLM2_TOKENIZER_FILES:
        (folder / name).write_text("{}")
    return folder


def test_the_tokenizer_is_looked_for_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    carried = tmp_path / "carried"
    monkeypatch.setattr(bench, "CARRIED_SMOLLM2_TOKENIZER", carried)
    zoo = tmp_path / "zoo"
    assert bench.smollm2_tokenizer_dir(None, zoo) is None
    in_zoo = _tokenizer_folder(zoo / bench.SMOLLM2)
    assert bench.smollm2_tokenizer_dir(None, zoo) == in_zoo
    _tokenizer_folder(carried)
    assert bench.smollm2_tokenizer_dir(None, zoo) == carried
    explicit = _tokenizer_folder(tmp_path / "explicit")
    assert bench.smollm2_tokenizer_dir(explicit, zoo) == explicit
    assert bench.smollm2_tokenizer_dir(tmp_path / "missing", None) == carried


def test_a_one_layer_shape_keeps_the_real_width_and_vocabulary(
    zoo_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / bench.SMOLLM2_SHAPE
    built = bench.build_smollm2_shape(target, zoo_dir / "tiny-llama-char", layers=1)
    hidden, vocab = bench.SMOLLM2_CONFIG["hidden_size"], bench.SMOLLM2_CONFIG["vocab_size"]
    assert built["layers"] == 1 and built["vocab_size"] == vocab
    model = load_causal_lm(target)
    assert model.config.hidden_size == hidden and model.config.num_key_value_heads == 3
    assert model.get_input_embeddings().weight.shape == (vocab, hidden)
    assert built["parameters"] == sum(p.numel() for p in model.parameters())
    assert len(load_tokenizer(target)) == built["tokenizer_size"]
