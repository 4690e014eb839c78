"""The shape zoo (issue 21): random-init models with the shapes of real checkpoints.

Cheap by construction: the full-size ``config.json`` files are checked without weights
(``shape_config(...).save_pretrained``), and the weights are built with one decoder
layer (``layers=1``) into temporary directories. The full build (about 1.1 B parameters,
2.7 GB in bf16) is measured by hand, not here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from trainer.config import RunConfig
from trainer.models import load_causal_lm, load_tokenizer
from trainer.mwra_counting import estimate_parameters, parameter_count
from trainer.run import RunSetupError, resolve_models
from trainer.zoo import (
    ALL_ZOO_IDS,
    SHAPE_IDS,
    ZOO_IDS,
    ZOO_RECIPES,
    build_command,
    build_zoo,
    resolve_model_source,
)
from trainer.zoo import shapes as zoo_shapes
from trainer.zoo.build import RECIPES, make_tokenizer

REPO = Path(__file__).resolve().parents[3]
GPU_EXAMPLES = REPO / "examples" / "gpu"

# The published config.json values (huggingface.co/Qwen/Qwen2.5-0.5B and
# huggingface.co/meta-llama/Llama-3.2-1B), written out here independently of the recipes.
# transformers 5 stores rope_theta / rope_scaling as rope_parameters.
DOCUMENTED: dict[str, dict[str, object]] = {
    "shape-qwen2.5-0.5b": {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    },
    "shape-llama-3.2-1b": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 8192,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": False,
        "rope_parameters": {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
}
REAL = {  # (vocabulary, parameters) of the real checkpoints, tied embeddings counted once
    "shape-qwen2.5-0.5b": (151936, 494_032_768),
    "shape-llama-3.2-1b": (128256, 1_235_814_400),
}


@pytest.fixture(scope="module")
def shape_zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both shape models with one decoder layer each (seed 0, bf16)."""
    root = tmp_path_factory.mktemp("shape-zoo")
    built = build_zoo(root, seed=0, ids=SHAPE_IDS)
    assert built == {zoo_id: root / zoo_id for zoo_id in SHAPE_IDS}  # built by build_zoo...
    return root


@pytest.fixture(scope="module", autouse=True)
def _one_layer() -> Iterator[None]:
    """Every build in this module is one layer deep (the real depth costs GBs)."""
    patch = pytest.MonkeyPatch()
    original = zoo_shapes.build_shapes

    def one_layer_build(*args: object, **kwargs: object) -> object:
        kwargs.setdefault("layers", 1)
        return original(*args, **kwargs)

    patch.setattr(zoo_shapes, "build_shapes", one_layer_build)
    yield
    patch.undo()


def _full_size_config(zoo_id: str, directory: Path) -> dict[str, object]:
    """The config.json the full-size build writes (written without any weights)."""
    tokenizer = make_tokenizer(RECIPES[zoo_shapes.SHAPE_RECIPES[zoo_id].tokenizer_of], 0)
    zoo_shapes.shape_config(zoo_id, tokenizer).save_pretrained(directory)
    return json.loads((directory / "config.json").read_text())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("zoo_id", SHAPE_IDS)
def test_full_size_config_has_the_documented_shapes(zoo_id: str, tmp_path: Path) -> None:
    config = _full_size_config(zoo_id, tmp_path)
    for key, value in DOCUMENTED[zoo_id].items():
        assert config[key] == value, key
    tokenizer = make_tokenizer(RECIPES[zoo_shapes.SHAPE_RECIPES[zoo_id].tokenizer_of], 0)
    assert config["vocab_size"] == len(tokenizer) < 1000  # the zoo's vocabulary, not 151k
    # The real checkpoint's count follows from the same shapes with the real vocabulary,
    # and the built one is below it by exactly the missing embedding rows.
    real_vocab, real_params = REAL[zoo_id]
    assert estimate_parameters({**config, "vocab_size": real_vocab}) == real_params
    missing_rows = (real_vocab - len(tokenizer)) * config["hidden_size"]
    assert estimate_parameters(config) == real_params - missing_rows


@pytest.mark.parametrize("zoo_id", SHAPE_IDS)
def test_built_model_has_the_shapes_and_runs_a_forward_pass(zoo_id: str, shape_zoo: Path) -> None:
    directory = resolve_model_source(f"zoo:{zoo_id}", shape_zoo)
    config = json.loads((directory / "config.json").read_text())
    expected = {**DOCUMENTED[zoo_id], "num_hidden_layers": 1}
    for key, value in expected.items():
        assert config[key] == value, key
    assert config["dtype"] == "bfloat16"
    assert (directory / "model.safetensors").stat().st_mode & 0o044 == 0o044  # shareable
    manifest = json.loads((directory / "zoo.json").read_text())
    assert manifest["layers_override"] == 1 and manifest["dtype"] == "bfloat16"

    model = load_causal_lm(directory, "bfloat16")
    tokenizer = load_tokenizer(directory)
    n_params = sum(p.numel() for p in model.parameters())
    assert manifest["n_params"] == n_params == estimate_parameters(config)
    assert parameter_count(f"zoo:{zoo_id}", zoo_dir=shape_zoo).value == n_params  # MWRA
    real_vocab, real_params = REAL[zoo_id]
    assert (manifest["real_vocab_size"], manifest["real_n_params"]) == (real_vocab, real_params)
    assert manifest["n_params_below_real"] == real_params - n_params
    assert manifest["size_bytes"] > 2 * n_params  # bf16 weights, tied embeddings saved once
    assert str(real_params // 1000) in manifest["parameter_note"].replace(",", "")

    weight = model.model.layers[0].mlp.up_proj.weight.float()
    assert weight.std().item() == pytest.approx(0.02, rel=0.05)  # the model's own init

    inputs = tokenizer(["Compute 12+7."], return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (1, inputs["input_ids"].shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()


def test_building_leaves_the_recipe_and_its_fingerprint_alone() -> None:
    # transformers writes rope_theta into the rope_scaling dict it is given; a recipe
    # changed that way hashed differently in the next process, so was rebuilt every time.
    recipe = zoo_shapes.SHAPE_RECIPES["shape-llama-3.2-1b"]
    before = (json.dumps(recipe.architecture, sort_keys=True), recipe.fingerprint("bfloat16", None))
    tokenizer = make_tokenizer(RECIPES[recipe.tokenizer_of], 0)
    zoo_shapes.shape_config(recipe.id, tokenizer)
    after = (json.dumps(recipe.architecture, sort_keys=True), recipe.fingerprint("bfloat16", None))
    assert after == before
    assert "rope_theta" not in recipe.architecture["rope_scaling"]


def test_build_is_deterministic_for_the_seed(shape_zoo: Path, tmp_path: Path) -> None:
    zoo_id = "shape-qwen2.5-0.5b"
    again = zoo_shapes.build_shapes(tmp_path / "again", seed=0, ids=(zoo_id,))[zoo_id]
    other = zoo_shapes.build_shapes(tmp_path / "other", seed=1, ids=(zoo_id,))[zoo_id]
    first = shape_zoo / zoo_id / "model.safetensors"
    assert _digest(again / "model.safetensors") == _digest(first)
    assert _digest(other / "model.safetensors") != _digest(first)
    assert _digest(again / "tokenizer.json") == _digest(shape_zoo / zoo_id / "tokenizer.json")


def test_a_current_build_is_reused_and_fp32_is_a_flag(shape_zoo: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    zoo_shapes.build_shapes(shape_zoo, seed=0, log=lines.append)
    assert lines == [f"zoo: {i} is up to date in {shape_zoo / i}" for i in SHAPE_IDS]

    zoo_id = "shape-qwen2.5-0.5b"
    argv = ["--zoo-dir", str(tmp_path), "--fp32", "--layers", "1", zoo_id]
    assert zoo_shapes.main(argv) == 0
    assert json.loads((tmp_path / zoo_id / "config.json").read_text())["dtype"] == "float32"
    fp32 = json.loads((tmp_path / zoo_id / "zoo.json").read_text())
    bf16 = json.loads((shape_zoo / zoo_id / "zoo.json").read_text())
    assert fp32["n_params"] == bf16["n_params"]
    assert fp32["size_bytes"] > 1.9 * bf16["size_bytes"]
    assert not (tmp_path / "shape-llama-3.2-1b").exists()


def test_shapes_are_opt_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from trainer.zoo import build as zoo_build

    calls: list[tuple[str, tuple[str, ...]]] = []

    def fake_build_all(root: Path, seed: int, ids: tuple[str, ...], *_: object) -> dict:
        calls.append(("tiny", ids))
        return {i: root / i for i in ids}

    def fake_build_shapes(root: Path, *, ids: tuple[str, ...], **_: object) -> dict:
        calls.append(("shapes", ids))
        return {i: root / i for i in ids}

    monkeypatch.setattr(zoo_build, "build_all", fake_build_all)
    monkeypatch.setattr(zoo_shapes, "build_shapes", fake_build_shapes)
    build_zoo(tmp_path)  # the default build: the tiny zoo only
    assert calls == [("tiny", ZOO_IDS)]
    calls.clear()
    build_zoo(tmp_path, ids=ZOO_RECIPES["shapes"])
    assert calls == [("shapes", SHAPE_IDS)]

    assert not set(SHAPE_IDS) & set(ZOO_IDS) and set(SHAPE_IDS) <= set(ALL_ZOO_IDS)
    assert build_command("shape-llama-3.2-1b") == "python -m trainer zoo build --recipe shapes"


def test_gpu_examples_validate(capsys: pytest.CaptureFixture[str]) -> None:
    from trainer.cli import main

    for name in ("zoo-shapes-bench.json", "local-hf-pool.json"):
        assert main(["validate", "--config", str(GPU_EXAMPLES / name)]) == 0, name
        config = RunConfig.from_file(GPU_EXAMPLES / name)
        assert [p.dtype for p in config.pool] == ["bfloat16", "bfloat16"]
        assert sum(p.device_share or 0 for p in config.pool) == 1.0  # one GPU
    capsys.readouterr()


def test_zoo_shapes_example_resolves_once_built(shape_zoo: Path) -> None:
    config = RunConfig.from_file(GPU_EXAMPLES / "zoo-shapes-bench.json")
    assert [p.model for p in config.pool] == [f"zoo:{i}" for i in SHAPE_IDS]
    resolved = resolve_models(config, shape_zoo)
    assert [model for model, _ in resolved.values()] == [shape_zoo / i for i in SHAPE_IDS]


def test_local_hf_example_fails_only_for_the_missing_model_directories(tmp_path: Path) -> None:
    config = RunConfig.from_file(GPU_EXAMPLES / "local-hf-pool.json")  # parses and validates
    models = ["/models/Qwen2.5-0.5B-Instruct", "/models/Llama-3.2-1B-Instruct"]
    assert [p.model for p in config.pool] == models
    if any(Path(model).exists() for model in models):
        pytest.skip("this machine has the lab's checkpoints")
    with pytest.raises(RunSetupError) as error:
        resolve_models(config, tmp_path)
    hint = (
        "does not exist; give the path of a local Hugging Face model directory (models "
        "are never downloaded at run time), or 'zoo:<id>' for a tiny zoo model built with "
        "`python -m trainer zoo build`"
    )
    assert str(error.value) == (
        "cannot load the pool's models:\n"
        f"  pool[0] (qwen2.5-0.5b-instruct): model directory {models[0]} {hint}\n"
        f"  pool[1] (llama-3.2-1b-instruct): model directory {models[1]} {hint}"
    )
